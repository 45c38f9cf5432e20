/* Nonblocking communicators (config.blocking = 0) and ncclCommAbort from
 * another thread: inits from a unique id, grouped, by split and by shrink
 * return ncclInProgress and complete in the background (polled with
 * ncclCommGetAsyncError), then a correct allreduce; finalize in the
 * background, destroy during it; abort while an allreduce is stuck on a rank
 * that never calls (3 ranks: the stuck calls and the abort return within 2 s);
 * abort during a pending init whose last rank never comes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#define BOUND_S 2.0 /* a stuck call or an abort returns within this after the abort */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static ncclUniqueId shared_id(void)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (t_rank == 0) T_NCCL(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    return id;
}

/* Polls (sleeping: ranks are oversubscribed) while c reports ncclInProgress. */
static ncclResult_t settle(ncclComm_t c)
{
    ncclResult_t st = ncclInProgress;
    double t0 = now_s();
    while (ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclInProgress && now_s() - t0 < 60) nap_ms(1);
    return st;
}

static ncclConfig_t nonblocking_config(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    return config;
}

/* A nonblocking call returned r: ncclInProgress (or ncclSuccess), then the
 * communicator settles to ncclSuccess. */
static int settled_ok(ncclComm_t c, ncclResult_t r, const char *what)
{
    T_EXPECT(r == ncclInProgress || r == ncclSuccess, "%s returned %s (%s)", what, ncclGetErrorString(r),
             ncclGetLastError(c));
    if (!c || (r != ncclInProgress && r != ncclSuccess)) return 0;
    ncclResult_t s = settle(c);
    T_EXPECT(s == ncclSuccess, "%s settled to %s (%s)", what, ncclGetErrorString(s), ncclGetLastError(c));
    return s == ncclSuccess;
}

/* Finalize in the background: destroy right away (it waits for the
 * finalize), or after polling until it completed. */
static void finalize_destroy(ncclComm_t c, int poll)
{
    ncclResult_t r = ncclCommFinalize(c);
    T_EXPECT(r == ncclInProgress || r == ncclSuccess, "finalize returned %s", ncclGetErrorString(r));
    if (poll) T_EXPECT(settle(c) == ncclSuccess, "finalize did not complete");
    T_NCCL(ncclCommDestroy(c));
}

START_TEST(test_init_uniqueid)
{
    ncclComm_t c = NULL;
    ncclConfig_t config = nonblocking_config();
    ncclResult_t r = ncclCommInitRankConfig(&c, t_nranks, shared_id(), t_rank, &config);
    T_EXPECT(c != NULL, "no handle from a nonblocking init");
    /* While it is pending, other calls are refused (NCCL: ncclInvalidArgument). */
    ncclResult_t now = ncclSuccess;
    int count = -1;
    if (c && ncclCommGetAsyncError(c, &now) == ncclSuccess && now == ncclInProgress) {
        ncclResult_t q = ncclCommCount(c, &count);
        T_EXPECT(q == ncclInvalidArgument || q == ncclSuccess, "ncclCommCount during the init: %s",
                 ncclGetErrorString(q));
    }
    if (settled_ok(c, r, "ncclCommInitRankConfig")) {
        T_NCCL(ncclCommCount(c, &count));
        T_EXPECT(count == t_nranks, "count %d, expected %d", count, t_nranks);
        T_EXPECT(t_comm_works(c, &t_mem) == 0, "allreduce on the nonblocking communicator failed");
        finalize_destroy(c, 1);
    } else if (c) {
        ncclCommAbort(c);
    }
    T_END();
}
END_TEST

START_TEST(test_init_grouped)
{
    ncclComm_t c[2] = {NULL, NULL};
    ncclConfig_t config = nonblocking_config();
    ncclUniqueId id[2] = {shared_id(), shared_id()};
    T_NCCL(ncclGroupStart());
    for (int i = 0; i < 2; i++) T_NCCL(ncclCommInitRankConfig(&c[i], t_nranks, id[i], t_rank, &config));
    ncclResult_t r = ncclGroupEnd();
    for (int i = 0; i < 2; i++) {
        if (settled_ok(c[i], r, "grouped ncclGroupEnd")) {
            T_EXPECT(t_comm_works(c[i], &t_mem) == 0, "grouped communicator %d does not work", i);
            finalize_destroy(c[i], i == 0);
        } else if (c[i]) {
            ncclCommAbort(c[i]);
        }
    }
    T_END();
}
END_TEST

