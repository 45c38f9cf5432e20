/* The GPU side of a communicator and of a call: setup (mailboxes, proxy), the plan
 * cache, scratch memory and the kernel launch on the user's stream.  Only built
 * with CUDA; the core reaches it through the GPU executor (gpu_exec.c). */
#ifndef MPCCL_GPU_LAUNCH_H
#define MPCCL_GPU_LAUNCH_H

#include "core/comm.h"
#include "core/group.h"

#ifdef MPCCL_HAVE_CUDA
#include "kernels/devplan.h"
#include "proxy/proxy.h"

struct mpccl_os_remote;

/* Collective over the communicator: device links inside the node, the proxy for
 * other nodes.  comm->cuda_dev is the device. */
mpccl_status_t mpccl_gpu_setup(ncclComm_t comm);
void mpccl_gpu_release(ncclComm_t comm, int force);
/* ncclCommFinalize: waits for the device, then detaches the proxy, which
 * drives the transport the caller is about to close. */
void mpccl_gpu_finalize(ncclComm_t comm);
/* ncclCommAbort, before the forced release (comm->aborting is set): stops the
 * communicator's in-flight work. */
void mpccl_gpu_abort(ncclComm_t comm);
/* A failure: stop comm's kernels without waiting (any thread). */
void mpccl_gpu_stop(ncclComm_t comm);
/* ncclCommRevoke: MPCCL_OK once in-flight work is stopped, else why not. */
mpccl_status_t mpccl_gpu_revoke(ncclComm_t comm, const char *fn);

/* Checks the call's buffers against the communicator's device (fn names the API
 * call in messages). */
mpccl_status_t mpccl_gpu_check_buffers(const char *fn, ncclComm_t comm, mpccl_coll_t coll, const void *in,
                                       const void *out, size_t count, ncclDataType_t dt, int root);

/* Plans (cached), prepares scratch and launches one call on its stream; returns
 * once the work is enqueued. */
mpccl_status_t mpccl_gpu_launch(mpccl_call_t *call);
/* What mpccl_gpu_launch / mpccl_gpu_launch_p2p of the same calls will need --
 * the plan uploaded, scratch allocated -- without launching anything (a
 * group's first pass: its launches then make no such CUDA calls). */
mpccl_status_t mpccl_gpu_prepare(mpccl_call_t *call);
mpccl_status_t mpccl_gpu_prepare_p2p(mpccl_call_t **calls, int n);
/* Whether call d of comm runs on the flat kernels (ncclGroupSimulateEnd's model). */
int mpccl_gpu_takes_flat(ncclComm_t comm, const mpccl_coll_desc_t *d);
/* The communicator's flat kernels (NULL: it has none). */
struct mpccl_flat_comm *mpccl_gpu_flat(ncclComm_t comm);
/* Device memory this communicator's GPU state holds: mailboxes, the flat
 * kernels' region, plans and scratch (ncclCommMemStats). */
uint64_t mpccl_gpu_mem_bytes(ncclComm_t comm);
/* Launches n (<= MPCCL_ENGINE_MAX_BUFS - 3) send/recv calls of one communicator
 * as one kernel. */
mpccl_status_t mpccl_gpu_launch_p2p(mpccl_call_t **calls, int n);
/* The one-sided channel to peers on other nodes and the proxy carrying it
 * (NULL: the communicator spans one node). */
struct mpccl_os_remote *mpccl_gpu_os_remote(ncclComm_t comm);
mpccl_proxy_comm_t *mpccl_gpu_proxy(ncclComm_t comm);
/* How launches that need the proxy post themselves (gpu_proxy_work.h). */
struct mpccl_proxy_work *mpccl_gpu_proxy_work(ncclComm_t comm);
/* Attaches the proxy's one-sided channel to peers of this node without P2P
 * if the communicator has none yet (first window registration; collective
 * only in that every rank calls it there). */
mpccl_status_t mpccl_gpu_onesided_channel(ncclComm_t comm);
/* The communicator's abort word (NULL: none yet) and whether its last
 * launch outside graphs has finished (gpu_abort.c). */
struct mpccl_gpu_abort_ctl *mpccl_gpu_abort_ctl(ncclComm_t comm);
int mpccl_gpu_launches_done(ncclComm_t comm);
/* MPCCL_LINK_* of the engine's link to peer (NONE for itself or out of range). */
int mpccl_gpu_link_kind(ncclComm_t comm, int peer);
#endif

#endif
