/* The shared-device path: the collectives of a communicator whose ranks are
 * processes sharing one GPU without MPS (gpu_shared_route.h decides).  The
 * lowest rank's process, the leader, runs every collective for all ranks in
 * one launch (lib/kernels/shared_dev.h) through CUDA IPC mappings of the
 * followers' buffers; the followers' GPU contexts do nothing, so the GPU never
 * has to switch between contexts inside a call.
 *
 * A call, on each rank: a follower finishes its stream (its input is final and
 * its output free), describes its buffers in a shared host segment and waits
 * for the done word the leader's launch writes; the leader waits for every
 * follower's description, checks that the calls match, launches and returns
 * (it stays stream-ordered).  Buffers that CUDA IPC cannot share (e.g. from a
 * stream-ordered pool) go through a staging buffer of their rank.  Send and
 * receive are copies by the receiver out of the sender's buffer
 * (gpu_shared_p2p.c).  Calls being captured into a CUDA graph take the usual
 * kernels.
 * Only built with CUDA. */
#ifndef MPCCL_GPU_SHARED_H
#define MPCCL_GPU_SHARED_H

#include "cuda/cuda_rt.h"

#ifdef MPCCL_HAVE_CUDA

#include "core/comm.h"
#include "core/group.h"
#include "gpu/gpu_shared_route.h"

typedef struct mpccl_gpu_shared mpccl_gpu_shared_t;

/* Collective over comm's bootstrap: decides the route (logged once at INFO)
 * and, for MPCCL_SHARED_LEADER, builds the shared segment.  *out stays NULL
 * for every other route.  route (may be NULL) receives the decision. */
mpccl_status_t mpccl_gpu_shared_create(ncclComm_t comm, mpccl_gpu_shared_t **out, mpccl_shared_route_t *route);
/* Local; after the communicator's launches ended (NULL is fine). */
void mpccl_gpu_shared_destroy(mpccl_gpu_shared_t *sh);
/* Whether the path takes this call (every rank answers alike for matching
 * calls; a capturing stream is the caller's to check). */
int mpccl_gpu_shared_takes(const mpccl_gpu_shared_t *sh, const mpccl_call_t *call);
/* Runs the call as described above. */
mpccl_status_t mpccl_gpu_shared_run(mpccl_gpu_shared_t *sh, mpccl_call_t *call);
/* Send/receive (gpu_shared_p2p.c): whether the path takes them, and one
 * group of them (calls in program order). */
int mpccl_gpu_shared_takes_p2p(const mpccl_gpu_shared_t *sh);
mpccl_status_t mpccl_gpu_shared_p2p(mpccl_gpu_shared_t *sh, mpccl_call_t **calls, int n);

#endif /* MPCCL_HAVE_CUDA */
#endif
