/* Check under MPI: see harness.h. */
#include "harness.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int t_rank, t_nranks, t_level = 1;
ncclComm_t t_comm;
perf_mem_t t_mem;
uint64_t t_seed;

static int nfail, ended, timeout_s = 300;
static char first[1024];

void t_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (nfail == 0) snprintf(first, sizeof(first), "%s:%d: %s", file, line, msg);
    /* every rank prints its own; cap so a broken big buffer does not flood */
    if (nfail < 8) fprintf(stderr, "[rank %d] %s:%d: %s\n", t_rank, file, line, msg);
    nfail++;
}

int t_failures(void) { return nfail; }

static int any_rank(int mine)
{
    int all = mine;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

void t_end(const char *file, int line)
{
    int mine = nfail > 0, all;
    ended = 1;
    all = any_rank(mine);
    if (mine) ck_abort_msg("%s (%d failures on rank %d)", first, nfail, t_rank);
    if (all) ck_abort_msg("%s:%d: failed on another rank (see its messages above)", file, line);
}

static void watchdog(int sig)
{
    static volatile sig_atomic_t fired;
    char msg[256];
    (void)sig;
    if (fired++) _exit(124); /* MPI_Abort itself hung */
    /* snprintf is not async-signal-safe, but this process is stuck anyway */
    int n = snprintf(msg, sizeof(msg), "[rank %d] watchdog: test '%s' ran over %d s (MPCCL_TEST_TIMEOUT); aborting the job\n",
                     t_rank, tcase_name(), timeout_s);
    if (n > 0 && write(2, msg, (size_t)n) < 0) _exit(124);
    alarm(10);
    MPI_Abort(MPI_COMM_WORLD, 124);
    _exit(124);
}

/* Check installs its own SIGALRM handler when the runner starts (it SIGKILLs the
 * process group, silently), so ours goes in again before every test. */
static void arm_watchdog(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = watchdog;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm((unsigned)timeout_s);
}

static void setup(void)
{
    nfail = 0;
    ended = 0;
    first[0] = 0;
    arm_watchdog();
}

/* A test that stopped at a ck_assert never reached T_END: vote "failed" here so
 * the other ranks' T_END allreduce is matched. */
static void teardown(void)
{
    if (!ended) any_rank(1);
    alarm(0);
}

TCase *t_tcase(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 0); /* only used with fork; the watchdog covers nofork */
    return tc;
}

int t_comm_works(ncclComm_t comm, perf_mem_t *m)
{
    float host[3], *buf;
    int n = 0, me = -1, bad = 0;
    if (ncclCommCount(comm, &n) != ncclSuccess || ncclCommUserRank(comm, &me) != ncclSuccess) return 1;
    buf = perf_mem_alloc(m, sizeof(host));
    if (buf == NULL) return 1;
    for (int i = 0; i < 3; i++) host[i] = (float)(me + 1 + i);
    bad |= perf_mem_put(m, buf, host, sizeof(host));
    bad |= ncclAllReduce(buf, buf, 3, ncclFloat, ncclSum, comm, m->stream) != ncclSuccess;
    bad |= perf_mem_sync(m);
    bad |= perf_mem_get(m, host, buf, sizeof(host));
    for (int i = 0; i < 3 && !bad; i++) bad |= host[i] != (float)(n * (n + 1) / 2 + n * i);
    perf_mem_free(m, buf);
    return bad;
}

static uint64_t choose_seed(void)
{
    const char *s = getenv("MPCCL_TEST_SEED");
    unsigned long long seed = s && *s ? strtoull(s, NULL, 0) : (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 20);
    MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    return seed;
}

int t_main(int argc, char **argv, Suite *(*make_suite)(void))
{
    const char *s;
    int failed, any, local;
    MPI_Comm node;
    SRunner *sr;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_nranks);
    if ((s = getenv("MPCCL_TEST_LEVEL")) && *s) t_level = atoi(s);
    if ((s = getenv("MPCCL_TEST_TIMEOUT")) && *s) timeout_s = atoi(s);
    t_seed = choose_seed();
    arm_watchdog();

    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    perf_mem_select_device(local);
    ncclResult_t r = mpcclCommInitMPI(&t_comm, MPI_COMM_WORLD, NULL);
    if (r != ncclSuccess || perf_mem_init(&t_mem, t_comm)) {
        fprintf(stderr, "[rank %d] cannot create the world communicator: %s (%s)\n", t_rank, ncclGetErrorString(r),
                ncclGetLastError(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    alarm(0);
    if (t_rank == 0)
        printf("%s: %d ranks, seed %llu (MPCCL_TEST_SEED=%llu repeats it), level %d, %s buffers, MPCCL_HOSTID=%s, "
               "MPCCL_ALGO=%s\n",
               argv[0], t_nranks, (unsigned long long)t_seed, (unsigned long long)t_seed, t_level,
               t_mem.gpu ? "GPU" : "host", getenv("MPCCL_HOSTID") ? getenv("MPCCL_HOSTID") : "(unset)",
               getenv("MPCCL_ALGO") ? getenv("MPCCL_ALGO") : "(unset)");
    fflush(stdout);

    sr = srunner_create(make_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, t_rank == 0 ? CK_ENV : CK_SILENT);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    any = any_rank(failed);

    arm_watchdog();
    if (ncclCommDestroy(t_comm) != ncclSuccess) any = 1;
    perf_mem_fini(&t_mem);
    alarm(0);
    MPI_Finalize();
    return any ? EXIT_FAILURE : EXIT_SUCCESS;
}
