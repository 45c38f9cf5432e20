/* Memory registration and remote keys for one-sided operations over UCX
 * (windows, signal areas).  The put and atomic-add themselves are the
 * transport's ops (lib/core/transport.h); this is what they need around them. */
#ifndef MPCCL_UCX_RMA_H
#define MPCCL_UCX_RMA_H

#include <stddef.h>
#include <ucp/api/ucp.h>
#include "util/status.h"
#include "core/transport.h"

/* The worker / the endpoint to peer of a UCX transport; NULL when t is not
 * one (or peer is out of range).  ucx_transport.c. */
ucp_worker_h mpccl_ucx_worker(mpccl_transport_t *t);
ucp_ep_h mpccl_ucx_ep(mpccl_transport_t *t, int peer);

typedef struct mpccl_ucx_mem {
    ucp_mem_h memh;
    void *packed;      /* remote key for peers (ucp_rkey_pack) */
    size_t packed_len;
} mpccl_ucx_mem_t;

/* Registers [addr, addr + len) for remote access and packs its remote key. */
mpccl_status_t mpccl_ucx_mem_map(void *addr, size_t len, mpccl_ucx_mem_t *out);
void mpccl_ucx_mem_unmap(mpccl_ucx_mem_t *m);
/* A remote key usable on t's endpoint to peer from peer's packed key. */
mpccl_status_t mpccl_ucx_rkey_unpack(mpccl_transport_t *t, int peer, const void *packed, void **rkey);
void mpccl_ucx_rkey_destroy(void *rkey);
/* Operations issued on t before the fence complete at their targets before
 * any issued after it begins (ucp_worker_fence). */
mpccl_status_t mpccl_ucx_fence(mpccl_transport_t *t);

#endif
