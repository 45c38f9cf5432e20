/* Datatype table and fp16/bf16/fp8 conversions against the independent model in
 * fp_ref.h: every pattern decoded, every pattern round-tripped, float->format
 * checked at every boundary of every format (values, midpoints for ties-to-even,
 * their float neighbours, overflow) and on a large seeded random sample.
 * MPCCL_TEST_SEED overrides the seed; MPCCL_TEST_EXHAUSTIVE=1 checks all 2^32
 * floats (minutes). */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/datatype.h"
#include "fp_ref.h"

static uint64_t seed;
static uint64_t rng_state;

static uint64_t rnd(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static float f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static float dec_f16(uint32_t p) { return mpccl_half_to_float((uint16_t)p); }
static float dec_bf16(uint32_t p) { return mpccl_bf16_to_float((uint16_t)p); }
static float dec_e4m3(uint32_t p) { return mpccl_e4m3_to_float((uint8_t)p); }
static float dec_e5m2(uint32_t p) { return mpccl_e5m2_to_float((uint8_t)p); }
static uint32_t enc_f16(float f) { return mpccl_float_to_half(f); }
static uint32_t enc_bf16(float f) { return mpccl_float_to_bf16(f); }
static uint32_t enc_e4m3(float f) { return mpccl_float_to_e4m3(f); }
static uint32_t enc_e5m2(float f) { return mpccl_float_to_e5m2(f); }

static const struct fmt {
    ref_fmt *ref;
    ncclDataType_t dt;
    float (*dec)(uint32_t);
    uint32_t (*enc)(float);
} fmts[] = {
    {&REF_F16, ncclFloat16, dec_f16, enc_f16},
    {&REF_BF16, ncclBfloat16, dec_bf16, enc_bf16},
    {&REF_E4M3, ncclFloat8e4m3, dec_e4m3, enc_e4m3},
    {&REF_E5M2, ncclFloat8e5m2, dec_e5m2, enc_e5m2},
};
#define NFMT (int)(sizeof fmts / sizeof fmts[0])

/* One float->format check; returns 1 on a mismatch (reported once per format). */
static int check_enc(const struct fmt *f, float x, int *reported)
{
    uint32_t got = f->enc(x), want = ref_encode(f->ref, (double)x);
    if (got == want) return 0;
    if ((*reported)++ < 5)
        fprintf(stderr, "%s: encode(%a, bits 0x%08x) = 0x%x, expected 0x%x\n", f->ref->name,
                (double)x, u32(x), got, want);
    return 1;
}

START_TEST(test_tables)
{
    static const struct { ncclDataType_t dt; size_t size; int fl; const char *name; } t[] = {
        {ncclInt8, 1, 0, "int8"},         {ncclUint8, 1, 0, "uint8"},
        {ncclInt32, 4, 0, "int32"},       {ncclUint32, 4, 0, "uint32"},
        {ncclInt64, 8, 0, "int64"},       {ncclUint64, 8, 0, "uint64"},
        {ncclFloat16, 2, 1, "float16"},   {ncclFloat32, 4, 1, "float32"},
        {ncclFloat64, 8, 1, "float64"},   {ncclBfloat16, 2, 1, "bfloat16"},
        {ncclFloat8e4m3, 1, 1, "float8e4m3"}, {ncclFloat8e5m2, 1, 1, "float8e5m2"},
    };
    ck_assert_int_eq((int)(sizeof t / sizeof t[0]), ncclNumTypes);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        ck_assert_uint_eq(mpccl_dtype_size(t[i].dt), t[i].size);
        ck_assert_int_eq(mpccl_dtype_is_float(t[i].dt), t[i].fl);
        ck_assert_str_eq(mpccl_dtype_name(t[i].dt), t[i].name);
    }
    ck_assert_uint_eq(mpccl_dtype_size(ncclNumTypes), 0);
    ck_assert_uint_eq(mpccl_dtype_size((ncclDataType_t)-1), 0);
    ck_assert_int_eq(mpccl_dtype_is_float(ncclNumTypes), 0);
    ck_assert_str_eq(mpccl_dtype_name(ncclNumTypes), "invalid");
    ck_assert_str_eq(mpccl_op_name(MPCCL_OP_SUM), "sum");
    ck_assert_str_eq(mpccl_op_name(MPCCL_OP_PROD), "prod");
    ck_assert_str_eq(mpccl_op_name(MPCCL_OP_MAX), "max");
    ck_assert_str_eq(mpccl_op_name(MPCCL_OP_MIN), "min");
    ck_assert_str_eq(mpccl_op_name(MPCCL_NUM_OPS), "invalid");
}
END_TEST

