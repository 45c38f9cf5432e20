/* CUDA runtime helpers of the GPU executor: error conversion, the current
 * device, driver entry points (fetched through the runtime, never linked: the
 * library must load where no driver is installed) and the memory kind of a user
 * pointer.  Only built with MPCCL_HAVE_CUDA. */
#ifndef MPCCL_CUDA_RT_H
#define MPCCL_CUDA_RT_H

#if __has_include("build_config.h")
#include "build_config.h" /* MPCCL_HAVE_CUDA */
#endif

#ifdef MPCCL_HAVE_CUDA

#include <stddef.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "util/status.h"

/* MPCCL_ERR_CUDA with "WHAT: <cuda error name>: <cuda message>". */
mpccl_status_t mpccl_cuda_error(cudaError_t e, const char *what);
/* The same for a driver call. */
mpccl_status_t mpccl_cu_error(CUresult r, const char *what);

#define MPCCL_CUDA_CHECK(call)                                                \
    do {                                                                      \
        cudaError_t mpccl_ce_ = (call);                                       \
        if (mpccl_ce_ != cudaSuccess) return mpccl_cuda_error(mpccl_ce_, #call); \
    } while (0)

/* The calling thread's current device, or -1 when there is no usable device
 * (no driver, or no GPU).  Prints nothing and records no error in that case. */
int mpccl_cuda_current_device(void);

/* Makes dev current for the calling thread; *saved receives the previous
 * device so that mpccl_cuda_restore_device can put it back. */
mpccl_status_t mpccl_cuda_push_device(int dev, int *saved);
void mpccl_cuda_restore_device(int saved);

/* Driver functions, resolved once (ABI of CUDA 12.0). */
typedef struct mpccl_cu_fns {
    PFN_cuGetErrorString_v6000 cuGetErrorString;
    PFN_cuGetErrorName_v6000 cuGetErrorName;
    PFN_cuPointerGetAttributes_v7000 cuPointerGetAttributes;
    PFN_cuDeviceGet_v2000 cuDeviceGet;
    PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute;
    PFN_cuMemCreate_v10020 cuMemCreate;
    PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle;
    PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle;
    PFN_cuMemMap_v10020 cuMemMap;
    PFN_cuMemSetAccess_v10020 cuMemSetAccess;
    PFN_cuMemAddressReserve_v10020 cuMemAddressReserve;
    PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity;
    PFN_cuMemRelease_v10020 cuMemRelease;
    PFN_cuMemUnmap_v10020 cuMemUnmap;
    PFN_cuMemAddressFree_v10020 cuMemAddressFree;
    PFN_cuMemRetainAllocationHandle_v11000 cuMemRetainAllocationHandle;
    PFN_cuMemGetAddressRange_v3020 cuMemGetAddressRange;
} mpccl_cu_fns_t;

/* The table, resolved at first use; MPCCL_ERR_CUDA naming the missing symbol
 * when the driver lacks one. */
mpccl_status_t mpccl_cu_get(const mpccl_cu_fns_t **out);

/* Memory kinds of a user pointer, as seen from a communicator's device. */
enum {
    MPCCL_MEM_DEVICE = 0,     /* device memory of the communicator's device */
    MPCCL_MEM_MANAGED,        /* cudaMallocManaged */
    MPCCL_MEM_HOST_PINNED,    /* cudaHostAlloc / cudaMallocHost / cudaHostRegister */
    MPCCL_MEM_HOST_PAGEABLE,  /* plain host memory (malloc, stack, mmap) */
    MPCCL_MEM_OTHER_DEVICE    /* device memory of another GPU */
};
const char *mpccl_mem_kind_name(int kind);

/* Classifies p (cached per allocation; a freed and reused address is detected
 * through the allocation's buffer id).  *dev_out (may be NULL) receives the
 * owning device ordinal for DEVICE / OTHER_DEVICE, else -1. */
mpccl_status_t mpccl_mem_kind(const void *p, int comm_dev, int *kind);
mpccl_status_t mpccl_mem_kind_dev(const void *p, int comm_dev, int *kind, int *dev_out);
/* 1 when p is device memory (not managed), with the allocation holding it
 * (base, size) and its buffer id, from the same cache; 0 otherwise. */
int mpccl_mem_device_range(const void *p, uint64_t *base, uint64_t *size, uint64_t *id);

/* MPCCL_ERR_ARG unless [p, p+bytes) is memory the communicator's device can use
 * (its device memory, managed, or pinned host memory, within one allocation).
 * fn and arg name the call and the argument in the message.  bytes == 0 accepts
 * anything (NCCL allows NULL buffers for empty calls). */
mpccl_status_t mpccl_check_gpu_buffer(const char *fn, const char *arg, const void *p, size_t bytes,
                                      int comm_dev);

#endif /* MPCCL_HAVE_CUDA */
#endif
