/* Every collective against the host reference (examples/perf_check.c): all 12
 * datatypes, sum/prod/max/min/avg and PreMulSum (scalar on the host and "device"
 * resident), in place and out of place, roots varied, counts from 0 to > 1 MiB.
 *
 * The full datatype x op product runs at small counts; larger counts take a
 * rotating subset so the suite stays fast at 8 oversubscribed ranks.
 * MPCCL_TEST_LEVEL=0 shrinks the matrix further (used for the forced-algorithm
 * runs), 2 runs everything in place and out of place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "perf_check.h"
#include "perf_coll.h"

/* op variants: the five built-ins, then PreMulSum with the scalar in host memory
 * (read when the op is created) and with it in buffer memory (read at call time) */
#define V_PREMUL_HOST PERF_PREMULSUM
#define V_PREMUL_DEV PERF_COPY
#define NUM_VARIANTS (PERF_COPY + 1)

static const char *variant_name(int v)
{
    return v == V_PREMUL_HOST ? "premulsum(host)" : v == V_PREMUL_DEV ? "premulsum(device)" : perf_op_name((perf_op_t)v);
}

static uint64_t case_no; /* same sequence on every rank: data seeds and roots follow it */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
    z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ull;
    return z ^ (z >> 33);
}

/* Creates the PreMulSum op for variant v; the scalar's memory must outlive the call. */
static ncclRedOp_t make_op(int v, const perf_data_t *d, void *devscalar, unsigned char *hostscalar)
{
    ncclRedOp_t op = perf_op_nccl((perf_op_t)v);
    unsigned char decoy[8];
    if (v != V_PREMUL_HOST && v != V_PREMUL_DEV) return op;
    perf_set(d->type, hostscalar, 0, d->scalar);
    perf_set(d->type, decoy, 0, d->scalar * 4 + 1);
    if (v == V_PREMUL_HOST) {
        T_NCCL(ncclRedOpCreatePreMulSum(&op, hostscalar, d->type, ncclScalarHostImmediate, t_comm));
        /* immediate: the value was taken at creation, later writes must not matter */
        memcpy(hostscalar, decoy, sizeof(decoy));
    } else {
        /* device residence: read when the collective runs, so it may change after creation */
        perf_mem_put(&t_mem, devscalar, decoy, perf_type_size(d->type));
        T_NCCL(ncclRedOpCreatePreMulSum(&op, devscalar, d->type, ncclScalarDevice, t_comm));
        perf_mem_put(&t_mem, devscalar, hostscalar, perf_type_size(d->type));
    }
    return op;
}

static void run_case(perf_coll_t coll, ncclDataType_t t, int v, size_t count, int inplace)
{
    perf_call_t c;
    perf_data_t d;
    size_t cnt, scnt, rcnt, big, wrong;
    unsigned char hostscalar[8];
    char msg[600] = "";
    void *devscalar;
    uint64_t seed = t_seed ^ mix(++case_no);
    perf_op_t dop = !perf_coll_reduces(coll) ? PERF_COPY : v == V_PREMUL_DEV ? PERF_PREMULSUM : (perf_op_t)v;
    int n = t_nranks;

    memset(&c, 0, sizeof(c));
    /* count is the call's count argument: scale up to the buffer's total */
    perf_coll_counts(coll, n, count * (coll == PERF_ALL_GATHER || coll == PERF_REDUCE_SCATTER ||
                                       coll == PERF_ALLTOALL || coll == PERF_GATHER || coll == PERF_SCATTER ? n : 1),
                     &cnt, &scnt, &rcnt);
    big = (scnt > rcnt ? scnt : rcnt) * perf_type_size(t);
    perf_data_init(&d, t, dop, n, seed);
    c.coll = coll, c.type = t, c.count = cnt, c.inplace = inplace, c.comm = t_comm;
    c.rank = t_rank, c.nranks = n, c.stream = t_mem.stream;
    c.root = perf_coll_rooted(coll) ? (int)(mix(case_no) % (uint64_t)n) : -1;
    c.sendbase = perf_mem_alloc(&t_mem, big);
    c.recvbase = perf_mem_alloc(&t_mem, big);
    devscalar = perf_mem_alloc(&t_mem, 8);
    void *host = malloc(big ? big : 1);
    if (!c.sendbase || !c.recvbase || !devscalar || !host) {
        t_fail(__FILE__, __LINE__, "out of memory for %zu bytes", big);
        goto out;
    }
    c.op = make_op(perf_coll_reduces(coll) ? v : PERF_SUM, &d, devscalar, hostscalar);
    if (perf_call_prepare(&c, &d, &t_mem, host, 1)) t_fail(__FILE__, __LINE__, "cannot stage the input");
    T_RESULT(perf_call_launch(&c), ncclSuccess, t_comm);
    T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
    wrong = perf_call_check(&c, &d, &t_mem, host, msg, sizeof(msg));
    T_EXPECT(wrong == 0, "%s %s %s count %zu %s root %d (case seed %llu): %zu wrong; %s", perf_coll_name(coll),
             perf_type_name(t), perf_coll_reduces(coll) ? variant_name(v) : "", count,
             inplace ? "in-place" : "out-of-place", c.root, (unsigned long long)seed, wrong, msg);
    if (perf_coll_reduces(coll) && (v == V_PREMUL_HOST || v == V_PREMUL_DEV)) T_NCCL(ncclRedOpDestroy(c.op, t_comm));
out:
    free(host);
    perf_mem_free(&t_mem, devscalar);
    perf_mem_free(&t_mem, c.recvbase);
    perf_mem_free(&t_mem, c.sendbase);
}

