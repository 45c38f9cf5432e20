/* Host reductions, scale and divide for every datatype against references computed
 * another way: integers in 128-bit arithmetic reduced modulo 2^bits, float32 in
 * double, float64 in __float128 (both wide enough that rounding the wide result
 * once more is the correctly rounded result), fp16/bf16/fp8 decoded by the fp_ref.h
 * model, computed in double and rounded by its table-search encoder.  Results must
 * match exactly (NaN for NaN in float32/float64, whose payload is the CPU's).
 * Each case runs with a separate dst, with dst == a and with dst == b, and checks
 * that nothing past n is written.  MPCCL_TEST_SEED overrides the seed. */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/datatype.h"
#include "host/host_reduce.h"
#include "fp_ref.h"

typedef __int128 i128;
typedef unsigned __int128 u128;

static uint64_t seed, rng_state;

static uint64_t rnd(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

enum kind { SINT, UINT, F32, F64, LOWP };
static const struct tinfo {
    ncclDataType_t dt;
    enum kind kind;
    int bits;
    ref_fmt *ref;
} types[] = {
    {ncclInt8, SINT, 8, NULL},          {ncclUint8, UINT, 8, NULL},
    {ncclInt32, SINT, 32, NULL},        {ncclUint32, UINT, 32, NULL},
    {ncclInt64, SINT, 64, NULL},        {ncclUint64, UINT, 64, NULL},
    {ncclFloat16, LOWP, 16, &REF_F16},  {ncclFloat32, F32, 32, NULL},
    {ncclFloat64, F64, 64, NULL},       {ncclBfloat16, LOWP, 16, &REF_BF16},
    {ncclFloat8e4m3, LOWP, 8, &REF_E4M3}, {ncclFloat8e5m2, LOWP, 8, &REF_E5M2},
};
#define NTYPES (int)(sizeof types / sizeof types[0])

static const size_t counts[] = {0, 1, 7, 1023, 4099};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])
#define GUARD 16 /* elements past n that must stay untouched */

/* ---- element access: every element travels as its raw bits in a u64 ---- */
static uint64_t get_raw(const struct tinfo *t, const void *p, size_t i)
{
    uint64_t v = 0;
    memcpy(&v, (const char *)p + i * (size_t)(t->bits / 8), (size_t)(t->bits / 8));
    return v;
}

static void put_raw(const struct tinfo *t, void *p, size_t i, uint64_t v)
{
    memcpy((char *)p + i * (size_t)(t->bits / 8), &v, (size_t)(t->bits / 8));
}

static i128 as_int(const struct tinfo *t, uint64_t raw)
{
    if (t->kind == UINT) return (i128)raw;
    return t->bits == 64 ? (i128)(int64_t)raw
                         : (i128)(int64_t)(raw << (64 - t->bits)) >> (64 - t->bits);
}

static uint64_t wrap(const struct tinfo *t, i128 v)
{
    u128 m = (u128)v;
    return t->bits == 64 ? (uint64_t)m : (uint64_t)(m & ((1ULL << t->bits) - 1));
}

