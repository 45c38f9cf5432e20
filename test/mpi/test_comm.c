/* Communicator lifecycle: queries, ncclCommSplit (colors, keys, NOCOLOR),
 * finalize/destroy, abort, async errors, both bootstraps (MPI communicators and
 * a unique id broadcast over MPI), configs (default, non-blocking, bad magic). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

/* Allgathers each member's world rank over comm: the member list in comm order. */
static void members(ncclComm_t comm, int *out, int n)
{
    int32_t *buf = perf_mem_alloc(&t_mem, sizeof(int32_t) * (size_t)(n + 1));
    int32_t mine = t_rank, *host = malloc(sizeof(int32_t) * (size_t)n);
    int me = -1;
    ncclCommUserRank(comm, &me);
    T_EXPECT(buf && host, "out of memory");
    if (!buf || !host) goto out;
    perf_mem_put(&t_mem, buf + me, &mine, sizeof(mine));
    T_RESULT(ncclAllGather(buf + me, buf, 1, ncclInt32, comm, t_mem.stream), ncclSuccess, comm);
    T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
    perf_mem_get(&t_mem, host, buf, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) out[i] = host[i];
out:
    free(host);
    perf_mem_free(&t_mem, buf);
}

/* Checks a split result against the expected membership: ranks with our color,
 * ordered by (key, world rank). */
static void check_split(ncclComm_t sub, const int *color, const int *key, const char *what)
{
    int n = t_nranks, want[64], got[64], nw = 0, cnt = -1, me = -1;
    if (color[t_rank] == NCCL_SPLIT_NOCOLOR) {
        T_EXPECT(sub == NULL, "%s: NOCOLOR rank got a communicator", what);
        return;
    }
    T_EXPECT(sub != NULL, "%s: no communicator", what);
    if (sub == NULL) return;
    for (int r = 0; r < n; r++)
        if (color[r] == color[t_rank]) want[nw++] = r;
    for (int i = 1; i < nw; i++) /* insertion sort by key, ties by world rank */
        for (int j = i; j > 0 && key[want[j]] < key[want[j - 1]]; j--) {
            int x = want[j];
            want[j] = want[j - 1], want[j - 1] = x;
        }
    T_NCCL(ncclCommCount(sub, &cnt));
    T_NCCL(ncclCommUserRank(sub, &me));
    T_EXPECT(cnt == nw, "%s: %d ranks, expected %d", what, cnt, nw);
    if (cnt != nw) return;
    members(sub, got, nw);
    for (int i = 0; i < nw; i++) {
        T_EXPECT(got[i] == want[i], "%s: rank %d of the new communicator is world rank %d, expected %d", what, i,
                 got[i], want[i]);
        if (want[i] == t_rank) T_EXPECT(me == i, "%s: my rank is %d, expected %d", what, me, i);
    }
    T_EXPECT(t_comm_works(sub, &t_mem) == 0, "%s: allreduce on the new communicator failed", what);
}

static void split_case(int (*colorf)(int), int (*keyf)(int), const char *what)
{
    int color[64], key[64];
    ncclComm_t sub = (ncclComm_t)&sub; /* must be overwritten, also with NULL */
    ck_assert_int_le(t_nranks, 64);
    for (int r = 0; r < t_nranks; r++) color[r] = colorf(r), key[r] = keyf(r);
    T_RESULT(ncclCommSplit(t_comm, color[t_rank], key[t_rank], &sub, NULL), ncclSuccess, t_comm);
    check_split(sub, color, key, what);
    if (sub != NULL && sub != (ncclComm_t)&sub) T_NCCL(ncclCommDestroy(sub));
}

static int mod3(int r) { return r % 3; }
static int ident(int r) { return r; }
static int zero(int r) { (void)r; return 0; }
static int reverse(int r) { return t_nranks - r; }
static int even_none(int r) { return r % 2 == 0 ? NCCL_SPLIT_NOCOLOR : 7; }
static int halves(int r) { return r < t_nranks / 2 ? 5 : 2; } /* colors need not be dense or ordered */
static int same_key(int r) { (void)r; return 3; }

START_TEST(test_split)
{
    split_case(mod3, ident, "color rank%3, key rank");
    split_case(zero, reverse, "one color, keys reversing the order");
    split_case(even_none, ident, "even ranks NCCL_SPLIT_NOCOLOR");
    split_case(halves, same_key, "two halves, equal keys (world order)");
    T_EXPECT(t_comm_works(t_comm, &t_mem) == 0, "parent broken after splits");
    T_END();
}
END_TEST

/* ncclCommShrink without the last rank (which does not call, as a dead rank
 * would not), then ncclCommGrow back to full size with that rank joining as a
 * new one; each communicator computes, and the world one still does. */