/* One or both placements, as the collective allows. */
static void run_places(perf_coll_t coll, ncclDataType_t t, int v, size_t count, int which)
{
    if (coll == PERF_BCAST || !perf_coll_has_inplace(coll)) which = coll == PERF_BCAST ? 1 : 0;
    if (which == 0 || which == 2) run_case(coll, t, v, count, 0);
    if (which == 1 || which == 2) run_case(coll, t, v, count, 1);
}

static const size_t small_counts[] = {1, 2, 7, 13};
static const size_t medium_counts[] = {0, 1021, 4099};

static void reduce_matrix(perf_coll_t coll)
{
    int all = t_level >= 2 ? 2 : -1;
    /* full datatype x op product at small counts */
    for (int t = 0; t < ncclNumTypes; t++)
        for (int v = 0; v < NUM_VARIANTS; v++) {
            if (t_level == 0) {
                run_places(coll, (ncclDataType_t)t, v, 7, (t + v) % 2);
                continue;
            }
            for (size_t i = 0; i < sizeof(small_counts) / sizeof(small_counts[0]); i++)
                run_places(coll, (ncclDataType_t)t, v, small_counts[i], all >= 0 || i == 3 ? 2 : (int)(t + v + i) % 2);
        }
    /* medium counts: every datatype, the ops rotating */
    for (size_t i = 0; i < sizeof(medium_counts) / sizeof(medium_counts[0]); i++) {
        if (t_level == 0 && medium_counts[i] != 1021) continue;
        for (int t = 0; t < ncclNumTypes; t++)
            run_places(coll, (ncclDataType_t)t, (int)(t * 3 + i) % NUM_VARIANTS, medium_counts[i],
                       all >= 0 ? 2 : (int)(t + i) % 2);
    }
    /* 65537: a few combinations (odd count: no vector path divides it evenly) */
    static const struct { ncclDataType_t t; int v; } mid[] = {
        {ncclFloat32, PERF_SUM}, {ncclBfloat16, PERF_AVG}, {ncclInt32, PERF_PROD},
        {ncclFloat16, V_PREMUL_DEV}, {ncclUint8, PERF_MAX}, {ncclFloat64, PERF_MIN}};
    for (size_t i = 0; i < (t_level == 0 ? 2 : sizeof(mid) / sizeof(mid[0])); i++)
        run_places(coll, mid[i].t, mid[i].v, 65537, all >= 0 ? 2 : (int)i % 2);
}

static void copy_matrix(perf_coll_t coll)
{
    static const size_t counts[] = {0, 1, 2, 7, 13, 1021, 4099};
    static const ncclDataType_t quick[] = {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64};
    for (int t = 0; t < ncclNumTypes; t++) {
        /* level 0: one type per element size */
        if (t_level == 0 && t != ncclInt8 && t != ncclFloat16 && t != ncclFloat32 && t != ncclFloat64) continue;
        for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
            if (t_level == 0 && counts[i] != 1 && counts[i] != 13 && counts[i] != 1021) continue;
            run_places(coll, (ncclDataType_t)t, PERF_SUM, counts[i], 2);
        }
    }
    for (int i = 0; i < (t_level == 0 ? 1 : 4); i++) run_places(coll, quick[i], PERF_SUM, 65537, i % 2);
}

