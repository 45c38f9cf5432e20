/* Strangers at every listener: ncclCommInitRank (bootstrap root and ring),
 * 1000 allreduces, ncclCommShrink (the doors) and ncclCommGrow (a new root
 * and ring) run once undisturbed and once while a stranger thread in every
 * rank (stranger.h) holds 3 silent, 3 garbage and 3 huge-length connections
 * to each of the process's listening ports and floods them.  Every step
 * must succeed both times, the disturbed run must take at most
 * MPCCL_STRANGER_SLACK_MS (default 3000; the goal is 1000 on an idle
 * machine) longer per step, no stranger may receive a byte of the unique
 * id's secret, and no stranger is counted as a rank.  Host communicators,
 * host buffers; bounded by an alarm. */
#define _GNU_SOURCE
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "stranger.h"

enum { STEP_INIT, STEP_ALLREDUCE, STEP_SHRINK, STEP_GROW, NSTEPS };
static const char *step_name[NSTEPS] = {"init", "1000 allreduces", "shrink", "shrink+grow"};

static int rank, nranks, failures;

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        ncclResult_t r_ = (call);                                                                            \
        if (r_ != ncclSuccess) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: %s: %s (%s)\n", rank, __FILE__, __LINE__, #call,                \
                    ncclGetErrorString(r_), ncclGetLastError(NULL));                                         \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Whether buf holds any 8 consecutive bytes of the id's secret part. */
static int leaked(const unsigned char *buf, size_t n, void *arg)
{
    const unsigned char *secret = arg; /* the last 16 bytes of the id */
    for (size_t i = 0; i + 8 <= n; i++)
        for (int j = 0; j + 8 <= 16; j++)
            if (!memcmp(buf + i, secret + j, 8)) return 1;
    return 0;
}

static int allreduce_ok(ncclComm_t comm, int n, int iters)
{
    enum { COUNT = 256 };
    float *buf = malloc(COUNT * sizeof(float));
    int ok = 1, me = -1;
    ncclCommUserRank(comm, &me);
    for (int it = 0; it < iters && ok; it++) {
        for (int i = 0; i < COUNT; i++) buf[i] = (float)(me + 1) * (float)(i % 7 + it % 3);
        if (ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess) ok = 0;
        float sum = (float)(n * (n + 1) / 2);
        for (int i = 0; i < COUNT && ok; i++)
            if (buf[i] != sum * (float)(i % 7 + it % 3)) ok = 0;
    }
    free(buf);
    return ok;
}

/* One run of the four steps; t[] gets each step's time on this rank. */
static void scenario(double t[NSTEPS], unsigned char secret[16])
{
    ncclUniqueId id;
    ncclComm_t comm = NULL, same = NULL, small = NULL, grown = NULL;
    double t0 = now_s();
    if (rank == 0) CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    memcpy(secret, id.internal + 112, 16);
    CHECK(ncclCommInitRank(&comm, nranks, id, rank));
    int n = -1;
    if (comm) ncclCommCount(comm, &n);
    if (n != nranks) {
        fprintf(stderr, "rank %d: the communicator has %d ranks, expected %d\n", rank, n, nranks);
        failures++;
    }
    t[STEP_INIT] = now_s() - t0;

    t0 = now_s();
    if (comm && !allreduce_ok(comm, nranks, 1000)) {
        fprintf(stderr, "rank %d: allreduces failed or wrong\n", rank);
        failures++;
    }
    t[STEP_ALLREDUCE] = now_s() - t0;

    /* Every rank stays: each but the lowest waits at its door for the id. */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now_s();
    if (comm) CHECK(ncclCommShrink(comm, NULL, 0, &same, NULL, NCCL_SHRINK_DEFAULT));
    if (same && !allreduce_ok(same, nranks, 3)) failures++;
    t[STEP_SHRINK] = now_s() - t0;

    /* Without the last rank, and back with it as a new one. */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now_s();
    int ex = nranks - 1;
    if (nranks > 1 && rank != ex && comm) CHECK(ncclCommShrink(comm, &ex, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
    ncclUniqueId gid;
    memset(&gid, 0, sizeof(gid));
    if (rank == 0 && small) CHECK(ncclCommGetUniqueId(small, &gid));
    MPI_Bcast(&gid, sizeof(gid), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (nranks > 1 && rank != ex && small) CHECK(ncclCommGrow(small, nranks, rank == 0 ? &gid : NULL, -1, &grown, NULL));
    else if (nranks > 1 && rank == ex) CHECK(ncclCommGrow(NULL, nranks, &gid, ex, &grown, NULL));
    if (grown && !allreduce_ok(grown, nranks, 3)) failures++;
    t[STEP_GROW] = now_s() - t0;

    if (grown) ncclCommDestroy(grown);
    if (small) ncclCommDestroy(small);
    if (same) ncclCommDestroy(same);
    if (comm) ncclCommDestroy(comm);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "test_stranger: timed out (alarm)\n";
    if (write(2, msg, sizeof(msg) - 1) < 0) _exit(3);
    _exit(3);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *e = getenv("MPCCL_STRANGER_SLACK_MS");
    double slack = (e ? atof(e) : 3000.0) / 1000.0;
    e = getenv("MPCCL_STRANGER_FLOOD");
    int flood = e ? atoi(e) : 2;
    signal(SIGALRM, watchdog);
    alarm(240);

    double quiet[NSTEPS], busy[NSTEPS];
    unsigned char secret[16];
    scenario(quiet, secret);
    stranger_t *s = stranger_start(flood);
    if (s == NULL) {
        fprintf(stderr, "rank %d: cannot start the stranger\n", rank);
        failures++;
    }
    scenario(busy, secret);
    long conns = 0;
    int leak = 0, ports = s ? stranger_stop(s, &conns, leaked, secret, &leak) : 0;
    if (leak) {
        fprintf(stderr, "rank %d: a stranger received bytes of the unique id's secret\n", rank);
        failures++;
    }
    if (ports == 0 || conns == 0) {
        fprintf(stderr, "rank %d: the stranger found no listener (%d ports, %ld connections)\n", rank, ports, conns);
        failures++;
    }
    double qmax[NSTEPS], bmax[NSTEPS];
    MPI_Reduce(quiet, qmax, NSTEPS, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(busy, bmax, NSTEPS, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long all_conns = 0;
    int all_ports = 0;
    MPI_Reduce(&conns, &all_conns, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&ports, &all_ports, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("test_stranger: %d ranks, %d listening ports attacked, %ld stranger connections\n", nranks, all_ports,
               all_conns);
        for (int k = 0; k < NSTEPS; k++) {
            printf("  %-16s without strangers %7.3f s, with %7.3f s (%+.3f s)\n", step_name[k], qmax[k], bmax[k],
                   bmax[k] - qmax[k]);
            if (bmax[k] - qmax[k] > slack) {
                fprintf(stderr, "test_stranger: %s took %.3f s longer with strangers (allowed %.3f s)\n",
                        step_name[k], bmax[k] - qmax[k], slack);
                failures++;
            }
        }
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("test_stranger: %s\n", total ? "FAILED" : "passed");
    MPI_Finalize();
    return total ? 1 : 0;
}
