/* Hierarchical allreduce: reduce-scatter inside the node, allreduce of each part
 * between the ranks with the same local rank on every node, allgather inside the
 * node.  Pipelined by rounds; every phase of a round only waits for the data it
 * needs, so rounds overlap. */
#include <stdlib.h>

#include "algo/algo.h"

int mpccl_hier_possible(const mpccl_topo_t *topo)
{
    if (!topo->node_of || !topo->node_size || !topo->local_rank || topo->nnodes < 2) return 0;
    for (int n = 1; n < topo->nnodes; n++)
        if (topo->node_size[n] != topo->node_size[0]) return 0;
    return 1;
}

mpccl_status_t mpccl_algo_allreduce_hier(mpccl_gen_t *g)
{
    const mpccl_topo_t *topo = g->topo;
    mpccl_build_t *b = g->b;
    if (!mpccl_hier_possible(topo))
        return mpccl_fail(MPCCL_ERR_INTERNAL, "hierarchical allreduce needs equal nodes (%d nodes)", topo->nnodes);
    int nl = topo->node_size[0], nn = topo->nnodes, me = topo->rank;
    int mynode = topo->node_of[me], mylocal = topo->local_rank[me];
    int *intra = malloc((size_t)nl * sizeof(int)), *inter = malloc((size_t)nn * sizeof(int));
    uint32_t *rd = malloc((size_t)nl * sizeof(uint32_t)), *rd2 = malloc((size_t)nn * sizeof(uint32_t));
    mpccl_status_t st = MPCCL_OK;
    if (!intra || !inter || !rd || !rd2) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory building a hierarchical allreduce");
        goto out;
    }
    for (int r = 0; r < topo->nranks; r++) {
        if (topo->node_of[r] == mynode) intra[topo->local_rank[r]] = r;
        if (topo->local_rank[r] == mylocal) inter[topo->node_of[r]] = r;
    }
    mpccl_group_t gi = {nl, mylocal, intra}, gx = {nn, mynode, inter};
    uint64_t count = g->d->count, esize = mpccl_dtype_size(g->d->dt);
    /* A round gives each inter-node ring segment about one chunk. */
    uint64_t rounds = mpccl_div_up(count, (uint64_t)nl * (uint64_t)nn * g->chunk);
    if (rounds == 0) rounds = 1;
    uint64_t part_max = mpccl_div_up(mpccl_div_up(count, rounds), (uint64_t)nl);
    /* Between nodes: ring for large parts, recursive doubling for small ones. */
    int use_ring = mpccl_cost_ar_ring(nn, (double)(part_max * esize), (double)(g->chunk * esize), mpccl_link_inter) <
                   mpccl_cost_ar_rd(nn, (double)(part_max * esize), mpccl_link_inter);
    mpccl_pool_t pi, px;
    mpccl_pool_init(b, &pi, nl > 1 ? 4 : 0, part_max);
    if (use_ring)
        mpccl_pool_init(b, &px, 4, mpccl_div_up(part_max, (uint64_t)nn)); /* >= any ring segment */
    else
        mpccl_pool_init(b, &px, 2, part_max);
    for (uint64_t c = 0; c < rounds && count; c++) {
        mpccl_segs_t segs = {mpccl_split_off(count, rounds, c), 0, mpccl_split_len(count, rounds, c)};
        uint64_t poff = mpccl_seg_off(&segs, nl, mylocal), plen = mpccl_seg_len(&segs, nl, mylocal);
        mpccl_ref_t part = mpccl_ref(MPCCL_BUF_OUT, poff);
        uint32_t fin = mpccl_ring_rs(b, &gi, MPCCL_BUF_IN, &segs, part, &pi, rd);
        /* The inter-node phase works in place on my part of OUT, after the
         * intra-node reduce-scatter has written it. */
        uint32_t first = b->s->nsteps, saved = b->entry;
        b->entry = fin;
        if (use_ring)
            mpccl_ring_allreduce(b, &gx, MPCCL_BUF_OUT, MPCCL_BUF_OUT, poff, plen, g->chunk, &px, rd2);
        else
            mpccl_rd_allreduce(b, &gx, part, part, plen, &px);
        b->entry = saved;
        uint32_t done = b->s->nsteps > first ? mpccl_b_join_since(b, first) : fin;
        mpccl_ring_ag(b, &gi, part, done, MPCCL_BUF_OUT, &segs, rd);
    }
    if (g->d->divide) mpccl_gen_divide(g, count);
out:
    free(intra);
    free(inter);
    free(rd);
    free(rd2);
    return st;
}
