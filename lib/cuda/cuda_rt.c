/* CUDA runtime helpers: error conversion, device binding, driver entry points
 * and the memory kind of user pointers (see cuda_rt.h). */
#include "cuda/cuda_rt.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"

mpccl_status_t mpccl_cuda_error(cudaError_t e, const char *what)
{
    return mpccl_fail(MPCCL_ERR_CUDA, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

mpccl_status_t mpccl_cu_error(CUresult r, const char *what)
{
    const char *name = NULL, *msg = NULL;
    const mpccl_cu_fns_t *cu = NULL;
    /* The table is complete whenever a driver call could have failed. */
    if (mpccl_cu_get(&cu) == MPCCL_OK) {
        cu->cuGetErrorName(r, &name);
        cu->cuGetErrorString(r, &msg);
    }
    return mpccl_fail(MPCCL_ERR_CUDA, "%s: %s (%d): %s", what, name ? name : "CUDA driver error", (int)r,
                      msg ? msg : "no description");
}

int mpccl_cuda_current_device(void)
{
    int n = 0, dev = -1;
    /* A toolkit without a driver answers here with an error; that is the
     * ordinary "no GPU" case, so it is neither logged nor recorded. */
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        return -1;
    }
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return dev;
}

mpccl_status_t mpccl_cuda_push_device(int dev, int *saved)
{
    MPCCL_CUDA_CHECK(cudaGetDevice(saved));
    if (*saved != dev) MPCCL_CUDA_CHECK(cudaSetDevice(dev));
    return MPCCL_OK;
}

void mpccl_cuda_restore_device(int saved)
{
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != saved) (void)cudaSetDevice(saved);
}

/* ---- driver entry points ------------------------------------------------------ */

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static mpccl_cu_fns_t cu_fns;
static const char *cu_missing; /* first symbol the driver did not provide */
static cudaError_t cu_missing_err;

static void cu_resolve_one(const char *sym, void **slot)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    /* Pinning the ABI version keeps the function types equal to the PFN_*_v*
     * typedefs above, whatever driver runs underneath. */
    cudaError_t e = cudaGetDriverEntryPointByVersion(sym, slot, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || *slot == NULL) {
        *slot = NULL;
        if (cu_missing == NULL) {
            cu_missing = sym;
            cu_missing_err = e;
        }
        (void)cudaGetLastError();
    }
}

static void cu_resolve(void)
{
#define RESOLVE(name) cu_resolve_one(#name, (void **)&cu_fns.name)
    RESOLVE(cuGetErrorString);
    RESOLVE(cuGetErrorName);
    RESOLVE(cuPointerGetAttributes);
    RESOLVE(cuDeviceGet);
    RESOLVE(cuDeviceGetAttribute);
    RESOLVE(cuMemCreate);
    RESOLVE(cuMemExportToShareableHandle);
    RESOLVE(cuMemImportFromShareableHandle);
    RESOLVE(cuMemMap);
    RESOLVE(cuMemSetAccess);
    RESOLVE(cuMemAddressReserve);
    RESOLVE(cuMemGetAllocationGranularity);
    RESOLVE(cuMemRelease);
    RESOLVE(cuMemUnmap);
    RESOLVE(cuMemAddressFree);
    RESOLVE(cuMemRetainAllocationHandle);
    RESOLVE(cuMemGetAddressRange);
#undef RESOLVE
}

mpccl_status_t mpccl_cu_get(const mpccl_cu_fns_t **out)
{
    pthread_once(&cu_once, cu_resolve);
    if (cu_missing != NULL)
        return mpccl_fail(MPCCL_ERR_CUDA, "CUDA driver entry point %s is not available (%s): the driver is "
                          "missing or older than CUDA 12.0", cu_missing,
                          cu_missing_err != cudaSuccess ? cudaGetErrorString(cu_missing_err) : "symbol not found");
    *out = &cu_fns;
    return MPCCL_OK;
}

/* ---- memory kinds ----------------------------------------------------------------- */

const char *mpccl_mem_kind_name(int kind)
{
    switch (kind) {
    case MPCCL_MEM_DEVICE: return "device memory";
    case MPCCL_MEM_MANAGED: return "managed memory";
    case MPCCL_MEM_HOST_PINNED: return "pinned host memory";
    case MPCCL_MEM_HOST_PAGEABLE: return "pageable host memory";
    case MPCCL_MEM_OTHER_DEVICE: return "memory of another device";
    }
    return "unknown memory";
}

/* What the driver says about one allocation, independent of the communicator. */
typedef struct {
    uintptr_t base;
    size_t size;
    unsigned long long id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID: unique for the process lifetime */
    unsigned int memtype;  /* CUmemorytype, 0 when the driver does not know p */
    unsigned int managed;
    int ordinal;
} alloc_info_t;

/* A handful of buffers is what applications pass again and again; a short
 * array with round-robin replacement covers that without a hash table. */
#define MEM_CACHE_SIZE 64
static pthread_mutex_t mem_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static alloc_info_t mem_cache[MEM_CACHE_SIZE];
static unsigned mem_cache_next;

