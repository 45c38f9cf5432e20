/* Hang reports and check mode on host communicators (doc/DEBUGGING.md).  The
 * last rank is the one to blame; each test makes a communicator of its own.
 *
 * Case "timeout" (MPCCL_OP_TIMEOUT=3): the last rank stays away from call 6
 * (computing), or calls broadcast call 6 where the others call allreduce call 6.
 * Every waiting rank fails within 5 s with ncclRemoteError, and its
 * ncclGetLastError names the last rank -- host, pid, "has not entered call 6",
 * or the broadcast and its number.
 * Case "check" (MPCCL_CHECK_MODE=1 or NCCL_CHECK_MODE=1): a mismatched
 * operation, count, root, datatype or op, and a send whose receive has
 * another count: every rank involved gets ncclInvalidUsage within 1 s, naming
 * the rank and the argument; nobody returns success, and the communicator
 * then computes correct results (matched calls pass).
 * Case "stall" (MPCCL_STALL_REPORT_S=2, no timeout): the last rank arrives
 * 3.5 s late; every call succeeds (check-hang.sh counts the one report).
 * mpcclCommDumpState names every rank; SIGUSR2 prints the report (counted by
 * the script). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "mpccl.h"

#define COUNT 4096

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ncclComm_t new_comm(void)
{
    ncclComm_t c = NULL;
    T_NCCL(mpcclCommInitMPI(&c, MPI_COMM_WORLD, NULL));
    return c;
}

/* n correct allreduces of COUNT floats (inputs from the seed), checked. */
static void good_allreduces(ncclComm_t comm, float *buf, int n)
{
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < COUNT; i++) buf[i] = (float)((t_rank + 1) * ((i + k + (int)(t_seed % 13)) % 7 + 1));
        T_NCCL(ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL));
        for (int i = 0; i < COUNT; i += 97) {
            float want = (float)(t_nranks * (t_nranks + 1) / 2 * ((i + k + (int)(t_seed % 13)) % 7 + 1));
            T_EXPECT(buf[i] == want, "allreduce %d element %d: %g, expected %g", k, i, buf[i], want);
        }
    }
}

static int *all_pids(void)
{
    int *pids = calloc((size_t)t_nranks, sizeof(int));
    int me = (int)getpid();
    MPI_Allgather(&me, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);
    return pids;
}

/* ---- timeout ---- */

START_TEST(test_absent_rank_named)
{
    if (t_nranks < 2) return;
    int last = t_nranks - 1;
    int *pids = all_pids();
    ncclComm_t comm = new_comm();
    float *buf = malloc(COUNT * sizeof(float));
    good_allreduces(comm, buf, 5); /* call 1..#5 */
    MPI_Barrier(MPI_COMM_WORLD);
    if (t_rank == last) {
        sleep(6); /* computing, away from call 6 */
        /* It may complete (its peers' data had all arrived) or fail (revoked). */
        ncclResult_t r = ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL);
        T_EXPECT(r == ncclRemoteError || r == ncclSuccess, "the late rank's call 6 returned %s",
                 ncclGetErrorString(r));
    } else {
        double t0 = now_s();
        ncclResult_t r = ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL);
        double took = now_s() - t0;
        const char *msg = ncclGetLastError(comm);
        char want[160];
        T_EXPECT(r == ncclRemoteError, "call 6 returned %s, expected ncclRemoteError", ncclGetErrorString(r));
        T_EXPECT(took < 5.0, "call 6 failed after %.2f s, expected within 5 s", took);
        snprintf(want, sizeof(want), "rank %d (host ", last);
        T_EXPECT(strstr(msg, want) != NULL, "the error does not name rank %d with its host: %s", last, msg);
        snprintf(want, sizeof(want), "pid %d)", pids[last]);
        T_EXPECT(strstr(msg, want) != NULL, "the error does not name pid %d: %s", pids[last], msg);
        T_EXPECT(strstr(msg, "has not entered call 6") != NULL, "the error does not say 'has not entered call 6': %s", msg);
        T_EXPECT(strstr(msg, "last completed allreduce call 5") != NULL, "the error does not name the last call: %s",
                 msg);
        printf("rank %d: failed after %.2f s: %s\n", t_rank, took, msg);
    }
    MPI_Barrier(MPI_COMM_WORLD); /* nobody leaves the communicator while others report */
    ncclCommAbort(comm);
    free(buf);
    free(pids);
    T_END();
}
END_TEST

