/* lib/gpu/gpu_fdpass.c: a descriptor offered under a key reaches another process
 * (a forked child fetching from its parent, as ranks fetch ncclMemAlloc
 * memory from each other); unknown and withdrawn keys are refused with a
 * message; calls reach the handler of another process with their request
 * and descriptor, and its answer comes back (as registered buffers are
 * pushed to peer processes).  No CUDA. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/gpu_fdpass.h"

START_TEST(child_fetches_parent_fd)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(mpccl_fdpass_offer(0x1234, p[1]), MPCCL_OK);
    pid_t parent = getpid();
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        int fd = -1;
        if (mpccl_fdpass_fetch(parent, 0x1234, &fd) != MPCCL_OK || fd < 0) _exit(2);
        if (write(fd, "ok", 2) != 2) _exit(3);
        close(fd);
        /* A key nobody offered: refused, with a reason. */
        if (mpccl_fdpass_fetch(parent, 0x9999, &fd) == MPCCL_OK || fd != -1) _exit(4);
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
    ck_assert_int_ne(mpccl_fdpass_fetch(getpid(), 0x1234, &fd), MPCCL_OK);
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
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(p[0]);
        char reply[MPCCL_FDPASS_MAX_MSG];
        uint32_t len = 0;
        int32_t code = -1;
        if (mpccl_fdpass_call(parent, "echo-abc", 8, p[1], reply, &len, &code, "test call") != MPCCL_OK) _exit(2);
        if (code != 0 || len != 8 || memcmp(reply, "cba-ohce", 8) != 0) _exit(3);
        /* The handler's refusal comes back as its code, not as a failure. */
        if (mpccl_fdpass_call(parent, "nope", 4, -1, reply, &len, &code, "test call") != MPCCL_OK || code != 17)
            _exit(4);
        /* Too long a request never leaves this process. */
        static char big[MPCCL_FDPASS_MAX_MSG + 1];
        if (mpccl_fdpass_call(parent, big, sizeof(big), -1, reply, &len, &code, "test call") == MPCCL_OK) _exit(5);
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
    ck_assert_int_ne(mpccl_fdpass_fetch(child, 1, &fd), MPCCL_OK);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "fd server"));
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
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
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
