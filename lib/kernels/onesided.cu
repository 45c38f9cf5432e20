// Signal and wait kernels of one-sided operations (onesided.h).
extern "C" {
#include "util/status.h" /* a C header without its own linkage block: first, before its guard */
}
#include <cooperative_groups.h>

#include "kernels/abort.cuh"
#include "kernels/onesided.h"

// A failed launch or attribute call, named as the GPU executor names CUDA errors.
static mpccl_status_t cuda_failed(cudaError_t e, const char *what)
{
    return mpccl_fail(MPCCL_ERR_CUDA, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
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

// A put in one launch: CTA c stores its slice of the bytes into the peer's
// window, then (after the block barrier) one thread fences at system scope.
// The fence is cumulative: the barrier puts the other threads' stores before
// it, so one fence per CTA orders the whole slice -- one per thread was most
// of a small put's time.  Several CTAs are a cooperative launch: after the
// grid barrier every slice is fenced, and CTA 0 fences once more and adds to
// the peer's counter.  (The grid barrier's memory is the driver's, one per
// launch: a completion counter of our own would need a slot per launch in
// flight, on any stream or graph, which nothing on the host can hand out
// safely.)  W is the widest word whose alignment src and dst share; head
// bytes bring dst to it.
template <typename W>
__global__ void __launch_bounds__(MPCCL_OS_PUT_THREADS)
    mpccl_os_put_signal_kernel(char *dst, const char *src, size_t bytes, size_t head, unsigned long long *word)
{
    enum { U = 4 };
    const size_t nw = (bytes - head) / sizeof(W), per = (nw + gridDim.x - 1) / gridDim.x;
    const size_t b = blockIdx.x * per, e = b + per < nw ? b + per : nw, nt = blockDim.x;
    const W *s = (const W *)(src + head);
    W *d = (W *)(dst + head);
    for (size_t i = b + threadIdx.x; i < e; i += U * nt) {
        W x[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + u * nt < e) x[u] = s[i + u * nt];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + u * nt < e) d[i + u * nt] = x[u];
    }
    if (blockIdx.x == 0)
        for (size_t i = threadIdx.x; i < head; i += nt) dst[i] = src[i];
    if (blockIdx.x == gridDim.x - 1)
        for (size_t i = head + nw * sizeof(W) + threadIdx.x; i < bytes; i += nt) dst[i] = src[i];
    __syncthreads();
    if (threadIdx.x == 0) __threadfence_system();
    if (gridDim.x > 1) {
        cooperative_groups::this_grid().sync();
        if (blockIdx.x != 0) return;
        if (threadIdx.x == 0) __threadfence_system(); // every CTA's fenced slice before the add
    }
    if (threadIdx.x == 0) atomicAdd(word, 1ULL);
}

// One thread serves the descriptors in order, so descriptors naming the same
// counter add up (a wait is all of them: the order costs nothing).
__global__ void mpccl_os_wait_kernel(mpccl_os_wait_args_t a)
{
    if (threadIdx.x != 0) return;
    mpccl_abort_begin();
    for (uint32_t i = 0; i < a.n && !mpccl_aborted(); i++) {
        volatile unsigned long long *s = (volatile unsigned long long *)(a.sig + a.idx[i]);
        unsigned long long want = a.expected[a.idx[i]] + a.cnt[i];
        /* spin hard first (a ping-pong's answer comes within microseconds),
         * then let the SM's other warps run */
        mpccl_abort_wait w{};
        for (uint32_t spins = 0; *s < want;) {
            if (++spins > 4096) __nanosleep(128);
            if (mpccl_abort_poll(a.ab, w,
                                 mpccl_abort_why{MPCCL_ABORT_OP_OS_WAIT, (int32_t)a.idx[i], a.peer[i], -1, a.cnt[i],
                                                 (uint32_t)want, (const volatile uint32_t *)s}))
                break;
        }
        if (mpccl_aborted()) break; /* the counts stay as they were */
        a.expected[a.idx[i]] = want;
    }
    // Reads of the window by later work on the stream come after the counts.
    __threadfence_system();
}

extern "C" mpccl_status_t mpccl_os_signal_launch(uint64_t *word, cudaStream_t stream)
{
    mpccl_os_signal_kernel<<<1, 1, 0, stream>>>((unsigned long long *)word);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_failed(e, "signal kernel launch");
    return MPCCL_OK;
}

template <typename W>
static cudaError_t launch_put(unsigned nctas, char *dst, const char *src, size_t bytes, size_t head,
                              unsigned long long *word, cudaStream_t stream)
{
    if (nctas <= 1) {
        mpccl_os_put_signal_kernel<W><<<1, MPCCL_OS_PUT_THREADS, 0, stream>>>(dst, src, bytes, head, word);
        return cudaGetLastError();
    }
    void *args[] = {&dst, &src, &bytes, &head, &word};
    return cudaLaunchCooperativeKernel((const void *)mpccl_os_put_signal_kernel<W>, dim3(nctas),
                                       dim3(MPCCL_OS_PUT_THREADS), args, 0, stream);
}

extern "C" mpccl_status_t mpccl_os_put_signal_launch(void *dst, const void *src, size_t bytes, uint64_t *word,
                                                     unsigned nctas, cudaStream_t stream)
{
    uintptr_t apart = ((uintptr_t)dst ^ (uintptr_t)src) & 15, d = (uintptr_t)dst;
    unsigned w = apart == 0 ? 16 : apart & 1 ? 1 : apart & 2 ? 2 : apart & 4 ? 4 : 8;
    size_t head = (w - (d & (w - 1))) & (w - 1);
    if (head > bytes) head = bytes;
    char *dc = (char *)dst;
    const char *sc = (const char *)src;
    unsigned long long *wd = (unsigned long long *)word;
    cudaError_t e;
    switch (w) {
    case 16: e = launch_put<uint4>(nctas, dc, sc, bytes, head, wd, stream); break;
    case 8: e = launch_put<uint2>(nctas, dc, sc, bytes, head, wd, stream); break;
    case 4: e = launch_put<unsigned>(nctas, dc, sc, bytes, head, wd, stream); break;
    case 2: e = launch_put<unsigned short>(nctas, dc, sc, bytes, head, wd, stream); break;
    default: e = launch_put<unsigned char>(nctas, dc, sc, bytes, head, wd, stream);
    }
    if (e != cudaSuccess) return cuda_failed(e, "put kernel launch");
    return MPCCL_OK;
}

extern "C" unsigned mpccl_os_put_max_ctas(int dev)
{
    int per_sm = 0, sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mpccl_os_put_signal_kernel<uint4>,
                                                      MPCCL_OS_PUT_THREADS, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    long n = (long)per_sm * sms;
    return n < 1 ? 1u : (unsigned)n;
}

extern "C" mpccl_status_t mpccl_os_wait_launch(const mpccl_os_wait_args_t *a, cudaStream_t stream)
{
    mpccl_os_wait_kernel<<<1, 32, 0, stream>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_failed(e, "wait kernel launch");
    return MPCCL_OK;
}

extern "C" mpccl_status_t mpccl_os_preload(void)
{
    cudaFuncAttributes fa;
    const void *fns[] = {(const void *)mpccl_os_signal_kernel, (const void *)mpccl_os_wait_kernel,
                         (const void *)mpccl_os_put_signal_kernel<uint4>, (const void *)mpccl_os_put_signal_kernel<uint2>,
                         (const void *)mpccl_os_put_signal_kernel<unsigned>,
                         (const void *)mpccl_os_put_signal_kernel<unsigned short>,
                         (const void *)mpccl_os_put_signal_kernel<unsigned char>};
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
        cudaError_t e = cudaFuncGetAttributes(&fa, fns[i]);
        if (e != cudaSuccess) return cuda_failed(e, "loading the one-sided kernels");
    }
    return MPCCL_OK;
}
