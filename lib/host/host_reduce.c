/* Element-wise host arithmetic: the CPU executor's reduce, PreMulSum scaling and
 * integer ncclAvg.  The per-element definitions are in reduce_ops.h, shared with
 * the CUDA kernels.
 *
 * Loop shape: blocks of BLK elements are copied into locals, combined there and
 * copied out.  The locals cannot alias, so the inner loop (constant trip count)
 * vectorizes at -O2 without runtime alias checks, and results stay right when dst
 * is a or b (each block is read before it is written). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/datatype.h"
#include "host/host_reduce.h"
#include "util/reduce_ops.h"

#define BLK 64

#define DEFINE_BINARY(fname, T, OPF)                                           \
    static void fname(void *dst, const void *a, const void *b, size_t n)       \
    {                                                                          \
        T *d = (T *)dst;                                                       \
        const T *pa = (const T *)a, *pb = (const T *)b;                        \
        size_t i = 0;                                                          \
        for (; i + BLK <= n; i += BLK) {                                       \
            T x[BLK], y[BLK];                                                  \
            memcpy(x, pa + i, sizeof x);                                       \
            memcpy(y, pb + i, sizeof y);                                       \
            for (size_t j = 0; j < BLK; j++) x[j] = OPF(x[j], y[j]);           \
            memcpy(d + i, x, sizeof x);                                        \
        }                                                                      \
        for (; i < n; i++) d[i] = OPF(pa[i], pb[i]);                           \
    }

/* dst[i] = OPF(src[i], s) for a scalar s of type S. */
#define DEFINE_UNARY(fname, T, S, OPF)                                         \
    static void fname(void *dst, const void *src, S s, size_t n)               \
    {                                                                          \
        T *d = (T *)dst;                                                       \
        const T *p = (const T *)src;                                           \
        size_t i = 0;                                                          \
        for (; i + BLK <= n; i += BLK) {                                       \
            T x[BLK];                                                          \
            memcpy(x, p + i, sizeof x);                                        \
            for (size_t j = 0; j < BLK; j++) x[j] = OPF(x[j], s);              \
            memcpy(d + i, x, sizeof x);                                        \
        }                                                                      \
        for (; i < n; i++) d[i] = OPF(p[i], s);                                \
    }

typedef void (*binary_fn)(void *, const void *, const void *, size_t);