static float rawf(uint64_t r) { float f; uint32_t u = (uint32_t)r; memcpy(&f, &u, 4); return f; }
static double rawd(uint64_t r) { double d; memcpy(&d, &r, 8); return d; }
static uint64_t fraw(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static uint64_t draw(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* max/min rule written out: a NaN operand loses, -0 < +0, both NaN -> NaN */
static long double ref_maxmin(int is_max, long double a, long double b)
{
    if (isnan(a)) return b;
    if (isnan(b)) return a;
    if (a == b && is_max) return signbit(a) && signbit(b) ? a : fabsl(a);
    if (a == b) return signbit(a) || signbit(b) ? -fabsl(a) : a;
    return (a > b) == is_max ? a : b;
}

/* expected raw result of a op b for op in 0..3, 4 = scale (b is the scalar),
 * 5 = divide (b is the divisor) */
enum { OP_SCALE = 4, OP_DIV = 5 };
static uint64_t reference(const struct tinfo *t, int op, uint64_t a, uint64_t b)
{
    switch (t->kind) {
    case SINT:
    case UINT: {
        i128 x = as_int(t, a), y = op == OP_DIV ? (i128)b : as_int(t, b);
        switch (op) {
        case MPCCL_OP_SUM: return wrap(t, x + y);
        case MPCCL_OP_PROD: case OP_SCALE: return wrap(t, (i128)((u128)x * (u128)y));
        case MPCCL_OP_MAX: return wrap(t, x > y ? x : y);
        case MPCCL_OP_MIN: return wrap(t, x < y ? x : y);
        default: return wrap(t, x / y); /* C truncates toward zero */
        }
    }
    case F32: {
        double x = rawf(a), y = op == OP_DIV ? (double)b : (double)rawf(b);
        switch (op) {
        case MPCCL_OP_SUM: return fraw((float)(x + y));
        case MPCCL_OP_PROD: case OP_SCALE: return fraw((float)(x * y));
        case MPCCL_OP_MAX: case MPCCL_OP_MIN:
            return fraw((float)ref_maxmin(op == MPCCL_OP_MAX, x, y));
        default: return fraw((float)(x / y));
        }
    }
    case F64: {
        __float128 x = rawd(a), y = op == OP_DIV ? (__float128)b : (__float128)rawd(b);
        switch (op) {
        case MPCCL_OP_SUM: return draw((double)(x + y));
        case MPCCL_OP_PROD: case OP_SCALE: return draw((double)(x * y));
        case MPCCL_OP_MAX: case MPCCL_OP_MIN:
            return draw((double)ref_maxmin(op == MPCCL_OP_MAX, rawd(a), rawd(b)));
        default: return draw((double)(x / y));
        }
    }
    default: {
        double x = ref_decode(t->ref, (uint32_t)a);
        double y = op == OP_DIV ? (double)b : ref_decode(t->ref, (uint32_t)b);
        double r;
        switch (op) {
        case MPCCL_OP_SUM: r = x + y; break;
        case MPCCL_OP_PROD: case OP_SCALE: r = x * y; break;
        case MPCCL_OP_MAX: case MPCCL_OP_MIN:
            r = (double)ref_maxmin(op == MPCCL_OP_MAX, x, y);
            break;
        default: r = x / y;
        }
        return ref_encode(t->ref, r);
    }
    }
}

static int same(const struct tinfo *t, uint64_t got, uint64_t want)
{
    if (t->kind == F32 && isnan(rawf(want))) return isnan(rawf(got));
    if (t->kind == F64 && isnan(rawd(want))) return isnan(rawd(got));
    return got == want;
}

/* Random element: full-range bits for integers and the small formats (so NaN, inf
 * and both zeros occur), and for float32/float64 mostly finite values over a wide
 * exponent range (overflow and subnormals included) plus specials. */
static uint64_t random_elem(const struct tinfo *t)
{
    uint64_t r = rnd();
    if (t->kind == F32 || t->kind == F64) {
        static const double sp[] = {0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY, NAN, -NAN, 0x1p-130,
                                    FLT_MAX, -FLT_MAX, DBL_MAX, 0x1p-1070, 3.0};
        double v;
        if (r % 10 == 0)
            v = sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
        else if (t->kind == F32)
            v = ldexp((double)((r >> 16) & 0xffffff), (int)((r >> 40) % 290) - 170);
        else
            v = ldexp((double)(r >> 11), (int)((r >> 3) % 2150) - 1125);
        if (r & 1) v = -v;
        return t->kind == F32 ? fraw((float)v) : draw(v);
    }
    return t->bits == 64 ? r : r & ((1ULL << t->bits) - 1);
}

static void *alloc_fill(const struct tinfo *t, size_t n)
{
    unsigned char *p = malloc((n + GUARD) * (size_t)(t->bits / 8));
    for (size_t i = 0; i < n; i++) put_raw(t, p, i, random_elem(t));
    memset(p + n * (size_t)(t->bits / 8), 0xa5, GUARD * (size_t)(t->bits / 8));
    return p;
}

static void check_guard(const struct tinfo *t, const void *p, size_t n, const char *what)
{
    const unsigned char *g = (const unsigned char *)p + n * (size_t)(t->bits / 8);
    for (size_t i = 0; i < GUARD * (size_t)(t->bits / 8); i++)
        ck_assert_msg(g[i] == 0xa5, "%s %s n=%zu: wrote past the end", mpccl_dtype_name(t->dt), what, n);
}

static void check_result(const struct tinfo *t, int op, const char *mode, size_t n,
                         const void *dst, const void *a, const void *b, uint64_t scalar)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t x = get_raw(t, a, i), y = op >= OP_SCALE ? scalar : get_raw(t, b, i);
        uint64_t want = reference(t, op, x, y), got = get_raw(t, dst, i);
        ck_assert_msg(same(t, got, want),
                      "%s op %d (%s) n=%zu [%zu]: 0x%" PRIx64 " op 0x%" PRIx64 " = 0x%" PRIx64
                      ", expected 0x%" PRIx64 " (seed %" PRIu64 ")",
                      mpccl_dtype_name(t->dt), op, mode, n, i, x, y, got, want, seed);
    }
    check_guard(t, dst, n, mode);
}

