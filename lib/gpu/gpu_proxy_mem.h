/* The proxy's memory for a GPU communicator (gpu_proxy_mem.c): pinned host
 * staging, and with GPU-direct the CTAs' slots in device memory.  Only built
 * with CUDA. */
#ifndef MPCCL_GPU_PROXY_MEM_H
#define MPCCL_GPU_PROXY_MEM_H

#include "core/comm.h"
#include "gpu/gpu_proxy.h"

/* Fills a for comm's proxy (device comm->cuda_dev, current on the caller):
 * always the pinned staging; the device slots too when GPU-direct is chosen
 * (MPCCL_GPU_DIRECT, doc/GPU_DESIGN.md).  Returns 1 with GPU-direct, 0 with
 * staging; *why says why (for the INFO line naming the path). */
int mpccl_gpu_proxy_memory(ncclComm_t comm, mpccl_proxy_alloc_t *a, const char **why);

/* Whether mpccl_gpu_proxy_memory will choose GPU-direct on device dev (the
 * same decision, taken before the communicator's geometry is agreed). */
int mpccl_gpu_proxy_direct_planned(int dev);

/* How device dev's pieces will go to other nodes, for mpccl_gpu_comm_create:
 * MPCCL_GPU_NET_DIRECT (above), else staged, with MPCCL_GPU_NET_EAGER where no
 * UCX network device reads GPU memory: a network like TCP, whose rendezvous
 * is dear (devplan.h, eager pieces). */
int mpccl_gpu_proxy_net(int dev);

#endif
