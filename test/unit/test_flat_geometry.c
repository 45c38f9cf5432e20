/* The flat kernels' geometry and region layout (lib/gpu/gpu_flat_geometry.c,
 * lib/kernels/flat_layout.h): the invariants the kernels rely on, for every
 * mode, rank count, element size, awkward counts and extreme settings.  A
 * broken invariant here is a kernel writing outside its area on a GPU. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu/gpu_flat_geometry.h"

static const int ranks[] = {2, 3, 4, 5, 8, 16};
static const size_t sizes[] = {1, 2, 4, 8};
static const uint64_t counts[] = {1, 2, 3, 7, 15, 16, 17, 31, 255, 1021, 4093, 65537, 262143, 1000003,
                                  (1ull << 24) + 5, (1ull << 28) + 1};

/* Settings as the library clamps them: defaults and the extremes. */
static mpccl_flat_geom_params_t settings(int n, int which)
{
    mpccl_flat_geom_params_t p;
    p.nranks = n;
    switch (which) {
    case 0: /* defaults */
        p.max_ctas = 128;
        p.slice_bytes = (128ull << 20) / (2 * (uint64_t)n);
        if (p.slice_bytes > (16ull << 20)) p.slice_bytes = 16ull << 20;
        p.slice_bytes &= ~(uint64_t)255;
        p.cta_bytes = 16 << 10;
        p.ll_max = 256 << 10;
        p.p2p_slice = 4 << 20;
        p.p2p_ctas = 64;
        break;
    case 1: /* smallest slices, most CTAs, tiny per-CTA share, LL up to 1M */
        p.max_ctas = MPCCL_FLAT_MAX_CTAS;
        p.slice_bytes = 64 << 10;
        p.cta_bytes = 16;
        p.ll_max = 1 << 20;
        p.p2p_slice = 64 << 10;
        p.p2p_ctas = MPCCL_FLAT_MAX_CTAS;
        break;
    default: /* one CTA, no LL, huge per-CTA share */
        p.max_ctas = 1;
        p.slice_bytes = 1 << 20;
        p.cta_bytes = 1ull << 30;
        p.ll_max = 0;
        p.p2p_slice = 256 << 10;
        p.p2p_ctas = 0;
        break;
    }
    return p;
}

START_TEST(collective_geometry)
{
    for (int w = 0; w < 3; w++)
        for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++)
            for (int mode = 0; mode < MPCCL_FLAT_NUM_MODES; mode++)
                for (size_t ei = 0; ei < sizeof(sizes) / sizeof(sizes[0]); ei++)
                    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                        int n = ranks[ri];
                        size_t es = sizes[ei];
                        uint64_t count = counts[ci];
                        mpccl_flat_geom_params_t p = settings(n, w);
                        mpccl_flat_geom_t g;
                        mpccl_flat_geometry(&p, mode, count, es, &g);
                        int two = mode == MPCCL_FLAT_ALLREDUCE_2;
                        ck_assert_uint_ge(g.ctas, 1);
                        ck_assert_uint_le(g.ctas, p.max_ctas);
                        ck_assert_uint_ge(g.sub_elems, 1);
                        /* every CTA's share starts on a 16-byte boundary of the user buffer's chunk */
                        ck_assert_uint_eq(((uint64_t)g.sub_elems * es) % 16, 0);
                        uint64_t block = two ? (count + n - 1) / n : count;
                        if (g.ll_bytes) {
                            ck_assert(!two);
                            ck_assert_uint_le(block * es, p.ll_max);
                            ck_assert_uint_eq(g.ll_bytes, mpccl_flat_ll_area(p.ll_max));
                            /* one chunk covers the block; two LL bytes per data byte; inside the LL area */
                            ck_assert_uint_ge((uint64_t)g.ctas * g.sub_elems, block);
                            ck_assert_uint_eq(g.stride, 2ull * g.sub_elems * es);
                            ck_assert_uint_le((uint64_t)g.ctas * g.stride, g.ll_bytes);
                        } else {
                            uint64_t area = two ? p.slice_bytes / 2 : p.slice_bytes;
                            ck_assert_uint_eq(g.stride % 16, 0);
                            ck_assert_uint_le((uint64_t)g.sub_elems * es, g.stride);
                            ck_assert_uint_le((uint64_t)g.ctas * g.stride, area);
                        }
                    }
}
END_TEST

