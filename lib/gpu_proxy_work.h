/* Launches that need the proxy thread announce themselves, so the proxy can
 * sleep while none is in flight (proxy.h, mpccl_proxy_post).  Eagerly, the
 * host posts the kernel's CTAs just before it enqueues the kernel.  Inside a
 * CUDA graph capture nothing runs at enqueue time, so a host node of the
 * graph posts them at every replay: it sits on a branch beside the kernel
 * (fork before, join after), so the kernel never waits for it; a kernel that
 * started first simply waits for the proxy a few microseconds longer. */
#ifndef MPCCL_GPU_PROXY_WORK_H
#define MPCCL_GPU_PROXY_WORK_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "proxy.h"
#include "status.h"

typedef struct mpccl_proxy_post_arg mpccl_proxy_post_arg_t;

typedef struct mpccl_proxy_work {
    mpccl_proxy_comm_t *pc;
    /* Graphs: the host node's branch and the arguments its nodes hold (kept
     * until mpccl_proxy_work_fini: a graph may be replayed until then). */
    cudaStream_t side;
    cudaEvent_t fork, join;
    mpccl_proxy_post_arg_t *args;
} mpccl_proxy_work_t;

/* Whether stream is being captured (what begin did). */
typedef struct mpccl_proxy_work_token {
    int capturing;
    uint32_t ctas;
} mpccl_proxy_work_token_t;

/* Before enqueueing a kernel of ctas CTAs that moves pieces through the proxy
 * (w->pc non-NULL): posts them, or adds the posting host node to the graph
 * being captured on stream.  *done: the counter the kernel's CTAs add 1 to. */
mpccl_status_t mpccl_proxy_work_begin(mpccl_proxy_work_t *w, cudaStream_t stream, uint32_t ctas, uint32_t **done,
                                      mpccl_proxy_work_token_t *tok);
/* After the kernel was enqueued (launched: how that went): joins the host
 * node's branch (capture), or takes the post back when the launch failed. */
mpccl_status_t mpccl_proxy_work_end(mpccl_proxy_work_t *w, cudaStream_t stream, const mpccl_proxy_work_token_t *tok,
                                    mpccl_status_t launched);
/* Frees the graphs' resources (the device current). */
void mpccl_proxy_work_fini(mpccl_proxy_work_t *w);

#endif