/* More than 1 MiB per call (per rank for the block collectives). */
static void big_case(perf_coll_t coll, ncclDataType_t t, int v)
{
    run_places(coll, t, v, (1u << 20) / perf_type_size(t) + 3, t_level >= 2 ? 2 : (int)(case_no % 2));
}

START_TEST(test_allreduce) { reduce_matrix(PERF_ALLREDUCE); T_END(); }
END_TEST
START_TEST(test_reduce) { reduce_matrix(PERF_REDUCE); T_END(); }
END_TEST
START_TEST(test_reduce_scatter) { reduce_matrix(PERF_REDUCE_SCATTER); T_END(); }
END_TEST
START_TEST(test_broadcast) { copy_matrix(PERF_BROADCAST); T_END(); }
END_TEST
START_TEST(test_bcast) { copy_matrix(PERF_BCAST); T_END(); }
END_TEST
START_TEST(test_allgather) { copy_matrix(PERF_ALL_GATHER); T_END(); }
END_TEST
START_TEST(test_alltoall) { copy_matrix(PERF_ALLTOALL); T_END(); }
END_TEST
START_TEST(test_gather) { copy_matrix(PERF_GATHER); T_END(); }
END_TEST
START_TEST(test_scatter) { copy_matrix(PERF_SCATTER); T_END(); }
END_TEST
START_TEST(test_sendrecv_ring) { copy_matrix(PERF_SENDRECV); T_END(); }
END_TEST

START_TEST(test_big)
{
    big_case(PERF_ALLREDUCE, ncclFloat32, PERF_SUM);
    big_case(PERF_ALL_GATHER, ncclInt32, PERF_SUM);
    if (t_level > 0) {
        big_case(PERF_ALLREDUCE, ncclBfloat16, V_PREMUL_HOST);
        big_case(PERF_REDUCE_SCATTER, ncclFloat16, PERF_SUM);
        big_case(PERF_REDUCE, ncclInt64, PERF_MAX);
        big_case(PERF_BROADCAST, ncclUint8, PERF_SUM);
        big_case(PERF_ALLTOALL, ncclFloat64, PERF_SUM);
        big_case(PERF_GATHER, ncclFloat8e4m3, PERF_SUM);
        big_case(PERF_SCATTER, ncclUint32, PERF_SUM);
        big_case(PERF_ALLREDUCE, ncclFloat8e5m2, PERF_AVG);
    }
    T_END();
}
END_TEST

/* Send/recv above 1 MiB, an odd byte count (the LL path cuts it in chunks when
 * forced on for every size). */
START_TEST(test_big_sendrecv)
{
    big_case(PERF_SENDRECV, ncclFloat32, PERF_SUM);
    if (t_level > 0) big_case(PERF_SENDRECV, ncclUint8, PERF_SUM);
    T_END();
}
END_TEST

static Suite *coll_suite(void)
{
    Suite *s = suite_create("coll");
    TCase *tc = t_tcase("coll");
    tcase_add_test(tc, test_allreduce);
    tcase_add_test(tc, test_reduce);
    tcase_add_test(tc, test_reduce_scatter);
    tcase_add_test(tc, test_broadcast);
    tcase_add_test(tc, test_bcast);
    tcase_add_test(tc, test_allgather);
    tcase_add_test(tc, test_alltoall);
    tcase_add_test(tc, test_gather);
    tcase_add_test(tc, test_scatter);
    tcase_add_test(tc, test_big);
    suite_add_tcase(s, tc);
    /* apart, so that CK_RUN_CASE=p2p runs only send/recv (check-gpu's LL variants) */
    TCase *p2p = t_tcase("p2p");
    tcase_add_test(p2p, test_sendrecv_ring);
    tcase_add_test(p2p, test_big_sendrecv);
    suite_add_tcase(s, p2p);
    return s;
}

int main(int argc, char **argv) { return t_main(argc, argv, coll_suite); }
