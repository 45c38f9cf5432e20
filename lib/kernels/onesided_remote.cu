// Kernels of one-sided operations with peers on other nodes (onesided_remote.h).
extern "C" {
#include "util/status.h" /* a C header without its own linkage block: first, before its guard */
}
#include "kernels/abort.cuh"
#include "kernels/onesided_remote.h"
#include "kernels/proxy_done.cuh"

// A failed launch or attribute call, named as the GPU executor names CUDA errors.
static mpccl_status_t cuda_failed(cudaError_t e, const char *what)
{
    return mpccl_fail(MPCCL_ERR_CUDA, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static_assert(sizeof(mpccl_os_msg_hdr_t) == MPCCL_OS_HDR_BYTES, "header size");

#define REMOTE_PUT_THREADS 512

// One CTA: thread 0 reserves the put's piece numbers for the peer, so puts on
// other streams interleave whole pieces, never bytes.  Piece p uses slot
// p % nslots once the proxy acknowledged the send of piece p - nslots (tx_ack
// counts sends completed in order).  The slot lies in pinned host memory: the
// stores cross PCIe, and a system-scope fence puts them (and the header)
// before tx_ready.  W is the widest word src is aligned to; every piece starts
// a multiple of (slot_bytes - header) into src, which keeps that alignment.
template <typename W>
__global__ void __launch_bounds__(REMOTE_PUT_THREADS) mpccl_os_remote_put_kernel(mpccl_os_remote_put_t a)
{
    __shared__ uint32_t base;
    const uint64_t payload = a.slot_bytes - MPCCL_OS_HDR_BYTES;
    const uint32_t n = a.bytes ? (uint32_t)((a.bytes + payload - 1) / payload) : 1u;
    if (threadIdx.x == 0) {
        base = atomicAdd(a.reserve, n);
        mpccl_abort_begin();
    }
    __syncthreads();
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t p = base + i, slot = p % a.nslots;
        if (threadIdx.x == 0) {
            const uint32_t need = p - a.nslots + 1; // sends acknowledged before the slot is free
            mpccl_abort_wait w{};
            for (uint32_t spins = 0; (int32_t)(*a.link.tx_ack - need) < 0;) {
                if (++spins > 1024) __nanosleep(256);
                if (mpccl_abort_poll(a.ab, w,
                                     mpccl_abort_why{MPCCL_ABORT_OP_OS_PUT, (int32_t)a.win_id, a.peer, -1, a.bytes,
                                                     need, a.link.tx_ack}))
                    break;
            }
        }
        __syncthreads();
        if (mpccl_aborted()) break; /* the proxy is told nothing more: the channel is dead */
        const uint64_t off = (uint64_t)i * payload;
        const uint32_t len = (uint32_t)(a.bytes - off < payload ? a.bytes - off : payload);
        char *hdr = a.link.tx_slots + (size_t)slot * a.slot_bytes;
        char *dst = (a.data ? a.data + (size_t)slot * a.slot_bytes : hdr) + MPCCL_OS_HDR_BYTES;
        const char *src = (const char *)a.src + off;
        if (!a.src_win) { /* from a window, UCX reads src itself */
            const uint32_t nw = len / sizeof(W);
            for (uint32_t k = threadIdx.x; k < nw; k += blockDim.x) ((W *)dst)[k] = ((const W *)src)[k];
            for (uint32_t k = nw * sizeof(W) + threadIdx.x; k < len; k += blockDim.x) dst[k] = src[k];
        }
        if (threadIdx.x == 0) {
            mpccl_os_msg_hdr_t *h = (mpccl_os_msg_hdr_t *)hdr;
            h->magic = MPCCL_OS_MSG_MAGIC;
            h->win_id = a.win_id;
            h->offset = a.offset + off;
            h->bytes = len;
            h->sig = i == n - 1 ? a.sig : 0u;
            h->src_win = a.src_win;
            h->src_offset = a.src_offset + off;
        }
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            a.link.tx_len[slot] = MPCCL_OS_HDR_BYTES + len;
            __threadfence_system();
            a.link.tx_ready[slot] = p + 1;
        }
    }
    if (threadIdx.x == 0 && a.data && !mpccl_aborted()) { /* GPU-direct: until the puts left */
        const uint32_t need = base + n;
        mpccl_abort_wait w{};
        for (uint32_t spins = 0; (int32_t)(*a.link.tx_ack - need) < 0;) {
            if (++spins > 1024) __nanosleep(256);
            if (mpccl_abort_poll(a.ab, w,
                                 mpccl_abort_why{MPCCL_ABORT_OP_OS_PUT, (int32_t)a.win_id, a.peer, -1, a.bytes, need,
                                                 a.link.tx_ack}))
                break;
        }
    }
    if (threadIdx.x == 0) mpccl_proxy_launch_done(a.proxy_count, a.proxy_done);
}

