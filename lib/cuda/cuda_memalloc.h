/* ncclMemAlloc / ncclMemFree's allocator (cuda_memalloc.c); the entry points
 * and their argument checks are api/api_memalloc.c's. */
#ifndef MPCCL_CUDA_MEMALLOC_H
#define MPCCL_CUDA_MEMALLOC_H

#include <stddef.h>

#include "util/status.h"

/* size > 0 bytes on the current device; *ptr its address. */
mpccl_status_t mpccl_gpu_mem_alloc(void **ptr, size_t size);
/* ptr: returned by mpccl_gpu_mem_alloc and not freed yet (else MPCCL_ERR_ARG). */
mpccl_status_t mpccl_gpu_mem_free(void *ptr);

#endif
