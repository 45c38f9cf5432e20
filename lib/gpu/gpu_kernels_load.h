/* Loads all of mpccl's kernels into a device's context before a communicator
 * on it launches anything (gpu_kernels_load.c says why). */
#ifndef MPCCL_GPU_KERNELS_LOAD_H
#define MPCCL_GPU_KERNELS_LOAD_H

#include "util/status.h"

/* Once per device and process; the caller has made cuda_dev current. */
mpccl_status_t mpccl_gpu_kernels_load(int cuda_dev);

#endif
