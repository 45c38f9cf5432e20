/* The proxy's memory for a GPU communicator (gpu_proxy_mem.c): pinned host
 * staging, and with GPU-direct the CTAs' slots in device memory.  Only built
 * with CUDA. */
#ifndef MPCCL_GPU_PROXY_MEM_H
#define MPCCL_GPU_PROXY_MEM_H

#include "core/comm.h"
#include "proxy/proxy.h"

/* How device dev's pieces will go to other nodes, decided once when a GPU
 * communicator spanning nodes is set up (mpccl_gpu_comm_create's geometry
 * and the proxy's memory follow it): MPCCL_GPU_NET_DIRECT where the CTAs'
 * slots are device memory that UCX moves itself (MPCCL_GPU_DIRECT,
 * doc/GPU_DESIGN.md), with MPCCL_GPU_NET_FLUSH where the device does not
 * order a NIC's writes; else staged, with MPCCL_GPU_NET_EAGER where no UCX
 * network device reads GPU memory (a network like TCP, whose rendezvous is
 * dear: devplan.h, eager pieces).  why (len bytes) says why, for the INFO
 * line naming the path. */
int mpccl_gpu_proxy_net(int dev, char *why, size_t len);

/* Fills a for comm's proxy (device comm->cuda_dev) as net says
 * (mpccl_gpu_proxy_net; 0 on one node): always the pinned staging, the
 * device slots too with MPCCL_GPU_NET_DIRECT. */
void mpccl_gpu_proxy_memory(ncclComm_t comm, int net, mpccl_proxy_alloc_t *a);

#endif
