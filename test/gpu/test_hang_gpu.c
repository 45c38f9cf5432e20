/* Hang reports and check mode on GPU communicators: N forked processes
 * (default 3) sharing GPU 0.  The last rank is the one to blame.
 *
 *   test_hang_gpu absent [N]: MPCCL_OP_TIMEOUT=3; after five allreduces the
 *     last rank never launches call 6 (it sleeps).  The others' kernels give up;
 *     ncclCommGetAsyncError is ncclRemoteError within 15 s, and
 *     ncclGetLastError names the last rank (host, pid), "has not launched call 6",
 *     and the peer and flag step the kernel waited at.
 *   test_hang_gpu stall [N]: MPCCL_STALL_REPORT_S=2, no timeout; the last
 *     rank comes to call 6 six seconds late.  Rank 0's log (its stderr, kept
 *     in a file) holds one "stalled for 2 s" report naming the last rank and
 *     "has not launched call 6", and every result is exact: the report
 *     changes nothing.
 *   test_hang_gpu check [N]: MPCCL_CHECK_MODE=1; the last rank calls
 *     ncclBroadcast where the others call ncclAllReduce: every rank gets
 *     ncclInvalidUsage within 1 s naming the rank and the operation; a
 *     matched allreduce afterwards is exact.
 *
 * Prints one line per rank; exits 0 (pass), 1 (fail), 77 (no GPU).
 * test/gpu/hang.sh runs both under `timeout`. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "nccl.h"

#define COUNT 4096
#define MAX_RANKS 8

static int rank_, nranks;
static const char *scenario;

#define FAILF(...)                                                         \
    do {                                                                   \
        printf("hang-gpu scenario=%s rank=%d: FAIL: ", scenario, rank_);   \
        printf(__VA_ARGS__);                                               \
        printf("\n");                                                      \
        return 1;                                                          \
    } while (0)
#define CUDACHK(call)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) FAILF("%s: %s", #call, cudaGetErrorString(e_));                 \
    } while (0)
#define NCCLCHK(call)                                                                          \
    do {                                                                                       \
        ncclResult_t r_ = (call);                                                              \
        if (r_ != ncclSuccess) FAILF("%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One exact allreduce of COUNT int32 (round k); 0 when right. */
