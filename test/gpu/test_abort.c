/* GPU communicators after a peer failed: the survivors' kernels must leave
 * their wait loops.  One run = one kernel kind x one scenario, on N forked
 * processes (one GPU each when there are enough, else sharing GPUs: the
 * kernels and paths are the same).  The last rank is the victim: it dies
 * (SIGKILL) or hangs (alive, never calls again).  Each survivor prints one
 * line with what it measured:
 *
 *   abort-test kind=ll scenario=killbefore rank=0 abort_ms=3.1 drain_ms=0.1 ok
 *
 * abort_ms: ncclCommAbort (or Revoke / Shrink) returning; drain_ms:
 * cudaStreamSynchronize on the survivor's stream afterwards.  Both must stay
 * below ABORT_TEST_BOUND_MS (default 2000; the goal is 100).
 *
 * Usage: test_abort KIND SCENARIO
 *   KIND: ll oneshot twoshot engine p2p p2pll p2pengine window windowce reg onesided hier nodes nodesll
 *   SCENARIO: killbefore killmid hang revoke shrink graph group timeout
 *   (group: two communicators on one stream, both aborted in one group)
 * Exits 0 (pass), 1 (fail), 77 (no GPU, or a combination that does not
 * apply).  test/gpu/abort.sh runs the matrix under `timeout`. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "nccl.h"

#define COUNT_BIG (1u << 20) /* floats: past LL, several flat chunks */
#define COUNT_LL 256u
#define LOOP 200             /* killmid: launches enqueued by a survivor */
#define VICTIM_LOOP 50       /* killmid: launches the victim completes first */

typedef struct {
    const char *name;
    const char *env[4]; /* NAME=VALUE settings that force the kind */
} kind_t;

static const kind_t kinds[] = {
    {"ll", {"MPCCL_FLAT_LL_BYTES=1M", NULL}},
    {"oneshot", {"MPCCL_FLAT_LL_BYTES=0", NULL}},
    {"twoshot", {"MPCCL_FLAT_LL_BYTES=0", "MPCCL_FLAT_ALLREDUCE=twoshot", NULL}},
    {"engine", {"MPCCL_FLAT=0", "MPCCL_FLAT_P2P=0", NULL}},
    {"p2p", {"MPCCL_FLAT_P2P_LL_BYTES=0", NULL}},
    {"p2pll", {"MPCCL_FLAT_P2P_LL_BYTES=64G", NULL}},
    {"p2pengine", {"MPCCL_FLAT=0", "MPCCL_FLAT_P2P=0", NULL}},
    {"window", {"MPCCL_FLAT_WIN_BYTES=0", NULL}},
    /* an allgather on windows moved by the copy engines between barrier kernels */
    {"windowce", {"MPCCL_FLAT_WIN_BYTES=0", "MPCCL_FLAT_CE_BYTES=1", NULL}},
    {"reg", {"MPCCL_FLAT_WIN_BYTES=0", NULL}},
    {"onesided", {NULL}},
    /* 4 ranks as 2 simulated nodes x 2: hierarchical collectives (node and
     * rail communicators under the one the test aborts) */
    {"hier", {"MPCCL_HIER_CHUNK_BYTES=256K", NULL}},
    /* every rank a simulated node of its own: every peer behind the proxy,
     * every collective on the engine between nodes */
    {"nodes", {NULL}},
    /* the same with 1 KB calls: the engine's small-call kernel */
    {"nodesll", {NULL}},
};

static const kind_t *kind;
static const char *scenario;
static int nranks, rank_, victim;
static double bound_ms = 2000;

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    float *in, *out;
    size_t count;
    ncclWindow_t win_in, win_out;
    void *reg_in, *reg_out;
} ctx_t;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

#define FAILF(...)                                                                     \
    do {                                                                               \
        fprintf(stderr, "abort-test kind=%s scenario=%s rank=%d: ", kind->name, scenario, rank_); \
        fprintf(stderr, __VA_ARGS__);                                                  \
        fprintf(stderr, "\n");                                                         \
        return 1;                                                                      \
    } while (0)
