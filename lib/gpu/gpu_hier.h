/* Hierarchical collectives of a GPU communicator spanning nodes (its node and
 * rail children, core/comm_hier.h): phases inside the node on the flat
 * kernels around a phase between nodes, on two private streams, pipelined
 * by chunks.  Only built with CUDA. */
#ifndef MPCCL_GPU_HIER_H
#define MPCCL_GPU_HIER_H

#include "core/comm.h"
#include "core/group.h"

typedef struct mpccl_gpu_hier mpccl_gpu_hier_t;

/* Streams and events for comm's hierarchical calls (comm's device current);
 * *out stays NULL where comm can have no children (mpccl_comm_hier_possible). */
mpccl_status_t mpccl_gpu_hier_create(ncclComm_t comm, mpccl_gpu_hier_t **out);
/* leak: an abort (kernels may still use the scratch). */
void mpccl_gpu_hier_destroy(mpccl_gpu_hier_t *gh, int leak);
uint64_t mpccl_gpu_hier_mem_bytes(const mpccl_gpu_hier_t *gh);
/* Whether call d of comm runs hierarchically (the same answer on every rank). */
int mpccl_gpu_hier_takes(ncclComm_t comm, const mpccl_gpu_hier_t *gh, const mpccl_coll_desc_t *d);
/* Enqueues the call on its stream: forks to the private streams, joins back. */
mpccl_status_t mpccl_gpu_hier_launch(ncclComm_t comm, mpccl_gpu_hier_t *gh, const mpccl_call_t *call);

#endif