START_TEST(p2p_geometry)
{
    static const uint64_t bytes[] = {1, 15, 16, 17, 4096, 65535, 1 << 20, (1ull << 30) + 3};
    for (int w = 0; w < 3; w++)
        for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++) {
            mpccl_flat_geom_params_t p = settings(ranks[ri], w);
            uint32_t stride = mpccl_flat_p2p_stride(&p);
            ck_assert_uint_ge(stride, 16);
            ck_assert_uint_eq(stride % 16, 0);
            for (size_t b = 0; b < sizeof(bytes) / sizeof(bytes[0]); b++) {
                uint32_t ctas, sub;
                mpccl_flat_p2p_geometry(&p, bytes[b], &ctas, &sub);
                ck_assert_uint_ge(ctas, 1);
                uint32_t cap = p.p2p_ctas ? p.p2p_ctas : 64, half = p.max_ctas > 1 ? p.max_ctas / 2 : 1;
                ck_assert_uint_le(ctas, half < cap ? half : cap);
                ck_assert_uint_le((uint64_t)ctas * stride, p.p2p_slice);
                ck_assert_uint_ge(sub, 16);
                ck_assert_uint_le(sub, stride);
                ck_assert_uint_eq(sub % 16, 0);
            }
        }
}
END_TEST

/* LL send/recv: lanes fit the region's LL part, every lane's part is whole
 * 16-byte units, and the lanes' chunks cover the message exactly once (the
 * kernel's per-lane chunk count, flat_p2p.cu ll_lane_chunks). */
START_TEST(p2p_ll_geometry)
{
    static const uint64_t bytes[] = {1, 7, 15, 16, 17, 100, 4095, 4096, 4097, 65535, 65537, 262144, 262145,
                                     1 << 20, (1ull << 24) + 9};
    for (int w = 0; w < 3; w++)
        for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++) {
            mpccl_flat_geom_params_t p = settings(ranks[ri], w);
            for (size_t b = 0; b < sizeof(bytes) / sizeof(bytes[0]); b++) {
                uint32_t ctas, sub;
                mpccl_flat_p2p_ll_geometry(&p, bytes[b], &ctas, &sub);
                uint32_t cap = p.p2p_ctas ? p.p2p_ctas : 64, half = p.max_ctas > 1 ? p.max_ctas / 2 : 1;
                ck_assert_uint_ge(ctas, 1);
                ck_assert_uint_le(ctas, half < cap ? half : cap);
                ck_assert_uint_le(ctas, MPCCL_FLAT_P2P_LL_LANES);
                ck_assert_uint_ge(sub, 16);
                ck_assert_uint_le(sub, MPCCL_FLAT_P2P_LL_LANE);
                ck_assert_uint_eq(sub % 16, 0);
                /* lane g, chunk c covers [c * ctas * sub + g * sub, + sub) clipped to the message */
                uint64_t covered = 0, chunk = (uint64_t)ctas * sub;
                for (uint32_t g = 0; g < ctas; g++) {
                    uint64_t first = (uint64_t)g * sub;
                    uint64_t nch = bytes[b] > first ? (bytes[b] - first - 1) / chunk + 1 : 0;
                    for (uint64_t c = 0; c < nch; c++) {
                        uint64_t off = c * chunk + first;
                        ck_assert_uint_lt(off, bytes[b]);
                        covered += bytes[b] - off < sub ? bytes[b] - off : sub;
                    }
                }
                ck_assert_uint_eq(covered, bytes[b]);
            }
        }
}
END_TEST

/* Window collectives: the CTA parts are whole 16-byte vectors, within the
 * grid limit, and together cover the block without an empty CTA (the kernel
 * rounds the two-shot block up to whole vectors: still covered). */