START_TEST(test_split)
{
    ncclComm_t sub = NULL;
    ncclConfig_t config = nonblocking_config();
    ncclResult_t r = ncclCommSplit(t_comm, t_rank % 2, t_rank, &sub, &config);
    if (settled_ok(sub, r, "ncclCommSplit")) {
        int n = -1;
        T_NCCL(ncclCommCount(sub, &n));
        T_EXPECT(n == (t_nranks + 1 - t_rank % 2) / 2, "split child has %d ranks", n);
        T_EXPECT(t_comm_works(sub, &t_mem) == 0, "allreduce on the split child failed");
        finalize_destroy(sub, 0);
    } else if (sub) {
        ncclCommAbort(sub);
    }
    T_EXPECT(t_comm_works(t_comm, &t_mem) == 0, "the parent does not work after the split");
    T_END();
}
END_TEST

START_TEST(test_shrink)
{
    ncclComm_t c = NULL, child = NULL;
    ncclConfig_t config = nonblocking_config();
    ncclResult_t r = ncclCommInitRankConfig(&c, t_nranks, shared_id(), t_rank, &config);
    int ok = settled_ok(c, r, "ncclCommInitRankConfig"), last = t_nranks - 1;
    if (ok && t_nranks >= 2 && t_rank != last) {
        r = ncclCommShrink(c, &last, 1, &child, &config, NCCL_SHRINK_DEFAULT);
        if (settled_ok(child, r, "ncclCommShrink")) {
            int n = -1;
            T_NCCL(ncclCommCount(child, &n));
            T_EXPECT(n == t_nranks - 1, "shrink child has %d ranks, expected %d", n, t_nranks - 1);
            T_EXPECT(t_comm_works(child, &t_mem) == 0, "allreduce on the shrink child failed");
            finalize_destroy(child, 1);
        } else if (child) {
            ncclCommAbort(child);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (c) finalize_destroy(c, 1);
    T_END();
}
END_TEST

/* ncclCommGrow with config.blocking = 0: the last rank joins a communicator
 * of the others (a nonblocking split without it) as a new rank; existing and
 * new ranks get ncclInProgress or ncclSuccess and settle. */
START_TEST(test_grow)
{
    if (t_nranks < 2) {
        T_END();
        return;
    }
    int ex = t_nranks - 1;
    ncclComm_t small = NULL, grown = NULL;
    ncclConfig_t config = nonblocking_config();
    ncclResult_t r = ncclCommSplit(t_comm, t_rank == ex ? NCCL_SPLIT_NOCOLOR : 0, t_rank, &small, &config);
    int ok = t_rank == ex ? r == ncclSuccess : settled_ok(small, r, "ncclCommSplit");
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (t_rank == 0 && small) T_NCCL(ncclCommGetUniqueId(small, &id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (ok && t_rank != ex) r = ncclCommGrow(small, t_nranks, t_rank == 0 ? &id : NULL, -1, &grown, NULL);
    else if (ok) r = ncclCommGrow(NULL, t_nranks, &id, ex, &grown, &config);
    if (ok && settled_ok(grown, r, "ncclCommGrow")) {
        int n = -1, me = -1;
        T_NCCL(ncclCommCount(grown, &n));
        T_NCCL(ncclCommUserRank(grown, &me));
        T_EXPECT(n == t_nranks && me == t_rank, "grown: rank %d of %d, expected %d of %d", me, n, t_rank, t_nranks);
        T_EXPECT(t_comm_works(grown, &t_mem) == 0, "allreduce on the grown communicator failed");
        finalize_destroy(grown, 1);
    } else if (grown) {
        ncclCommAbort(grown);
    }
    if (small) finalize_destroy(small, 0);
    T_END();
}
END_TEST

typedef struct aborter {
    ncclComm_t comm;
    int delay_ms;
    double start, end; /* ncclCommAbort called, returned */
    ncclResult_t result;
} aborter_t;

static void *abort_later(void *p)
{
    aborter_t *a = p;
    nap_ms(a->delay_ms);
    a->start = now_s();
    a->result = ncclCommAbort(a->comm);
    a->end = now_s();
    return NULL;
}

/* Ranks 0 and 1 call an allreduce that rank 2 never joins; another thread
 * aborts the communicator.  The stuck call must return an error that says
 * so (or that the other rank, which aborted too, revoked the communicator),
 * both within BOUND_S of the abort.  On a blocking and a nonblocking
 * communicator, alone and inside a group. */
static void stuck_allreduce(int nonblocking, int grouped)
{
    ncclComm_t c = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    const char *what = nonblocking ? (grouped ? "grouped, nonblocking" : "nonblocking") : (grouped ? "grouped" : "alone");
    int dev = 0;
    config.blocking = !nonblocking;
    ncclResult_t r = ncclCommInitRankConfig(&c, t_nranks, shared_id(), t_rank, &config);
    if (!settled_ok(c, r, "ncclCommInitRankConfig")) c = NULL;
    if (c) T_NCCL(ncclCommCuDevice(c, &dev));
    if (c && dev < 0 && t_rank < 2) { /* host: the call itself waits for the peer */
        size_t count = 1 << 16;
        float *buf = perf_mem_alloc(&t_mem, count * sizeof(float));
        aborter_t a = {.comm = c, .delay_ms = 300, .result = ncclSuccess};
        pthread_t th;
        T_EXPECT(buf != NULL, "out of memory");
        T_EXPECT(pthread_create(&th, NULL, abort_later, &a) == 0, "cannot start the aborting thread");
        if (grouped) ncclGroupStart();
        r = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c, t_mem.stream);
        if (grouped) r = ncclGroupEnd();
        double back = now_s();
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", ncclGetLastError(NULL));
        pthread_join(th, NULL);
        T_EXPECT(r == ncclRemoteError || r == ncclInvalidUsage, "%s: stuck allreduce returned %s after the abort",
                 what, ncclGetErrorString(r));
        /* Its own abort, or the other stuck rank's, whose revoke may come first. */
        T_EXPECT(strstr(msg, "abort") != NULL || strstr(msg, "revoked") != NULL,
                 "%s: the stuck call's error does not say aborted (or revoked by the peer that aborted): %s", what,
                 msg);
        T_EXPECT(back - a.start < BOUND_S, "%s: the stuck allreduce returned %.3f s after the abort", what,
                 back - a.start);
        T_EXPECT(a.end - a.start < BOUND_S, "%s: ncclCommAbort took %.3f s", what, a.end - a.start);
        T_EXPECT(a.result == ncclSuccess, "%s: ncclCommAbort returned %s", what, ncclGetErrorString(a.result));
        printf("[rank %d] stuck allreduce (%s) returned %s %.1f ms after the abort; abort took %.1f ms\n", t_rank,
               what, ncclGetErrorString(r), (back - a.start) * 1e3, (a.end - a.start) * 1e3);
        perf_mem_free(&t_mem, buf);
        c = NULL;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (c) T_NCCL(ncclCommAbort(c));
}

START_TEST(test_abort_stuck_allreduce)
{
    if (t_nranks == 3) {
        stuck_allreduce(0, 0);
        stuck_allreduce(0, 1);
        stuck_allreduce(1, 0);
    }
    T_END();
}
END_TEST

/* Every rank but the last starts a nonblocking init the last never joins;
 * it stays pending, then ncclCommAbort (or ncclCommDestroy, which abandons a
 * pending init) ends it within BOUND_S. */
static void pending_init_ended_by(ncclResult_t (*end)(ncclComm_t), const char *what)
{
    ncclUniqueId id = shared_id();
    if (t_nranks >= 2 && t_rank < t_nranks - 1) {
        ncclComm_t c = NULL;
        ncclConfig_t config = nonblocking_config();
        ncclResult_t r = ncclCommInitRankConfig(&c, t_nranks, id, t_rank, &config), now = ncclSuccess;
        T_EXPECT(r == ncclInProgress, "an init whose last rank never comes returned %s", ncclGetErrorString(r));
        nap_ms(200);
        if (c) {
            T_NCCL(ncclCommGetAsyncError(c, &now));
            T_EXPECT(now == ncclInProgress, "the pending init reports %s", ncclGetErrorString(now));
            double t0 = now_s();
            T_NCCL(end(c));
            double took = now_s() - t0;
            T_EXPECT(took < BOUND_S, "%s of a pending init took %.3f s", what, took);
            printf("[rank %d] %s of a pending init took %.1f ms\n", t_rank, what, took * 1e3);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

START_TEST(test_abort_pending_init)
{
    pending_init_ended_by(ncclCommAbort, "ncclCommAbort");
    pending_init_ended_by(ncclCommDestroy, "ncclCommDestroy");
    T_END();
}
END_TEST

static Suite *nonblock_suite(void)
{
    Suite *s = suite_create("nonblock");
    TCase *tc = t_tcase("nonblock");
    tcase_add_test(tc, test_init_uniqueid);
    tcase_add_test(tc, test_init_grouped);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_shrink);
    tcase_add_test(tc, test_grow);
    tcase_add_test(tc, test_abort_stuck_allreduce);
    tcase_add_test(tc, test_abort_pending_init);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) { return t_main(argc, argv, nonblock_suite); }
