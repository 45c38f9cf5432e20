/* Whether a network device of this UCX reads and writes GPU memory itself
 * (GPUDirect RDMA): the condition under which GPU communicators spanning
 * nodes hand UCX device memory by default (MPCCL_GPU_DIRECT=auto,
 * lib/gpu/gpu_proxy_mem.c).  Without such a device, UCX moves CUDA memory
 * through its cuda_copy transport, whose CUDA calls run on the proxy thread
 * and can wait behind the application's work (doc/GPU_DESIGN.md). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <uct/api/uct.h>

#include "ucx.h"
#include "util/config.h"
#include "util/log.h"

int mpccl_ucx_md_is_gdr_nic(const char *component, uint64_t reg_mem_types)
{
    /* Verbs devices (InfiniBand, RoCE) are UCX's "ib" component; the CUDA
     * components (cuda_cpy, cuda_ipc, gdr_copy) register CUDA memory too, but
     * move it with the GPU's own engines, not a NIC. */
    return component && strcmp(component, "ib") == 0 && (reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

static pthread_once_t gdr_once = PTHREAD_ONCE_INIT;
static int gdr_found;
static char gdr_md[64];

/* Whether memory domain md_name of comp registers CUDA memory on a NIC. */
static int md_reaches_gpu(uct_component_h comp, const char *comp_name, const char *md_name)
{
    uct_md_config_t *cfg;
    uct_md_h md;
    if (uct_md_config_read(comp, NULL, NULL, &cfg) != UCS_OK) return 0;
    ucs_status_t st = uct_md_open(comp, md_name, cfg, &md);
    uct_config_release(cfg);
    if (st != UCS_OK) return 0;
    uct_md_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    int yes = uct_md_query(md, &attr) == UCS_OK && mpccl_ucx_md_is_gdr_nic(comp_name, attr.cap.reg_mem_types);
    uct_md_close(md);
    return yes;
}

static void find_gdr_nic(void)
{
    uct_component_h *comps;
    unsigned ncomps;
    if (uct_query_components(&comps, &ncomps) != UCS_OK) return;
    for (unsigned c = 0; c < ncomps && !gdr_found; c++) {
        uct_component_attr_t attr;
        memset(&attr, 0, sizeof(attr));
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if (uct_component_query(comps[c], &attr) != UCS_OK || attr.md_resource_count == 0) continue;
        if (strcmp(attr.name, "ib") != 0) continue; /* only NICs qualify: skip opening the others */
        uct_md_resource_desc_t mds[attr.md_resource_count];
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        if (uct_component_query(comps[c], &attr) != UCS_OK) continue;
        for (unsigned m = 0; m < attr.md_resource_count && !gdr_found; m++)
            if (md_reaches_gpu(comps[c], attr.name, mds[m].md_name)) {
                gdr_found = 1;
                snprintf(gdr_md, sizeof(gdr_md), "%s", mds[m].md_name);
            }
    }
    uct_release_component_list(comps);
    MPCCL_INFO(MPCCL_SUB_NET, "UCX network device that reads GPU memory (GPUDirect RDMA): %s",
               gdr_found ? gdr_md : "none");
}

const char *mpccl_ucx_gdr_nic(void)
{
    pthread_once(&gdr_once, find_gdr_nic);
    return gdr_found ? gdr_md : NULL;
}

/* 0 staging, 1 GPU-direct, auto (the default, lib/util/config.c): GPU-direct
 * where a NIC of UCX reads and writes GPU memory itself.  Read by the GPU
 * proxy's memory choice and by the UCX context's defaults alike. */
int mpccl_ucx_gpu_direct_setting(void)
{
    const char *v = mpccl_config_str("GPU_DIRECT");
    if (v && strcmp(v, "auto") == 0) return MPCCL_GPU_DIRECT_AUTO;
    if (v && strcmp(v, "1") == 0) return MPCCL_GPU_DIRECT_ON;
    if (v && strcmp(v, "0") == 0) return MPCCL_GPU_DIRECT_OFF;
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        MPCCL_WARN(MPCCL_SUB_NET, "MPCCL_GPU_DIRECT=%s is not 0, 1 or auto; using 0 (pinned host staging)",
                   v ? v : "");
    return MPCCL_GPU_DIRECT_OFF;
}
