/* Datatype table (sizes, names) and scalar conversions to and from double. */
#include <math.h>
#include <string.h>

#include "util/datatype.h"
#include "util/fp_convert.h"

static const struct {
    size_t size;
    int is_float;
    const char *name;
} dtypes[ncclNumTypes] = {
    [ncclInt8] = {1, 0, "int8"},         [ncclUint8] = {1, 0, "uint8"},
    [ncclInt32] = {4, 0, "int32"},       [ncclUint32] = {4, 0, "uint32"},
    [ncclInt64] = {8, 0, "int64"},       [ncclUint64] = {8, 0, "uint64"},
    [ncclFloat16] = {2, 1, "float16"},   [ncclFloat32] = {4, 1, "float32"},
    [ncclFloat64] = {8, 1, "float64"},   [ncclBfloat16] = {2, 1, "bfloat16"},
    [ncclFloat8e4m3] = {1, 1, "float8e4m3"}, [ncclFloat8e5m2] = {1, 1, "float8e5m2"},
};

static int dtype_valid(ncclDataType_t dt) { return (unsigned)dt < (unsigned)ncclNumTypes; }

size_t mpccl_dtype_size(ncclDataType_t dt) { return dtype_valid(dt) ? dtypes[dt].size : 0; }

const char *mpccl_dtype_name(ncclDataType_t dt)
{
    return dtype_valid(dt) ? dtypes[dt].name : "invalid";
}

int mpccl_dtype_is_float(ncclDataType_t dt) { return dtype_valid(dt) && dtypes[dt].is_float; }

const char *mpccl_op_name(mpccl_op_t op)
{
    static const char *const names[MPCCL_NUM_OPS] = {"sum", "prod", "max", "min"};
    return (unsigned)op < (unsigned)MPCCL_NUM_OPS ? names[op] : "invalid";
}

/* Rounds v once, to nearest even, to a binary format with M mantissa bits and
 * exponent bias B (no upper bound: the float encoders apply inf/saturation).
 * Going through float first would round twice (CUDA's __double2half does not). */
static float round_double(double v, int M, int B)
{
    if (!isfinite(v) || v == 0) return (float)v;
    int e;
    frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
    int ex = e - 1 < 1 - B ? 1 - B : e - 1;
    double q = ldexp(1.0, ex - M); /* the target's ulp at |v| */
    /* |v|/q and r*q only shift exponents, so rint is the one rounding. */
    double r = rint(fabs(v) / q) * q;
    return (float)copysign(r, v);
}

/* Integers: truncate toward zero and saturate to the type's range (a C cast
 * would be undefined out of range); NaN gives 0. */
static double clamp_trunc(double v, double lo, double hi)
{
    if (v != v) return 0;
    v = trunc(v);
    return v < lo ? lo : (v > hi ? hi : v);
}

void mpccl_dtype_from_double(ncclDataType_t dt, double v, void *out)
{
    union {
        int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
        uint16_t u16; float f32; double f64;
    } x;
    size_t n = mpccl_dtype_size(dt);
    switch (dt) {
    case ncclInt8: x.i8 = (int8_t)clamp_trunc(v, INT8_MIN, INT8_MAX); break;
    case ncclUint8: x.u8 = (uint8_t)clamp_trunc(v, 0, UINT8_MAX); break;
    case ncclInt32: x.i32 = (int32_t)clamp_trunc(v, INT32_MIN, INT32_MAX); break;
    case ncclUint32: x.u32 = (uint32_t)clamp_trunc(v, 0, UINT32_MAX); break;
    case ncclInt64:
        /* 2^63 is the first double past INT64_MAX */
        x.i64 = v >= 0x1p63 ? INT64_MAX : (int64_t)clamp_trunc(v, -0x1p63, 0x1p63);
        break;
    case ncclUint64: x.u64 = v >= 0x1p64 ? UINT64_MAX : (uint64_t)clamp_trunc(v, 0, 0x1p64); break;
    case ncclFloat16: x.u16 = mpccl_f32_to_f16(round_double(v, 10, 15)); break;
    case ncclFloat32: x.f32 = (float)v; break;
    case ncclFloat64: x.f64 = v; break;
    case ncclBfloat16: x.u16 = mpccl_f32_to_bf16(round_double(v, 7, 127)); break;
    case ncclFloat8e4m3: x.u8 = mpccl_f32_to_e4m3(round_double(v, 3, 7)); break;
    case ncclFloat8e5m2: x.u8 = mpccl_f32_to_e5m2(round_double(v, 2, 15)); break;
    default: return; /* size 0: nothing to write */
    }
    memcpy(out, &x, n);
}

double mpccl_dtype_to_double(ncclDataType_t dt, const void *in)
{
    union {
        int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
        uint16_t u16; float f32; double f64;
    } x;
    memcpy(&x, in, mpccl_dtype_size(dt));
    switch (dt) {
    case ncclInt8: return x.i8;
    case ncclUint8: return x.u8;
    case ncclInt32: return x.i32;
    case ncclUint32: return x.u32;
    case ncclInt64: return (double)x.i64;
    case ncclUint64: return (double)x.u64;
    case ncclFloat16: return mpccl_f16_to_f32(x.u16);
    case ncclFloat32: return x.f32;
    case ncclFloat64: return x.f64;
    case ncclBfloat16: return mpccl_bf16_to_f32(x.u16);
    case ncclFloat8e4m3: return mpccl_e4m3_to_f32(x.u8);
    case ncclFloat8e5m2: return mpccl_e5m2_to_f32(x.u8);
    default: return NAN;
    }
}
