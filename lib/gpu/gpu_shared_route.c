/* The shared-device decision (gpu_shared_route.h). */
#include "build_config.h"

#include <stdio.h>
#include <string.h>

#include "gpu/gpu_shared_route.h"

static int same_gpu(const mpccl_dev_ident_t *a, const mpccl_dev_ident_t *b)
{
    return a->host_hash == b->host_hash && memcmp(a->uuid, b->uuid, 16) == 0;
}

/* Distinct processes among the ranks on rank r's GPU. */
static int procs_on_gpu_of(const mpccl_dev_ident_t *ids, int nranks, int r)
{
    int n = 0;
    for (int j = 0; j < nranks; j++) {
        if (!same_gpu(&ids[j], &ids[r])) continue;
        int seen = 0;
        for (int k = 0; k < j && !seen; k++) seen = same_gpu(&ids[k], &ids[r]) && ids[k].pid == ids[j].pid;
        if (!seen) n++;
    }
    return n;
}

mpccl_status_t mpccl_shared_route(const mpccl_dev_ident_t *ids, int nranks, const char *setting,
                                  mpccl_shared_route_t *out, char *why, size_t whylen)
{
    enum { AUTO, LEADER, KERNELS } want = AUTO;
    if (setting && *setting && strcmp(setting, "auto") != 0) {
        if (strcmp(setting, "leader") == 0) want = LEADER;
        else if (strcmp(setting, "kernels") == 0) want = KERNELS;
        else return mpccl_fail(MPCCL_ERR_USAGE, "MPCCL_SHARED_GPU=%s: expected auto, leader or kernels", setting);
    }
    memset(out, 0, sizeof(*out));
    if (why && whylen) why[0] = '\0';
    int all_one = 1, mps_off = 0, max_procs = 1, first_shared = -1;
    for (int r = 0; r < nranks; r++) {
        if (!same_gpu(&ids[r], &ids[0])) all_one = 0;
        int p = procs_on_gpu_of(ids, nranks, r);
        if (p > 1) {
            if (first_shared < 0) first_shared = r;
            if (ids[r].mps != 1) mps_off = 1;
        }
        if (p > max_procs) max_procs = p;
    }
    out->max_procs = max_procs;
    out->mps_off = mps_off;
    if (max_procs < 2) {
        out->mode = MPCCL_SHARED_NONE;
        return MPCCL_OK;
    }
    const char *mps = mps_off ? "MPS off" : "MPS on";
    int leader_ok = all_one && nranks <= MPCCL_SHARED_MAX_LEADER_RANKS;
    if (leader_ok && (want == LEADER || (want == AUTO && mps_off))) {
        out->mode = MPCCL_SHARED_LEADER;
        out->leader = 0;
        if (why)
            snprintf(why, whylen, "all %d ranks (%d processes) share one GPU, %s: rank 0's process runs every "
                     "collective for all (shared-device path)", nranks, max_procs, mps);
        return MPCCL_OK;
    }
    out->mode = mps_off ? MPCCL_SHARED_SLICED : MPCCL_SHARED_TOGETHER;
    if (why) {
        const char *reason = want == KERNELS ? "MPCCL_SHARED_GPU=kernels, the default; =auto lets rank 0's process "
                                               "run every collective for all instead"
                             : !all_one      ? "the communicator spans several GPUs"
                             : !leader_ok    ? "more ranks than the shared-device path takes"
                                             : "MPS runs their kernels together";
        snprintf(why, whylen, "up to %d processes share a GPU (rank %d's among them), %s: the usual kernels (%s)%s",
                 max_procs, first_shared, mps, reason,
                 mps_off ? "; without MPS the GPU time-slices their kernels, milliseconds per call: start the MPS "
                           "daemon (nvidia-cuda-mps-control -d)" : "");
    }
    return MPCCL_OK;
}
