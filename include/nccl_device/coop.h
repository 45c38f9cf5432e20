/* mpccl's device API, part 2: cooperative thread groups, the subset of CUDA's
 * cooperative groups NCCL's device API uses (thread_rank, size, num_threads,
 * sync).  Same names as NCCL 2.29's nccl_device/coop.h. */
#ifndef MPCCL_NCCL_DEVICE_COOP_H
#define MPCCL_NCCL_DEVICE_COOP_H

#if defined(__CUDACC__) && defined(__cplusplus)

#include <stdint.h>

namespace mpccl_dev {
NCCL_DEVICE_INLINE int lane() { return (int)(threadIdx.x & 31); }
NCCL_DEVICE_INLINE uint32_t lanes_below()
{
    uint32_t m;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}
} // namespace mpccl_dev

/* An aligned power-of-two group of lanes of one warp. */
template <int N>
struct ncclCoopTile {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a tile is a power of two of at most 32 lanes");
    NCCL_DEVICE_INLINE int thread_rank() const { return mpccl_dev::lane() % N; }
    NCCL_DEVICE_INLINE constexpr int size() const { return N; }
    NCCL_DEVICE_INLINE constexpr int num_threads() const { return N; }
    NCCL_DEVICE_INLINE uint32_t laneMask() const
    {
        return N == 32 ? 0xffffffffu : ((1u << N) - 1) << (mpccl_dev::lane() & ~(N - 1));
    }
    NCCL_DEVICE_INLINE void sync()
    {
        if (N > 1) __syncwarp(laneMask());
    }
};
typedef ncclCoopTile<1> ncclCoopThread;
typedef ncclCoopTile<32> ncclCoopWarp;

/* Any lanes of one warp. */
struct ncclCoopLanes {
    uint32_t lmask;
    NCCL_DEVICE_INLINE constexpr ncclCoopLanes(uint32_t m = 0xffffffffu) : lmask(m) {}
    NCCL_DEVICE_INLINE int thread_rank() const { return __popc(lmask & mpccl_dev::lanes_below()); }
    NCCL_DEVICE_INLINE int size() const { return __popc(lmask); }
    NCCL_DEVICE_INLINE int num_threads() const { return __popc(lmask); }
    NCCL_DEVICE_INLINE void sync() { __syncwarp(lmask); }
};

/* nWarps consecutive warps starting at warp0, named by id 0..14 (a named
 * hardware barrier 1 + id; two spans with one id must not overlap in time). */
struct ncclCoopWarpSpan {
    uint32_t warp0 : 8, nWarps : 8, id : 8;
    NCCL_DEVICE_INLINE constexpr ncclCoopWarpSpan(int w0, int n, int i) : warp0(w0), nWarps(n), id(i) {}
    NCCL_DEVICE_INLINE int thread_rank() const { return (int)threadIdx.x - 32 * (int)warp0; }
    NCCL_DEVICE_INLINE int size() const { return 32 * (int)nWarps; }
    NCCL_DEVICE_INLINE int num_threads() const { return 32 * (int)nWarps; }
    NCCL_DEVICE_INLINE void sync() { asm volatile("bar.sync %0, %1;" ::"r"(1 + (int)id), "r"(32 * (int)nWarps) : "memory"); }
};

/* The whole thread block (1-D). */
struct ncclCoopCta {
    NCCL_DEVICE_INLINE int thread_rank() const { return (int)threadIdx.x; }
    NCCL_DEVICE_INLINE int size() const { return (int)blockDim.x; }
    NCCL_DEVICE_INLINE int num_threads() const { return (int)blockDim.x; }
    NCCL_DEVICE_INLINE void sync() { __syncthreads(); }
};

template <int N>
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopTile<N> c) { return c.laneMask(); }
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopLanes c) { return c.lmask; }
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopWarpSpan) { return 0xffffffffu; }
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopCta) { return 0xffffffffu; }

template <int N>
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopTile<N>) { return N == 1; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopLanes) { return false; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopWarpSpan) { return false; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopCta) { return false; }

template <int N>
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopTile<N>) { return true; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopLanes) { return true; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopWarpSpan) { return false; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopCta) { return false; }

/* The lanes of this warp that are running this code now. */
NCCL_DEVICE_INLINE ncclCoopLanes ncclCoopCoalesced() { return ncclCoopLanes{__activemask()}; }

#endif /* __CUDACC__ */
#endif
