/* lib/cuda/cuda_fdpass.c: a descriptor offered under a key reaches another process
 * (a forked child fetching from its parent, as ranks fetch ncclMemAlloc
 * memory from each other); unknown and withdrawn keys are refused with a
 * message; calls reach the handler of another process with their request
 * and descriptor, and its answer comes back (as registered buffers are
 * pushed to peer processes); another copy of the library in the same process
 * (an older one's "mpccl-fd-<pid>", or one with another tag) does not stand in
 * the way, and a wrong tag reaches no server.  The server hands nothing to a
 * process of another user or one its communicators do not name, answers a
 * wrong key the same way (no key oracle), and serves connections
 * concurrently: silent ones delay nobody.  No CUDA. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <stddef.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cuda/cuda_fdpass.h"
#include "bootstrap/bootstrap_net.h"
#include "util/config.h"

/* Forks a child that waits until the parent has allowed it (allow: 1) or
 * not (0), so that its first connection already meets the allow-list. */
static pid_t fork_peer(int allow)
{
    int go[2];
    ck_assert_int_eq(pipe(go), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        char b;
        close(go[1]);
        if (read(go[0], &b, 1) != 1) _exit(90);
        close(go[0]);
        return 0;
    }
    close(go[0]);
    if (allow) ck_assert_int_eq(mpccl_fdpass_allow(child), MPCCL_OK);
    ck_assert_int_eq(write(go[1], "g", 1), 1);
    close(go[1]);
    return child;
}

static int wait_exit(pid_t child)
{
    int status = -1;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

START_TEST(child_fetches_parent_fd)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(mpccl_fdpass_offer(0x1234, p[1]), MPCCL_OK);
    pid_t parent = getpid();
    uint32_t tag = mpccl_fdpass_tag();
    pid_t child = fork_peer(1);
    if (child == 0) {
        int fd = -1;
        if (mpccl_fdpass_fetch(parent, tag, 0x1234, &fd) != MPCCL_OK || fd < 0) _exit(2);
        if (write(fd, "ok", 2) != 2) _exit(3);
        close(fd);
        /* A key nobody offered: refused, with a reason. */
        if (mpccl_fdpass_fetch(parent, tag, 0x9999, &fd) == MPCCL_OK || fd != -1) _exit(4);
        if (strstr(mpccl_last_error(), "nothing is offered") == NULL) _exit(5);
        _exit(0);
    }
    ck_assert_int_eq(wait_exit(child), 0);
    mpccl_fdpass_forget(child);
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
    pid_t child = fork_peer(1);
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
    ck_assert_int_eq(wait_exit(child), 0);
    mpccl_fdpass_forget(child);
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

/* The server called directly: a private listener, a child that sends a raw
 * fetch request for key, and mpccl_fdpass_serve_connection answering it.
 * The child exits with the reply code, plus 10 when a descriptor came. */
static int direct_fetch(int allow, uid_t as_uid, uint64_t key)
{
    char name[64];
    snprintf(name, sizeof(name), "mpccl-test-direct-%d", (int)getpid());
    int s = listen_on(name);
    ck_assert_int_ge(s, 0);
    pid_t child = fork_peer(allow);
    if (child == 0) {
        if (as_uid != geteuid() && setuid(as_uid) != 0) _exit(91);
        int c = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a;
        memset(&a, 0, sizeof(a));
        a.sun_family = AF_UNIX;
        memcpy(a.sun_path + 1, name, strlen(name));
        if (connect(c, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))) != 0)
            _exit(92);
        struct { uint32_t op, len; uint64_t key; } q = {1, 0, key};
        /* A stranger is answered before it writes: the write may find the
         * connection closed, the answer is there to read all the same. */
        (void)send(c, &q, sizeof(q), MSG_NOSIGNAL);
        struct { int32_t code; uint32_t len; } r;
        union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } ctl;
        struct iovec iov = {&r, sizeof(r)};
        struct msghdr m;
        memset(&m, 0, sizeof(m));
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        if (recvmsg(c, &m, MSG_WAITALL) != (ssize_t)sizeof(r)) _exit(94);
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        int got_fd = h && h->cmsg_type == SCM_RIGHTS;
        _exit(r.code + (got_fd ? 10 : 0));
    }
    int c = accept(s, NULL, NULL);
    ck_assert_int_ge(c, 0);
    mpccl_fdpass_serve_connection(c);
    close(c);
    close(s);
    int code = wait_exit(child);
    if (allow) mpccl_fdpass_forget(child);
    return code;
}