static mpccl_status_t query_alloc(const void *p, alloc_info_t *info)
{
    const mpccl_cu_fns_t *cu;
    MPCCL_CHECK(mpccl_cu_get(&cu));
    memset(info, 0, sizeof(*info));

    /* Short query first: the allocation's base and id find a cached entry;
     * a freed and reallocated range gets a new id, so a stale entry never
     * matches. */
    CUdeviceptr base = 0;
    CUpointer_attribute a2[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_BUFFER_ID};
    void *d2[2] = {&base, &info->id};
    CUresult r = cu->cuPointerGetAttributes(2, a2, d2, (CUdeviceptr)(uintptr_t)p);
    if (r == CUDA_ERROR_INVALID_CONTEXT) {
        /* A thread that never touched CUDA has no context yet: bind the
         * current device's primary context and ask again. */
        (void)cudaFree(NULL);
        r = cu->cuPointerGetAttributes(2, a2, d2, (CUdeviceptr)(uintptr_t)p);
    }
    if (r != CUDA_SUCCESS) {
        /* Some kinds of memory may not answer the range query; classify them
         * without the cache. */
        CUpointer_attribute a3[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                     CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
        void *d3[3] = {&info->memtype, &info->managed, &info->ordinal};
        memset(info, 0, sizeof(*info));
        info->ordinal = -1;
        r = cu->cuPointerGetAttributes(3, a3, d3, (CUdeviceptr)(uintptr_t)p);
        if (r != CUDA_SUCCESS) return mpccl_cu_error(r, "cuPointerGetAttributes");
        info->id = info->memtype ? ~0ull : 0; /* known to CUDA, but not cacheable */
        return MPCCL_OK;
    }
    if (info->id == 0) return MPCCL_OK; /* not known to CUDA: pageable */
    info->base = (uintptr_t)base;

    pthread_mutex_lock(&mem_cache_mu);
    for (int i = 0; i < MEM_CACHE_SIZE; i++) {
        if (mem_cache[i].id == info->id && mem_cache[i].base == info->base) {
            *info = mem_cache[i];
            pthread_mutex_unlock(&mem_cache_mu);
            return MPCCL_OK;
        }
    }
    pthread_mutex_unlock(&mem_cache_mu);

    size_t size = 0;
    CUpointer_attribute a4[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *d4[4] = {&info->memtype, &info->managed, &info->ordinal, &size};
    info->ordinal = -1;
    r = cu->cuPointerGetAttributes(4, a4, d4, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS) return mpccl_cu_error(r, "cuPointerGetAttributes");
    info->size = size;

    pthread_mutex_lock(&mem_cache_mu);
    mem_cache[mem_cache_next++ % MEM_CACHE_SIZE] = *info;
    pthread_mutex_unlock(&mem_cache_mu);
    return MPCCL_OK;
}

static int classify(const alloc_info_t *info, int comm_dev)
{
    if (info->id == 0 || info->memtype == 0) return MPCCL_MEM_HOST_PAGEABLE;
    if (info->managed) return MPCCL_MEM_MANAGED;
    if (info->memtype == CU_MEMORYTYPE_HOST) return MPCCL_MEM_HOST_PINNED;
    return info->ordinal == comm_dev ? MPCCL_MEM_DEVICE : MPCCL_MEM_OTHER_DEVICE;
}

mpccl_status_t mpccl_mem_kind_dev(const void *p, int comm_dev, int *kind, int *dev_out)
{
    alloc_info_t info;
    MPCCL_CHECK(query_alloc(p, &info));
    *kind = classify(&info, comm_dev);
    if (dev_out)
        *dev_out = (*kind == MPCCL_MEM_DEVICE || *kind == MPCCL_MEM_OTHER_DEVICE) ? info.ordinal : -1;
    return MPCCL_OK;
}

mpccl_status_t mpccl_mem_kind(const void *p, int comm_dev, int *kind)
{
    return mpccl_mem_kind_dev(p, comm_dev, kind, NULL);
}

int mpccl_mem_device_range(const void *p, uint64_t *base, uint64_t *size, uint64_t *id)
{
    alloc_info_t info;
    if (query_alloc(p, &info) != MPCCL_OK) {
        (void)cudaGetLastError();
        return 0;
    }
    if (info.managed || info.memtype != CU_MEMORYTYPE_DEVICE || info.size == 0 || info.id == 0 || info.id == ~0ull)
        return 0;
    *base = (uint64_t)info.base;
    *size = (uint64_t)info.size;
    *id = (uint64_t)info.id;
    return 1;
}

mpccl_status_t mpccl_check_gpu_buffer(const char *fn, const char *arg, const void *p, size_t bytes,
                                      int comm_dev)
{
    if (bytes == 0) return MPCCL_OK;
    if (p == NULL)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: %s is NULL but %zu bytes are to be accessed", fn, arg, bytes);
    alloc_info_t info;
    MPCCL_CHECK(query_alloc(p, &info));
    int kind = classify(&info, comm_dev);
    switch (kind) {
    case MPCCL_MEM_HOST_PAGEABLE:
        return mpccl_fail(MPCCL_ERR_ARG, "%s: %s %p is pageable host memory; a GPU communicator needs device, "
                          "managed or pinned host memory", fn, arg, p);
    case MPCCL_MEM_OTHER_DEVICE:
        return mpccl_fail(MPCCL_ERR_ARG, "%s: %s %p belongs to device %d, the communicator uses device %d", fn,
                          arg, p, info.ordinal, comm_dev);
    default: break;
    }
    /* A buffer that runs past its allocation would fault inside the kernel,
     * far from the call that caused it. */
    uintptr_t a = (uintptr_t)p;
    if (info.size != 0 && (a - info.base > info.size || bytes > info.size - (a - info.base)))
        return mpccl_fail(MPCCL_ERR_ARG, "%s: %s %p with %zu bytes runs past the end of its allocation "
                          "(%s at 0x%" PRIxPTR ", %zu bytes)", fn, arg, p, bytes, mpccl_mem_kind_name(kind),
                          info.base, info.size);
    return MPCCL_OK;
}
