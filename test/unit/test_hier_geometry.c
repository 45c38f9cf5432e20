/* How hierarchical collectives cut a call into chunks
 * (lib/gpu/gpu_hier_geometry.c): the chunks tile the buffer exactly, only the
 * last one has a tail and it is shorter than a node, pieces cover every
 * rank's block, and the reorder's stride test accepts exactly the evenly
 * spaced rails.  A broken invariant here is a GPU phase reading or writing
 * outside the call's buffers. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu/gpu_hier_geometry.h"

/* Check's ck_assert reports every passing check to the runner (a write per
 * call); millions of them made this test take a minute under a sanitizer on
 * a loaded machine.  The inner loops test plainly and fail with the line. */
#define REQUIRE(cond)                                                                        \
    do {                                                                                     \
        if (!(cond)) ck_abort_msg("%s:%d: %s (G=%d count=%llu chunk=%llu c=%llu)", __FILE__, \
                                  __LINE__, #cond, G, (unsigned long long)count,             \
                                  (unsigned long long)chunk, (unsigned long long)c);         \
    } while (0)

static const int node_sizes[] = {2, 3, 4, 8};
static const uint64_t esizes[] = {1, 2, 4, 8};
static const uint64_t counts[] = {1, 2, 3, 7, 8, 9, 17, 1021, 65537, 1000003, (1ull << 22) + 3};
static const uint64_t chunk_bytes[] = {1, 7, 256, 64 << 10, 4 << 20};

START_TEST(slices_tile_the_buffer)
{
    for (size_t gi = 0; gi < sizeof(node_sizes) / sizeof(node_sizes[0]); gi++)
        for (size_t ei = 0; ei < sizeof(esizes) / sizeof(esizes[0]); ei++)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
                for (size_t bi = 0; bi < sizeof(chunk_bytes) / sizeof(chunk_bytes[0]); bi++) {
                    int G = node_sizes[gi];
                    uint64_t count = counts[ci];
                    uint64_t chunk = mpccl_hier_chunk_elems(esizes[ei], G, chunk_bytes[bi]);
                    ck_assert_uint_ge(chunk, (uint64_t)G);
                    ck_assert_uint_eq(chunk % (uint64_t)G, 0);
                    uint64_t n = mpccl_hier_nchunks(count, chunk), next = 0;
                    ck_assert_uint_ge(n, 1);
                    if (n > 100000) continue; /* one element per chunk over millions: nothing new, only slow */
                    for (uint64_t c = 0; c < n; c++) {
                        mpccl_hier_slice_t s = mpccl_hier_slice(count, chunk, G, c);
                        REQUIRE(s.off == next);
                        REQUIRE(s.len >= 1);
                        REQUIRE(s.share * (uint64_t)G + s.tail == s.len);
                        REQUIRE(s.tail < (uint64_t)G);
                        REQUIRE(c + 1 == n || s.tail == 0);
                        next = s.off + s.len;
                    }
                    ck_assert_uint_eq(next, count);
                    ck_assert_uint_eq(mpccl_hier_slice(count, chunk, G, n).len, 0);
                }
}
END_TEST

START_TEST(pieces_cover_each_block)
{
    for (int N = 2; N <= 9; N++)
        for (size_t ei = 0; ei < sizeof(esizes) / sizeof(esizes[0]); ei++)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
                for (size_t bi = 0; bi < sizeof(chunk_bytes) / sizeof(chunk_bytes[0]); bi++) {
                    uint64_t S = counts[ci], p = mpccl_hier_piece_elems(S, esizes[ei], N, chunk_bytes[bi]);
                    ck_assert_uint_ge(p, 1);
                    ck_assert_uint_le(p, S);
                    uint64_t n = mpccl_hier_nchunks(S, p);
                    ck_assert_uint_ge(n * p, S);
                    ck_assert_uint_lt((n - 1) * p, S);
                    /* A piece of every node's rank fits the chunk's budget, unless one element does not. */
                    if (p > 1) ck_assert_uint_le(p * (uint64_t)N * esizes[ei], chunk_bytes[bi]);
                }
}
END_TEST

START_TEST(rail_stride)
{
    enum { N = 3, G = 2 };
    int64_t stride = -1;
    /* node-major: ranks 0,1 | 2,3 | 4,5 */
    int node_major[N * G] = {0, 1, 2, 3, 4, 5};
    ck_assert_int_eq(mpccl_hier_rail_stride(node_major, N, G, 0, &stride), 1);
    ck_assert_int_eq(stride, G);
    ck_assert_int_eq(mpccl_hier_rail_stride(node_major, N, G, 1, &stride), 1);
    ck_assert_int_eq(stride, G);
    /* round-robin: node n holds ranks n and n + N */
    int round_robin[N * G] = {0, 3, 1, 4, 2, 5};
    ck_assert_int_eq(mpccl_hier_rail_stride(round_robin, N, G, 1, &stride), 1);
    ck_assert_int_eq(stride, 1);
    /* uneven or decreasing: one copy per block instead */
    int uneven[N * G] = {0, 1, 2, 4, 3, 5};
    ck_assert_int_eq(mpccl_hier_rail_stride(uneven, N, G, 0, &stride), 0);
    int decreasing[N * G] = {0, 5, 1, 4, 2, 3};
    ck_assert_int_eq(mpccl_hier_rail_stride(decreasing, N, G, 1, &stride), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hier_geometry");
    TCase *tc = tcase_create("geometry");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, slices_tile_the_buffer);
    tcase_add_test(tc, pieces_cover_each_block);
    tcase_add_test(tc, rail_stride);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