/* Every pattern of every format decodes to the value of its fields. */
START_TEST(test_decode_all)
{
    const struct fmt *f = &fmts[_i];
    uint32_t npat = 1u << f->ref->bits, nans = 0;
    for (uint32_t p = 0; p < npat; p++) {
        double want = ref_decode(f->ref, p);
        float got = f->dec(p);
        if (isnan(want)) {
            ck_assert_msg(isnan(got), "%s 0x%x: got %a, expected NaN", f->ref->name, p, (double)got);
            /* as the GPU: canonical NaN, except bf16 whose bits just move up */
            uint32_t nanbits = f->dt == ncclBfloat16 ? p << 16 : 0x7fffffffu;
            ck_assert_msg(u32(got) == nanbits, "%s 0x%x: NaN bits 0x%08x", f->ref->name, p, u32(got));
            nans++;
            continue;
        }
        ck_assert_msg((double)got == want && !signbit(got) == !signbit(want),
                      "%s 0x%x: got %a, expected %a", f->ref->name, p, (double)got, want);
        /* the generic entry point agrees */
        uint16_t raw = (uint16_t)p;
        uint8_t raw8 = (uint8_t)p;
        double viad = mpccl_dtype_to_double(f->dt, f->ref->bits == 16 ? (void *)&raw : (void *)&raw8);
        ck_assert_msg(viad == want, "%s 0x%x: to_double %a, expected %a", f->ref->name, p, viad, want);
    }
    /* fp16: 2*1023 NaNs; bf16: 2*127; e4m3: 2; e5m2: 2*3 */
    static const uint32_t expect_nans[] = {2046, 254, 2, 6};
    ck_assert_uint_eq(nans, expect_nans[_i]);
}
END_TEST

/* Decoding then encoding gives every pattern back; NaNs come back canonical. */
START_TEST(test_roundtrip_all)
{
    const struct fmt *f = &fmts[_i];
    uint32_t npat = 1u << f->ref->bits;
    for (uint32_t p = 0; p < npat; p++) {
        double v = ref_decode(f->ref, p);
        uint32_t want = isnan(v) ? f->ref->nan_out : p;
        if (isinf(v) && f->ref->satfinite) /* e5m2 inf saturates, as CUDA's SATFINITE */
            want = (p & (1u << (f->ref->bits - 1))) | 0x7bu;
        uint32_t got = f->enc(f->dec(p));
        ck_assert_msg(got == want, "%s 0x%x -> %a -> 0x%x, expected 0x%x", f->ref->name, p,
                      (double)f->dec(p), got, want);
    }
}
END_TEST

/* Every finite value of the format, every midpoint between neighbours (ties to
 * even), their float neighbours, the overflow boundary, both signs, and the float
 * specials. */
