/* Plans the small-call kernel runs (lib/kernels/engine_small.cu): which
 * plans it takes, and their flattened device form (devplan.h,
 * mpccl_dev_small_step_t).  The choice and the flattening are plain C
 * (testable without a GPU); the upload needs CUDA. */
#ifndef MPCCL_GPU_PLAN_SMALL_H
#define MPCCL_GPU_PLAN_SMALL_H

#include "kernels/plan.h"

/* Most steps of a plan the small-call kernel runs: its bit masks (and its
 * shared memory) hold them all. */
#define MPCCL_ENGINE_SMALL_MAX_STEPS 32

/* Whether the small-call kernel can run s: at most
 * MPCCL_ENGINE_SMALL_MAX_STEPS steps, all kept in progress at once (window),
 * every step's part on CTA 0 alone (nctas, min_bytes as for
 * mpccl_gpu_plan_pieces), and every message with data a single LL piece (at
 * most ll_bytes) to or from a peer whose link is MPCCL_LINK_PROXY with the
 * proxy's words (staged).  Where it says no, *why names the first reason
 * (static text; for logs and tests). */
int mpccl_gpu_plan_small(const mpccl_sched_t *s, uint32_t es, uint32_t nctas, uint32_t min_bytes, uint32_t ll_bytes,
                         uint32_t window, const mpccl_dev_link_t *links, int nranks, const char **why);

/* Flattens s (which mpccl_gpu_plan_small took) into out[s->nsteps]: each
 * step's buffers, its dependencies and the earlier messages of its channel
 * as masks, and the pointers of its channel on CTA 0 taken from links (the
 * host copy of the device links) and hdr (the communicator's header with
 * its device pointers: nctas, nslots, tx_seq, rx_seq, tx_acked,
 * rx_clean). */
void mpccl_gpu_small_image(const mpccl_sched_t *s, const mpccl_dev_link_t *links, const mpccl_dev_comm_t *hdr,
                           mpccl_dev_small_step_t *out);

#if defined(MPCCL_HAVE_CUDA) && !defined(MPCCL_GPU_PLAN_CONVERT_ONLY)
/* Flattens and uploads s into p->small (freed by mpccl_gpu_plan_free). */
mpccl_status_t mpccl_gpu_small_upload(const mpccl_sched_t *s, const mpccl_dev_link_t *links,
                                      const mpccl_dev_comm_t *hdr, mpccl_gpu_plan_t *p);
#endif

#endif
