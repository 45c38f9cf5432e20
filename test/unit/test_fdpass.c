/* lib/gpu/gpu_fdpass.c: a descriptor offered under a key reaches another process
 * (a forked child fetching from its parent, as ranks fetch ncclMemAlloc
 * memory from each other); unknown and withdrawn keys are refused with a
 * message; calls reach the handler of another process with their request
 * and descriptor, and its answer comes back (as registered buffers are
 * pushed to peer processes); another copy of the library in the same process
 * (an older one's "mpccl-fd-<pid>", or one with another tag) does not stand in
 * the way, and a wrong tag reaches no server.  No CUDA. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#include "gpu/gpu_fdpass.h"

START_TEST(child_fetches_parent_fd)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(mpccl_fdpass_offer(0x1234, p[1]), MPCCL_OK);
    pid_t parent = getpid();
    uint32_t tag = mpccl_fdpass_tag();
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        int fd = -1;
        if (mpccl_fdpass_fetch(parent, tag, 0x1234, &fd) != MPCCL_OK || fd < 0) _exit(2);
        if (write(fd, "ok", 2) != 2) _exit(3);
        close(fd);
        /* A key nobody offered: refused, with a reason. */
        if (mpccl_fdpass_fetch(parent, tag, 0x9999, &fd) == MPCCL_OK || fd != -1) _exit(4);
        if (strstr(mpccl_last_error(), "nothing offered") == NULL) _exit(5);
        _exit(0);
    }
    int status = -1;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    char buf[2];
    ck_assert_int_eq(read(p[0], buf, 2), 2);
    ck_assert(memcmp(buf, "ok", 2) == 0);
    /* Withdrawn: fetching fails (here from this process's own server). */
    mpccl_fdpass_withdraw(0x1234);
    int fd = -1;
    ck_assert_int_ne(mpccl_fdpass_fetch(getpid(), mpccl_fdpass_tag(), 0x1234, &fd), MPCCL_OK);
    ck_assert_int_eq(fd, -1);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* The parent's handler: "echo" writes the request into the descriptor and
 * answers with its reversal; anything else is refused with code 17. */
static int32_t echo_handler(const void *req, uint32_t len, int fd, void *reply, uint32_t *reply_len)
{
    const char *q = req;
    if (len < 4 || memcmp(q, "echo", 4) != 0) {
        if (fd >= 0) close(fd);
        *reply_len = 0;
        return 17;
    }
    if (fd >= 0) {
        if (write(fd, q, len) != (ssize_t)len) return 18;
        close(fd);
    }
    char *r = reply;
    for (uint32_t i = 0; i < len; i++) r[i] = q[len - 1 - i];
    *reply_len = len;
    return 0;
}

START_TEST(child_calls_parent_handler)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(mpccl_fdpass_serve(echo_handler), MPCCL_OK);
    pid_t parent = getpid();
    uint32_t tag = mpccl_fdpass_tag();
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(p[0]);
        char reply[MPCCL_FDPASS_MAX_MSG];
        uint32_t len = 0;
        int32_t code = -1;
        if (mpccl_fdpass_call(parent, tag, "echo-abc", 8, p[1], reply, &len, &code, "test call") != MPCCL_OK) _exit(2);
        if (code != 0 || len != 8 || memcmp(reply, "cba-ohce", 8) != 0) _exit(3);
        /* The handler's refusal comes back as its code, not as a failure. */
        if (mpccl_fdpass_call(parent, tag, "nope", 4, -1, reply, &len, &code, "test call") != MPCCL_OK || code != 17)
            _exit(4);
        /* Too long a request never leaves this process. */
        static char big[MPCCL_FDPASS_MAX_MSG + 1];
        if (mpccl_fdpass_call(parent, tag, big, sizeof(big), -1, reply, &len, &code, "test call") == MPCCL_OK) _exit(5);
        _exit(0);
    }
    close(p[1]);
    int status = -1;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    char buf[8];
    ck_assert_int_eq(read(p[0], buf, 8), 8); /* the descriptor reached the handler */
    ck_assert(memcmp(buf, "echo-abc", 8) == 0);
    close(p[0]);
}
END_TEST

START_TEST(no_server)
{
    /* A process that never offered has no server: a clear error, no hang. */
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    int fd = -1;
    ck_assert_int_ne(mpccl_fdpass_fetch(child, mpccl_fdpass_tag(), 1, &fd), MPCCL_OK);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "fd server"));
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
}
END_TEST

/* Listens on the abstract socket name (as another copy of mpccl would). */
static int listen_on(const char *name)
{
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(a.sun_path + 1, name, n);
    if (s < 0 || bind(s, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) != 0 ||
        listen(s, 4) != 0)
        return -1;
    return s;
}

START_TEST(two_copies_in_one_process)
{
    char old_name[64], other[64];
    uint32_t tag = mpccl_fdpass_tag();
    ck_assert_uint_ne(tag, 0);
    ck_assert_uint_eq(mpccl_fdpass_tag(), tag); /* fixed for the process */
    snprintf(old_name, sizeof(old_name), "mpccl-fd-%d", (int)getpid());
    snprintf(other, sizeof(other), "mpccl-fd-%d-%08x", (int)getpid(), tag ^ 0x5a5a5a5au);
    int s1 = listen_on(old_name), s2 = listen_on(other);
    ck_assert_int_ge(s1, 0);
    ck_assert_int_ge(s2, 0);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(mpccl_fdpass_offer(0x77, p[1]), MPCCL_OK);
    int fd = -1;
    ck_assert_int_eq(mpccl_fdpass_fetch(getpid(), tag, 0x77, &fd), MPCCL_OK);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* a tag nobody serves under */
    fd = -1;
    ck_assert_int_ne(mpccl_fdpass_fetch(getpid(), tag ^ 0x0f0f0f0fu, 0x77, &fd), MPCCL_OK);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "mpccl-fd-"));
    ck_assert_int_eq(fd, -1);
    mpccl_fdpass_withdraw(0x77);
    close(s1);
    close(s2);
    close(p[0]);
    close(p[1]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fdpass");
    TCase *tc = tcase_create("fdpass");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, child_fetches_parent_fd);
    tcase_add_test(tc, child_calls_parent_handler);
    tcase_add_test(tc, no_server);
    tcase_add_test(tc, two_copies_in_one_process);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