static int good_allreduce(ncclComm_t comm, cudaStream_t s, int *dev, int *host, int k)
{
    for (int i = 0; i < COUNT; i++) host[i] = (rank_ + 1) * ((i + k) % 11 + 1);
    CUDACHK(cudaMemcpy(dev, host, COUNT * sizeof(int), cudaMemcpyHostToDevice));
    NCCLCHK(ncclAllReduce(dev, dev, COUNT, ncclInt32, ncclSum, comm, s));
    CUDACHK(cudaStreamSynchronize(s));
    CUDACHK(cudaMemcpy(host, dev, COUNT * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < COUNT; i++)
        if (host[i] != nranks * (nranks + 1) / 2 * ((i + k) % 11 + 1)) FAILF("allreduce %d element %d: %d", k, i, host[i]);
    return 0;
}

static int absent(ncclComm_t comm, cudaStream_t s, int *dev, int *host)
{
    for (int k = 1; k <= 5; k++)
        if (good_allreduce(comm, s, dev, host, k)) return 1;
    int last = nranks - 1;
    if (rank_ == last) {
        sleep(20); /* computing, away from call 6; the others are done by then */
        ncclCommAbort(comm);
        printf("hang-gpu scenario=absent rank=%d: stayed away from call 6\n", rank_);
        return 0;
    }
    double t0 = now_s();
    NCCLCHK(ncclAllReduce(dev, dev, COUNT, ncclInt32, ncclSum, comm, s));
    ncclResult_t async = ncclSuccess;
    while (now_s() - t0 < 15.0) {
        (void)cudaStreamQuery(s);
        NCCLCHK(ncclCommGetAsyncError(comm, &async));
        if (async != ncclSuccess) break;
        usleep(100000);
    }
    double took = now_s() - t0;
    const char *msg = ncclGetLastError(comm);
    char want[64];
    if (async != ncclRemoteError) FAILF("async error %s after %.1f s, expected ncclRemoteError", ncclGetErrorString(async), took);
    snprintf(want, sizeof(want), "rank %d (host ", last);
    if (!strstr(msg, want)) FAILF("the error does not name rank %d with its host: %s", last, msg);
    if (!strstr(msg, "has not launched call 6")) FAILF("the error does not say 'has not launched call 6': %s", msg);
    if (!strstr(msg, "waiting for rank")) FAILF("the error does not name the peer the kernel waited for: %s", msg);
    printf("hang-gpu scenario=absent rank=%d: ok after %.1f s: %s\n", rank_, took, msg);
    ncclCommAbort(comm);
    return 0;
}

static char log_path[128]; /* this rank's stderr, for the stall scenario */

static int stall(ncclComm_t comm, cudaStream_t s, int *dev, int *host)
{
    for (int k = 1; k <= 5; k++)
        if (good_allreduce(comm, s, dev, host, k)) return 1;
    int last = nranks - 1;
    double t0 = now_s();
    if (rank_ == last) sleep(6); /* late for call 6: the others' kernels wait */
    if (good_allreduce(comm, s, dev, host, 6)) return 1;
    double took = now_s() - t0;
    if (good_allreduce(comm, s, dev, host, 7)) return 1;
    ncclCommDestroy(comm);
    fflush(stderr);
    if (rank_ != 0) {
        printf("hang-gpu scenario=stall rank=%d: ok, call 6 took %.1f s\n", rank_, took);
        return 0;
    }
    /* Rank 0 is the lowest waiting rank: the report is printed there. */
    FILE *f = fopen(log_path, "r");
    if (!f) FAILF("cannot read its log %s", log_path);
    char line[4096], want[64];
    int reports = 0, named = 0;
    snprintf(want, sizeof(want), "rank %d (host ", last);
    while (fgets(line, sizeof(line), f)) {
        if (!strstr(line, "hang: stalled for 2 s")) continue;
        reports++;
        if (strstr(line, want) && strstr(line, "has not launched call 6")) named = 1;
        fputs(line, stdout);
    }
    fclose(f);
    if (reports != 1) FAILF("%d stall reports in its log, expected one (call 6 took %.1f s)", reports, took);
    if (!named) FAILF("the stall report does not name rank %d as not having launched call 6", last);
    printf("hang-gpu scenario=stall rank=%d: ok, call 6 took %.1f s, one report naming rank %d\n", rank_, took, last);
    return 0;
}

static int check(ncclComm_t comm, cudaStream_t s, int *dev, int *host)
{
    if (good_allreduce(comm, s, dev, host, 1)) return 1;
    int last = nranks - 1;
    double t0 = now_s();
    ncclResult_t r = rank_ == last ? ncclBroadcast(dev, dev, COUNT, ncclInt32, 0, comm, s)
                                   : ncclAllReduce(dev, dev, COUNT, ncclInt32, ncclSum, comm, s);
    double took = now_s() - t0;
    const char *msg = ncclGetLastError(comm);
    char want[64];
    snprintf(want, sizeof(want), "rank %d calls broadcast", last);
    if (r != ncclInvalidUsage) FAILF("mismatched call returned %s, expected ncclInvalidUsage", ncclGetErrorString(r));
    if (took > 1.0) FAILF("mismatched call took %.2f s, expected under 1 s", took);
    if (!strstr(msg, want) || !strstr(msg, "operation")) FAILF("the error does not name rank %d's broadcast: %s", last, msg);
    if (good_allreduce(comm, s, dev, host, 2)) return 1;
    printf("hang-gpu scenario=check rank=%d: ok in %.3f s: %s\n", rank_, took, msg);
    ncclCommDestroy(comm);
    return 0;
}

static int rank_main(int id_fd_r, int *id_fd_w)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) return 77;
    CUDACHK(cudaSetDevice(0)); /* every rank on one GPU */
    ncclUniqueId id;
    if (rank_ == 0) {
        NCCLCHK(ncclGetUniqueId(&id));
        for (int r = 1; r < nranks; r++)
            if (write(id_fd_w[r], &id, sizeof(id)) != (ssize_t)sizeof(id)) FAILF("sending the unique id");
    } else if (read(id_fd_r, &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        FAILF("receiving the unique id");
    }
    ncclComm_t comm;
    NCCLCHK(ncclCommInitRank(&comm, nranks, id, rank_));
    cudaStream_t s;
    CUDACHK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *dev = NULL, *host = malloc(COUNT * sizeof(int));
    CUDACHK(cudaMalloc((void **)&dev, COUNT * sizeof(int)));
    if (strcmp(scenario, "absent") == 0) return absent(comm, s, dev, host);
    if (strcmp(scenario, "stall") == 0) return stall(comm, s, dev, host);
    return check(comm, s, dev, host);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "absent") && strcmp(argv[1], "check") && strcmp(argv[1], "stall"))) {
        fprintf(stderr, "usage: %s absent|stall|check [NRANKS]\n", argv[0]);
        return 2;
    }
    scenario = argv[1];
    nranks = argc > 2 ? atoi(argv[2]) : 3;
    if (nranks < 2 || nranks > MAX_RANKS) return 2;
    if (strcmp(scenario, "absent") == 0) setenv("MPCCL_OP_TIMEOUT", "3", 1);
    else if (strcmp(scenario, "stall") == 0) setenv("MPCCL_STALL_REPORT_S", "2", 1), unsetenv("MPCCL_OP_TIMEOUT");
    else setenv("MPCCL_CHECK_MODE", "1", 1);
    int idp[MAX_RANKS][2];
    for (int r = 0; r < nranks; r++)
        if (pipe(idp[r])) return 1;
    pid_t pid[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        pid[r] = fork();
        if (pid[r] < 0) return 1;
        if (pid[r] == 0) {
            rank_ = r;
            if (strcmp(scenario, "stall") == 0) { /* the log, read back by rank 0 */
                snprintf(log_path, sizeof(log_path), "/tmp/hang-gpu-stall-%d.log", (int)getpid());
                if (!freopen(log_path, "w", stderr)) _exit(1);
            }
            int w[MAX_RANKS];
            for (int k = 0; k < nranks; k++) w[k] = idp[k][1];
            alarm(100);
            int rc = rank_main(idp[r][0], w);
            fflush(stdout);
            if (log_path[0]) unlink(log_path);
            _exit(rc);
        }
    }
    int fail = 0, skipped = 0;
    for (int r = 0; r < nranks; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        if (rc == 77) skipped++;
        else if (rc != 0) fail = 1;
    }
    if (skipped == nranks) return 77;
    printf("hang-gpu scenario=%s ranks=%d: %s\n", scenario, nranks, fail ? "FAIL" : "pass");
    return fail;
}