START_TEST(test_other_collective_named)
{
    if (t_nranks < 2) return;
    int last = t_nranks - 1;
    ncclComm_t comm = new_comm();
    float *buf = malloc(COUNT * sizeof(float));
    good_allreduces(comm, buf, 5);
    MPI_Barrier(MPI_COMM_WORLD);
    if (t_rank == last) {
        usleep(500000); /* the others time out first */
        ncclResult_t r = ncclBroadcast(buf, buf, COUNT, ncclFloat32, 0, comm, NULL);
        printf("rank %d: broadcast call 6 returned %s (check mode off: not checked)\n", t_rank, ncclGetErrorString(r));
    } else {
        double t0 = now_s();
        ncclResult_t r = ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL);
        double took = now_s() - t0;
        const char *msg = ncclGetLastError(comm);
        char want[64];
        snprintf(want, sizeof(want), "rank %d", last);
        T_EXPECT(r == ncclRemoteError, "allreduce call 6 returned %s, expected ncclRemoteError", ncclGetErrorString(r));
        T_EXPECT(took < 5.0, "allreduce call 6 failed after %.2f s, expected within 5 s", took);
        T_EXPECT(strstr(msg, want) != NULL, "the error does not name rank %d: %s", last, msg);
        T_EXPECT(strstr(msg, "broadcast call 6") != NULL, "the error does not name broadcast call 6: %s", msg);
        printf("rank %d: failed after %.2f s: %s\n", t_rank, took, msg);
    }
    MPI_Barrier(MPI_COMM_WORLD); /* nobody leaves the communicator while others report */
    ncclCommAbort(comm);
    free(buf);
    T_END();
}
END_TEST

/* ---- check mode ---- */

typedef struct mismatch {
    const char *what;   /* the argument the error must name */
    ncclDataType_t dt;  /* the last rank's */
    size_t count;
    int root;
    ncclRedOp_t op;
    int bcast;          /* the last rank calls broadcast */
} mismatch_t;

/* Ranks but the last call allreduce (or broadcast root 0 when m->bcast is 2);
 * the last rank calls per m.  Every rank: ncclInvalidUsage within 1 s. */
static void expect_mismatch(ncclComm_t comm, float *buf, const mismatch_t *m)
{
    int last = t_nranks - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    ncclResult_t r;
    if (t_rank != last) {
        r = m->bcast == 2 ? ncclBroadcast(buf, buf, COUNT, ncclFloat32, 0, comm, NULL)
                          : ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL);
    } else if (m->bcast) {
        r = ncclBroadcast(buf, buf, m->count, m->dt, m->root, comm, NULL);
    } else {
        r = ncclAllReduce(buf, buf, m->count, m->dt, m->op, comm, NULL);
    }
    double took = now_s() - t0;
    const char *msg = ncclGetLastError(comm);
    char want[64];
    snprintf(want, sizeof(want), "rank %d", last);
    T_EXPECT(r == ncclInvalidUsage, "%s mismatch: returned %s, expected ncclInvalidUsage", m->what,
             ncclGetErrorString(r));
    T_EXPECT(took < 1.0, "%s mismatch: took %.2f s, expected under 1 s", m->what, took);
    T_EXPECT(strstr(msg, want) != NULL, "%s mismatch: the error does not name rank %d: %s", m->what, last, msg);
    T_EXPECT(strstr(msg, m->what) != NULL, "%s mismatch: the error does not name the argument: %s", m->what, msg);
    if (t_rank == 0) printf("%s mismatch, %.3f s: %s\n", m->what, took, msg);
}

START_TEST(test_check_mismatches)
{
    if (t_nranks < 2) return;
    ncclComm_t comm = new_comm();
    float *buf = malloc(2 * COUNT * sizeof(double));
    good_allreduces(comm, buf, 2);
    const mismatch_t cases[] = {
        {"the operation (broadcast", ncclFloat32, COUNT, 0, ncclSum, 1},
        {"count (1024 vs 4096)", ncclFloat32, COUNT / 4, 0, ncclSum, 0},
        {"datatype (int32 vs float32)", ncclInt32, COUNT, 0, ncclSum, 0},
        {"op (max vs sum)", ncclFloat32, COUNT, 0, ncclMax, 0},
        {"root (1 vs 0)", ncclFloat32, COUNT, 1, ncclSum, 2},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_mismatch(comm, buf, &cases[i]);
        good_allreduces(comm, buf, 1); /* the communicator still computes right */
    }
    ncclCommDestroy(comm);
    free(buf);
    T_END();
}
END_TEST

