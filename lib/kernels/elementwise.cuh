/* Device element-wise arithmetic of the engine: the 12 datatypes x sum/prod/max/
 * min, scale (PreMulSum, float avg) and divide (integer avg), built on the very
 * definitions the host uses (lib/util/reduce_ops.h, lib/util/fp_convert.h), so results are
 * bit-identical to lib/host/host_reduce.c.
 *
 * Range loops: every thread of the CTA takes 16-byte vectors when all pointers
 * share their alignment modulo 16 (a scalar head brings them to a boundary), else
 * one element at a time.  Loads go through L2 only (ld.cg): the data was often
 * just written by another CTA or another GPU, and L1 is not coherent. */
#ifndef MPCCL_ELEMENTWISE_CUH
#define MPCCL_ELEMENTWISE_CUH

#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "nccl.h"
#include "util/reduce_ops.h"

namespace mpccl_ew {

enum { OP_SUM = 0, OP_PROD, OP_MAX, OP_MIN }; /* mpccl_op_t */

/* Per datatype: storage type T, scalar type S (what a STEP_SCALE multiplies by,
 * decoded once), divisor type D (STEP_DIVIDE), and the ops. */
template <int DT> struct ty;

#define MPCCL_EW_INT(DT, name, TT, DIVEXPR)                                                   \
    template <> struct ty<DT> {                                                               \
        typedef TT T;                                                                         \
        typedef TT S;                                                                         \
        typedef uint64_t D;                                                                   \
        static __device__ __forceinline__ T sum(T a, T b) { return mpccl_sum_##name(a, b); }  \
        static __device__ __forceinline__ T prod(T a, T b) { return mpccl_prod_##name(a, b); } \
        static __device__ __forceinline__ T max(T a, T b) { return mpccl_max_##name(a, b); }  \
        static __device__ __forceinline__ T min(T a, T b) { return mpccl_min_##name(a, b); }  \
        static __device__ __forceinline__ S scalar(const unsigned char *p)                    \
        {                                                                                     \
            T v;                                                                              \
            memcpy(&v, p, sizeof v);                                                          \
            return v;                                                                         \
        }                                                                                     \
        static __device__ __forceinline__ T scale(T a, S s) { return mpccl_prod_##name(a, s); } \
        static __device__ __forceinline__ D divisor(uint64_t d) { return d; }                 \
        static __device__ __forceinline__ T div(T a, D d) { return (T)(DIVEXPR); }            \
    };
MPCCL_EW_INT(ncclInt8, i8, int8_t, mpccl_div_signed(a, d))
MPCCL_EW_INT(ncclUint8, u8, uint8_t, a / d)
MPCCL_EW_INT(ncclInt32, i32, int32_t, mpccl_div_signed(a, d))
MPCCL_EW_INT(ncclUint32, u32, uint32_t, a / d)
MPCCL_EW_INT(ncclInt64, i64, int64_t, mpccl_div_signed(a, d))
MPCCL_EW_INT(ncclUint64, u64, uint64_t, a / d)
#undef MPCCL_EW_INT

/* fp16 and bf16 arithmetic in hardware: __hadd/__hmul/__hmax/__hmin give the
 * very bits of lib/util/reduce_ops.h's decode-op-round definitions for every pair of
 * operands, NaN and signed zeros included (checked exhaustively on an H200, see
 * reduce_ops.h), in one instruction instead of two software conversions. */
#define MPCCL_EW_HW(name, H, from, to)                                                                    \
    __device__ __forceinline__ uint16_t hw_sum_##name(uint16_t a, uint16_t b) { return to(__hadd(from(a), from(b))); } \
    __device__ __forceinline__ uint16_t hw_prod_##name(uint16_t a, uint16_t b) { return to(__hmul(from(a), from(b))); } \
    __device__ __forceinline__ uint16_t hw_max_##name(uint16_t a, uint16_t b) { return to(__hmax(from(a), from(b))); } \
    __device__ __forceinline__ uint16_t hw_min_##name(uint16_t a, uint16_t b) { return to(__hmin(from(a), from(b))); }
MPCCL_EW_HW(f16, __half, __ushort_as_half, __half_as_ushort)
MPCCL_EW_HW(bf16, __nv_bfloat16, __ushort_as_bfloat16, __bfloat16_as_ushort)
#undef MPCCL_EW_HW
/* fp8 has no arithmetic of its own: the shared software definitions. */
#define hw_sum_e4m3 mpccl_sum_e4m3
#define hw_prod_e4m3 mpccl_prod_e4m3
#define hw_max_e4m3 mpccl_max_e4m3
#define hw_min_e4m3 mpccl_min_e4m3
#define hw_sum_e5m2 mpccl_sum_e5m2
#define hw_prod_e5m2 mpccl_prod_e5m2
#define hw_max_e5m2 mpccl_max_e5m2
#define hw_min_e5m2 mpccl_min_e5m2

/* fp16/bf16/fp8: the scalar is decoded to float once; divide by the divisor as a
 * float (as the host does). */
#define MPCCL_EW_LP(DT, name, TT, dec)                                                        \
    template <> struct ty<DT> {                                                               \
        typedef TT T;                                                                         \
        typedef float S;                                                                      \
        typedef float D;                                                                      \
        static __device__ __forceinline__ T sum(T a, T b) { return hw_sum_##name(a, b); }     \
        static __device__ __forceinline__ T prod(T a, T b) { return hw_prod_##name(a, b); }   \
        static __device__ __forceinline__ T max(T a, T b) { return hw_max_##name(a, b); }     \
        static __device__ __forceinline__ T min(T a, T b) { return hw_min_##name(a, b); }     \
        static __device__ __forceinline__ S scalar(const unsigned char *p)                    \
        {                                                                                     \
            T v;                                                                              \
            memcpy(&v, p, sizeof v);                                                          \
            return dec(v);                                                                    \
        }                                                                                     \
        static __device__ __forceinline__ T scale(T a, S s) { return mpccl_scale_##name(a, s); } \
        static __device__ __forceinline__ D divisor(uint64_t d) { return (float)d; }          \
        static __device__ __forceinline__ T div(T a, D d) { return mpccl_div_##name(a, d); }  \
    };
MPCCL_EW_LP(ncclFloat16, f16, uint16_t, mpccl_f16_to_f32)
MPCCL_EW_LP(ncclBfloat16, bf16, uint16_t, mpccl_bf16_to_f32)
MPCCL_EW_LP(ncclFloat8e4m3, e4m3, uint8_t, mpccl_e4m3_to_f32)
MPCCL_EW_LP(ncclFloat8e5m2, e5m2, uint8_t, mpccl_e5m2_to_f32)
#undef MPCCL_EW_LP

#define MPCCL_EW_FP(DT, name, TT)                                                             \
    template <> struct ty<DT> {                                                               \
        typedef TT T;                                                                         \
        typedef TT S;                                                                         \
        typedef TT D;                                                                         \
        static __device__ __forceinline__ T sum(T a, T b) { return mpccl_sum_##name(a, b); }  \
        static __device__ __forceinline__ T prod(T a, T b) { return mpccl_prod_##name(a, b); } \
        static __device__ __forceinline__ T max(T a, T b) { return mpccl_max_##name(a, b); }  \
        static __device__ __forceinline__ T min(T a, T b) { return mpccl_min_##name(a, b); }  \
        static __device__ __forceinline__ S scalar(const unsigned char *p)                    \
        {                                                                                     \
            T v;                                                                              \
            memcpy(&v, p, sizeof v);                                                          \
            return v;                                                                         \
        }                                                                                     \
        static __device__ __forceinline__ T scale(T a, S s) { return mpccl_prod_##name(a, s); } \
        static __device__ __forceinline__ D divisor(uint64_t d) { return (TT)d; }             \
        static __device__ __forceinline__ T div(T a, D d) { return __fdiv_rn_wrap(a, d); }    \
        static __device__ __forceinline__ float __fdiv_rn_wrap(float a, float d) { return __fdiv_rn(a, d); } \
        static __device__ __forceinline__ double __fdiv_rn_wrap(double a, double d) { return __ddiv_rn(a, d); } \
    };
MPCCL_EW_FP(ncclFloat32, f32, float)
MPCCL_EW_FP(ncclFloat64, f64, double)
#undef MPCCL_EW_FP

/* The element functions as functors, so range loops are instantiated per op. */
template <int DT, int OP> struct binop {
    typedef typename ty<DT>::T T;
    static __device__ __forceinline__ T apply(T a, T b)
    {
        return OP == OP_SUM ? ty<DT>::sum(a, b) : OP == OP_PROD ? ty<DT>::prod(a, b)
             : OP == OP_MAX ? ty<DT>::max(a, b) : ty<DT>::min(a, b);
    }
};
template <int DT> struct scaleop {
    typedef typename ty<DT>::T T;
    typedef typename ty<DT>::S P;
    static __device__ __forceinline__ T apply(T a, P s) { return ty<DT>::scale(a, s); }
};
template <int DT> struct divop {
    typedef typename ty<DT>::T T;
    typedef typename ty<DT>::D P;
    static __device__ __forceinline__ T apply(T a, P d) { return ty<DT>::div(a, d); }
};

__device__ __forceinline__ uint4 ld16(const void *p) { return __ldcg((const uint4 *)p); }
__device__ __forceinline__ void st16(void *p, uint4 v) { *(uint4 *)p = v; }
template <typename T> __device__ __forceinline__ T ld1(const T *p)
{
    if (sizeof(T) == 1) return (T)__ldcg((const unsigned char *)p);
    if (sizeof(T) == 2) {
        unsigned short v = __ldcg((const unsigned short *)p);
        T r;
        memcpy(&r, &v, sizeof r);
        return r;
    }
    if (sizeof(T) == 4) {
        unsigned int v = __ldcg((const unsigned int *)p);
        T r;
        memcpy(&r, &v, sizeof r);
        return r;
    }
    unsigned long long v = __ldcg((const unsigned long long *)p);
    T r;
    memcpy(&r, &v, sizeof r);
    return r;
}

/* Elements to process one at a time before every pointer sits on a 16-byte
 * boundary; n (everything) when their misalignments differ or are not whole
 * elements. */
template <typename T> __device__ __forceinline__ uint64_t head_elems(uintptr_t a, uintptr_t b, uintptr_t c, uint64_t n)
{
    uintptr_t m = a & 15;
    if ((b & 15) != m || (c & 15) != m || (m % sizeof(T)) != 0) return n;
    uint64_t h = ((16 - m) & 15) / sizeof(T);
    return h < n ? h : n;
}

#define MPCCL_EW_UNROLL 4

/* d[i] = F(a[i], b[i]) for i < n, all threads of the CTA; d may alias a or b
 * exactly (each element is read and written by one thread, reads first). */
template <typename F> __device__ void binary_range(typename F::T *d, const typename F::T *a, const typename F::T *b,
                                                   uint64_t n)
{
    typedef typename F::T T;
    const int V = 16 / sizeof(T);
    const uint64_t tid = threadIdx.x, nt = blockDim.x;
    uint64_t h = head_elems<T>((uintptr_t)d, (uintptr_t)a, (uintptr_t)b, n);
    for (uint64_t i = tid; i < h; i += nt) d[i] = F::apply(ld1(a + i), ld1(b + i));
    uint64_t nv = (n - h) / V;
    char *dv = (char *)(d + h);
    const char *av = (const char *)(a + h), *bv = (const char *)(b + h);
    uint64_t v = tid;
    for (; v + (MPCCL_EW_UNROLL - 1) * nt < nv; v += MPCCL_EW_UNROLL * nt) {
        uint4 x[MPCCL_EW_UNROLL], y[MPCCL_EW_UNROLL];
#pragma unroll
        for (int u = 0; u < MPCCL_EW_UNROLL; u++) {
            x[u] = ld16(av + (v + u * nt) * 16);
            y[u] = ld16(bv + (v + u * nt) * 16);
        }
#pragma unroll
        for (int u = 0; u < MPCCL_EW_UNROLL; u++) {
            T xs[V], ys[V];
            memcpy(xs, &x[u], 16);
            memcpy(ys, &y[u], 16);
#pragma unroll
            for (int k = 0; k < V; k++) xs[k] = F::apply(xs[k], ys[k]);
            memcpy(&x[u], xs, 16);
            st16(dv + (v + u * nt) * 16, x[u]);
        }
    }
    for (; v < nv; v += nt) {
        uint4 x = ld16(av + v * 16), y = ld16(bv + v * 16);
        T xs[V], ys[V];
        memcpy(xs, &x, 16);
        memcpy(ys, &y, 16);
#pragma unroll
        for (int k = 0; k < V; k++) xs[k] = F::apply(xs[k], ys[k]);
        memcpy(&x, xs, 16);
        st16(dv + v * 16, x);
    }
    for (uint64_t i = h + nv * V + tid; i < n; i += nt) d[i] = F::apply(ld1(a + i), ld1(b + i));
}

/* d[i] = F(a[i], p) for i < n; d may alias a exactly. */
template <typename F> __device__ void unary_range(typename F::T *d, const typename F::T *a, typename F::P p, uint64_t n)
{
    typedef typename F::T T;
    const int V = 16 / sizeof(T);
    const uint64_t tid = threadIdx.x, nt = blockDim.x;
    uint64_t h = head_elems<T>((uintptr_t)d, (uintptr_t)a, (uintptr_t)a, n);
    for (uint64_t i = tid; i < h; i += nt) d[i] = F::apply(ld1(a + i), p);
    uint64_t nv = (n - h) / V;
    char *dv = (char *)(d + h);
    const char *av = (const char *)(a + h);
    for (uint64_t v = tid; v < nv; v += nt) {
        uint4 x = ld16(av + v * 16);
        T xs[V];
        memcpy(xs, &x, 16);
#pragma unroll
        for (int k = 0; k < V; k++) xs[k] = F::apply(xs[k], p);
        memcpy(&x, xs, 16);
        st16(dv + v * 16, x);
    }
    for (uint64_t i = h + nv * V + tid; i < n; i += nt) d[i] = F::apply(ld1(a + i), p);
}

/* d[i] = a[i] for i < n elements of T (ranges do not overlap unless equal). */
template <typename T> __device__ void copy_range(T *d, const T *a, uint64_t n)
{
    if (d == a) return;
    const int V = 16 / sizeof(T);
    const uint64_t tid = threadIdx.x, nt = blockDim.x;
    uint64_t h = head_elems<T>((uintptr_t)d, (uintptr_t)a, (uintptr_t)a, n);
    for (uint64_t i = tid; i < h; i += nt) d[i] = ld1(a + i);
    uint64_t nv = (n - h) / V;
    char *dv = (char *)(d + h);
    const char *av = (const char *)(a + h);
    uint64_t v = tid;
    for (; v + (MPCCL_EW_UNROLL - 1) * nt < nv; v += MPCCL_EW_UNROLL * nt) {
        uint4 x[MPCCL_EW_UNROLL];
#pragma unroll
        for (int u = 0; u < MPCCL_EW_UNROLL; u++) x[u] = ld16(av + (v + u * nt) * 16);
#pragma unroll
        for (int u = 0; u < MPCCL_EW_UNROLL; u++) st16(dv + (v + u * nt) * 16, x[u]);
    }
    for (; v < nv; v += nt) st16(dv + v * 16, ld16(av + v * 16));
    for (uint64_t i = h + nv * V + tid; i < n; i += nt) d[i] = ld1(a + i);
}

/* d = a (op) b with the op chosen at run time, outside the loops. */
template <int DT> __device__ void reduce_range(int op, typename ty<DT>::T *d, const typename ty<DT>::T *a,
                                               const typename ty<DT>::T *b, uint64_t n)
{
    switch (op) {
    case OP_SUM: binary_range<binop<DT, OP_SUM> >(d, a, b, n); break;
    case OP_PROD: binary_range<binop<DT, OP_PROD> >(d, a, b, n); break;
    case OP_MAX: binary_range<binop<DT, OP_MAX> >(d, a, b, n); break;
    default: binary_range<binop<DT, OP_MIN> >(d, a, b, n); break;
    }
}

} // namespace mpccl_ew

#endif