/* _i = type * NCOUNTS + count index */
START_TEST(test_reduce_ops)
{
    const struct tinfo *t = &types[_i / NCOUNTS];
    size_t n = counts[_i % NCOUNTS], esz = (size_t)(t->bits / 8);
    for (int op = 0; op < MPCCL_NUM_OPS; op++) {
        rng_state = seed ^ ((uint64_t)(_i * 8 + op + 1) * 0x9E3779B97F4A7C15ULL);
        void *a = alloc_fill(t, n), *b = alloc_fill(t, n), *dst = alloc_fill(t, n);
        void *a2 = alloc_fill(t, n), *b2 = alloc_fill(t, n);
        void *dst_before = malloc((n + GUARD) * esz);
        memcpy(a2, a, n * esz);
        memcpy(b2, b, n * esz);
        memcpy(dst_before, dst, (n + GUARD) * esz);

        mpccl_host_reduce(t->dt, (mpccl_op_t)op, dst, a, b, n);
        check_result(t, op, "separate", n, dst, a, b, 0);
        if (n == 0) ck_assert(memcmp(dst, dst_before, GUARD * esz) == 0);

        mpccl_host_reduce(t->dt, (mpccl_op_t)op, a2, a2, b, n); /* dst == a */
        check_result(t, op, "dst==a", n, a2, a, b, 0);
        mpccl_host_reduce(t->dt, (mpccl_op_t)op, b2, a, b2, n); /* dst == b */
        check_result(t, op, "dst==b", n, b2, a, b, 0);
        free(a); free(b); free(dst); free(a2); free(b2); free(dst_before);
    }
}
END_TEST

START_TEST(test_scale_divide)
{
    const struct tinfo *t = &types[_i / NCOUNTS];
    size_t n = counts[_i % NCOUNTS], esz = (size_t)(t->bits / 8);
    rng_state = seed ^ ((uint64_t)(_i + 1000) * 0xD1B54A32D192ED03ULL);
    static const uint64_t divisors[] = {1, 2, 3, 7, 8, 16, 100, 1000};
    for (int rep = 0; rep < 4; rep++) {
        void *src = alloc_fill(t, n), *dst = alloc_fill(t, n), *alias = alloc_fill(t, n);
        /* a finite, non-zero scalar most of the time: 1/nranks-like or random */
        uint64_t scalar = random_elem(t);
        if (rep == 0) {
            unsigned char buf[8] = {0};
            mpccl_dtype_from_double(t->dt, t->kind == SINT || t->kind == UINT ? 3.0 : 0.125, buf);
            memcpy(&scalar, buf, esz);
        }
        unsigned char sbuf[8];
        memcpy(sbuf, &scalar, esz);
        memcpy(alias, src, n * esz);
        mpccl_host_scale(t->dt, dst, src, sbuf, n);
        check_result(t, OP_SCALE, "scale", n, dst, src, NULL, scalar);
        mpccl_host_scale(t->dt, alias, alias, sbuf, n);
        check_result(t, OP_SCALE, "scale dst==src", n, alias, src, NULL, scalar);

        uint64_t d = divisors[rnd() % (sizeof divisors / sizeof divisors[0])];
        if (rep == 3 && t->kind != F32 && t->kind != F64 && t->kind != LOWP)
            d = (rnd() >> 1) | 1; /* huge divisors: integers only (floats take it as float) */
        memcpy(alias, src, n * esz);
        mpccl_host_divide(t->dt, dst, src, d, n);
        check_result(t, OP_DIV, "divide", n, dst, src, NULL, d);
        mpccl_host_divide(t->dt, alias, alias, d, n);
        check_result(t, OP_DIV, "divide dst==src", n, alias, src, NULL, d);
        free(src); free(dst); free(alias);
    }
}
END_TEST

