/* Node detection from host hashes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/config.h"
#include "util/log.h"
#include "core/topo.h"

/* FNV-1a: stable across processes and machines (the hash travels). */
static uint64_t hash_bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t mpccl_topo_host_hash(void)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const char *override = mpccl_config_str("HOSTID");
    if (override) return hash_bytes(h, override, strlen(override));
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    h = hash_bytes(h, host, strlen(host));
    /* Containers may share a hostname across machines; the boot id tells them apart. */
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        char boot[64] = {0};
        if (fgets(boot, sizeof(boot), f)) h = hash_bytes(h, boot, strlen(boot));
        fclose(f);
    }
    return h;
}

mpccl_status_t mpccl_topo_from_hashes(const uint64_t *hashes, int nranks, int rank, mpccl_topo_t *topo)
{
    memset(topo, 0, sizeof(*topo));
    topo->rank = rank;
    topo->nranks = nranks;
    topo->node_of = calloc((size_t)nranks, sizeof(int));
    topo->local_rank = calloc((size_t)nranks, sizeof(int));
    topo->node_size = calloc((size_t)nranks, sizeof(int));
    if (!topo->node_of || !topo->local_rank || !topo->node_size) {
        mpccl_topo_free(topo);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory building the topology of %d ranks", nranks);
    }
    /* Nodes are numbered in order of first appearance, so every rank agrees. */
    for (int r = 0; r < nranks; r++) {
        int node = -1;
        for (int q = 0; q < r && node < 0; q++)
            if (hashes[q] == hashes[r]) node = topo->node_of[q];
        if (node < 0) node = topo->nnodes++;
        topo->node_of[r] = node;
        topo->local_rank[r] = topo->node_size[node]++;
    }
    return MPCCL_OK;
}

mpccl_status_t mpccl_topo_build(mpccl_bootstrap_t *bs, mpccl_topo_t *topo)
{
    uint64_t *hashes = calloc((size_t)bs->nranks, sizeof(uint64_t));
    mpccl_status_t st;
    if (!hashes) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for %d host ids", bs->nranks);
    hashes[bs->rank] = mpccl_topo_host_hash();
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(bs, hashes, sizeof(uint64_t)), st, out);
    MPCCL_CHECK_GOTO(mpccl_topo_from_hashes(hashes, bs->nranks, bs->rank, topo), st, out);
    MPCCL_INFO(MPCCL_SUB_INIT, "topology: %d ranks on %d node(s); this rank is local rank %d of %d on node %d",
               bs->nranks, topo->nnodes, topo->local_rank[bs->rank], topo->node_size[topo->node_of[bs->rank]],
               topo->node_of[bs->rank]);
out:
    free(hashes);
    return st;
}

void mpccl_topo_free(mpccl_topo_t *topo)
{
    free(topo->node_of);
    free(topo->local_rank);
    free(topo->node_size);
    topo->node_of = topo->local_rank = topo->node_size = NULL;
}
