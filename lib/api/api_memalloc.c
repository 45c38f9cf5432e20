/* ncclMemAlloc / ncclMemFree: the arguments, then the GPU executor's
 * allocator (gpu/cuda_memalloc.c).  Without CUDA both calls report that the
 * library was built without it. */
#include "build_config.h"
#include "api/api.h"

#ifdef MPCCL_HAVE_CUDA
#include "cuda/cuda_memalloc.h"

MPCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size)
{
    if (ptr == NULL || size == 0)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG, "ncclMemAlloc: %s", ptr == NULL ? "argument ptr is NULL"
                                                                                    : "size is 0"));
    return mpccl_result(mpccl_gpu_mem_alloc(ptr, size));
}

MPCCL_API(ncclResult_t, ncclMemFree, void *ptr)
{
    if (ptr == NULL) return ncclSuccess; /* like free(NULL) and NCCL */
    return mpccl_result(mpccl_gpu_mem_free(ptr));
}

#else /* no CUDA */

#define MPCCL_NO_CUDA "this libmpccl was built without CUDA"

MPCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size)
{
    (void)ptr;
    (void)size;
    return mpccl_api_unsupported("ncclMemAlloc", MPCCL_NO_CUDA);
}

MPCCL_API(ncclResult_t, ncclMemFree, void *ptr)
{
    (void)ptr;
    return mpccl_api_unsupported("ncclMemFree", MPCCL_NO_CUDA);
}

#endif