START_TEST(test_encode_boundaries)
{
    const struct fmt *f = &fmts[_i];
    ref_fmt *r = f->ref;
    ref_init(r);
    int bad = 0, reported = 0;
    long checks = 0;
    double max = r->val[r->n - 1];
    double next = 2 * ldexp(1.0, (1 << r->ebits) - 2 - r->bias); /* 2^(emax+1) */
    for (int i = 0; i < r->n; i++) {
        double v = r->val[i];
        double hi = i + 1 < r->n ? r->val[i + 1] : next;
        double mid = (v + hi) / 2;
        ck_assert_msg((double)(float)mid == mid, "midpoint %a is not a float", mid);
        float pts[] = {(float)v, nextafterf((float)v, INFINITY), nextafterf((float)v, -INFINITY),
                       (float)mid, nextafterf((float)mid, INFINITY), nextafterf((float)mid, -INFINITY)};
        for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++) {
            bad += check_enc(f, pts[k], &reported);
            bad += check_enc(f, -pts[k], &reported);
            checks += 2;
        }
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, f32(0x7f800001u),
                              f32(0xffc00001u), f32(0x7fbfffffu), FLT_MAX, -FLT_MAX, FLT_MIN,
                              -FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN, (float)(max * 2),
                              (float)(max * 1.0625), (float)next, (float)(next * 4), 1e30f, -1e30f};
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) {
        bad += check_enc(f, specials[k], &reported);
        checks++;
    }
    ck_assert_msg(bad == 0, "%s: %d of %ld boundary conversions wrong", r->name, bad, checks);
    ck_assert(checks >= 12L * r->n);
    /* spot checks of the rules themselves, so a wrong model cannot hide */
    if (f->dt == ncclFloat16) {
        ck_assert_uint_eq(f->enc(65520.0f), 0x7c00);               /* tie above max -> inf */
        ck_assert_uint_eq(f->enc(nextafterf(65520.0f, 0)), 0x7bff);
        ck_assert_uint_eq(f->enc(0x1p-25f), 0x0000);               /* tie -> even (0) */
        ck_assert_uint_eq(f->enc(nextafterf(0x1p-25f, 1)), 0x0001);
        ck_assert_uint_eq(f->enc(-NAN), 0x7fff);
    } else if (f->dt == ncclFloat8e4m3) {
        ck_assert_uint_eq(f->enc(INFINITY), 0x7e);
        ck_assert_uint_eq(f->enc(-1e9f), 0xfe);
        ck_assert_uint_eq(f->enc(464.0f), 0x7e);
        ck_assert_uint_eq(f->enc(0x1p-10f), 0x00);
        ck_assert_uint_eq(f->enc(-0x1.000002p-10f), 0x81);
        ck_assert_uint_eq(f->enc(-NAN), 0x7f);
    } else if (f->dt == ncclFloat8e5m2) {
        ck_assert_uint_eq(f->enc(-INFINITY), 0xfb);
        ck_assert_uint_eq(f->enc(61440.0f), 0x7b);
        ck_assert_uint_eq(f->enc(NAN), 0x7f);
    } else {
        ck_assert_uint_eq(f->enc(f32(0x7f7f8000u)), 0x7f80);       /* tie above max -> inf */
        ck_assert_uint_eq(f->enc(f32(0x00018000u)), 0x0002);       /* subnormal tie up to even */
        ck_assert_uint_eq(f->enc(f32(0x00008000u)), 0x0000);       /* subnormal tie down to even */
    }
}
END_TEST

/* Random float bit patterns (every exponent) and random floats across the format's
 * own range. */
START_TEST(test_encode_random)
{
    const struct fmt *f = &fmts[_i];
    ref_fmt *r = f->ref;
    rng_state = seed + (uint64_t)_i * 0x9E3779B97F4A7C15ULL;
    int bad = 0, reported = 0;
    const long n = 1L << 21;
    int emin = 1 - r->bias - r->mbits - 3, emax = (1 << r->ebits) - 1 - r->bias + 2;
    for (long i = 0; i < n; i++) {
        uint64_t x = rnd();
        bad += check_enc(f, f32((uint32_t)x), &reported);
        int e = emin + (int)((x >> 32) % (uint64_t)(emax - emin + 1));
        float y = ldexpf(1.0f + (float)((x >> 40) & 0x7fffff) * 0x1p-23f, e);
        bad += check_enc(f, (x >> 63) ? -y : y, &reported);
    }
    ck_assert_msg(bad == 0, "%s: %d of %ld random conversions wrong (seed %" PRIu64 ")", r->name,
                  bad, 2 * n, seed);
}
END_TEST

START_TEST(test_encode_exhaustive)
{
    const struct fmt *f = &fmts[_i];
    int bad = 0, reported = 0;
    for (uint64_t x = 0; x <= 0xffffffffu; x++) bad += check_enc(f, f32((uint32_t)x), &reported);
    ck_assert_msg(bad == 0, "%s: %d of 2^32 conversions wrong", f->ref->name, bad);
}
END_TEST

/* double -> format rounds once: values a hair off a midpoint in double would be
 * rounded onto the midpoint by a detour through float. */
START_TEST(test_from_double_lowp)
{
    const struct fmt *f = &fmts[_i];
    ref_fmt *r = f->ref;
    ref_init(r);
    rng_state = seed ^ 0xD1B54A32D192ED03ULL ^ (uint64_t)_i;
    double next = 2 * ldexp(1.0, (1 << r->ebits) - 2 - r->bias);
    int bad = 0;
    long checks = 0;
    for (int i = 0; i < r->n; i++) {
        double v = r->val[i], hi = i + 1 < r->n ? r->val[i + 1] : next;
        double mid = (v + hi) / 2, eps = ldexp(mid, -40);
        double pts[] = {v, mid, mid + eps, mid - eps, -mid - eps, -(mid - eps),
                        v + (hi - v) * ((double)(rnd() >> 11) * 0x1p-53)};
        for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++) {
            uint32_t got = 0;
            mpccl_dtype_from_double(f->dt, pts[k], &got); /* little-endian: low bytes */
            uint32_t want = ref_encode(r, pts[k]);
            if (got != want && bad++ < 5)
                fprintf(stderr, "%s from_double(%a) = 0x%x, expected 0x%x\n", r->name, pts[k], got, want);
            checks++;
        }
    }
    const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e300, -1e300, 1e-300, DBL_TRUE_MIN};
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) {
        uint32_t got = 0;
        mpccl_dtype_from_double(f->dt, specials[k], &got);
        ck_assert_msg(got == ref_encode(r, specials[k]), "%s from_double(%a) = 0x%x", r->name,
                      specials[k], got);
    }
    ck_assert_msg(bad == 0, "%s: %d of %ld double conversions wrong", r->name, bad, checks);
}
END_TEST

