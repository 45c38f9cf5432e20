/* UCX internals shared by the files of lib/ucx/: the process-wide context and the
 * private area UCX reserves inside each of its requests for us. */
#ifndef MPCCL_UCX_H
#define MPCCL_UCX_H

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>
#include "util/status.h"
#include "core/transport.h"

/* Lives inside every UCX request (ucp_params_t.request_size): ties an in-flight
 * UCX operation to its caller's mpccl_req_t without a separate allocation, and
 * lets cancel detach the caller from a send UCX cannot cancel. */
typedef struct mpccl_ucx_op {
    mpccl_req_t *owner;          /* NULL once detached (cancelled send) */
    struct mpccl_ucx_tp *tp;     /* the transport whose list holds this op */
    struct mpccl_ucx_op *prev, *next;
    uint64_t tag;
    size_t bytes;
    int peer;
    int is_recv;
} mpccl_ucx_op_t;

/* The process-wide context, created on first use (thread-safe); later calls
 * return the same one or the same error. */
mpccl_status_t mpccl_ucx_context(ucp_context_h *out);
/* Whether the context was created with UCP_FEATURE_WAKEUP (workers have an
 * event fd to sleep on). */
int mpccl_ucx_has_wakeup(void);
/* Whether the UCX library loaded is major.minor or newer. */
int mpccl_ucx_version_at_least(unsigned major, unsigned minor);
/* Whether UCX reports CUDA device memory among its memory types (send GPU
 * buffers directly instead of staging them through host memory).  Creates the
 * context if needed; 0 if it cannot be created. */
int mpccl_ucx_supports_cuda(void);

/* GPUDirect RDMA (ucx_gdr.c): the name of a network device (UCX memory
 * domain) that registers CUDA memory, so that the NIC reads and writes GPU
 * memory itself; NULL if there is none.  Queried once per process. */
const char *mpccl_ucx_gdr_nic(void);
/* The rule, for one memory domain: UCX component comp registers the memory
 * types reg_mem_types (bits UCS_MEMORY_TYPE_*). */
int mpccl_ucx_md_is_gdr_nic(const char *comp, uint64_t reg_mem_types);
/* What MPCCL_GPU_DIRECT asks for (ucx_gdr.c; warns once about a value that
 * is not 0, 1 or auto, and reads it as 0). */
enum { MPCCL_GPU_DIRECT_OFF = 0, MPCCL_GPU_DIRECT_ON = 1, MPCCL_GPU_DIRECT_AUTO = 2 };
int mpccl_ucx_gpu_direct_setting(void);

/* The largest tagged message sent eagerly, read from an endpoint's
 * description (ucp_ep_print_info's "tag_send:" line); 0 when it cannot tell
 * (ucx_transport.c, the transport's eager_max). */
size_t mpccl_ucx_parse_eager_max(const char *text);
/* From the same description: 1 when every lane's transport stays on the
 * machine (shared memory, CMA, self, CUDA), 0 when one does not, -1 when it
 * cannot tell (ucx_ep_info.c, the transport's drains). */
int mpccl_ucx_parse_lanes_local(const char *text);

/* Regions (ucx_region.c; the transport's region_open): memory described to
 * UCX once.  MPCCL_REGION_DEVICE memory is registered with ucp_mem_map. */
typedef struct mpccl_ucx_region mpccl_ucx_region_t;
mpccl_status_t mpccl_ucx_region_open(void *buf, size_t bytes, int kind, mpccl_ucx_region_t **out);
void mpccl_ucx_region_close(mpccl_ucx_region_t *r);
/* Adds the region's memory type (and memory handle, where this UCX takes one)
 * to prm for a request on [buf, buf + bytes), which must lie inside it. */
mpccl_status_t mpccl_ucx_region_params(const mpccl_ucx_region_t *r, const void *buf, size_t bytes,
                                       ucp_request_param_t *prm);

/* UCX (lib/ucx/): collective over bs; connects every pair of ranks. */
mpccl_status_t mpccl_ucx_transport_create(mpccl_bootstrap_t *bs, mpccl_transport_t **out);
/* The same, telling which peers run on this machine (same_machine[peer] = 1;
 * NULL: none known): with MPCCL_UCX_ERR_MODE=auto those connect without UCX's
 * peer failure detection, so UCX may use shared memory (the peer watcher
 * detects their death instead). */
mpccl_status_t mpccl_ucx_transport_create_local(mpccl_bootstrap_t *bs, const unsigned char *same_machine,
                                                mpccl_transport_t **out);

#endif
