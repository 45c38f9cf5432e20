/* The proxy's memory for a GPU communicator (gpu_proxy_mem.h): pinned host
 * staging, and with GPU-direct the CTAs' slots in device memory, which UCX
 * sends from and receives into itself (doc/GPU_DESIGN.md, GPU-direct). */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu/gpu_comm.h"
#include "cuda/cuda_rt.h"
#include "gpu/gpu_proxy_mem.h"
#include "ucx/ucx.h"
#include "util/log.h"

/* ---- pinned host memory for the proxy's staging ---- */

static mpccl_status_t pinned_alloc(void *ctx, size_t bytes, void **host, void **dev)
{
    (void)ctx;
    MPCCL_CUDA_CHECK(cudaHostAlloc(host, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable));
    memset(*host, 0, bytes);
    cudaError_t e = cudaHostGetDevicePointer(dev, *host, 0);
    if (e != cudaSuccess) {
        cudaFreeHost(*host);
        return mpccl_cuda_error(e, "cudaHostGetDevicePointer(proxy staging)");
    }
    return MPCCL_OK;
}

static void pinned_free(void *ctx, void *host)
{
    (void)ctx;
    cudaFreeHost(host);
}

/* ---- GPU-direct: the CTAs' slots in device memory, moved by UCX itself ---- */

/* ctx of the device-slot callbacks: the device number, plus one. */
static int ctx_device(void *ctx) { return (int)(intptr_t)ctx - 1; }

/* On the attaching thread, before any launch of the communicator; the proxy
 * then opens them as a UCX region there too (ucx_region.c). */
static mpccl_status_t device_slots_alloc(void *ctx, size_t bytes, void **dev)
{
    (void)ctx; /* the attaching thread has the device current */
    MPCCL_CUDA_CHECK(cudaMalloc(dev, bytes));
    return MPCCL_OK;
}

static void device_slots_free(void *ctx, void *dev)
{
    (void)ctx;
    cudaFree(dev);
}

/* The proxy thread drives UCX, which copies device memory on its own streams:
 * the device must be current there, and a user thread capturing a graph in
 * global mode must not make those calls illegal.  Makes CUDA calls only the
 * first time for a device (the proxy's first pass after the attach). */
static void device_bind(void *ctx)
{
    static __thread int bound = -1;
    int dev = ctx_device(ctx);
    if (bound == dev) return;
    enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&m);
    if (cudaSetDevice(dev) == cudaSuccess) bound = dev;
}

/* Writes a NIC made into device memory reach the kernel in order only where
 * the device orders them for its own accesses; elsewhere they are flushed
 * before the proxy raises rx_word (a CUDA call on the proxy thread per pass
 * with arrivals: only on such devices). */
static void device_flush(void *ctx)
{
    (void)ctx;
    (void)cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                             cudaFlushGPUDirectRDMAWritesToOwner);
}

/* Whether the CTAs' slots go to device memory; why, either way (into why,
 * len bytes). */
static int choose_direct(int dev, int *ordered, char *why, size_t len)
{
    int mode = mpccl_ucx_gpu_direct_setting();
    const char *said = NULL;
    if (mode == MPCCL_GPU_DIRECT_OFF) said = "MPCCL_GPU_DIRECT=0";
    else if (!mpccl_ucx_supports_cuda())
        said = mode == MPCCL_GPU_DIRECT_ON ? "MPCCL_GPU_DIRECT=1, but this UCX reports no CUDA memory support"
                                           : "MPCCL_GPU_DIRECT=auto, and this UCX reports no CUDA memory support";
    if (said) return snprintf(why, len, "%s", said), 0;
    int ordering = 0, flush_options = 0;
    (void)cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, dev);
    (void)cudaDeviceGetAttribute(&flush_options, cudaDevAttrGPUDirectRDMAFlushWritesOptions, dev);
    *ordered = ordering >= cudaGPUDirectRDMAWritesOrderingOwner;
    if (!*ordered && !(flush_options & cudaFlushGPUDirectRDMAWritesOptionHost)) {
        (void)cudaGetLastError();
        return snprintf(why, len, "the device neither orders nor flushes a NIC's writes"), 0;
    }
    if (mode == MPCCL_GPU_DIRECT_ON) {
        snprintf(why, len, "%s", *ordered ? "MPCCL_GPU_DIRECT=1, UCX reports CUDA memory, the device orders a "
                                            "NIC's writes"
                                          : "MPCCL_GPU_DIRECT=1, UCX reports CUDA memory, a NIC's writes are "
                                            "flushed before each hand-over");
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            MPCCL_INFO(MPCCL_SUB_NET, "MPCCL_GPU_DIRECT=1: with UCX's cuda_copy or cuda_ipc transports, a kernel "
                       "the application loads lazily while a collective between nodes waits can stall it; "
                       "CUDA_MODULE_LOADING=EAGER avoids that (doc/GPU_DESIGN.md, GPU-direct)");
        return 1;
    }
    /* Without a NIC that reaches GPU memory, UCX would move it with its
     * cuda_copy transport: CUDA copies on the proxy thread, which can wait
     * behind the application's own work (doc/GPU_DESIGN.md). */
    const char *nic = mpccl_ucx_gdr_nic();
    if (!nic)
        return snprintf(why, len, "MPCCL_GPU_DIRECT=auto: UCX reports CUDA memory, but no network device that "
                        "reads GPU memory itself (GPUDirect RDMA); host staging"), 0;
    snprintf(why, len, "MPCCL_GPU_DIRECT=auto: UCX's %s reads GPU memory (GPUDirect RDMA), %s", nic,
             *ordered ? "the device orders its writes" : "its writes are flushed before each hand-over");
    return 1;
}

int mpccl_gpu_proxy_net(int dev, char *why, size_t len)
{
    int ordered = 0;
    if (choose_direct(dev, &ordered, why, len)) return MPCCL_GPU_NET_DIRECT | (ordered ? 0 : MPCCL_GPU_NET_FLUSH);
    return mpccl_ucx_gdr_nic() == NULL ? MPCCL_GPU_NET_EAGER : 0;
}

void mpccl_gpu_proxy_memory(ncclComm_t comm, int net, mpccl_proxy_alloc_t *a)
{
    memset(a, 0, sizeof(*a));
    a->alloc = pinned_alloc;
    a->free = pinned_free;
    if (!(net & MPCCL_GPU_NET_DIRECT)) return;
    a->alloc_slots = device_slots_alloc;
    a->free_slots = device_slots_free;
    a->slots_kind = MPCCL_REGION_DEVICE;
    a->bind = device_bind;
    a->flush = net & MPCCL_GPU_NET_FLUSH ? device_flush : NULL;
    a->ctx = (void *)(intptr_t)(comm->cuda_dev + 1);
}
#endif