START_TEST(window_geometry)
{
    static const int modes[] = {MPCCL_FLAT_ALLREDUCE_2, MPCCL_FLAT_REDUCESCATTER, MPCCL_FLAT_ALLGATHER,
                                MPCCL_FLAT_ALLTOALL, MPCCL_FLAT_BROADCAST, MPCCL_FLAT_REDUCE};
    for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++)
        for (int w = 0; w < 3; w++)
            for (size_t mi = 0; mi < sizeof(modes) / sizeof(modes[0]); mi++)
                for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
                    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                        mpccl_flat_geom_params_t p = settings(ranks[ri], w);
                        uint64_t n = (uint64_t)ranks[ri], es = sizes[si], vec = 16 / es, sub = 0;
                        int two = modes[mi] == MPCCL_FLAT_ALLREDUCE_2;
                        uint64_t block = two ? (counts[ci] + n - 1) / n : counts[ci];
                        uint64_t kernel_block = two ? (block + vec - 1) / vec * vec : block;
                        uint32_t ctas = mpccl_flat_win_geometry(&p, modes[mi], counts[ci], es, &sub);
                        ck_assert_uint_ge(ctas, 1);
                        ck_assert_uint_le(ctas, p.max_ctas);
                        ck_assert_uint_gt(sub, 0);
                        ck_assert_uint_eq(sub % vec, 0);
                        ck_assert_uint_ge((uint64_t)ctas * sub, kernel_block);
                        ck_assert_uint_lt((uint64_t)(ctas - 1) * sub, block);
                    }
}
END_TEST

/* Every part of the region starts 16-byte aligned (vector and LL stores) and
 * the parts follow each other without overlap. */
START_TEST(region_layout)
{
    static const uint64_t slices[] = {64 << 10, 4 << 20, 16 << 20};
    static const uint64_t lls[] = {0, 64 << 10, 256 << 10, 1 << 20};
    for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++)
        for (size_t si = 0; si < 3; si++)
            for (size_t li = 0; li < 4; li++) {
                int n = ranks[ri];
                uint64_t sl = slices[si], ll = lls[li];
                uint64_t fo = mpccl_flat_flags_off(n, sl), co = mpccl_flat_ctr_off(n, sl);
                uint64_t lo = mpccl_flat_ll_off(n, sl), po = mpccl_flat_p2p_off(n, sl, ll);
                ck_assert_uint_eq(fo, 2ull * n * sl);
                ck_assert_uint_eq(co - fo, 4ull * n * MPCCL_FLAT_MAX_CTAS * 4);
                ck_assert_uint_ge(lo, co + 8);
                ck_assert_uint_ge(po, lo + 2ull * n * 2 * ll);
                ck_assert_uint_eq(fo % 16, 0);
                ck_assert_uint_eq(lo % 16, 0);
                ck_assert_uint_eq(po % 16, 0);
                ck_assert_uint_eq(mpccl_flat_ll_area(ll) % 16, 0);
                uint64_t wo = mpccl_flat_win_off(n, sl, ll, 4 << 20);
                ck_assert_uint_eq(wo, po + mpccl_flat_p2p_bytes(n, 4 << 20));
                /* the p2p LL part after the staged words: three words per peer and CTA, then 16-byte aligned units
                 * [source][parity][lane][2 * lane bytes], ending where the window barrier starts */
                uint64_t llo = po + mpccl_flat_p2p_ll_off(n, 4 << 20), lu = llo + mpccl_flat_p2p_ll_units_off(n);
                ck_assert_uint_eq(llo, po + 2ull * n * (4 << 20) + (5ull * 4 + 4ull * 8) * n * MPCCL_FLAT_MAX_CTAS);
                ck_assert_uint_eq(lu, llo + 3ull * n * MPCCL_FLAT_MAX_CTAS * 4);
                ck_assert_uint_eq(lu % 16, 0);
                ck_assert_uint_eq(wo, lu + 2ull * n * MPCCL_FLAT_P2P_LL_LANES * 2 * MPCCL_FLAT_P2P_LL_LANE);
                ck_assert_uint_eq(wo % 16, 0);
                /* the window barrier: a flag per source and CTA, an epoch per CTA, then two
                 * 8-byte pointers per source and CTA (16-byte aligned, after the words) */
                uint64_t pw = mpccl_flat_win_ptrs_off(n);
                ck_assert_uint_ge(pw, ((uint64_t)n + 1) * MPCCL_FLAT_MAX_CTAS * 4);
                ck_assert_uint_eq((wo + pw) % 16, 0);
                ck_assert_uint_eq(mpccl_flat_win_bytes(n), pw + (uint64_t)n * MPCCL_FLAT_MAX_CTAS * 16);
                ck_assert_uint_eq(mpccl_flat_region_bytes(n, sl, ll, 4 << 20), wo + mpccl_flat_win_bytes(n));
            }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("flat_geometry");
    TCase *tc = tcase_create("geometry");
    tcase_add_test(tc, collective_geometry);
    tcase_add_test(tc, p2p_geometry);
    tcase_add_test(tc, p2p_ll_geometry);
    tcase_add_test(tc, window_geometry);
    tcase_add_test(tc, region_layout);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
