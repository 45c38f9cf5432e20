/* What an engine launch tells the proxy it will move (proxy.h,
 * mpccl_proxy_post_pieces; counted by plan.h, mpccl_gpu_plan_pieces).
 * Plain C, apart from the proxy's headers: the plan's header includes it. */
#ifndef MPCCL_GPU_PROXY_DUE_H
#define MPCCL_GPU_PROXY_DUE_H

#include <stdint.h>

/* The pieces one launch moves through the channel of CTA chan with the remote
 * peer rank: sent to it (tx) and received from it (rx) through slots, and
 * whole messages sent and received (kernels/devplan.h). */
typedef struct mpccl_proxy_due {
    int32_t rank;
    uint32_t chan;
    uint32_t tx, rx;
    uint32_t whole_tx, whole_rx;
} mpccl_proxy_due_t;

#endif
