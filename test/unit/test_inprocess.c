/* Several ranks in one process, driven from one thread: ncclCommInitAll, grouped
 * ncclCommInitRank, a group of collectives over all of them, grouped
 * ncclCommSplit.  Uses only the public API.  Host communicators here (on a GPU
 * machine the suite runs on GPUs through make check-gpu's MPI suites). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl.h"

#define N 4
#define COUNT 1021 /* prime: not divisible by the rank count */

static unsigned long long seed;

static float value(int rank, int i)
{
    /* Small integers: float sums are exact whatever the order. */
    return (float)((seed + (unsigned long long)rank * 7919u + (unsigned long long)i * 104729u) % 97u);
}

/* allreduce on every comm in one group from this thread, then check. */
static void allreduce_all(ncclComm_t *comms, int n)
{
    float *in[N], *out[N];
    for (int r = 0; r < n; r++) {
        in[r] = malloc(COUNT * sizeof(float));
        out[r] = calloc(COUNT, sizeof(float));
        for (int i = 0; i < COUNT; i++) in[r][i] = value(r, i);
    }
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++)
        ck_assert_int_eq(ncclAllReduce(in[r], out[r], COUNT, ncclFloat, ncclSum, comms[r], NULL), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    for (int i = 0; i < COUNT; i++) {
        float want = 0;
        for (int r = 0; r < n; r++) want += value(r, i);
        for (int r = 0; r < n; r++) ck_assert_msg(out[r][i] == want, "rank %d element %d: %g, expected %g", r, i,
                                                  (double)out[r][i], (double)want);
    }
    for (int r = 0; r < n; r++) {
        free(in[r]);
        free(out[r]);
    }
}

START_TEST(init_all_and_grouped_collectives)
{
    ncclComm_t comms[N];
    ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
    for (int r = 0; r < N; r++) {
        int rank = -1, count = -1;
        ck_assert_int_eq(ncclCommUserRank(comms[r], &rank), ncclSuccess);
        ck_assert_int_eq(ncclCommCount(comms[r], &count), ncclSuccess);
        ck_assert_int_eq(rank, r);
        ck_assert_int_eq(count, N);
    }
    allreduce_all(comms, N);
    allreduce_all(comms, N); /* back to back */
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

/* ncclGroupSimulateEnd: the group ends, nothing runs (outputs untouched, the
 * comms still work afterwards), and the estimate grows with the data. */
static float simulate_allreduce(ncclComm_t *comms, size_t count, float *out)
{
    float *in = calloc(count, sizeof(float));
    ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < N; r++)
        ck_assert_int_eq(ncclAllReduce(in, out + (size_t)r * count, count, ncclFloat, ncclSum, comms[r], NULL),
                         ncclSuccess);
    ck_assert_int_eq(ncclGroupSimulateEnd(&info), ncclSuccess);
    free(in);
    return info.estimatedTime;
}

START_TEST(group_simulate_end)
{
    ncclComm_t comms[N];
    ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
    size_t big = 1 << 20;
    float *out = malloc((size_t)N * big * sizeof(float));
    for (size_t i = 0; i < (size_t)N * big; i++) out[i] = -1.0f;
    float small_us = simulate_allreduce(comms, 1, out), big_us = simulate_allreduce(comms, big, out);
    ck_assert_msg(small_us > 0.0f && big_us > small_us, "estimates %g us (1 element), %g us (1M)", (double)small_us,
                  (double)big_us);
    for (size_t i = 0; i < (size_t)N * big; i++) ck_assert(out[i] == -1.0f); /* nothing ran */
    /* Bad argument: an error, and the group is over all the same. */
    ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
    bad.magic = 0;
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
    ck_assert_int_eq(ncclGroupSimulateEnd(NULL), ncclInvalidArgument);
    ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
    ck_assert_int_eq(ncclGroupSimulateEnd(&info), ncclInvalidUsage); /* no group open */
    allreduce_all(comms, N); /* the communicators are fine */
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
    free(out);
}
END_TEST

/* ncclCommGrow: two existing ranks (made by ncclCommInitAll) and two new ones
 * form a communicator of four from one thread (a group runs the inits side
 * by side); it computes, and the parent still works.  Bad arguments fail
 * before anything waits. */