START_TEST(test_from_double_other)
{
    union { int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64; float f; double d; } x;
#define FROM(dt, v) (memset(&x, 0, sizeof x), mpccl_dtype_from_double((dt), (v), &x), x)
    ck_assert_int_eq(FROM(ncclInt8, 3.7).i8, 3);
    ck_assert_int_eq(FROM(ncclInt8, -3.7).i8, -3);
    ck_assert_int_eq(FROM(ncclInt8, 1000.0).i8, 127);
    ck_assert_int_eq(FROM(ncclInt8, -1000.0).i8, -128);
    ck_assert_uint_eq(FROM(ncclUint8, -5.0).u8, 0);
    ck_assert_uint_eq(FROM(ncclUint8, 255.9).u8, 255);
    ck_assert_int_eq(FROM(ncclInt32, -2147483648.5).i32, INT32_MIN);
    ck_assert_int_eq(FROM(ncclInt32, 1e30).i32, INT32_MAX);
    ck_assert_int_eq(FROM(ncclInt32, NAN).i32, 0);
    ck_assert_uint_eq(FROM(ncclUint32, 4294967295.0).u32, UINT32_MAX);
    ck_assert_int_eq(FROM(ncclInt64, 0x1p63).i64, INT64_MAX);
    ck_assert_int_eq(FROM(ncclInt64, -0x1p63).i64, INT64_MIN);
    ck_assert_int_eq(FROM(ncclInt64, -123456789012.9).i64, -123456789012LL);
    ck_assert_uint_eq(FROM(ncclUint64, 0x1p63).u64, 1ULL << 63);
    ck_assert_uint_eq(FROM(ncclUint64, 1e30).u64, UINT64_MAX);
    ck_assert(FROM(ncclFloat32, 0.1).f == 0.1f);
    ck_assert(FROM(ncclFloat64, 0.1).d == 0.1);
#undef FROM
    rng_state = seed ^ 0x5851F42D4C957F2DULL;
    for (int i = 0; i < 10000; i++) {
        uint64_t v = rnd();
        int32_t i32 = (int32_t)v;
        uint8_t u8 = (uint8_t)v;
        int64_t i64 = (int64_t)(v >> 12) - (1LL << 51); /* exact in double */
        ck_assert(mpccl_dtype_to_double(ncclInt32, &i32) == (double)i32);
        ck_assert(mpccl_dtype_to_double(ncclUint8, &u8) == (double)u8);
        ck_assert(mpccl_dtype_to_double(ncclInt64, &i64) == (double)i64);
        int64_t back;
        mpccl_dtype_from_double(ncclInt64, (double)i64, &back);
        ck_assert_int_eq(back, i64);
        float fl = f32((uint32_t)v);
        if (!isnan(fl)) ck_assert(mpccl_dtype_to_double(ncclFloat32, &fl) == (double)fl);
    }
}
END_TEST

int main(void)
{
    const char *s = getenv("MPCCL_TEST_SEED");
    seed = s ? strtoull(s, NULL, 0) : 0x6d706363ULL;
    printf("test_datatype: seed %" PRIu64 " (set MPCCL_TEST_SEED to repeat)\n", seed);
    Suite *suite = suite_create("datatype");
    TCase *tc = tcase_create("conversions");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_tables);
    tcase_add_loop_test(tc, test_decode_all, 0, NFMT);
    tcase_add_loop_test(tc, test_roundtrip_all, 0, NFMT);
    tcase_add_loop_test(tc, test_encode_boundaries, 0, NFMT);
    tcase_add_loop_test(tc, test_encode_random, 0, NFMT);
    tcase_add_loop_test(tc, test_from_double_lowp, 0, NFMT);
    tcase_add_test(tc, test_from_double_other);
    const char *ex = getenv("MPCCL_TEST_EXHAUSTIVE");
    if (ex && atoi(ex)) tcase_add_loop_test(tc, test_encode_exhaustive, 0, NFMT);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
