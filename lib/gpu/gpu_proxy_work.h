/* Launches that need the proxy thread announce themselves, so the proxy can
 * sleep while none is in flight (proxy.h, mpccl_proxy_post_pieces for the
 * engine's, mpccl_proxy_post for puts).  Eagerly, the host posts the launch
 * just before it enqueues the kernel.  Inside a CUDA
 * graph capture nothing runs at enqueue time, so a host node of the graph
 * posts the graph's launches at every replay: one node per graph, with no
 * edge to the kernels, so no kernel waits for it; a kernel that starts first
 * waits for the proxy a few microseconds longer. */
#ifndef MPCCL_GPU_PROXY_WORK_H
#define MPCCL_GPU_PROXY_WORK_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "proxy/proxy.h"
#include "util/status.h"

typedef struct mpccl_proxy_post_arg mpccl_proxy_post_arg_t;

typedef struct mpccl_proxy_work {
    mpccl_proxy_comm_t *pc;
    uint32_t *counts;  /* device memory [MPCCL_PROXY_WORK_KINDS]: launches finished (puts) */
    /* Graphs: the capture sequence being recorded and its host node's
     * argument (owned by that graph). */
    unsigned long long cap_id;
    mpccl_proxy_post_arg_t *cap_arg;
} mpccl_proxy_work_t;

/* What a put kernel gets in its arguments (both NULL: no proxy, or an engine
 * launch, whose pieces were posted instead). */
typedef struct mpccl_proxy_work_args {
    uint32_t *count, *done;
} mpccl_proxy_work_args_t;

/* What begin did, for end. */
typedef struct mpccl_proxy_work_token {
    int capturing;
    int kind;
    const mpccl_proxy_due_t *due;
    uint32_t ndue;
} mpccl_proxy_work_token_t;

/* Serves pc's launches from now on (the device current). */
mpccl_status_t mpccl_proxy_work_init(mpccl_proxy_work_t *w, mpccl_proxy_comm_t *pc);
/* Before enqueueing a kernel of kind (MPCCL_PROXY_WORK_*) that moves pieces
 * through the proxy: posts it, or adds what it posts to the host node of the
 * graph being captured on stream (one node per graph, posting at every
 * replay).  An engine launch posts due[0..ndue), its pieces per channel
 * (mpccl_gpu_plan_pieces; they must outlive the launch's end call), a put
 * launch one launch (mpccl_proxy_post: the one-sided channel, lane 0).
 * Without a proxy (w NULL or not initialised) *a is NULLs and nothing
 * happens. */
mpccl_status_t mpccl_proxy_work_begin(mpccl_proxy_work_t *w, cudaStream_t stream, int kind,
                                      const mpccl_proxy_due_t *due, uint32_t ndue, mpccl_proxy_work_args_t *a,
                                      mpccl_proxy_work_token_t *tok);
/* After the kernel was enqueued (launched: how that went): takes the post
 * back when an eager launch failed. */
mpccl_status_t mpccl_proxy_work_end(mpccl_proxy_work_t *w, cudaStream_t stream, const mpccl_proxy_work_token_t *tok,
                                    mpccl_status_t launched);
/* Frees the put kernels' counters (the device current; no kernel of this
 * work still running, or aborting: the counters then leak). */
void mpccl_proxy_work_fini(mpccl_proxy_work_t *w, int aborting);

#endif
