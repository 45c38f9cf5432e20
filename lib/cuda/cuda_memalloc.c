/* ncclMemAlloc / ncclMemFree: device memory that communicators and other
 * devices can use directly, as NCCL defines it.  A cuMem (VMM) allocation on the
 * current device, rounded up to the recommended granularity, exportable as a
 * POSIX file descriptor where the device supports it, mapped read-write for
 * the current device and every device with peer access to it.  Devices without
 * VMM get cudaMalloc memory, as NCCL does.  Without CUDA both calls report that
 * the library was built without it (api/api_memalloc.c, the entry points). */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include "cuda/cuda_rt.h"
#include "cuda/cuda_memalloc.h"
#include "util/log.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

/* Live allocations: ncclMemFree must tell ours from any other pointer, and
 * needs the mapped size, which the pointer alone does not give. */
typedef struct mem_block {
    struct mem_block *next;
    void *ptr;
    size_t size; /* mapped bytes (rounded) */
    int vmm;     /* 0: cudaMalloc fallback */
} mem_block_t;

static pthread_mutex_t blocks_mu = PTHREAD_MUTEX_INITIALIZER;
static mem_block_t *blocks;

static int dev_attr(const mpccl_cu_fns_t *cu, CUdevice d, CUdevice_attribute a)
{
    int v = 0;
    return cu->cuDeviceGetAttribute(&v, a, d) == CUDA_SUCCESS ? v : 0;
}

/* Maps a fresh VMM allocation of `size` (already rounded) for dev and its peers. */
static mpccl_status_t vmm_alloc(const mpccl_cu_fns_t *cu, int dev, size_t size, size_t gran,
                                const CUmemAllocationProp *prop_in, void **out)
{
    CUmemAllocationProp prop = *prop_in;
    CUmemGenericAllocationHandle h;
    CUresult r = cu->cuMemCreate(&h, size, &prop, 0);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && prop.requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
        /* Exportable memory can be refused (e.g. inside some containers);
         * memory that cannot be shared is still memory. */
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclMemAlloc: device %d refused a POSIX-fd exportable allocation (%d); "
                   "allocating without a shareable handle", dev, (int)r);
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        r = cu->cuMemCreate(&h, size, &prop, 0);
    }
    if (r != CUDA_SUCCESS) return mpccl_cu_error(r, "ncclMemAlloc: cuMemCreate");
    CUdeviceptr addr = 0;
    mpccl_status_t st = MPCCL_OK;
    r = cu->cuMemAddressReserve(&addr, size, gran, 0, 0);
    if (r != CUDA_SUCCESS) {
        st = mpccl_cu_error(r, "ncclMemAlloc: cuMemAddressReserve");
        goto release;
    }
    r = cu->cuMemMap(addr, size, 0, h, 0);
    if (r != CUDA_SUCCESS) {
        st = mpccl_cu_error(r, "ncclMemAlloc: cuMemMap");
        goto unreserve;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 1;
    CUmemAccessDesc *acc = calloc((size_t)ndev, sizeof(*acc));
    if (acc == NULL) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "ncclMemAlloc: out of memory");
        goto unmap;
    }
    int nacc = 0;
    for (int d = 0; d < ndev; d++) {
        int can = d == dev;
        if (!can && cudaDeviceCanAccessPeer(&can, d, dev) != cudaSuccess) can = 0;
        if (!can) continue;
        acc[nacc].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc[nacc].location.id = d;
        acc[nacc].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        nacc++;
    }
    r = cu->cuMemSetAccess(addr, size, acc, (size_t)nacc);
    free(acc);
    if (r != CUDA_SUCCESS) {
        st = mpccl_cu_error(r, "ncclMemAlloc: cuMemSetAccess");
        goto unmap;
    }
    /* The mapping keeps the memory alive; unmapping it in ncclMemFree is then
     * all it takes to give it back. */
    cu->cuMemRelease(h);
    *out = (void *)(uintptr_t)addr;
    return MPCCL_OK;
unmap:
    cu->cuMemUnmap(addr, size);
unreserve:
    cu->cuMemAddressFree(addr, size);
release:
    cu->cuMemRelease(h);
    return st;
}

