/* mpccl-info: the UCX that mpccl was built with and the one it runs with, whether
 * that UCX moves CUDA memory, and its transports and devices (uct queries). */
#include <stdio.h>
#include <string.h>

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "info_parts.h"
#include "ucx/ucx.h"

/* The memory types the UCP context supports (bit UCS_MEMORY_TYPE_*), or 0 with
 * the failure named in err. */
static uint64_t ucp_memory_types(char *err, size_t len)
{
    ucp_config_t *config;
    ucp_context_h ctx;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        snprintf(err, len, "ucp_config_read: %s", ucs_status_string(st));
        return 0;
    }
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
    st = ucp_init(&params, config, &ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        snprintf(err, len, "ucp_init: %s", ucs_status_string(st));
        return 0;
    }
    ucp_context_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    st = ucp_context_query(ctx, &attr);
    ucp_cleanup(ctx);
    if (st != UCS_OK) {
        snprintf(err, len, "ucp_context_query: %s", ucs_status_string(st));
        return 0;
    }
    return attr.memory_types;
}

static const char *dev_type_name(uct_device_type_t t)
{
    switch (t) {
    case UCT_DEVICE_TYPE_NET: return "network";
    case UCT_DEVICE_TYPE_SHM: return "shared memory";
    case UCT_DEVICE_TYPE_ACC: return "accelerator";
    case UCT_DEVICE_TYPE_SELF: return "loopback";
    default: return "other";
    }
}

/* One memory domain's transports and devices, as list elements. */
static void md_transports(info_out_t *o, uct_component_h comp, const char *md_name)
{
    uct_md_config_t *md_config;
    uct_md_h md;
    if (uct_md_config_read(comp, NULL, NULL, &md_config) != UCS_OK) return;
    ucs_status_t st = uct_md_open(comp, md_name, md_config, &md);
    uct_config_release(md_config);
    if (st != UCS_OK) return;
    uct_tl_resource_desc_t *res;
    unsigned n;
    if (uct_md_query_tl_resources(md, &res, &n) == UCS_OK) {
        for (unsigned i = 0; i < n; i++) {
            info_out_object(o, NULL);
            info_out_str(o, "transport", res[i].tl_name);
            info_out_str(o, "device", res[i].dev_name);
            info_out_str(o, "type", dev_type_name(res[i].dev_type));
            info_out_close(o);
        }
        uct_release_tl_resource_list(res);
    }
    uct_md_close(md);
}

static void transports(info_out_t *o)
{
    uct_component_h *comps;
    unsigned ncomps;
    info_out_list(o, "transports");
    if (uct_query_components(&comps, &ncomps) == UCS_OK) {
        for (unsigned c = 0; c < ncomps; c++) {
            uct_component_attr_t attr;
            memset(&attr, 0, sizeof(attr));
            attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
            if (uct_component_query(comps[c], &attr) != UCS_OK || attr.md_resource_count == 0) continue;
            uct_md_resource_desc_t mds[attr.md_resource_count];
            attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
            attr.md_resources = mds;
            if (uct_component_query(comps[c], &attr) != UCS_OK) continue;
            for (unsigned m = 0; m < attr.md_resource_count; m++) md_transports(o, comps[c], mds[m].md_name);
        }
        uct_release_component_list(comps);
    }
    info_out_close(o);
}

void info_ucx(info_out_t *o)
{
    unsigned major, minor, release;
    char version[64], err[160] = "";
    ucp_get_version(&major, &minor, &release);
    info_out_object(o, "ucx");
    snprintf(version, sizeof(version), "%d.%d", UCP_API_MAJOR, UCP_API_MINOR);
    info_out_str(o, "build_api_version", version);
    snprintf(version, sizeof(version), "%u.%u.%u", major, minor, release);
    info_out_str(o, "runtime_version", version);
    uint64_t types = ucp_memory_types(err, sizeof(err));
    if (err[0]) info_out_str(o, "error", err);
    info_out_bool(o, "cuda_memory", (types >> UCS_MEMORY_TYPE_CUDA) & 1);
    info_out_bool(o, "cuda_managed_memory", (types >> UCS_MEMORY_TYPE_CUDA_MANAGED) & 1);
    /* what MPCCL_GPU_DIRECT=auto (the default) goes by */
    const char *nic = mpccl_ucx_gdr_nic();
    info_out_str(o, "gpudirect_rdma_nic", nic ? nic : "none");
    transports(o);
    info_out_close(o);
}
