/* The proxy thread for a GPU communicator: attached at setup when it spans
 * nodes, or at the first window when a node's peers share no P2P (one-sided
 * operations only). */
#include "build_config.h"

#include <stdlib.h>

#include "gpu/gpu_cuda_rt.h"
#include "gpu/gpu_launch.h"
#include "gpu/gpu_proxy_mem.h"
#include "gpu/gpu_state.h"
#include "util/log.h"

/* Attaches the communicator to the proxy thread, which serves peers on other
 * nodes (CTA channels and the one-sided channel) and, for one-sided operations
 * only, peers of this node whose GPUs share no P2P (their collectives use the
 * host-memory links).  The caller has the device current. */
mpccl_status_t mpccl_gpu_attach_proxy(ncclComm_t comm, mpccl_gpu_state_t *s)
{
    mpccl_status_t st = MPCCL_OK;
    uint8_t *remote = calloc((size_t)comm->nranks, 1);
    if (!remote) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory");
    int proxied = 0;
    for (int r = 0; r < comm->nranks; r++) {
        if (comm->topo.node_of[r] != comm->topo.node_of[comm->rank]) remote[r] = MPCCL_PROXY_REMOTE;
        else if (s->g->links_host[r].kind == MPCCL_LINK_HOST) remote[r] = MPCCL_PROXY_ONESIDED_ONLY;
        proxied += remote[r] != 0;
    }
    if (proxied) {
        mpccl_proxy_os_t os;
        mpccl_dev_link_t *os_links = NULL;
        mpccl_proxy_alloc_t alloc;
        const char *why = "";
        int direct = mpccl_gpu_proxy_memory(comm, &alloc, &why);
        MPCCL_CHECK_GOTO(mpccl_os_remote_create(comm, s->g->nslots, s->g->slot_bytes, &s->os_remote, &os, &os_links),
                         st, out);
        MPCCL_CHECK_GOTO(mpccl_proxy_attach(comm->transport, comm->rank, comm->nranks, remote, s->g->nctas,
                                            s->g->nslots, s->g->slot_bytes, &alloc, s->g->links_host, &os,
                                            os_links, &s->proxy),
                         st, out);
        MPCCL_CHECK_GOTO(mpccl_proxy_work_init(&s->work, s->proxy), st, out);
        if (comm->topo.nnodes > 1)
            MPCCL_INFO(MPCCL_SUB_NET, "comm 0x%llx: collectives and send/recv to other nodes: %s (%s); one-sided "
                       "operations: decided at the first window", (unsigned long long)comm->id,
                       direct ? "GPU-direct, UCX moves the device's slots" : "pinned host staging and UCX", why);
    }
out:
    if (st != MPCCL_OK && s->proxy == NULL && s->os_remote) { /* a later window may try again */
        mpccl_os_remote_free(s->os_remote);
        s->os_remote = NULL;
    }
    free(remote);
    return st;
}

mpccl_status_t mpccl_gpu_onesided_channel(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    if (!s || !s->g || s->proxy) return MPCCL_OK;
    int saved = -1;
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    mpccl_status_t st = mpccl_gpu_attach_proxy(comm, s);
    mpccl_cuda_restore_device(saved);
    return st;
}