#define NCCLCHK(x)                                                                     \
    do {                                                                               \
        ncclResult_t r_ = (x);                                                         \
        if (r_ != ncclSuccess) FAILF("%s failed: %s (%s)", #x, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
    } while (0)
/* A call enqueued after the victim died may already report it (a survivor's
 * proxy sees a TCP connection reset at once): ncclRemoteError is an answer,
 * as in NCCL, where a call on a communicator with an async error returns it. */
#define AFTER_DEATH(x)                                                                 \
    do {                                                                               \
        ncclResult_t r_ = (x);                                                         \
        if (r_ != ncclSuccess && r_ != ncclRemoteError)                                \
            FAILF("%s failed: %s (%s)", #x, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
    } while (0)
#define CUDACHK(x)                                                                     \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) FAILF("%s failed: %s", #x, cudaGetErrorString(e_));     \
    } while (0)

static int is_p2p(void) { return strncmp(kind->name, "p2p", 3) == 0; }

/* One operation of the kind on c (enqueued only). */
static ncclResult_t op(ctx_t *c)
{
    if (strcmp(kind->name, "onesided") == 0) {
        /* every survivor waits for one signal of every peer, after signalling them */
        ncclResult_t r = ncclSuccess;
        ncclWaitSignalDesc_t d[8];
        int n = 0;
        for (int p = 0; p < nranks && r == ncclSuccess; p++) {
            if (p == rank_) continue;
            r = ncclSignal(p, 0, 0, 0, c->comm, c->stream);
            d[n].opCnt = 1;
            d[n].peer = p;
            d[n].sigIdx = 0;
            d[n].ctx = 0;
            n++;
        }
        if (r == ncclSuccess) r = ncclWaitSignal(n, d, c->comm, c->stream);
        return r;
    }
    if (is_p2p()) {
        int to = (rank_ + 1) % nranks, from = (rank_ + nranks - 1) % nranks;
        ncclResult_t r = ncclGroupStart();
        if (r == ncclSuccess) r = ncclSend(c->in, c->count, ncclFloat, to, c->comm, c->stream);
        if (r == ncclSuccess) r = ncclRecv(c->out, c->count, ncclFloat, from, c->comm, c->stream);
        ncclResult_t e = ncclGroupEnd();
        return r != ncclSuccess ? r : e;
    }
    if (strcmp(kind->name, "windowce") == 0)
        return ncclAllGather(c->in, c->out, c->count / (size_t)nranks, ncclFloat, c->comm, c->stream);
    return ncclAllReduce(c->in, c->out, c->count, ncclFloat, ncclSum, c->comm, c->stream);
}

static int setup_buffers(ctx_t *c)
{
    c->count = strcmp(kind->name, "ll") == 0 || strcmp(kind->name, "p2pll") == 0 || strcmp(kind->name, "nodesll") == 0
                   ? COUNT_LL
                   : COUNT_BIG;
    size_t bytes = c->count * sizeof(float);
    if (strncmp(kind->name, "window", 6) == 0 || strcmp(kind->name, "onesided") == 0) {
        NCCLCHK(ncclMemAlloc((void **)&c->in, bytes));
        NCCLCHK(ncclMemAlloc((void **)&c->out, bytes));
        NCCLCHK(ncclCommWindowRegister(c->comm, c->in, bytes, &c->win_in, NCCL_WIN_COLL_SYMMETRIC));
        NCCLCHK(ncclCommWindowRegister(c->comm, c->out, bytes, &c->win_out, NCCL_WIN_COLL_SYMMETRIC));
    } else {
        CUDACHK(cudaMalloc((void **)&c->in, bytes));
        CUDACHK(cudaMalloc((void **)&c->out, bytes));
        if (strcmp(kind->name, "reg") == 0) {
            NCCLCHK(ncclCommRegister(c->comm, c->in, bytes, &c->reg_in));
            NCCLCHK(ncclCommRegister(c->comm, c->out, bytes, &c->reg_out));
        }
    }
    CUDACHK(cudaMemset(c->in, 0, bytes));
    return 0;
}

/* ---- the victim ---- */

static void victim_dies(void) { raise(SIGKILL); }

static void victim_hangs(void)
{
    for (;;) pause(); /* the parent kills it once the survivors are done */
}

/* ---- survivors ---- */

static int wait_death(int fd)
{
    char b;
    ssize_t r;
    while ((r = read(fd, &b, 1)) < 0 && errno == EINTR) {
    }
    return r == 0 ? 0 : -1;
}

static int report(double abort_ms, double drain_ms, const char *extra)
{
    int ok = abort_ms <= bound_ms && drain_ms <= bound_ms;
    printf("abort-test kind=%s scenario=%s rank=%d abort_ms=%.1f drain_ms=%.1f%s%s %s\n", kind->name, scenario, rank_,
           abort_ms, drain_ms, extra ? " " : "", extra ? extra : "", ok ? "ok" : "TOO SLOW");
    fflush(stdout);
    return ok ? 0 : 1;
}

/* Aborts the communicator, then drains the stream, timing both. */
static int abort_and_drain(ctx_t *c)
{
    double t0 = now_ms();
    NCCLCHK(ncclCommAbort(c->comm));
    double t1 = now_ms();
    CUDACHK(cudaStreamSynchronize(c->stream));
    double t2 = now_ms();
    return report(t1 - t0, t2 - t1, NULL);
}

typedef struct {
    ncclComm_t comm;
    int delay_ms;
    double took;
    ncclResult_t r;
} aborter_t;

static void *aborter(void *arg)
{
    aborter_t *a = arg;
    usleep(a->delay_ms * 1000);
    double t0 = now_ms();
    a->r = ncclCommAbort(a->comm);
    a->took = now_ms() - t0;
    return NULL;
}

static int survivor(ctx_t *c, int death_fd)
{
    const char *s = scenario;
    if (strcmp(s, "killbefore") == 0 || strcmp(s, "revoke") == 0 || strcmp(s, "shrink") == 0) {
        if (wait_death(death_fd)) FAILF("waiting for the victim's death");
        AFTER_DEATH(op(c));
        AFTER_DEATH(op(c));
        usleep(200 * 1000); /* the kernels are in their wait loops by now */
        if (strcmp(s, "killbefore") == 0) return abort_and_drain(c);
        if (strcmp(s, "revoke") == 0) {
            double t0 = now_ms();
            NCCLCHK(ncclCommRevoke(c->comm, 0));
            double t1 = now_ms();
            CUDACHK(cudaStreamSynchronize(c->stream));
            double t2 = now_ms();
            ncclResult_t r = op(c);
            if (r != ncclInvalidUsage) FAILF("a call after ncclCommRevoke returned %s, expected ncclInvalidUsage", ncclGetErrorString(r));
            int rc = report(t1 - t0, t2 - t1, "later_call=ncclInvalidUsage");
            NCCLCHK(ncclCommAbort(c->comm));
            return rc;
        }
        /* shrink: the survivors' new communicator, then a checked allreduce on it */
        int excl = victim;
        ncclComm_t child = NULL;
        double t0 = now_ms();
        NCCLCHK(ncclCommShrink(c->comm, &excl, 1, &child, NULL, NCCL_SHRINK_ABORT));
        double t1 = now_ms();
        CUDACHK(cudaStreamSynchronize(c->stream));
        double t2 = now_ms();
        int nn = 0;
        NCCLCHK(ncclCommCount(child, &nn));
        float *x;
        CUDACHK(cudaMalloc((void **)&x, 1024 * sizeof(float)));
        float v[1024];
        for (int i = 0; i < 1024; i++) v[i] = (float)(rank_ + 1);
        CUDACHK(cudaMemcpy(x, v, sizeof(v), cudaMemcpyHostToDevice));
        NCCLCHK(ncclAllReduce(x, x, 1024, ncclFloat, ncclSum, child, c->stream));
        CUDACHK(cudaStreamSynchronize(c->stream));
        CUDACHK(cudaMemcpy(v, x, sizeof(v), cudaMemcpyDeviceToHost));
        float want = 0;
        for (int r = 0; r < nranks; r++)
            if (r != victim) want += (float)(r + 1);
        for (int i = 0; i < 1024; i++)
            if (v[i] != want) FAILF("allreduce on the shrunk communicator (%d ranks): element %d is %g, expected %g", nn, i, v[i], want);
        char extra[64];
        snprintf(extra, sizeof(extra), "child_ranks=%d child_allreduce=ok", nn);
        int rc = report(t1 - t0, t2 - t1, extra);
        NCCLCHK(ncclCommDestroy(child));
        NCCLCHK(ncclCommAbort(c->comm));
        return rc;
    }
    if (strcmp(s, "group") == 0) {
        /* a second communicator whose launch queues behind the first's */
        ctx_t b = *c;
        NCCLCHK(ncclCommSplit(c->comm, 0, rank_, &b.comm, NULL));
        if (wait_death(death_fd)) FAILF("waiting for the victim's death");
        AFTER_DEATH(op(c));
        AFTER_DEATH(ncclAllReduce(c->in, c->out, c->count, ncclFloat, ncclSum, b.comm, c->stream));
        usleep(200 * 1000);
        double t0 = now_ms();
        NCCLCHK(ncclGroupStart());
        NCCLCHK(ncclCommAbort(b.comm));
        NCCLCHK(ncclCommAbort(c->comm));
        NCCLCHK(ncclGroupEnd());
        double t1 = now_ms();
        CUDACHK(cudaStreamSynchronize(c->stream));
        double t2 = now_ms();
        return report(t1 - t0, t2 - t1, "comms=2");
    }
    if (strcmp(s, "killmid") == 0) {
        /* The victim may die while this rank still enqueues (a hierarchical
         * call is many launches): from then on calls report it. */
        for (int i = 0; i < LOOP; i++) {
            ncclResult_t r = op(c);
            if (r == ncclRemoteError) break;
            NCCLCHK(r);
        }
        if (wait_death(death_fd)) FAILF("waiting for the victim's death");
        usleep(200 * 1000);
        return abort_and_drain(c);
    }
    if (strcmp(s, "hang") == 0) {
        NCCLCHK(op(c));
        aborter_t a = {c->comm, 300, 0, ncclSuccess};
        pthread_t th;
        if (pthread_create(&th, NULL, aborter, &a)) FAILF("pthread_create");
        double t0 = now_ms();
        cudaError_t e = cudaStreamSynchronize(c->stream); /* returns once the other thread aborted */
        double t1 = now_ms();
        pthread_join(th, NULL);
        if (e != cudaSuccess) FAILF("cudaStreamSynchronize: %s", cudaGetErrorString(e));
        if (a.r != ncclSuccess) FAILF("ncclCommAbort from another thread: %s", ncclGetErrorString(a.r));
        double drain = t1 - t0 - a.delay_ms; /* after the abort began */
        return report(a.took, drain < 0 ? 0 : drain, "abort_from=thread");
    }
    if (strcmp(s, "timeout") == 0) {
        NCCLCHK(op(c));
        double t0 = now_ms();
        ncclResult_t ae = ncclSuccess;
        while (now_ms() - t0 < 20000) {
            NCCLCHK(ncclCommGetAsyncError(c->comm, &ae));
            if (ae != ncclSuccess) break;
            usleep(50 * 1000);
        }
        double t1 = now_ms();
        if (ae != ncclRemoteError) FAILF("ncclCommGetAsyncError gave %s after %.0f ms, expected ncclRemoteError", ncclGetErrorString(ae), t1 - t0);
        const char *msg = ncclGetLastError(c->comm);
        char want[32];
        snprintf(want, sizeof(want), "rank %d", victim);
        /* hier: a survivor may time out waiting for another survivor that
         * waits for the victim, or see that survivor's connections close when
         * it gave up first and aborted (over TCP a reset arrives at once) */
        int hier = strcmp(kind->name, "hier") == 0;
        if (hier) snprintf(want, sizeof(want), "waiting for rank");
        int named = msg && strstr(msg, "MPCCL_OP_TIMEOUT") &&
                    (is_p2p() || !strcmp(kind->name, "onesided") || strstr(msg, want));
        int peer_gave_up = hier && msg && strstr(msg, "failed (remote error)");
        if (!named && !peer_gave_up)
            FAILF("the timeout message does not name MPCCL_OP_TIMEOUT and the peer (%s): %s", want, msg ? msg : "(null)");
        printf("abort-test kind=%s scenario=timeout rank=%d detected_ms=%.0f message: %s\n", kind->name, rank_, t1 - t0, msg);
        double t2 = now_ms();
        CUDACHK(cudaStreamSynchronize(c->stream)); /* the kernels stopped themselves */
        double t3 = now_ms();
        int rc = report(0, t3 - t2, "after_timeout");
        NCCLCHK(ncclCommAbort(c->comm));
        return rc;
    }
    FAILF("unknown scenario");
}

/* Graph scenario: every rank captures the op, replays it once together; the
 * victim dies; survivors replay it again and abort. */
static int run_graph(ctx_t *c, int death_fd)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDACHK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    ncclResult_t r = op(c);
    CUDACHK(cudaStreamEndCapture(c->stream, &g));
    NCCLCHK(r);
    CUDACHK(cudaGraphInstantiate(&ge, g, 0));
    CUDACHK(cudaGraphLaunch(ge, c->stream));
    CUDACHK(cudaStreamSynchronize(c->stream));
    if (rank_ == victim) victim_dies();
    if (wait_death(death_fd)) FAILF("waiting for the victim's death");
    for (int i = 0; i < 3; i++) CUDACHK(cudaGraphLaunch(ge, c->stream));
    usleep(200 * 1000);
    return abort_and_drain(c);
}

