/* Ring reduce-scatter and allgather (the halves of the ring allreduce and of
 * hierarchical allreduce), and the AllGather / ReduceScatter collectives. */
#include <stdlib.h>

#include "algo/algo.h"

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Ring order: step s sends segment me-1-s and receives segment me-2-s, so that
 * after n-1 steps the segment that ends here is mine (index me). */
uint32_t mpccl_ring_rs(mpccl_build_t *b, const mpccl_group_t *g, uint32_t inbuf, const mpccl_segs_t *segs,
                       mpccl_ref_t out, mpccl_pool_t *pool, uint32_t *rd)
{
    int n = g->n, me = g->me;
    if (n == 1) {
        mpccl_ref_t src = mpccl_ref(inbuf, mpccl_seg_off(segs, n, 0));
        rd[0] = mpccl_b_copy(b, out, src, mpccl_seg_len(segs, n, 0), NULL, 0);
        return rd[0];
    }
    int next = g->ranks[mod(me + 1, n)], prev = g->ranks[mod(me - 1, n)];
    int k0 = mod(me - 1, n);
    rd[k0] = mpccl_b_send(b, next, mpccl_ref(inbuf, mpccl_seg_off(segs, n, k0)), mpccl_seg_len(segs, n, k0),
                          NULL, 0);
    uint32_t fin = MPCCL_NONE;
    for (int s = 0; s < n - 1; s++) {
        int k = mod(me - 2 - s, n);
        uint64_t len = mpccl_seg_len(segs, n, k);
        mpccl_ref_t mine = mpccl_ref(inbuf, mpccl_seg_off(segs, n, k)), slot;
        uint32_t war, si = mpccl_pool_get(pool, &slot, &war);
        uint32_t rv = mpccl_b_recv(b, prev, slot, len, MPCCL_DEPS(war));
        if (s < n - 2) {
            /* The partial sum stays in the slot until it has been forwarded. */
            uint32_t red = mpccl_b_reduce(b, slot, slot, mine, len, MPCCL_DEPS(rv));
            uint32_t sd = mpccl_b_send(b, next, slot, len, MPCCL_DEPS(red));
            mpccl_pool_put(pool, si, sd);
            rd[k] = red;
        } else {
            fin = mpccl_b_reduce(b, out, slot, mine, len, MPCCL_DEPS(rv));
            mpccl_pool_put(pool, si, fin);
            rd[k] = fin;
        }
    }
    return fin;
}

/* Step s sends segment me-s (mine first, then what arrived) and receives
 * me-1-s.  The first send comes before the copy of my own segment: an
 * executor that takes steps in order (the device engine's CTA) puts it on
 * the wire first, and the copy runs while the peer's segment is on its way. */
void mpccl_ring_ag(mpccl_build_t *b, const mpccl_group_t *g, mpccl_ref_t src, uint32_t src_dep,
                   uint32_t outbuf, const mpccl_segs_t *segs, const uint32_t *war)
{
    int n = g->n, me = g->me;
    mpccl_ref_t own = mpccl_ref(outbuf, mpccl_seg_off(segs, n, me));
    int next = g->ranks[mod(me + 1, n)], prev = g->ranks[mod(me - 1, n)];
    if (n > 1) mpccl_b_send(b, next, src, mpccl_seg_len(segs, n, me), MPCCL_DEPS(src_dep));
    mpccl_b_copy(b, own, src, mpccl_seg_len(segs, n, me), MPCCL_DEPS(src_dep, war ? war[me] : MPCCL_NONE));
    if (n == 1) return;
    for (int s = 0; s < n - 1; s++) {
        int k = mod(me - 1 - s, n);
        uint64_t len = mpccl_seg_len(segs, n, k);
        mpccl_ref_t dst = mpccl_ref(outbuf, mpccl_seg_off(segs, n, k));
        uint32_t rv = mpccl_b_recv(b, prev, dst, len, MPCCL_DEPS(war ? war[k] : MPCCL_NONE));
        if (s < n - 2) mpccl_b_send(b, next, dst, len, MPCCL_DEPS(rv));
    }
}

/* Pipeline rounds: each round moves about one chunk per segment. */
static uint64_t rounds_for(uint64_t count, uint64_t per_round)
{
    uint64_t r = mpccl_div_up(count, per_round);
    return r ? r : 1;
}

