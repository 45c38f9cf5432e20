/* Host side of the flat kernels (lib/kernels/flat.h): the symmetric region every
 * rank of a single-node, all-P2P communicator maps from every peer, and the
 * choice and launch of a flat kernel for a call.  Only built with CUDA. */
#ifndef MPCCL_GPU_FLAT_H
#define MPCCL_GPU_FLAT_H

#include "cuda/cuda_rt.h"

#ifdef MPCCL_HAVE_CUDA
#include "bootstrap/bootstrap.h"
#include "gpu/gpu_comm.h"
#include "core/group.h"

typedef struct mpccl_flat_comm mpccl_flat_comm_t;

/* Collective.  *out = NULL (and MPCCL_OK) when the communicator does not
 * qualify (several nodes, a pair without P2P, more than MPCCL_FLAT_MAX_RANKS
 * ranks, MPCCL_FLAT=0 on any rank) or when any rank could not set its region
 * up (logged); calls then go to the engine. */
mpccl_status_t mpccl_flat_create(mpccl_bootstrap_t *bs, const mpccl_topo_t *topo, const mpccl_gpu_comm_t *g,
                                 mpccl_flat_comm_t **out);
void mpccl_flat_destroy(mpccl_flat_comm_t *f, int leak_device_memory);

/* Whether the call runs as a flat kernel (the same answer on every rank). */
int mpccl_flat_takes(const mpccl_flat_comm_t *f, const mpccl_coll_desc_t *d);
/* Device memory of this rank's region (0 for NULL). */
uint64_t mpccl_flat_region_size(const mpccl_flat_comm_t *f);
/* Device scratch the call needs besides a prescaled copy of its input (a
 * reduce of 3 or more ranks split in two launches: a block on non-roots). */
uint64_t mpccl_flat_scratch_bytes(const mpccl_flat_comm_t *f, const mpccl_coll_desc_t *d);
/* Enqueues the call on stream with input `in` (the prescaled copy when the
 * call has one) and scratch of mpccl_flat_scratch_bytes (NULL when 0). */
mpccl_status_t mpccl_flat_launch_call(const mpccl_flat_comm_t *f, const mpccl_call_t *call, const void *in,
                                      void *scratch, cudaStream_t stream);
/* Where rank r runs (its region's description: pid, device UUID) when
 * collectives use registered buffers (MPCCL_FLAT_REG), else NULL. */
const mpccl_ipc_desc_t *mpccl_flat_reg_peer(const mpccl_flat_comm_t *f, int r);
/* Whether a group's send/recv calls go to the flat p2p kernel. */
int mpccl_flat_takes_p2p(const mpccl_flat_comm_t *f);
/* Enqueues n (<= MPCCL_FLAT_P2P_MAX_OPS) send/recv calls of one communicator,
 * in program order, as one launch on stream. */
mpccl_status_t mpccl_flat_launch_p2p(const mpccl_flat_comm_t *f, mpccl_call_t **calls, int n, cudaStream_t stream);
#endif
#endif