START_TEST(grow_from_two_to_four)
{
    ncclComm_t old[2], grown[N];
    ck_assert_int_eq(ncclCommInitAll(old, 2, NULL), ncclSuccess);
    ncclUniqueId id;
    ck_assert_int_eq(ncclCommGetUniqueId(old[0], &id), ncclSuccess);
    ck_assert_int_eq(ncclCommGrow(old[0], N, &id, 0, &grown[0], NULL), ncclInvalidArgument); /* rank must be -1 */
    ck_assert_int_eq(ncclCommGrow(old[0], 2, &id, -1, &grown[0], NULL), ncclInvalidArgument); /* not larger */
    ck_assert_int_eq(ncclCommGrow(NULL, N, NULL, 2, &grown[2], NULL), ncclInvalidArgument);   /* new rank, no id */
    ck_assert_int_eq(ncclCommGrow(NULL, N, &id, N, &grown[2], NULL), ncclInvalidArgument);    /* rank outside */
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclCommGrow(old[0], N, &id, -1, &grown[0], NULL), ncclSuccess); /* the coordinator */
    ck_assert_int_eq(ncclCommGrow(old[1], N, NULL, -1, &grown[1], NULL), ncclSuccess);
    for (int r = 2; r < N; r++) ck_assert_int_eq(ncclCommGrow(NULL, N, &id, r, &grown[r], NULL), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < N; r++) {
        int rank = -1, count = -1;
        ck_assert_int_eq(ncclCommUserRank(grown[r], &rank), ncclSuccess);
        ck_assert_int_eq(ncclCommCount(grown[r], &count), ncclSuccess);
        ck_assert(rank == r && count == N);
    }
    allreduce_all(grown, N);
    allreduce_all(old, 2);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(grown[r]), ncclSuccess);
    for (int r = 0; r < 2; r++) ck_assert_int_eq(ncclCommDestroy(old[r]), ncclSuccess);
}
END_TEST

/* ncclCommShrink: rank 1 of four is left out and does not call (as a dead
 * rank would not); the others revoke their communicators (no more work is
 * taken) and shrink them into a communicator in parent order, which
 * computes.  Bad lists and flags fail at once. */
START_TEST(shrink_without_the_excluded_rank)
{
    ncclComm_t comms[N], small[N] = {0};
    ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
    int ex[2] = {1, 1}, self[1] = {0}, bad[1] = {N};
    ck_assert_int_eq(ncclCommShrink(comms[0], ex, 2, &small[0], NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
    ck_assert_int_eq(ncclCommShrink(comms[0], self, 1, &small[0], NULL, NCCL_SHRINK_DEFAULT), ncclInvalidUsage);
    ck_assert_int_eq(ncclCommShrink(comms[0], bad, 1, &small[0], NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
    ck_assert_int_eq(ncclCommShrink(comms[0], ex, 1, &small[0], NULL, 0x40), ncclInvalidArgument);
    /* The usual recovery: revoke (rank 1 "failed"), then shrink the revoked comms. */
    ck_assert_int_eq(ncclCommRevoke(comms[0], 0x1), ncclInvalidArgument);
    for (int r = 0; r < N; r++)
        if (r != 1) ck_assert_int_eq(ncclCommRevoke(comms[r], 0), ncclSuccess);
    float x = 1, y = 0;
    ck_assert_int_eq(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comms[0], NULL), ncclInvalidUsage);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(comms[0]), "revoked"));
    int cnt = 0;
    ck_assert_int_eq(ncclCommCount(comms[0], &cnt), ncclSuccess); /* queries still work */
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < N; r++)
        if (r != 1) ck_assert_int_eq(ncclCommShrink(comms[r], ex, 1, &small[r], NULL, NCCL_SHRINK_DEFAULT), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ncclComm_t kept[N - 1];
    for (int r = 0, k = 0; r < N; r++) {
        if (r == 1) continue;
        int rank = -1, count = -1;
        ck_assert_int_eq(ncclCommUserRank(small[r], &rank), ncclSuccess);
        ck_assert_int_eq(ncclCommCount(small[r], &count), ncclSuccess);
        ck_assert(rank == k && count == N - 1);
        kept[k++] = small[r];
    }
    allreduce_all(kept, N - 1);
    for (int k = 0; k < N - 1; k++) ck_assert_int_eq(ncclCommDestroy(kept[k]), ncclSuccess);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

/* Suspend/resume of host communicators (no GPU memory to give back) and the
 * memory statistics. */
START_TEST(suspend_resume_and_mem_stats)
{
    ncclComm_t comms[N];
    ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
    uint64_t v = 99;
    ck_assert_int_eq(ncclCommMemStats(comms[0], ncclStatGpuMemTotal, &v), ncclSuccess);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(ncclCommMemStats(comms[0], (ncclCommMemStat_t)42, &v), ncclInvalidArgument);
    ck_assert_int_eq(ncclCommMemStats(comms[0], ncclStatGpuMemTotal, NULL), ncclInvalidArgument);
    ck_assert_int_eq(ncclCommResume(comms[0]), ncclInvalidUsage); /* not suspended */
    ck_assert_int_eq(ncclCommSuspend(comms[0], 0x80), ncclInvalidArgument);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommSuspend(comms[r], NCCL_SUSPEND_MEM), ncclSuccess);
    ck_assert_int_eq(ncclCommSuspend(comms[0], NCCL_SUSPEND_MEM), ncclInvalidUsage);
    ck_assert_int_eq(ncclCommMemStats(comms[0], ncclStatGpuMemSuspended, &v), ncclSuccess);
    ck_assert_uint_eq(v, 1);
    float x = 1, y = 0;
    ck_assert_int_eq(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comms[0], NULL), ncclInvalidUsage);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(comms[0]), "suspended"));
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommResume(comms[r]), ncclSuccess);
    ck_assert_int_eq(ncclCommMemStats(comms[0], ncclStatGpuMemSuspended, &v), ncclSuccess);
    ck_assert_uint_eq(v, 0);
    allreduce_all(comms, N);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