static mpccl_status_t oom(void) { return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory building a schedule"); }

mpccl_status_t mpccl_algo_allgather_ring(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    uint64_t count = g->d->count, rounds = rounds_for(count, g->chunk);
    int me = g->world.me;
    for (uint64_t c = 0; c < rounds && count; c++) {
        uint64_t off = mpccl_split_off(count, rounds, c);
        mpccl_segs_t segs = {off, count, mpccl_split_len(count, rounds, c)};
        mpccl_ref_t src = mpccl_ref(MPCCL_BUF_IN, off);
        /* In place, my input already sits in my segment of OUT. */
        if (g->alias) src = mpccl_ref(MPCCL_BUF_OUT, mpccl_seg_off(&segs, g->world.n, me));
        mpccl_ring_ag(b, &g->world, src, MPCCL_NONE, MPCCL_BUF_OUT, &segs, NULL);
    }
    return MPCCL_OK;
}

mpccl_status_t mpccl_algo_allgather_direct(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n, me = g->world.me;
    uint64_t count = g->d->count;
    mpccl_ref_t in = mpccl_ref(MPCCL_BUF_IN, 0);
    /* Pairwise order (send to me+i, receive from me-i): a windowed executor
     * never waits on a sender that has not reached the matching step. */
    for (int i = 1; i < n; i++) {
        int from = mod(me - i, n);
        mpccl_b_send(b, mod(me + i, n), in, count, NULL, 0);
        mpccl_b_recv(b, from, mpccl_ref(MPCCL_BUF_OUT, (uint64_t)from * count), count, NULL, 0);
    }
    if (!g->alias) mpccl_b_copy(b, mpccl_ref(MPCCL_BUF_OUT, (uint64_t)me * count), in, count, NULL, 0);
    return MPCCL_OK;
}

mpccl_status_t mpccl_algo_reducescatter_ring(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n;
    uint64_t count = g->d->count, rounds = rounds_for(count, g->chunk);
    uint32_t *rd = malloc((size_t)n * sizeof(uint32_t));
    if (!rd) return oom();
    mpccl_pool_t pool;
    mpccl_pool_init(b, &pool, n > 1 ? 4 : 0, mpccl_div_up(count, rounds));
    for (uint64_t c = 0; c < rounds && count; c++) {
        uint64_t off = mpccl_split_off(count, rounds, c);
        mpccl_segs_t segs = {off, count, mpccl_split_len(count, rounds, c)};
        mpccl_ring_rs(b, &g->world, MPCCL_BUF_IN, &segs, mpccl_ref(MPCCL_BUF_OUT, off), &pool, rd);
    }
    free(rd);
    if (g->d->divide) mpccl_gen_divide(g, count);
    return MPCCL_OK;
}

/* Everyone sends each segment straight to its owner; the owner folds the
 * arrivals into OUT in a fixed order (so results do not depend on timing). */
mpccl_status_t mpccl_algo_reducescatter_direct(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n, me = g->world.me;
    uint64_t count = g->d->count;
    mpccl_ref_t out = mpccl_ref(MPCCL_BUF_OUT, 0), cur = mpccl_ref(MPCCL_BUF_IN, (uint64_t)me * count);
    if (n == 1) {
        if (!g->alias) mpccl_b_copy(b, out, cur, count, NULL, 0);
    } else {
        mpccl_pool_t pool;
        mpccl_pool_init(b, &pool, (uint32_t)(n - 1 < 4 ? n - 1 : 4), count);
        uint32_t last = MPCCL_NONE;
        for (int i = 1; i < n; i++) {
            /* Pairwise order, as in the allgather above. */
            int to = mod(me + i, n);
            mpccl_b_send(b, to, mpccl_ref(MPCCL_BUF_IN, (uint64_t)to * count), count, NULL, 0);
            mpccl_ref_t slot;
            uint32_t war, si = mpccl_pool_get(&pool, &slot, &war);
            uint32_t rv = mpccl_b_recv(b, mod(me - i, n), slot, count, MPCCL_DEPS(war));
            last = mpccl_b_reduce(b, out, cur, slot, count, MPCCL_DEPS(rv, last));
            mpccl_pool_put(&pool, si, last);
            cur = out;
        }
    }
    if (g->d->divide) mpccl_gen_divide(g, count);
    return MPCCL_OK;
}