START_TEST(only_the_job_gets_memory)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(mpccl_fdpass_offer(0xabc0, p[1]), MPCCL_OK);
    /* A peer of this process's communicators, the right key: the descriptor. */
    ck_assert_int_eq(direct_fetch(1, geteuid(), 0xabc0), 0 + 10);
    /* Same user, outside the job, the right key: denied, no descriptor. */
    ck_assert_int_eq(direct_fetch(0, geteuid(), 0xabc0), 2);
    /* A peer, a wrong key: the same answer, so keys cannot be probed. */
    ck_assert_int_eq(direct_fetch(1, geteuid(), 0xabc8), 2);
    /* Another user: denied (a child changes user where the test may). */
    ck_assert_int_eq(mpccl_fdpass_peer_allowed(getpid(), geteuid() + 1), 0);
    ck_assert_int_eq(mpccl_fdpass_peer_allowed(getpid(), geteuid()), 1);
    if (geteuid() == 0) ck_assert_int_eq(direct_fetch(1, 65534, 0xabc0), 2);
    else printf("only_the_job_gets_memory: not root, another user's process checked through the allow rule only\n");
    /* MPCCL_FD_PEERS=user: any process of this user (separate PID namespaces). */
    setenv("MPCCL_FD_PEERS", "user", 1);
    mpccl_config_reload();
    ck_assert_int_eq(direct_fetch(0, geteuid(), 0xabc0), 0 + 10);
    ck_assert_int_eq(mpccl_fdpass_peer_allowed(getpid(), geteuid() + 1), 0);
    unsetenv("MPCCL_FD_PEERS");
    mpccl_config_reload();
    ck_assert_int_eq(direct_fetch(0, geteuid(), 0xabc0), 2);
    /* Forgotten peers are strangers again. */
    ck_assert_int_eq(mpccl_fdpass_allow(12345678), MPCCL_OK);
    ck_assert_int_eq(mpccl_fdpass_allow(12345678), MPCCL_OK);
    mpccl_fdpass_forget(12345678);
    ck_assert_int_eq(mpccl_fdpass_peer_allowed(12345678, geteuid()), 1);
    mpccl_fdpass_forget(12345678);
    ck_assert_int_eq(mpccl_fdpass_peer_allowed(12345678, geteuid()), 0);
    mpccl_fdpass_withdraw(0xabc0);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* Seven silent connections from a peer and seven from a stranger do not
 * delay a fetch: each connection has its own thread, and strangers are
 * answered before anything is read. */
START_TEST(silent_connections_delay_nobody)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(mpccl_fdpass_offer(0x5150, p[1]), MPCCL_OK);
    pid_t parent = getpid();
    uint32_t tag = mpccl_fdpass_tag();
    int hold[2], start[2];
    ck_assert_int_eq(pipe(hold), 0);
    ck_assert_int_eq(pipe(start), 0);
    pid_t kids[2];
    /* Both are forked before either connects: a fork while the server's
     * threads allocate could inherit the sanitizers' allocator lock held. */
    for (int k = 0; k < 2; k++) {
        kids[k] = fork_peer(k == 0);
        if (kids[k] == 0) {
            close(hold[1]);
            close(start[1]);
            char go;
            if (read(start[0], &go, 1) != 1) _exit(3);
            char name[64];
            snprintf(name, sizeof(name), "mpccl-fd-%d-%08x", (int)parent, tag);
            for (int i = 0; i < 7; i++) {
                int c = socket(AF_UNIX, SOCK_STREAM, 0);
                struct sockaddr_un a;
                memset(&a, 0, sizeof(a));
                a.sun_family = AF_UNIX;
                memcpy(a.sun_path + 1, name, strlen(name));
                if (connect(c, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))) != 0)
                    _exit(2);
            }
            char b;
            (void)read(hold[0], &b, 1); /* hold them until the parent is done */
            _exit(0);
        }
    }
    close(hold[0]);
    close(start[0]);
    ck_assert_int_eq(write(start[1], "gg", 2), 2);
    close(start[1]);
    struct timespec settle = {0, 200000000};
    nanosleep(&settle, NULL);
    int64_t t0 = mpccl_socket_now_ms();
    int fd = -1;
    ck_assert_int_eq(mpccl_fdpass_fetch(parent, tag, 0x5150, &fd), MPCCL_OK);
    int64_t ms = mpccl_socket_now_ms() - t0;
    printf("silent_connections_delay_nobody: fetch took %lld ms with 14 silent connections open\n", (long long)ms);
    ck_assert_int_lt(ms, 500);
    close(fd);
    close(hold[1]);
    for (int k = 0; k < 2; k++) ck_assert_int_eq(wait_exit(kids[k]), 0);
    mpccl_fdpass_forget(kids[0]);
    mpccl_fdpass_withdraw(0x5150);
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
    tcase_add_test(tc, only_the_job_gets_memory);
    tcase_add_test(tc, silent_connections_delay_nobody);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