/* Rank 0 sends COUNT floats to rank 1, which receives COUNT / 2: both get
 * ncclInvalidUsage naming the count; a matched ring of send/recv passes. */
START_TEST(test_check_pairing)
{
    if (t_nranks < 2) return;
    ncclComm_t comm = new_comm();
    float *sbuf = malloc(COUNT * sizeof(float)), *rbuf = malloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++) sbuf[i] = (float)(t_rank * 1000 + i % 1000 + (int)(t_seed % 7));
    int next = (t_rank + 1) % t_nranks, prev = (t_rank + t_nranks - 1) % t_nranks;
    T_NCCL(ncclGroupStart());
    T_NCCL(ncclSend(sbuf, COUNT, ncclFloat32, next, comm, NULL));
    T_NCCL(ncclRecv(rbuf, COUNT, ncclFloat32, prev, comm, NULL));
    T_NCCL(ncclGroupEnd());
    for (int i = 0; i < COUNT; i += 101)
        T_EXPECT(rbuf[i] == (float)(prev * 1000 + i % 1000 + (int)(t_seed % 7)), "ring element %d: %g", i, rbuf[i]);
    MPI_Barrier(MPI_COMM_WORLD);
    if (t_rank <= 1) {
        double t0 = now_s();
        ncclResult_t r = t_rank == 0 ? ncclSend(sbuf, COUNT, ncclFloat32, 1, comm, NULL)
                                     : ncclRecv(rbuf, COUNT / 2, ncclFloat32, 0, comm, NULL);
        double took = now_s() - t0;
        const char *msg = ncclGetLastError(comm);
        T_EXPECT(r == ncclInvalidUsage, "mismatched send/recv returned %s, expected ncclInvalidUsage",
                 ncclGetErrorString(r));
        T_EXPECT(took < 1.0, "mismatched send/recv took %.2f s", took);
        T_EXPECT(strstr(msg, "count") != NULL && strstr(msg, "rank 0") && strstr(msg, "rank 1"),
                 "the error does not name both ranks and the count: %s", msg);
        if (t_rank == 0) printf("send/recv mismatch, %.3f s: %s\n", took, msg);
    }
    good_allreduces(comm, rbuf, 1);
    ncclCommDestroy(comm);
    free(sbuf);
    free(rbuf);
    T_END();
}
END_TEST

/* ---- stall and reports on demand ---- */

START_TEST(test_stall_reported_once)
{
    ncclComm_t comm = new_comm();
    float *buf = malloc(COUNT * sizeof(float));
    good_allreduces(comm, buf, 2);
    if (t_rank == t_nranks - 1 && t_nranks > 1) usleep(3500000); /* past MPCCL_STALL_REPORT_S=2 */
    good_allreduces(comm, buf, 1); /* waits, reported, not failed */
    /* On demand: rank 0 into a file, every rank named. */
    if (t_rank == 0) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        T_EXPECT(f != NULL, "open_memstream");
        if (f) {
            T_NCCL(mpcclCommDumpState(comm, f));
            fclose(f);
            for (int r = 0; r < t_nranks && text; r++) {
                char want[32];
                snprintf(want, sizeof(want), "rank %d (host ", r);
                T_EXPECT(strstr(text, want) != NULL, "mpcclCommDumpState does not name rank %d: %s", r, text);
            }
            T_EXPECT(text && strstr(text, "last completed allreduce call 3"), "the dump lacks the last call: %s",
                     text ? text : "");
            printf("mpcclCommDumpState:\n%s", text ? text : "");
            free(text);
        }
        raise(SIGUSR2); /* the same in the log (the script counts it) */
        sleep(1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    T_RESULT(mpcclCommDumpState(NULL, stderr), ncclInvalidArgument, NULL);
    ncclCommDestroy(comm);
    free(buf);
    T_END();
}
END_TEST

static Suite *hang_suite(void)
{
    Suite *s = suite_create("hang");
    TCase *tc = t_tcase("timeout");
    tcase_add_test(tc, test_absent_rank_named);
    tcase_add_test(tc, test_other_collective_named);
    suite_add_tcase(s, tc);
    tc = t_tcase("check");
    tcase_add_test(tc, test_check_mismatches);
    tcase_add_test(tc, test_check_pairing);
    suite_add_tcase(s, tc);
    tc = t_tcase("stall");
    tcase_add_test(tc, test_stall_reported_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) { return t_main(argc, argv, hang_suite); }
