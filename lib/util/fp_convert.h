/* Bit-exact conversions between float and fp16 / bf16 / fp8 (e4m3, e5m2).
 *
 * Header-only (static inline) so the host reduction loops inline and vectorize
 * them, and usable from CUDA (__host__ __device__) so a kernel can run the very
 * same code.  The rules are CUDA's:
 *   float -> fp16/bf16  __float2half_rn / __float2bfloat16_rn: round to nearest
 *                       even, overflow to inf, subnormals kept, any NaN -> 0x7fff.
 *   float -> fp8        __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...): round to
 *                       nearest even, |x| beyond the largest finite (inf included)
 *                       -> +-max finite, any NaN -> 0x7f (sign dropped).
 *   fp16/fp8 -> float   exact; any NaN -> 0x7fffffff, as the GPU's cvt does.
 *   bf16 -> float       exact (the bits shifted up, NaN payload kept), as CUDA.
 * The tricks below avoid float subnormal arithmetic where it is free to, so an
 * application running with FTZ/DAZ set still gets exact conversions; they assume
 * float arithmetic rounds to nearest even (the default) without excess precision. */
#ifndef MPCCL_FP_CONVERT_H
#define MPCCL_FP_CONVERT_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MPCCL_HD static __host__ __device__ __forceinline__
#else
#define MPCCL_HD static inline
#endif

MPCCL_HD uint32_t mpccl_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

MPCCL_HD float mpccl_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* c ? a : b as bit arithmetic: a plain ?: lets the compiler sink the float work
 * of the losing side into a branch, which then blocks vectorization. */
MPCCL_HD uint32_t mpccl_sel32(int c, uint32_t a, uint32_t b)
{
    return b ^ ((a ^ b) & (0u - (uint32_t)(c != 0)));
}

/* Rounds the magnitude u (float bits, sign clear, not NaN) to a format with M
 * mantissa bits and exponent bias B.  Returns the unclamped magnitude pattern:
 * values that round past the top land above it, so callers clamp with min()
 * (the mapping is monotonic).  Normal targets: rebias the exponent and round the
 * dropped bits in integer arithmetic.  Subnormal targets: adding sub_magic, the
 * float whose ulp equals the target's subnormal ulp, makes the FPU do the
 * rounding; both operands and the sum are normal floats. */
MPCCL_HD uint32_t mpccl_round_mag(uint32_t u, int M, int B, float sub_magic)
{
    const uint32_t minnorm = (uint32_t)(127 - B + 1) << 23;
    const uint32_t sh = (uint32_t)(23 - M);
    uint32_t r = u - ((uint32_t)(127 - B) << 23);
    uint32_t nrm = (r + ((1u << (sh - 1)) - 1u) + ((r >> sh) & 1u)) >> sh;
    uint32_t sub = mpccl_f32_bits(mpccl_bits_f32(u) + sub_magic) - mpccl_f32_bits(sub_magic);
    return mpccl_sel32(u >= minnorm, nrm, sub);
}

MPCCL_HD uint16_t mpccl_f32_to_f16(float f)
{
    uint32_t x = mpccl_f32_bits(f), u = x & 0x7fffffffu;
    uint32_t m = mpccl_round_mag(u, 10, 15, 0.5f);
    m = m < 0x7c00u ? m : 0x7c00u; /* overflow -> inf */
    return (uint16_t)mpccl_sel32(u > 0x7f800000u, 0x7fffu, ((x >> 16) & 0x8000u) | m);
}

/* bf16 shares float's exponent, so rounding off the low 16 bits is the whole job,
 * subnormals and overflow to inf included. */
MPCCL_HD uint16_t mpccl_f32_to_bf16(float f)
{
    uint32_t x = mpccl_f32_bits(f);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    return (uint16_t)mpccl_sel32((x & 0x7fffffffu) > 0x7f800000u, 0x7fffu, r);
}

MPCCL_HD uint8_t mpccl_f32_to_e4m3(float f)
{
    uint32_t x = mpccl_f32_bits(f), u = x & 0x7fffffffu;
    uint32_t m = mpccl_round_mag(u, 3, 7, 16384.0f); /* ulp(2^14) = 2^-9 */
    m = m < 0x7eu ? m : 0x7eu;                        /* saturate to 448 */
    return (uint8_t)mpccl_sel32(u > 0x7f800000u, 0x7fu, ((x >> 24) & 0x80u) | m);
}

MPCCL_HD uint8_t mpccl_f32_to_e5m2(float f)
{
    uint32_t x = mpccl_f32_bits(f), u = x & 0x7fffffffu;
    uint32_t m = mpccl_round_mag(u, 2, 15, 128.0f); /* ulp(2^7) = 2^-16 */
    m = m < 0x7bu ? m : 0x7bu;                       /* saturate to 57344 */
    return (uint8_t)mpccl_sel32(u > 0x7f800000u, 0x7fu, ((x >> 24) & 0x80u) | m);
}

MPCCL_HD float mpccl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = h & 0x7c00u;
    uint32_t mag = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t nrm = mag + (112u << 23);       /* rebias 15 -> 127 */
    uint32_t inf = mag + (224u << 23);       /* exponent 31 -> 255 */
    /* subnormal: (2^-14 + m*2^-24) - 2^-14, exact by Sterbenz */
    uint32_t sub = mpccl_f32_bits(mpccl_bits_f32(mag + (113u << 23)) - 0x1p-14f);
    uint32_t r = mpccl_sel32(exp == 0x7c00u, inf, mpccl_sel32(exp == 0, sub, nrm));
    return mpccl_bits_f32(mpccl_sel32((h & 0x7fffu) > 0x7c00u, 0x7fffffffu, sign | r));
}

MPCCL_HD float mpccl_bf16_to_f32(uint16_t b)
{
    return mpccl_bits_f32((uint32_t)b << 16);
}

MPCCL_HD float mpccl_e4m3_to_f32(uint8_t v)
{
    uint32_t sign = (uint32_t)(v & 0x80u) << 24;
    uint32_t mag = v & 0x7fu;
    uint32_t nrm = (mag << 20) + (120u << 23); /* rebias 7 -> 127 */
    uint32_t sub = mpccl_f32_bits((float)(mag & 7u) * 0x1p-9f);
    uint32_t r = mpccl_sel32((mag >> 3) == 0, sub, nrm);
    return mpccl_bits_f32(mpccl_sel32(mag == 0x7fu, 0x7fffffffu, sign | r));
}

/* e5m2 is the top byte of an fp16. */
MPCCL_HD float mpccl_e5m2_to_f32(uint8_t v)
{
    return mpccl_f16_to_f32((uint16_t)(v << 8));
}

#endif
