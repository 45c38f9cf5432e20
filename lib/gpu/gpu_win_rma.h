/* GPU-direct one-sided operations between nodes (doc/ONESIDED.md).
 *
 * Where every rank's proxy moves device memory itself (GPU-direct,
 * MPCCL_GPU_DIRECT) and MPCCL_ONESIDED_DIRECT allows, windows and the signal
 * counters are registered with UCX and their remote keys exchanged at
 * registration; the proxy then puts each piece of a put straight into the
 * target's window and the signal's new value into its counter (a counter has
 * one writer, its source rank, which counts what it sent), and nothing runs at
 * the target.  Elsewhere the staged one-sided channel (gpu_win_remote.c)
 * carries them.  Only built with CUDA. */
#ifndef MPCCL_ONESIDED_RMA_H
#define MPCCL_ONESIDED_RMA_H

#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <stdint.h>

#include "core/comm.h"
#include "proxy/proxy.h"

struct mpccl_win;
typedef struct mpccl_os_rma mpccl_os_rma_t;

mpccl_status_t mpccl_os_rma_new(ncclComm_t comm, mpccl_os_rma_t **out);
/* Destroys the remote keys (and closes the source regions) of released
 * windows (the proxy no longer uses them); after the proxy detached and
 * before the transport closes. */
void mpccl_os_rma_drop_keys(mpccl_os_rma_t *r);
/* After mpccl_os_rma_drop_keys.  Safe on NULL. */
void mpccl_os_rma_free(mpccl_os_rma_t *r);
/* Whether the settings ask for GPU-direct puts here (MPCCL_ONESIDED_DIRECT,
 * and for auto a NIC that writes GPU memory): the proxy then gets device data
 * slots for them. */
int mpccl_os_rma_wanted(void);
/* Whether puts go GPU-direct (decided by mpccl_os_rma_sig_setup). */
int mpccl_os_rma_on(const mpccl_os_rma_t *r);

/* Collective, every rank of comm (r may be NULL on a rank without a proxy):
 * at the signal area's setup, decides whether puts go GPU-direct (every rank
 * can) and, if so, registers this rank's counters and exchanges their keys;
 * then tells the proxy pc. */
mpccl_status_t mpccl_os_rma_sig_setup(ncclComm_t comm, mpccl_os_rma_t *r, mpccl_proxy_comm_t *pc, void *counters,
                                      size_t bytes);
void mpccl_os_rma_sig_free(mpccl_os_rma_t *r);
/* Collective when mpccl_os_rma_on: registers window w and exchanges keys. */
mpccl_status_t mpccl_os_rma_win_setup(mpccl_os_rma_t *r, struct mpccl_win *w);
void mpccl_os_rma_win_free(mpccl_os_rma_t *r, struct mpccl_win *w);

/* Whether [src, src + bytes) lies in one of this rank's windows that GPU-direct
 * puts can leave from (user thread): then *win_id is its ordinal and *off src's
 * offset in it. */
int mpccl_os_rma_source(mpccl_os_rma_t *r, const void *src, size_t bytes, uint32_t *win_id, uint64_t *off);
/* The proxy's mpccl_proxy_os_t.rma_target (proxy thread). */
int mpccl_os_rma_target(mpccl_os_rma_t *r, int peer, const void *hdr, uint32_t len, mpccl_proxy_rma_t *out);
#endif

#endif