/* The rules the random data may hit only rarely, spelled out. */
START_TEST(test_special_rules)
{
    float fa[] = {0.0f, -0.0f, NAN, 1.0f, NAN, -2.0f};
    float fb[] = {-0.0f, 0.0f, 1.0f, NAN, NAN, -2.0f};
    float fo[6];
    mpccl_host_reduce(ncclFloat32, MPCCL_OP_MAX, fo, fa, fb, 6);
    ck_assert(!signbit(fo[0]) && fo[0] == 0 && !signbit(fo[1]) && fo[1] == 0);
    ck_assert(fo[2] == 1.0f && fo[3] == 1.0f && isnan(fo[4]) && fo[5] == -2.0f);
    mpccl_host_reduce(ncclFloat32, MPCCL_OP_MIN, fo, fa, fb, 6);
    ck_assert(signbit(fo[0]) && signbit(fo[1]) && fo[2] == 1.0f && fo[3] == 1.0f && isnan(fo[4]));

    uint16_t ha[] = {0x0000, 0x8000, 0x7e00, 0x3c00, 0x7bff, 0x0001};
    uint16_t hb[] = {0x8000, 0x0000, 0x3c00, 0xfe01, 0x7bff, 0x0001};
    uint16_t ho[6];
    mpccl_host_reduce(ncclFloat16, MPCCL_OP_MAX, ho, ha, hb, 6);
    ck_assert_uint_eq(ho[0], 0x0000); ck_assert_uint_eq(ho[1], 0x0000);
    ck_assert_uint_eq(ho[2], 0x3c00); ck_assert_uint_eq(ho[3], 0x3c00);
    mpccl_host_reduce(ncclFloat16, MPCCL_OP_SUM, ho, ha, hb, 6);
    ck_assert_uint_eq(ho[2], 0x7fff);  /* NaN + x -> canonical NaN */
    ck_assert_uint_eq(ho[4], 0x7c00);  /* 65504 + 65504 overflows to inf */
    ck_assert_uint_eq(ho[5], 0x0002);  /* subnormals add exactly */

    uint8_t ea[] = {0x7e, 0x7f, 0x01}, eb[] = {0x7e, 0x38, 0x01}, eo[3];
    mpccl_host_reduce(ncclFloat8e4m3, MPCCL_OP_SUM, eo, ea, eb, 3);
    ck_assert_uint_eq(eo[0], 0x7e);    /* 448 + 448 saturates */
    ck_assert_uint_eq(eo[1], 0x7f);
    ck_assert_uint_eq(eo[2], 0x02);

    int8_t ia[] = {127, -128, -7}, ib[] = {1, -1, 2}, io[3];
    mpccl_host_reduce(ncclInt8, MPCCL_OP_SUM, io, ia, ib, 3);
    ck_assert_int_eq(io[0], -128); ck_assert_int_eq(io[1], 127); ck_assert_int_eq(io[2], -5);
    mpccl_host_divide(ncclInt8, io, ia, 2, 3);
    ck_assert_int_eq(io[0], 63); ck_assert_int_eq(io[1], -64); ck_assert_int_eq(io[2], -3);
    int64_t la[] = {INT64_MIN, INT64_MIN, -9}, lo[3];
    mpccl_host_divide(ncclInt64, lo, la, 1ULL << 63, 1);
    ck_assert_int_eq(lo[0], -1);
    mpccl_host_divide(ncclInt64, lo, la, UINT64_MAX, 3);
    ck_assert_int_eq(lo[0], 0); ck_assert_int_eq(lo[2], 0);
}
END_TEST

int main(void)
{
    const char *s = getenv("MPCCL_TEST_SEED");
    seed = s ? strtoull(s, NULL, 0) : 0x72656475ULL;
    printf("test_reduce: seed %" PRIu64 " (set MPCCL_TEST_SEED to repeat)\n", seed);
    Suite *suite = suite_create("reduce");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_reduce_ops, 0, NTYPES * NCOUNTS);
    tcase_add_loop_test(tc, test_scale_divide, 0, NTYPES * NCOUNTS);
    tcase_add_test(tc, test_special_rules);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