START_TEST(grouped_init_rank_from_one_thread)
{
    ncclUniqueId id;
    ncclComm_t comms[N];
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommInitRank(&comms[r], N, id, r), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    allreduce_all(comms, N);

    /* Split from one thread inside a group: evens and odds, keys reversed. */
    ncclComm_t sub[N];
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommSplit(comms[r], r % 2, N - r, &sub[r], NULL), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < N; r++) {
        int rank = -1, count = -1;
        ck_assert_ptr_nonnull(sub[r]);
        ck_assert_int_eq(ncclCommUserRank(sub[r], &rank), ncclSuccess);
        ck_assert_int_eq(ncclCommCount(sub[r], &count), ncclSuccess);
        ck_assert_int_eq(count, N / 2);
        ck_assert_int_eq(rank, (N - 1 - r) / 2); /* reversed keys: the highest parent rank is 0 */
    }
    ncclComm_t evens[2] = {sub[2], sub[0]}, odds[2] = {sub[3], sub[1]}; /* in new-rank order */
    allreduce_all(evens, 2);
    allreduce_all(odds, 2);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(sub[r]), ncclSuccess);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

/* Ranks of one process that never communicated, destroyed one after another
 * by one thread: a flushing UCX close of the first would wait for a peer that
 * cannot progress until that close returns (it used to take the whole
 * MPCCL_UCX_CLOSE_TIMEOUT, set long here, per communicator). */
START_TEST(unused_comms_destroy_without_waiting)
{
    setenv("MPCCL_UCX_CLOSE_TIMEOUT", "30000", 1);
    ncclUniqueId id;
    ncclComm_t comms[N];
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommInitRank(&comms[r], N, id, r), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    ck_assert_msg(s < 20.0, "destroying %d unused in-process communicators took %.1f s: a close waited for "
                  "its timeout", N, s);
    unsetenv("MPCCL_UCX_CLOSE_TIMEOUT");
}
END_TEST

START_TEST(init_all_rejects_bad_arguments)
{
    ncclComm_t comms[2];
    ck_assert_int_eq(ncclCommInitAll(NULL, 2, NULL), ncclInvalidArgument);
    ck_assert_int_eq(ncclCommInitAll(comms, 0, NULL), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ndev"));
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclCommInitAll(comms, 2, NULL), ncclInvalidUsage);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
}
END_TEST

int main(void)
{
    /* Host communicators even on a GPU machine: ncclCommInitAll would bind
     * devices 0..N-1, which a machine with fewer GPUs lacks. */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    const char *s = getenv("MPCCL_TEST_SEED");
    seed = s ? strtoull(s, NULL, 0) : 20261121ULL;
    printf("test_inprocess: seed %llu (MPCCL_TEST_SEED)\n", seed);
    Suite *suite = suite_create("inprocess");
    TCase *tc = tcase_create("inprocess");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, init_all_and_grouped_collectives);
    tcase_add_test(tc, grouped_init_rank_from_one_thread);
    tcase_add_test(tc, init_all_rejects_bad_arguments);
    tcase_add_test(tc, group_simulate_end);
    tcase_add_test(tc, grow_from_two_to_four);
    tcase_add_test(tc, shrink_without_the_excluded_rank);
    tcase_add_test(tc, suspend_resume_and_mem_stats);
    tcase_add_test(tc, unused_comms_destroy_without_waiting);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
