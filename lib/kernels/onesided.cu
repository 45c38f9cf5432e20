// Signal and wait kernels of one-sided operations (onesided.h).
#include "kernels/onesided.h"
extern "C" {
#include "cuda_rt.h" /* a C header without its own linkage block */
}

// The data of the put was written by the copy that precedes this kernel on
// the stream (complete before the kernel starts); the system-scope fence
// orders this GPU's view of it before the add, so a peer that sees the new
// count and then reads its window sees the data.
__global__ void mpccl_os_signal_kernel(unsigned long long *word)
{
    __threadfence_system();
    atomicAdd(word, 1ULL);
    __threadfence_system();
}

// A small put in one launch: every thread stores its share into the peer's
// window; after the block barrier one thread fences at system scope and adds
// to the peer's counter.  The fence is cumulative: the barrier puts the other
// threads' stores before it, so a peer that sees the count sees all the
// bytes -- one fence instead of one per thread, which is most of a small
// put's time.  One CTA: puts this small are latency-bound, and one block
// needs no grid-wide completion count.
__global__ void __launch_bounds__(512) mpccl_os_put_signal_kernel(char *dst, const char *src, size_t bytes,
                                                                  unsigned long long *word)
{
    size_t nvec = ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) ? bytes / 16 : 0;
    const uint4 *s4 = (const uint4 *)src;
    uint4 *d4 = (uint4 *)dst;
    for (size_t i = threadIdx.x; i < nvec; i += blockDim.x) d4[i] = s4[i];
    for (size_t i = nvec * 16 + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        atomicAdd(word, 1ULL);
    }
}

// One thread serves the descriptors in order, so descriptors naming the same
// counter add up (a wait is all of them: the order costs nothing).
__global__ void mpccl_os_wait_kernel(mpccl_os_wait_args_t a)
{
    if (threadIdx.x != 0) return;
    for (uint32_t i = 0; i < a.n; i++) {
        volatile unsigned long long *s = (volatile unsigned long long *)(a.sig + a.idx[i]);
        unsigned long long want = a.expected[a.idx[i]] + a.cnt[i];
        /* spin hard first (a ping-pong's answer comes within microseconds),
         * then let the SM's other warps run */
        for (uint32_t spins = 0; *s < want;)
            if (++spins > 4096) __nanosleep(128);
        a.expected[a.idx[i]] = want;
    }
    // Reads of the window by later work on the stream come after the counts.
    __threadfence_system();
}

extern "C" mpccl_status_t mpccl_os_signal_launch(uint64_t *word, cudaStream_t stream)
{
    mpccl_os_signal_kernel<<<1, 1, 0, stream>>>((unsigned long long *)word);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return mpccl_cuda_error(e, "signal kernel launch");
    return MPCCL_OK;
}

extern "C" mpccl_status_t mpccl_os_put_signal_launch(void *dst, const void *src, size_t bytes, uint64_t *word,
                                                     cudaStream_t stream)
{
    mpccl_os_put_signal_kernel<<<1, 512, 0, stream>>>((char *)dst, (const char *)src, bytes,
                                                      (unsigned long long *)word);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return mpccl_cuda_error(e, "put kernel launch");
    return MPCCL_OK;
}

extern "C" mpccl_status_t mpccl_os_wait_launch(const mpccl_os_wait_args_t *a, cudaStream_t stream)
{
    mpccl_os_wait_kernel<<<1, 32, 0, stream>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return mpccl_cuda_error(e, "wait kernel launch");
    return MPCCL_OK;
}