static int rank_main(int id_fd_r, int *id_fd_w, int death_fd)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) return 77;
    CUDACHK(cudaSetDevice(rank_ % ndev));
    if (strcmp(kind->name, "hier") == 0) setenv("NCCL_HOSTID", rank_ < nranks / 2 ? "hier-node-a" : "hier-node-b", 1);
    if (strncmp(kind->name, "nodes", 5) == 0) {
        char node[32];
        snprintf(node, sizeof(node), "abort-node-%d", rank_);
        setenv("NCCL_HOSTID", node, 1);
    }
    ncclUniqueId id;
    if (rank_ == 0) {
        NCCLCHK(ncclGetUniqueId(&id));
        for (int r = 1; r < nranks; r++)
            if (write(id_fd_w[r], &id, sizeof(id)) != (ssize_t)sizeof(id)) FAILF("sending the unique id");
    } else if (read(id_fd_r, &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        FAILF("receiving the unique id");
    }
    ctx_t c;
    memset(&c, 0, sizeof(c));
    NCCLCHK(ncclCommInitRank(&c.comm, nranks, id, rank_));
    CUDACHK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    if (setup_buffers(&c)) return 1;
    /* every rank joined: one operation together */
    NCCLCHK(op(&c));
    CUDACHK(cudaStreamSynchronize(c.stream));
    if (strcmp(scenario, "graph") == 0) return run_graph(&c, death_fd);
    if (rank_ == victim) {
        if (strcmp(scenario, "group") == 0) {
            ncclComm_t b;
            NCCLCHK(ncclCommSplit(c.comm, 0, rank_, &b, NULL)); /* collective with the survivors' */
        }
        if (strcmp(scenario, "killmid") == 0) {
            for (int i = 0; i < VICTIM_LOOP; i++) NCCLCHK(op(&c));
            CUDACHK(cudaStreamSynchronize(c.stream));
            victim_dies();
        }
        if (strcmp(scenario, "hang") == 0 || strcmp(scenario, "timeout") == 0) victim_hangs();
        victim_dies();
    }
    return survivor(&c, death_fd);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s KIND SCENARIO\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strcmp(kinds[i].name, argv[1]) == 0) kind = &kinds[i];
    scenario = argv[2];
    if (!kind) {
        fprintf(stderr, "test_abort: unknown kind %s\n", argv[1]);
        return 2;
    }
    const char *b = getenv("ABORT_TEST_BOUND_MS");
    if (b) bound_ms = atof(b);
    /* onesided: only the waits (no graphs, no shrink) */
    if (strcmp(kind->name, "onesided") == 0 &&
        (strcmp(scenario, "graph") == 0 || strcmp(scenario, "shrink") == 0 || strcmp(scenario, "group") == 0)) {
        printf("abort-test kind=%s scenario=%s: does not apply\n", kind->name, scenario);
        return 77;
    }
    for (int i = 0; kind->env[i]; i++) putenv((char *)kind->env[i]);
    if (strcmp(scenario, "timeout") == 0) setenv("MPCCL_OP_TIMEOUT", "2", 1);
    nranks = strcmp(kind->name, "hier") == 0 ? 4 : strcmp(scenario, "shrink") == 0 ? 3 : 2;
    victim = nranks - 1;
    int idp[8][2], death[2];
    for (int r = 0; r < nranks; r++)
        if (pipe(idp[r])) return 1;
    if (pipe(death)) return 1;
    pid_t pid[8];
    for (int r = 0; r < nranks; r++) {
        pid[r] = fork();
        if (pid[r] < 0) return 1;
        if (pid[r] == 0) {
            rank_ = r;
            int w[8];
            for (int k = 0; k < nranks; k++) w[k] = idp[k][1];
            if (r != victim) close(death[1]); /* only the victim holds it: EOF = its death */
            alarm(120);
            int rc = rank_main(idp[r][0], w, death[0]);
            fflush(stdout);
            _exit(rc);
        }
    }
    close(death[1]);
    close(death[0]);
    int status = 0, skipped = 0;
    for (int r = 0; r < nranks; r++) {
        if (r == victim) continue;
        int st = 0;
        waitpid(pid[r], &st, 0);
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        if (rc == 77) skipped = 1;
        else if (rc != 0) {
            fprintf(stderr, "abort-test kind=%s scenario=%s: rank %d exited with %d\n", kind->name, scenario, r, rc);
            status = 1;
        }
    }
    kill(pid[victim], SIGKILL);
    waitpid(pid[victim], NULL, 0);
    if (skipped && !status) return 77;
    printf("abort-test kind=%s scenario=%s: %s\n", kind->name, scenario, status ? "FAIL" : "PASS");
    return status;
}
