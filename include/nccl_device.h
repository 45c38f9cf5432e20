/* mpccl's NCCL device API (NCCL 2.29's nccl_device.h): device communicators,
 * teams, window pointers, cooperative groups and the LSA barrier, for CUDA
 * kernels that load and store the memory of the GPUs of their node directly
 * (doc/DEVICE_API.md).  Compile kernels against this header and link
 * libmpccl: the device structures are mpccl's own.  GIN and NVLink multicast
 * are declared but not available (see gin.h). */
#ifndef MPCCL_NCCL_DEVICE_H
#define MPCCL_NCCL_DEVICE_H

#include "nccl.h"
#include "nccl_device/core.h"
#include "nccl_device/coop.h"
#include "nccl_device/lsa_barrier.h"
#include "nccl_device/gin.h"

#endif
