/* lib/fdpass.c: a descriptor offered under a key reaches another process
 * (a forked child fetching from its parent, as ranks fetch ncclMemAlloc
 * memory from each other); unknown and withdrawn keys are refused with a
 * message.  No CUDA. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdpass.h"

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
    tcase_add_test(tc, no_server);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