mpccl_status_t mpccl_gpu_mem_alloc(void **ptr, size_t size)
{
    int dev;
    MPCCL_CUDA_CHECK(cudaGetDevice(&dev));
    MPCCL_CUDA_CHECK(cudaFree(NULL)); /* the device's primary context, for the driver calls */
    const mpccl_cu_fns_t *cu;
    MPCCL_CHECK(mpccl_cu_get(&cu));
    CUdevice cudev;
    CUresult r = cu->cuDeviceGet(&cudev, dev);
    if (r != CUDA_SUCCESS) return mpccl_cu_error(r, "ncclMemAlloc: cuDeviceGet");

    mem_block_t *b = calloc(1, sizeof(*b));
    if (b == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclMemAlloc: out of memory");
    mpccl_status_t st;
    if (dev_attr(cu, cudev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)) {
        CUmemAllocationProp prop = {0};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        prop.requestedHandleTypes =
            dev_attr(cu, cudev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)
                ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                : CU_MEM_HANDLE_TYPE_NONE;
        /* So that network adapters can register it (GPUDirect RDMA). */
        if (dev_attr(cu, cudev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED))
            prop.allocFlags.gpuDirectRDMACapable = 1;
        size_t gran = 0;
        r = cu->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
        if (r != CUDA_SUCCESS || gran == 0) {
            free(b);
            return mpccl_cu_error(r, "ncclMemAlloc: cuMemGetAllocationGranularity");
        }
        if (size > SIZE_MAX - gran) {
            free(b);
            return mpccl_fail(MPCCL_ERR_ARG, "ncclMemAlloc: size %zu is too large", size);
        }
        b->size = (size + gran - 1) / gran * gran;
        b->vmm = 1;
        st = vmm_alloc(cu, dev, b->size, gran, &prop, &b->ptr);
    } else {
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclMemAlloc: device %d has no virtual memory management; using cudaMalloc",
                   dev);
        b->size = size;
        cudaError_t ce = cudaMalloc(&b->ptr, size);
        st = ce == cudaSuccess ? MPCCL_OK : mpccl_cuda_error(ce, "ncclMemAlloc: cudaMalloc");
    }
    if (st != MPCCL_OK) {
        free(b);
        return st;
    }
    pthread_mutex_lock(&blocks_mu);
    b->next = blocks;
    blocks = b;
    pthread_mutex_unlock(&blocks_mu);
    *ptr = b->ptr;
    MPCCL_TRACE(MPCCL_SUB_INIT, "ncclMemAlloc: %zu bytes (%zu mapped, %s) at %p on device %d", size, b->size,
                b->vmm ? "cuMem" : "cudaMalloc", b->ptr, dev);
    return MPCCL_OK;
}

mpccl_status_t mpccl_gpu_mem_free(void *ptr)
{
    pthread_mutex_lock(&blocks_mu);
    mem_block_t **pp = &blocks;
    while (*pp && (*pp)->ptr != ptr) pp = &(*pp)->next;
    mem_block_t *b = *pp;
    if (b) *pp = b->next;
    pthread_mutex_unlock(&blocks_mu);
    if (b == NULL)
        return mpccl_fail(MPCCL_ERR_ARG, "ncclMemFree: %p was not returned by ncclMemAlloc, or was freed "
                          "already", ptr);
    mpccl_status_t st = MPCCL_OK;
    if (b->vmm) {
        const mpccl_cu_fns_t *cu;
        st = mpccl_cu_get(&cu);
        if (st == MPCCL_OK) {
            CUdeviceptr a = (CUdeviceptr)(uintptr_t)b->ptr;
            CUresult r = cu->cuMemUnmap(a, b->size);
            if (r == CUDA_SUCCESS) r = cu->cuMemAddressFree(a, b->size);
            if (r != CUDA_SUCCESS) st = mpccl_cu_error(r, "ncclMemFree: cuMemUnmap/cuMemAddressFree");
        }
    } else {
        cudaError_t ce = cudaFree(b->ptr);
        if (ce != cudaSuccess) st = mpccl_cuda_error(ce, "ncclMemFree: cudaFree");
    }
    free(b);
    return st;
}

#endif