/* The four reductions of one type, plus scale by an element of the same type. */
#define DEFINE_TYPE(name, T)                                                   \
    DEFINE_BINARY(sum_##name, T, mpccl_sum_##name)                             \
    DEFINE_BINARY(prod_##name, T, mpccl_prod_##name)                           \
    DEFINE_BINARY(max_##name, T, mpccl_max_##name)                             \
    DEFINE_BINARY(min_##name, T, mpccl_min_##name)
DEFINE_TYPE(i8, int8_t)
DEFINE_TYPE(u8, uint8_t)
DEFINE_TYPE(i32, int32_t)
DEFINE_TYPE(u32, uint32_t)
DEFINE_TYPE(i64, int64_t)
DEFINE_TYPE(u64, uint64_t)
DEFINE_TYPE(f16, uint16_t)
DEFINE_TYPE(f32, float)
DEFINE_TYPE(f64, double)
DEFINE_TYPE(bf16, uint16_t)
DEFINE_TYPE(e4m3, uint8_t)
DEFINE_TYPE(e5m2, uint8_t)

#define ROW(name) {sum_##name, prod_##name, max_##name, min_##name}
static const binary_fn reduce_table[ncclNumTypes][MPCCL_NUM_OPS] = {
    [ncclInt8] = ROW(i8),       [ncclUint8] = ROW(u8),     [ncclInt32] = ROW(i32),
    [ncclUint32] = ROW(u32),    [ncclInt64] = ROW(i64),    [ncclUint64] = ROW(u64),
    [ncclFloat16] = ROW(f16),   [ncclFloat32] = ROW(f32),  [ncclFloat64] = ROW(f64),
    [ncclBfloat16] = ROW(bf16), [ncclFloat8e4m3] = ROW(e4m3), [ncclFloat8e5m2] = ROW(e5m2),
};
#undef ROW

/* Scale: integers reuse the wrapping product; the low-precision formats decode
 * the scalar once and round each product once. */
DEFINE_UNARY(scale_i8, int8_t, int8_t, mpccl_prod_i8)
DEFINE_UNARY(scale_u8, uint8_t, uint8_t, mpccl_prod_u8)
DEFINE_UNARY(scale_i32, int32_t, int32_t, mpccl_prod_i32)
DEFINE_UNARY(scale_u32, uint32_t, uint32_t, mpccl_prod_u32)
DEFINE_UNARY(scale_i64, int64_t, int64_t, mpccl_prod_i64)
DEFINE_UNARY(scale_u64, uint64_t, uint64_t, mpccl_prod_u64)
DEFINE_UNARY(scale_f32, float, float, mpccl_prod_f32)
DEFINE_UNARY(scale_f64, double, double, mpccl_prod_f64)
DEFINE_UNARY(scale_f16, uint16_t, float, mpccl_scale_f16)
DEFINE_UNARY(scale_bf16, uint16_t, float, mpccl_scale_bf16)
DEFINE_UNARY(scale_e4m3, uint8_t, float, mpccl_scale_e4m3)
DEFINE_UNARY(scale_e5m2, uint8_t, float, mpccl_scale_e5m2)

#define DIV_SIGNED(x, d) mpccl_div_signed((x), (d))
#define DIV_UNSIGNED(x, d) ((x) / (d))
#define DIV_FLOAT(x, d) ((x) / (d))
DEFINE_UNARY(div_i8, int8_t, uint64_t, (int8_t)DIV_SIGNED)
DEFINE_UNARY(div_i32, int32_t, uint64_t, (int32_t)DIV_SIGNED)
DEFINE_UNARY(div_i64, int64_t, uint64_t, DIV_SIGNED)
DEFINE_UNARY(div_u8, uint8_t, uint64_t, (uint8_t)DIV_UNSIGNED)
DEFINE_UNARY(div_u32, uint32_t, uint64_t, (uint32_t)DIV_UNSIGNED)
DEFINE_UNARY(div_u64, uint64_t, uint64_t, DIV_UNSIGNED)
DEFINE_UNARY(div_f32, float, float, DIV_FLOAT)
DEFINE_UNARY(div_f64, double, double, DIV_FLOAT)
DEFINE_UNARY(div_f16, uint16_t, float, mpccl_div_f16)
DEFINE_UNARY(div_bf16, uint16_t, float, mpccl_div_bf16)
DEFINE_UNARY(div_e4m3, uint8_t, float, mpccl_div_e4m3)
DEFINE_UNARY(div_e5m2, uint8_t, float, mpccl_div_e5m2)

/* Callers validate dt and op first (api_check.c); getting here with a bad one is a
 * bug in mpccl, and returning would leave dst silently wrong. */
static void bad_call(const char *what, int dt, int op)
{
    fprintf(stderr, "mpccl internal error: %s called with datatype %d op %d\n", what, dt, op);
    abort();
}

void mpccl_host_reduce(ncclDataType_t dt, mpccl_op_t op, void *dst, const void *a,
                       const void *b, size_t n)
{
    if ((unsigned)dt >= (unsigned)ncclNumTypes || (unsigned)op >= (unsigned)MPCCL_NUM_OPS)
        bad_call("mpccl_host_reduce", (int)dt, (int)op);
    reduce_table[dt][op](dst, a, b, n);
}

void mpccl_host_scale(ncclDataType_t dt, void *dst, const void *src, const void *scalar, size_t n)
{
    union {
        int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
        uint16_t u16; float f32; double f64;
    } s;
    size_t sz = mpccl_dtype_size(dt);
    if (sz == 0) bad_call("mpccl_host_scale", (int)dt, -1);
    memcpy(&s, scalar, sz);
    switch (dt) {
    case ncclInt8: scale_i8(dst, src, s.i8, n); break;
    case ncclUint8: scale_u8(dst, src, s.u8, n); break;
    case ncclInt32: scale_i32(dst, src, s.i32, n); break;
    case ncclUint32: scale_u32(dst, src, s.u32, n); break;
    case ncclInt64: scale_i64(dst, src, s.i64, n); break;
    case ncclUint64: scale_u64(dst, src, s.u64, n); break;
    case ncclFloat16: scale_f16(dst, src, mpccl_f16_to_f32(s.u16), n); break;
    case ncclFloat32: scale_f32(dst, src, s.f32, n); break;
    case ncclFloat64: scale_f64(dst, src, s.f64, n); break;
    case ncclBfloat16: scale_bf16(dst, src, mpccl_bf16_to_f32(s.u16), n); break;
    case ncclFloat8e4m3: scale_e4m3(dst, src, mpccl_e4m3_to_f32(s.u8), n); break;
    case ncclFloat8e5m2: scale_e5m2(dst, src, mpccl_e5m2_to_f32(s.u8), n); break;
    default: bad_call("mpccl_host_scale", (int)dt, -1);
    }
}

/* Float types divide by the divisor converted to float (exact up to 2^24). */
void mpccl_host_divide(ncclDataType_t dt, void *dst, const void *src, uint64_t divisor, size_t n)
{
    if (divisor == 0) bad_call("mpccl_host_divide (divisor 0)", (int)dt, -1);
    switch (dt) {
    case ncclInt8: div_i8(dst, src, divisor, n); break;
    case ncclUint8: div_u8(dst, src, divisor, n); break;
    case ncclInt32: div_i32(dst, src, divisor, n); break;
    case ncclUint32: div_u32(dst, src, divisor, n); break;
    case ncclInt64: div_i64(dst, src, divisor, n); break;
    case ncclUint64: div_u64(dst, src, divisor, n); break;
    case ncclFloat16: div_f16(dst, src, (float)divisor, n); break;
    case ncclFloat32: div_f32(dst, src, (float)divisor, n); break;
    case ncclFloat64: div_f64(dst, src, (double)divisor, n); break;
    case ncclBfloat16: div_bf16(dst, src, (float)divisor, n); break;
    case ncclFloat8e4m3: div_e4m3(dst, src, (float)divisor, n); break;
    case ncclFloat8e5m2: div_e5m2(dst, src, (float)divisor, n); break;
    default: bad_call("mpccl_host_divide", (int)dt, -1);
    }
}
