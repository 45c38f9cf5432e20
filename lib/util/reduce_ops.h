/* Per-element reduction operations, one definition shared by the host loops
 * (host_reduce.c) and the CUDA kernels (lib/kernels/), so both give bit-identical
 * results.
 *
 * Integers: sum and prod wrap around; they are computed on the unsigned type of the
 * same width (a signed overflow would be undefined in C), which is the same bits as
 * two's complement wraparound.  Division truncates toward zero (NCCL's integer
 * ncclAvg).
 *
 * Floats: max/min ignore a NaN operand (like fmaxf and CUDA's __hmax: the other
 * operand wins; both NaN gives a NaN) and order -0 below +0, so max(-0,+0) = +0
 * and min(-0,+0) = -0 whatever the argument order.  That tie rule is spelled out
 * because fmaxf leaves it open, and the host and device must agree.
 *
 * fp16/bf16/fp8: decode both operands to float, apply the float op, round once.
 * That equals rounding the exact result once (what __hadd/__hmul do): float has
 * 24 bits >= 2p+2 for every p here (fp16 11, bf16 8, e4m3 4, e5m2 3), so the
 * float rounding can never create a tie for the second one (Figueroa, "When is
 * double rounding innocuous?", 1995), and no result leaves float's range except
 * bf16 overflows, which go to inf either way.  The same argument makes NCCL's fp8
 * path (widen to half, __hadd, narrow) give these results too.
 *
 * Checked on an H200 (sm_90): the conversions in fp_convert.h equal CUDA's
 * intrinsics for all 2^32 floats and all patterns; sum/prod/max/min here equal
 * __hadd/__hmul/__hmax/__hmin for all 2^32 fp16 pairs and all 2^32 bf16 pairs,
 * NaN and signed zeros included, and NCCL's via-half fp8 ops for all fp8 pairs. */
#ifndef MPCCL_REDUCE_OPS_H
#define MPCCL_REDUCE_OPS_H

#include <stdint.h>
#include "util/fp_convert.h"

MPCCL_HD double mpccl_f64_from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

MPCCL_HD uint64_t mpccl_f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* ---- float32 / float64 ---- */
MPCCL_HD float mpccl_sum_f32(float a, float b) { return a + b; }
MPCCL_HD float mpccl_prod_f32(float a, float b) { return a * b; }
MPCCL_HD double mpccl_sum_f64(double a, double b) { return a + b; }
MPCCL_HD double mpccl_prod_f64(double a, double b) { return a * b; }

/* Equal operands differ at most in the sign of zero: AND of the bits picks +0
 * for max, OR picks -0 for min. */
MPCCL_HD float mpccl_max_f32(float a, float b)
{
    float r = a > b ? a : b;
    r = a == b ? mpccl_bits_f32(mpccl_f32_bits(a) & mpccl_f32_bits(b)) : r;
    return b != b ? a : r;
}

MPCCL_HD float mpccl_min_f32(float a, float b)
{
    float r = a < b ? a : b;
    r = a == b ? mpccl_bits_f32(mpccl_f32_bits(a) | mpccl_f32_bits(b)) : r;
    return b != b ? a : r;
}

MPCCL_HD double mpccl_max_f64(double a, double b)
{
    double r = a > b ? a : b;
    r = a == b ? mpccl_f64_from_bits(mpccl_f64_bits(a) & mpccl_f64_bits(b)) : r;
    return b != b ? a : r;
}

MPCCL_HD double mpccl_min_f64(double a, double b)
{
    double r = a < b ? a : b;
    r = a == b ? mpccl_f64_from_bits(mpccl_f64_bits(a) | mpccl_f64_bits(b)) : r;
    return b != b ? a : r;
}

/* ---- low-precision floats: float op, one rounding ---- */
#define MPCCL_LP_OPS(name, T, dec, enc)                                                   \
    MPCCL_HD T mpccl_sum_##name(T a, T b) { return enc(dec(a) + dec(b)); }                \
    MPCCL_HD T mpccl_prod_##name(T a, T b) { return enc(dec(a) * dec(b)); }              \
    MPCCL_HD T mpccl_max_##name(T a, T b) { return enc(mpccl_max_f32(dec(a), dec(b))); }  \
    MPCCL_HD T mpccl_min_##name(T a, T b) { return enc(mpccl_min_f32(dec(a), dec(b))); }  \
    MPCCL_HD T mpccl_scale_##name(T a, float s) { return enc(dec(a) * s); }               \
    MPCCL_HD T mpccl_div_##name(T a, float d) { return enc(dec(a) / d); }
MPCCL_LP_OPS(f16, uint16_t, mpccl_f16_to_f32, mpccl_f32_to_f16)
MPCCL_LP_OPS(bf16, uint16_t, mpccl_bf16_to_f32, mpccl_f32_to_bf16)
MPCCL_LP_OPS(e4m3, uint8_t, mpccl_e4m3_to_f32, mpccl_f32_to_e4m3)
MPCCL_LP_OPS(e5m2, uint8_t, mpccl_e5m2_to_f32, mpccl_f32_to_e5m2)
#undef MPCCL_LP_OPS

/* ---- integers ---- */
#define MPCCL_INT_OPS(name, T, U)                                                         \
    MPCCL_HD T mpccl_sum_##name(T a, T b) { return (T)(U)((U)a + (U)b); }                 \
    MPCCL_HD T mpccl_prod_##name(T a, T b) { return (T)(U)((U)a * (U)b); }                \
    MPCCL_HD T mpccl_max_##name(T a, T b) { return a > b ? a : b; }                       \
    MPCCL_HD T mpccl_min_##name(T a, T b) { return a < b ? a : b; }
/* uint8 promotes to int; 255*255 fits, so no signed overflow before the cast. */
MPCCL_INT_OPS(i8, int8_t, uint8_t)
MPCCL_INT_OPS(u8, uint8_t, uint8_t)
MPCCL_INT_OPS(i32, int32_t, uint32_t)
MPCCL_INT_OPS(u32, uint32_t, uint32_t)
MPCCL_INT_OPS(i64, int64_t, uint64_t)
MPCCL_INT_OPS(u64, uint64_t, uint64_t)
#undef MPCCL_INT_OPS

/* Signed division truncating toward zero, on magnitudes so that any divisor up
 * to 2^64-1 works (INT64_MIN / 2^63 = -1). */
MPCCL_HD int64_t mpccl_div_signed(int64_t x, uint64_t d)
{
    uint64_t mag = x < 0 ? 0u - (uint64_t)x : (uint64_t)x;
    uint64_t q = mag / d;
    return x < 0 ? (int64_t)(0u - q) : (int64_t)q;
}

#endif
