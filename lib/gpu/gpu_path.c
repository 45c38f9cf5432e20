/* The table of paths a GPU communicator reaches its peers by (gpu_path.h). */
#include <stddef.h>

#include "gpu/gpu_path.h"
#include "kernels/devplan.h"

static int same_node(const mpccl_gpu_pair_t *p)
{
    return p->topo->node_of[p->a] == p->topo->node_of[p->b];
}

/* Itself, or a peer of this node whose GPU and ours map each other's memory. */
static int reaches_p2p(const mpccl_gpu_pair_t *p)
{
    if (p->a == p->b) return 1;
    if (!same_node(p) || !p->p2p) return 0;
    size_t row = (size_t)p->n + 1;
    return p->p2p[(size_t)p->a * row + p->b] && p->p2p[(size_t)p->b * row + p->a];
}

static int reaches_proxy(const mpccl_gpu_pair_t *p)
{
    return !same_node(p);
}

/* Every peer of this node that the entries above did not take. */
static int reaches_host(const mpccl_gpu_pair_t *p)
{
    return same_node(p);
}

static const mpccl_gpu_path_t paths[] = {
    {"P2P", MPCCL_LINK_NVLINK, reaches_p2p},
    {"proxy", MPCCL_LINK_PROXY, reaches_proxy},
    {"host memory", MPCCL_LINK_HOST, reaches_host},
};

const mpccl_gpu_path_t *mpccl_gpu_path_pick(const mpccl_gpu_pair_t *p)
{
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (paths[i].reaches(p)) return &paths[i];
    return &paths[sizeof(paths) / sizeof(paths[0]) - 1]; /* not reached: host takes what is left of the node */
}

int mpccl_gpu_path_needs_proxy(const mpccl_topo_t *topo, int me)
{
    for (int j = 0; j < topo->nranks; j++) {
        mpccl_gpu_pair_t p = {.topo = topo, .p2p = NULL, .n = topo->nranks, .a = me, .b = j};
        if (mpccl_gpu_path_pick(&p)->link == MPCCL_LINK_PROXY) return 1;
    }
    return 0;
}