START_TEST(test_shrink_grow)
{
    if (t_nranks < 2) {
        T_END();
        return;
    }
    int ex = t_nranks - 1, n = -1, me = -1;
    ncclComm_t small = NULL, grown = NULL;
    if (t_rank != ex) {
        T_NCCL(ncclCommShrink(t_comm, &ex, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
        if (small) {
            T_NCCL(ncclCommCount(small, &n));
            T_NCCL(ncclCommUserRank(small, &me));
            T_EXPECT(n == t_nranks - 1 && me == t_rank, "shrunk: rank %d of %d, expected %d of %d", me, n, t_rank,
                     t_nranks - 1);
            T_EXPECT(t_comm_works(small, &t_mem) == 0, "shrunk communicator does not work");
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (t_rank == 0 && small) T_NCCL(ncclCommGetUniqueId(small, &id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (t_rank != ex && small) T_NCCL(ncclCommGrow(small, t_nranks, t_rank == 0 ? &id : NULL, -1, &grown, NULL));
    else if (t_rank == ex) T_NCCL(ncclCommGrow(NULL, t_nranks, &id, ex, &grown, NULL));
    if (grown) {
        T_NCCL(ncclCommCount(grown, &n));
        T_NCCL(ncclCommUserRank(grown, &me));
        T_EXPECT(n == t_nranks && me == t_rank, "grown: rank %d of %d, expected %d of %d", me, n, t_rank, t_nranks);
        T_EXPECT(t_comm_works(grown, &t_mem) == 0, "grown communicator does not work");
        T_NCCL(ncclCommDestroy(grown));
    }
    if (small) T_NCCL(ncclCommDestroy(small));
    T_EXPECT(t_comm_works(t_comm, &t_mem) == 0, "world communicator broken after shrink and grow");
    T_END();
}
END_TEST

START_TEST(test_queries)
{
    int n = -1, me = -1, dev = -2, version = 0;
    T_NCCL(ncclCommCount(t_comm, &n));
    T_NCCL(ncclCommUserRank(t_comm, &me));
    T_NCCL(ncclCommCuDevice(t_comm, &dev));
    T_EXPECT(n == t_nranks, "ncclCommCount %d, expected %d", n, t_nranks);
    T_EXPECT(me == t_rank, "ncclCommUserRank %d, expected %d (mpcclCommInitMPI keeps MPI ranks)", me, t_rank);
    if (t_mem.gpu)
        T_EXPECT(dev >= 0, "ncclCommCuDevice %d on a GPU communicator", dev);
    else
        T_EXPECT(dev == -1, "ncclCommCuDevice %d on a host communicator, expected -1", dev);
    T_NCCL(ncclGetVersion(&version));
    T_EXPECT(version == NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), "ncclGetVersion %d, header says %d",
             version, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
    ncclResult_t async = ncclInternalError;
    T_NCCL(ncclCommGetAsyncError(t_comm, &async));
    T_EXPECT(async == ncclSuccess, "async error %s on a healthy communicator", ncclGetErrorString(async));
    T_EXPECT(strlen(ncclGetErrorString(ncclInvalidArgument)) > 0, "empty error string");
    T_END();
}
END_TEST

START_TEST(test_finalize_destroy_abort)
{
    ncclComm_t a = NULL, b = NULL;
    T_NCCL(ncclCommSplit(t_comm, 0, t_rank, &a, NULL));
    T_NCCL(ncclCommSplit(t_comm, 0, t_rank, &b, NULL));
    if (a) {
        T_EXPECT(t_comm_works(a, &t_mem) == 0, "split communicator does not work");
        T_RESULT(ncclCommFinalize(a), ncclSuccess, a);
        T_RESULT(ncclCommDestroy(a), ncclSuccess, NULL);
    }
    if (b) {
        T_EXPECT(t_comm_works(b, &t_mem) == 0, "split communicator does not work");
        /* Every rank's part done first: a rank's kernel finishes a send to
         * another node once the piece is in the proxy's hands, and an abort
         * drops what the proxy has not sent yet (as NCCL's does). */
        MPI_Barrier(MPI_COMM_WORLD);
        T_RESULT(ncclCommAbort(b), ncclSuccess, NULL);
    }
    /* the parent outlives its children */
    T_EXPECT(t_comm_works(t_comm, &t_mem) == 0, "parent broken after finalize/destroy/abort of children");
    T_END();
}
END_TEST

START_TEST(test_init_mpi)
{
    ncclComm_t c = NULL;
    MPI_Comm split;
    int mrank, msize, me = -1, n = -1;
    T_NCCL(mpcclCommInitMPI(&c, MPI_COMM_WORLD, NULL));
    if (c) {
        T_EXPECT(t_comm_works(c, &t_mem) == 0, "communicator from MPI_COMM_WORLD does not work");
        T_NCCL(ncclCommDestroy(c));
    }
    /* a split MPI communicator: mpccl ranks follow its ranks (key reverses them) */
    MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, t_nranks - t_rank, &split);
    MPI_Comm_rank(split, &mrank);
    MPI_Comm_size(split, &msize);
    c = NULL;
    T_NCCL(mpcclCommInitMPI(&c, split, NULL));
    if (c) {
        T_NCCL(ncclCommUserRank(c, &me));
        T_NCCL(ncclCommCount(c, &n));
        T_EXPECT(me == mrank && n == msize, "rank %d of %d, MPI says %d of %d", me, n, mrank, msize);
        T_EXPECT(t_comm_works(c, &t_mem) == 0, "communicator from a split MPI communicator does not work");
        T_NCCL(ncclCommDestroy(c));
    }
    MPI_Comm_free(&split);
    T_RESULT(mpcclCommInitMPI(&c, MPI_COMM_NULL, NULL), ncclInvalidArgument, NULL);
    T_END();
}
END_TEST

static ncclUniqueId shared_id(void)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (t_rank == 0) T_NCCL(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    return id;
}

START_TEST(test_init_uniqueid)
{
    ncclComm_t c = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    int me = -1;
    T_NCCL(ncclCommInitRank(&c, t_nranks, shared_id(), t_rank));
    if (c) {
        T_NCCL(ncclCommUserRank(c, &me));
        T_EXPECT(me == t_rank, "unique-id communicator: rank %d, expected %d", me, t_rank);
        T_EXPECT(t_comm_works(c, &t_mem) == 0, "unique-id communicator does not work");
        T_NCCL(ncclCommDestroy(c));
    }
    /* ranks may be permuted against MPI's: the id's ranks are what counts */
    c = NULL;
    config.blocking = 1;
    T_NCCL(ncclCommInitRankConfig(&c, t_nranks, shared_id(), t_nranks - 1 - t_rank, &config));
    if (c) {
        T_NCCL(ncclCommUserRank(c, &me));
        T_EXPECT(me == t_nranks - 1 - t_rank, "permuted unique-id communicator: rank %d", me);
        T_EXPECT(t_comm_works(c, &t_mem) == 0, "unique-id communicator with config does not work");
        T_NCCL(ncclCommDestroy(c));
    }
    T_END();
}
END_TEST

/* Waits while a non-blocking communicator reports ncclInProgress. */
static ncclResult_t settle(ncclComm_t c)
{
    ncclResult_t st = ncclInProgress;
    time_t t0 = time(NULL);
    struct timespec nap = {0, 1000000}; /* sleep: the work runs in a background thread, ranks are oversubscribed */
    while (ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclInProgress && time(NULL) - t0 < 60)
        nanosleep(&nap, NULL);
    return st;
}

START_TEST(test_init_nonblocking)
{
    ncclComm_t c = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclResult_t r;
    float host = (float)(t_rank + 1), *buf = perf_mem_alloc(&t_mem, sizeof(float));
    config.blocking = 0;
    r = ncclCommInitRankConfig(&c, t_nranks, shared_id(), t_rank, &config);
    T_EXPECT(r == ncclSuccess || r == ncclInProgress, "non-blocking init: %s", ncclGetErrorString(r));
    if (c && (r == ncclSuccess || r == ncclInProgress)) {
        T_EXPECT(settle(c) == ncclSuccess, "non-blocking init did not complete");
        perf_mem_put(&t_mem, buf, &host, sizeof(host));
        r = ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, c, t_mem.stream);
        T_EXPECT(r == ncclSuccess || r == ncclInProgress, "allreduce: %s", ncclGetErrorString(r));
        T_EXPECT(settle(c) == ncclSuccess, "allreduce on a non-blocking communicator did not complete");
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
        perf_mem_get(&t_mem, &host, buf, sizeof(host));
        T_EXPECT(host == (float)(t_nranks * (t_nranks + 1) / 2), "non-blocking allreduce gave %g", host);
        r = ncclCommFinalize(c);
        T_EXPECT(r == ncclSuccess || r == ncclInProgress, "finalize: %s", ncclGetErrorString(r));
        T_EXPECT(settle(c) == ncclSuccess, "finalize did not complete");
        T_NCCL(ncclCommDestroy(c));
    }
    perf_mem_free(&t_mem, buf);
    T_END();
}
END_TEST

START_TEST(test_init_bad_config)
{
    ncclComm_t c = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId id = shared_id(); /* a valid id: only the config is wrong */
    config.magic = 0xdeadbeef;
    T_RESULT(ncclCommInitRankConfig(&c, t_nranks, id, t_rank, &config), ncclInvalidArgument, NULL);
    T_EXPECT(c == NULL, "a communicator was returned for a config with a bad magic");
    if (c) ncclCommDestroy(c);
    c = NULL;
    T_RESULT(mpcclCommInitMPI(&c, MPI_COMM_WORLD, &config), ncclInvalidArgument, NULL);
    if (c) ncclCommDestroy(c);
    T_EXPECT(t_comm_works(t_comm, &t_mem) == 0, "world communicator broken after failed inits");
    T_END();
}
END_TEST

static Suite *comm_suite(void)
{
    Suite *s = suite_create("comm");
    TCase *tc = t_tcase("comm");
    tcase_add_test(tc, test_queries);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_shrink_grow);
    tcase_add_test(tc, test_finalize_destroy_abort);
    tcase_add_test(tc, test_init_mpi);
    tcase_add_test(tc, test_init_uniqueid);
    tcase_add_test(tc, test_init_nonblocking);
    tcase_add_test(tc, test_init_bad_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) { return t_main(argc, argv, comm_suite); }
