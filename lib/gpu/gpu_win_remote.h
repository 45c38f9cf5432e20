/* One-sided operations between nodes on GPU communicators (doc/ONESIDED.md).
 * The proxy (proxy.h) carries them on its one-sided channel: a put kernel on
 * the user's stream stages the data in pinned host slots, the proxy sends
 * each piece, and the target's proxy copies it into the window on a delivery
 * stream of its own, then adds to the signal counter there.  Waits are the
 * ordinary wait kernel: the counters are the same.  Only built with CUDA. */
#ifndef MPCCL_ONESIDED_REMOTE_H
#define MPCCL_ONESIDED_REMOTE_H

#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/comm.h"
#include "kernels/devplan.h"
#include "proxy/proxy.h"

struct mpccl_proxy_work;

typedef struct mpccl_os_remote mpccl_os_remote_t;

/* Before the proxy attaches (gpu_launch.c): the delivery stream and the
 * piece counters, on comm's device.  The channel has MPCCL_PROXY_OS_SLOTS
 * slots per peer (nslots, the CTAs' count, when that setting is unusable).  Fills *os for mpccl_proxy_attach and
 * *links with the array the attach fills (nranks entries). */
mpccl_status_t mpccl_os_remote_create(ncclComm_t comm, uint32_t nslots, uint32_t slot_bytes,
                                      mpccl_os_remote_t **out, mpccl_proxy_os_t *os, mpccl_dev_link_t **links);
/* Stops delivering (pieces that arrive later wait in the proxy) and waits
 * for deliveries in flight; before the communicator's windows and signal
 * area go (mpccl_win_release).  Safe on NULL. */
void mpccl_os_remote_close(mpccl_os_remote_t *r, int aborting);
/* After the proxy detached.  Safe on NULL. */
void mpccl_os_remote_free(mpccl_os_remote_t *r);
/* The GPU-direct half (gpu_win_rma.h); NULL on NULL. */
struct mpccl_os_rma *mpccl_os_remote_rma(mpccl_os_remote_t *r);
/* Whether peer is reached through the one-sided channel. */
int mpccl_os_remote_reaches(const mpccl_os_remote_t *r, int peer);
/* Enqueues on stream a put of bytes from src (device memory; 0 bytes: a
 * signal alone) into window win_id of peer at offset, then (sig != 0) an add
 * to counter sig - 1 of the peer.  work: the proxy that carries it, to post
 * the launch to and report the channel's failures. */
mpccl_status_t mpccl_os_remote_put(mpccl_os_remote_t *r, struct mpccl_proxy_work *work, int peer, const void *src,
                                   size_t bytes, uint32_t win_id, size_t offset, uint32_t sig, mpccl_abort_arg_t ab,
                                   cudaStream_t stream);
#endif

#endif
