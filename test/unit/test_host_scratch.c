/* The scratch memory host communicators keep between calls
 * (lib/host/host_scratch.c): blocks come back to the next call that fits
 * them, the pool never holds more than its limit or its block count, and
 * sizes that cannot be allocated fail cleanly. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "host/host_scratch.h"

START_TEST(no_pool_allocates)
{
    size_t got = 0;
    char *b = mpccl_scratch_get(NULL, 1000, &got);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_ge(got, 1000);
    ck_assert_uint_eq((uintptr_t)b % 256, 0);
    b[got - 1] = 1;
    mpccl_scratch_put(NULL, b, got);
    mpccl_scratch_put(NULL, NULL, 0);
}
END_TEST

START_TEST(reuse_best_fit)
{
    mpccl_scratch_pool_t *p = mpccl_scratch_pool_new(1 << 20);
    size_t g1, g2, g3;
    void *a = mpccl_scratch_get(p, 100000, &g1), *b = mpccl_scratch_get(p, 300000, &g2);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(g1 % 256, 0);
    mpccl_scratch_put(p, a, g1);
    mpccl_scratch_put(p, b, g2);
    ck_assert_uint_eq(mpccl_scratch_idle_bytes(p), g1 + g2);
    /* the smallest block that fits, not the first */
    ck_assert_ptr_eq(mpccl_scratch_get(p, 50000, &g3), a);
    ck_assert_uint_eq(g3, g1);
    ck_assert_uint_eq(mpccl_scratch_idle_bytes(p), g2);
    ck_assert_ptr_eq(mpccl_scratch_get(p, 200000, &g3), b);
    ck_assert_uint_eq(mpccl_scratch_idle_bytes(p), 0);
    /* nothing idle fits: a new block */
    size_t g4;
    void *c = mpccl_scratch_get(p, 500000, &g4);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_ne(c, a);
    ck_assert_ptr_ne(c, b);
    mpccl_scratch_put(p, a, g1);
    mpccl_scratch_put(p, b, g2);
    mpccl_scratch_put(p, c, g4);
    mpccl_scratch_pool_free(p);
}
END_TEST

START_TEST(limits)
{
    mpccl_scratch_pool_t *p = mpccl_scratch_pool_new(1 << 20);
    size_t g;
    /* larger than the limit: freed at once */
    void *big = mpccl_scratch_get(p, 2 << 20, &g);
    mpccl_scratch_put(p, big, g);
    ck_assert_uint_eq(mpccl_scratch_idle_bytes(p), 0);
    /* three of 300 KB, then 400 KB: a smaller one makes room */
    void *s[3];
    size_t gs[3];
    for (int i = 0; i < 3; i++) s[i] = mpccl_scratch_get(p, 300 << 10, &gs[i]);
    size_t gl;
    void *l = mpccl_scratch_get(p, 400 << 10, &gl);
    for (int i = 0; i < 3; i++) mpccl_scratch_put(p, s[i], gs[i]);
    ck_assert_uint_eq(mpccl_scratch_idle_bytes(p), 3 * gs[0]);
    mpccl_scratch_put(p, l, gl);
    ck_assert_uint_le(mpccl_scratch_idle_bytes(p), 1 << 20);
    ck_assert_uint_eq(mpccl_scratch_idle_bytes(p), 2 * gs[0] + gl);
    /* a larger idle block is not given up for a smaller one */
    size_t gt;
    void *t = mpccl_scratch_get(p, 500 << 10, &gt); /* nothing idle fits: new */
    mpccl_scratch_put(p, t, gt);
    ck_assert_uint_le(mpccl_scratch_idle_bytes(p), 1 << 20);
    mpccl_scratch_pool_free(p);

    /* at most four idle blocks */
    p = mpccl_scratch_pool_new((size_t)1 << 30);
    void *m[6];
    size_t gm[6];
    for (int i = 0; i < 6; i++) m[i] = mpccl_scratch_get(p, 1000 * (size_t)(i + 1), &gm[i]);
    for (int i = 0; i < 6; i++) mpccl_scratch_put(p, m[i], gm[i]);
    ck_assert_uint_eq(mpccl_scratch_idle_bytes(p), gm[2] + gm[3] + gm[4] + gm[5]);
    mpccl_scratch_pool_free(p);

    /* keeps nothing */
    p = mpccl_scratch_pool_new(0);
    void *z = mpccl_scratch_get(p, 10, &g);
    mpccl_scratch_put(p, z, g);
    ck_assert_uint_eq(mpccl_scratch_idle_bytes(p), 0);
    mpccl_scratch_pool_free(p);
    mpccl_scratch_pool_free(NULL);
}
END_TEST

START_TEST(odd_sizes)
{
    mpccl_scratch_pool_t *p = mpccl_scratch_pool_new(1 << 20);
    size_t g = 0;
    void *z = mpccl_scratch_get(p, 0, &g);
    ck_assert_ptr_nonnull(z);
    ck_assert_uint_eq(g, 256);
    mpccl_scratch_put(p, z, g);
    ck_assert_ptr_null(mpccl_scratch_get(p, SIZE_MAX, &g));
    ck_assert_ptr_null(mpccl_scratch_get(p, SIZE_MAX - 100, &g));
    mpccl_scratch_pool_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("host_scratch");
    TCase *tc = tcase_create("pool");
    tcase_add_test(tc, no_pool_allocates);
    tcase_add_test(tc, reuse_best_fit);
    tcase_add_test(tc, limits);
    tcase_add_test(tc, odd_sizes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
