// The end of a one-sided put launch the proxy serves (lib/proxy/proxy.h,
// mpccl_proxy_post; engine launches post their pieces instead and signal nothing).
#ifndef MPCCL_KERNELS_PROXY_DONE_CUH
#define MPCCL_KERNELS_PROXY_DONE_CUH

#include <stdint.h>

// Called once per launch, by its last CTA: counts the launch in count (device
// memory) and stores the count into done (pinned host memory).  A store is a
// posted write the CTA does not wait for; an atomic on host memory would be a
// PCIe round trip at the end of every launch (measured: 9-10 us per call with
// one per CTA).  The store releases at system scope: every flag the launch
// raised (the other CTAs' too, seen through their count of finished CTAs) is
// visible to the proxy before the count.
__device__ __forceinline__ void mpccl_proxy_launch_done(uint32_t *count, uint32_t *done)
{
    if (done == nullptr) return;
    const uint32_t v = atomicAdd(count, 1u) + 1u;
    asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(done), "r"(v) : "memory");
}

#endif
