// LL lines of pieces to and from other nodes (devplan.h, "LL pieces"), and the
// system-scope acquire loads both engine kernels poll with: shared by the
// engine (engine.cu) and its small-call form (engine_small.cu).
#ifndef MPCCL_KERNELS_PROXY_LL_CUH
#define MPCCL_KERNELS_PROXY_LL_CUH

#include <stdint.h>

#include "kernels/devplan.h"

// A flag load that orders every later access of this CTA (after its barrier)
// behind it at system scope: the acquire half of the message protocol, without
// a separate fence.  A system-scope fence costs about 1.6 us on an H100, more
// than the load itself (doc/PERFORMANCE.md, 2026-11-27).
__device__ __forceinline__ uint32_t mpccl_acquire_load(const volatile uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t mpccl_acquire_load64(const volatile uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// One LL line as it was stored: {lo, flag, hi, flag} in one 16-byte load.
__device__ __forceinline__ void mpccl_ll_load(const char *line, uint32_t &lo, uint32_t &f0, uint32_t &hi,
                                              uint32_t &f1)
{
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(lo), "=r"(f0), "=r"(hi), "=r"(f1)
                 : "l"(line)
                 : "memory");
}

// Whether the LL line at p carries flag in both halves.
__device__ __forceinline__ bool mpccl_ll_line_is(const char *p, uint32_t flag)
{
    uint32_t lo, f0, hi, f1;
    mpccl_ll_load(p, lo, f0, hi, f1);
    return f0 == flag && f1 == flag;
}

// Bytes [8i, 8i + 8) of a piece travel in line i as {lo, flag, hi, flag}, the
// tail of the last line zero.  The source or destination may sit at any byte
// offset.
__device__ __forceinline__ uint64_t mpccl_ll_gather(const unsigned char *s, uint32_t bytes, uint32_t off)
{
    if (off + 8u <= bytes && ((uintptr_t)(s + off) & 7u) == 0) return *(const uint64_t *)(s + off);
    uint64_t v = 0;
    for (uint32_t k = 0; k < 8u && off + k < bytes; k++) v |= (uint64_t)s[off + k] << (8u * k);
    return v;
}

__device__ __forceinline__ void mpccl_ll_scatter(unsigned char *d, uint32_t bytes, uint32_t off, uint64_t v)
{
    if (off + 8u <= bytes && ((uintptr_t)(d + off) & 7u) == 0) {
        *(uint64_t *)(d + off) = v;
        return;
    }
    for (uint32_t k = 0; k < 8u && off + k < bytes; k++) d[off + k] = (unsigned char)(v >> (8u * k));
}

// Writes the piece src[0..bytes) as LL lines with flag: the threads of the
// CTA (by default), or those numbered first, first + stride, ... of a group.
__device__ __forceinline__ void mpccl_ll_pack(char *lines, const char *src, uint32_t bytes, uint32_t flag,
                                              uint32_t first = threadIdx.x, uint32_t stride = blockDim.x)
{
    for (uint32_t i = first; i < MPCCL_PROXY_LL_LINES(bytes); i += stride) {
        uint64_t v = mpccl_ll_gather((const unsigned char *)src, bytes, 8u * i);
        asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(lines + 16u * i),
                     "r"((uint32_t)v), "r"(flag), "r"((uint32_t)(v >> 32)), "r"(flag)
                     : "memory");
    }
}

#endif
