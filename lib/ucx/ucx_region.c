/* Regions of the UCX transport (core/transport.h, region_open): memory that
 * sends and receives use over and over, described to UCX once.
 *
 * Every tagged send or receive without a memory type makes UCX find out what
 * the buffer is.  With a UCX built for CUDA that detection may call the CUDA
 * driver (pointer queries, and on the first sight of a context
 * cuCtxSetFlags(CU_CTX_SYNC_MEMOPS), which takes the context's lock).  On the
 * GPU proxy's thread such a call can wait behind a user thread's CUDA call,
 * which waits for an engine kernel, which waits for the proxy
 * (doc/GPU_DESIGN.md, GPU-direct).  So the proxy opens its slots as regions on
 * the attaching thread: device memory is registered there (ucp_mem_map, which
 * runs UCX's detection and registration right then) and every request on it
 * carries the memory handle and UCS_MEMORY_TYPE_CUDA; host staging only
 * carries UCS_MEMORY_TYPE_HOST. */
#include <stdlib.h>
#include <string.h>
#include "build_config.h"
#include "util/log.h"
#include "ucx.h"

struct mpccl_ucx_region {
    ucp_mem_h memh; /* NULL: host memory, described by its type alone */
    ucs_memory_type_t type;
    const char *base;
    size_t bytes;
};

static const char *type_name(ucs_memory_type_t t)
{
    switch (t) {
    case UCS_MEMORY_TYPE_HOST: return "host";
    case UCS_MEMORY_TYPE_CUDA: return "cuda";
    case UCS_MEMORY_TYPE_CUDA_MANAGED: return "cuda-managed";
    default: return "other";
    }
}

mpccl_status_t mpccl_ucx_region_open(void *buf, size_t bytes, int kind, mpccl_ucx_region_t **out)
{
    if ((buf == NULL) != (bytes == 0) || (kind != MPCCL_REGION_HOST && kind != MPCCL_REGION_DEVICE))
        return mpccl_fail(MPCCL_ERR_INTERNAL, "UCX region: buf %p, %zu bytes, kind %d: expected memory (or none "
                          "and 0 bytes) and MPCCL_REGION_HOST or MPCCL_REGION_DEVICE", buf, bytes, kind);
    mpccl_ucx_region_t *r = calloc(1, sizeof(*r));
    if (r == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "UCX region: out of memory");
    r->base = buf;
    r->bytes = bytes;
    r->type = kind == MPCCL_REGION_DEVICE ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    if (buf == NULL) { /* any memory of the kind: requests carry its type, UCX registers what it needs */
        MPCCL_INFO(MPCCL_SUB_NET, "UCX region: any %s memory (requests carry the type only)", type_name(r->type));
        *out = r;
        return MPCCL_OK;
    }
    if (kind == MPCCL_REGION_DEVICE) {
        ucp_context_h ctx;
        mpccl_status_t st = mpccl_ucx_context(&ctx);
        if (st != MPCCL_OK) {
            free(r);
            return st;
        }
        /* No memory type given: UCX detects it here, on this thread. */
        ucp_mem_map_params_t mp;
        memset(&mp, 0, sizeof(mp));
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        mp.address = buf;
        mp.length = bytes;
        ucs_status_t us = ucp_mem_map(ctx, &mp, &r->memh);
        if (us != UCS_OK) {
            free(r);
            return mpccl_fail(MPCCL_ERR_SYSTEM, "UCX region: ucp_mem_map of %zu bytes of device memory at %p: %s",
                              bytes, buf, ucs_status_string(us));
        }
        ucp_mem_attr_t ma;
        memset(&ma, 0, sizeof(ma));
        ma.field_mask = UCP_MEM_ATTR_FIELD_MEM_TYPE;
        if (ucp_mem_query(r->memh, &ma) == UCS_OK && ma.mem_type != UCS_MEMORY_TYPE_CUDA) {
            ucp_mem_unmap(ctx, r->memh);
            free(r);
            return mpccl_fail(MPCCL_ERR_SYSTEM, "UCX region: UCX %s sees the device memory at %p as %s memory, not "
                              "CUDA memory: it cannot move it", ucp_get_version_string(), buf, type_name(ma.mem_type));
        }
    }
    MPCCL_INFO(MPCCL_SUB_NET, "UCX region: %zu bytes at %p, %s memory%s", bytes, buf, type_name(r->type),
               r->memh ? ", registered (requests carry its handle)" : "");
    *out = r;
    return MPCCL_OK;
}

void mpccl_ucx_region_close(mpccl_ucx_region_t *r)
{
    if (r == NULL) return;
    ucp_context_h ctx;
    if (r->memh && mpccl_ucx_context(&ctx) == MPCCL_OK) {
        ucs_status_t us = ucp_mem_unmap(ctx, r->memh);
        if (us != UCS_OK)
            MPCCL_WARN(MPCCL_SUB_NET, "UCX region: ucp_mem_unmap of %zu bytes at %p: %s", r->bytes,
                       (const void *)r->base, ucs_status_string(us));
    }
    free(r);
}

mpccl_status_t mpccl_ucx_region_params(const mpccl_ucx_region_t *r, const void *buf, size_t bytes,
                                       ucp_request_param_t *prm)
{
    const char *p = buf;
    if (r->base && (p < r->base || bytes > r->bytes || (size_t)(p - r->base) > r->bytes - bytes))
        return mpccl_fail(MPCCL_ERR_INTERNAL, "UCX region: %zu bytes at %p lie outside the region of %zu bytes at "
                          "%p", bytes, buf, r->bytes, (const void *)r->base);
    prm->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    prm->memory_type = r->type;
#ifdef MPCCL_UCX_REQ_MEMH
    if (r->memh) {
        prm->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        prm->memh = r->memh;
    }
#endif
    return MPCCL_OK;
}