extern "C" mpccl_status_t mpccl_os_remote_put_launch(const mpccl_os_remote_put_t *a, cudaStream_t stream)
{
    uintptr_t s = (uintptr_t)a->src;
    if (a->bytes == 0) s = 0;
    if (s % 16 == 0) mpccl_os_remote_put_kernel<uint4><<<1, REMOTE_PUT_THREADS, 0, stream>>>(*a);
    else if (s % 8 == 0) mpccl_os_remote_put_kernel<uint2><<<1, REMOTE_PUT_THREADS, 0, stream>>>(*a);
    else if (s % 4 == 0) mpccl_os_remote_put_kernel<unsigned><<<1, REMOTE_PUT_THREADS, 0, stream>>>(*a);
    else mpccl_os_remote_put_kernel<unsigned char><<<1, REMOTE_PUT_THREADS, 0, stream>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_failed(e, "remote put kernel launch");
    return MPCCL_OK;
}

#define DELIVER_THREADS 256

// A small piece's data is copied here (src: the slot, 16-byte aligned); a
// large one's by the copy before this kernel on the stream (complete before
// it starts).  After the block barrier one fence orders the block's stores
// (cumulative) before the add, as the local put kernel does; the slot is
// acknowledged last, once nothing reads it.
__global__ void __launch_bounds__(DELIVER_THREADS)
    mpccl_os_delivered_kernel(char *dst, const char *src, uint32_t bytes, unsigned long long *sig,
                              volatile uint32_t *ack, uint32_t value)
{
    uint32_t head = 0;
    if (((uintptr_t)dst & 15) == 0) {
        const uint32_t nw = bytes / 16;
        for (uint32_t k = threadIdx.x; k < nw; k += blockDim.x) ((uint4 *)dst)[k] = ((const uint4 *)src)[k];
        head = nw * 16;
    }
    for (uint32_t k = head + threadIdx.x; k < bytes; k += blockDim.x) dst[k] = src[k];
    __syncthreads();
    if (threadIdx.x != 0) return;
    __threadfence_system();
    if (sig) atomicAdd(sig, 1ULL);
    __threadfence_system();
    *ack = value;
}

extern "C" mpccl_status_t mpccl_os_delivered_launch(void *dst, const void *src, uint32_t bytes, uint64_t *sig,
                                                    volatile uint32_t *ack, uint32_t value, cudaStream_t stream)
{
    if (bytes > MPCCL_OS_DELIVER_KERNEL_BYTES)
        return cuda_failed(cudaErrorInvalidValue, "delivery kernel (a piece above the in-kernel copy limit)");
    mpccl_os_delivered_kernel<<<1, bytes ? DELIVER_THREADS : 32, 0, stream>>>(
        (char *)dst, (const char *)src, bytes, (unsigned long long *)sig, ack, value);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_failed(e, "delivery kernel launch");
    return MPCCL_OK;
}

extern "C" mpccl_status_t mpccl_os_remote_preload(void)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, mpccl_os_delivered_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, mpccl_os_remote_put_kernel<uint4>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, mpccl_os_remote_put_kernel<uint2>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, mpccl_os_remote_put_kernel<unsigned>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, mpccl_os_remote_put_kernel<unsigned char>);
    if (e != cudaSuccess) return cuda_failed(e, "loading the one-sided kernels");
    return MPCCL_OK;
}
