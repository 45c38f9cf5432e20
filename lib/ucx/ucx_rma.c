/* Memory registration and remote keys over the process-wide UCX context. */
#include <string.h>
#include "ucx.h"
#include "ucx_rma.h"

mpccl_status_t mpccl_ucx_mem_map(void *addr, size_t len, mpccl_ucx_mem_t *out)
{
    ucp_context_h ctx;
    MPCCL_CHECK(mpccl_ucx_context(&ctx));
    memset(out, 0, sizeof(*out));
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = addr;
    mp.length = len;
    ucs_status_t us = ucp_mem_map(ctx, &mp, &out->memh);
    if (us != UCS_OK)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "ucp_mem_map(%p, %zu bytes): %s", addr, len, ucs_status_string(us));
    us = ucp_rkey_pack(ctx, out->memh, &out->packed, &out->packed_len);
    if (us != UCS_OK) {
        ucp_mem_unmap(ctx, out->memh);
        out->memh = NULL;
        return mpccl_fail(MPCCL_ERR_SYSTEM, "ucp_rkey_pack(%p, %zu bytes): %s", addr, len, ucs_status_string(us));
    }
    return MPCCL_OK;
}

void mpccl_ucx_mem_unmap(mpccl_ucx_mem_t *m)
{
    ucp_context_h ctx;
    if (!m || !m->memh || mpccl_ucx_context(&ctx) != MPCCL_OK) return;
    if (m->packed) ucp_rkey_buffer_release(m->packed);
    ucp_mem_unmap(ctx, m->memh);
    memset(m, 0, sizeof(*m));
}

mpccl_status_t mpccl_ucx_rkey_unpack(mpccl_transport_t *t, int peer, const void *packed, void **rkey)
{
    ucp_ep_h ep = mpccl_ucx_ep(t, peer);
    if (!ep) return mpccl_fail(MPCCL_ERR_INTERNAL, "rkey unpack: no UCX endpoint to rank %d", peer);
    ucp_rkey_h r;
    ucs_status_t us = ucp_ep_rkey_unpack(ep, packed, &r);
    if (us != UCS_OK)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "ucp_ep_rkey_unpack (remote key of rank %d): %s", peer,
                          ucs_status_string(us));
    *rkey = r;
    return MPCCL_OK;
}

void mpccl_ucx_rkey_destroy(void *rkey)
{
    if (rkey) ucp_rkey_destroy((ucp_rkey_h)rkey);
}

mpccl_status_t mpccl_ucx_fence(mpccl_transport_t *t)
{
    ucp_worker_h w = mpccl_ucx_worker(t);
    if (!w) return mpccl_fail(MPCCL_ERR_INTERNAL, "fence: not a UCX transport");
    ucs_status_t us = ucp_worker_fence(w);
    if (us != UCS_OK) return mpccl_fail(MPCCL_ERR_SYSTEM, "ucp_worker_fence: %s", ucs_status_string(us));
    return MPCCL_OK;
}
