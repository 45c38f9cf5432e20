/* AllReduce: pipelined ring (reduce-scatter then allgather, per round) and
 * recursive doubling (folding the ranks beyond a power of two in and out). */
#include <stdlib.h>

#include "algo/algo.h"

void mpccl_gen_divide(mpccl_gen_t *g, uint64_t n)
{
    mpccl_build_t *b = g->b;
    uint32_t all = mpccl_b_join_since(b, 0);
    mpccl_ref_t out = mpccl_ref(MPCCL_BUF_OUT, 0);
    mpccl_b_step(b, MPCCL_STEP_DIVIDE, -1, n, out, out, out, MPCCL_DEPS(all));
}

static uint64_t ring_rounds(int n, uint64_t count, uint64_t chunk)
{
    uint64_t r = mpccl_div_up(count, (uint64_t)n * chunk);
    return r ? r : 1;
}

uint64_t mpccl_ring_allreduce_slot(int n, uint64_t count, uint64_t chunk)
{
    return mpccl_div_up(mpccl_div_up(count, ring_rounds(n, count, chunk)), (uint64_t)n);
}

/* rd: n entries of scratch.  In place (inbuf == outbuf, or IN aliasing OUT), a
 * segment of OUT may be overwritten by the allgather only after the
 * reduce-scatter has read it, hence war = rd. */
void mpccl_ring_allreduce(mpccl_build_t *b, const mpccl_group_t *g, uint32_t inbuf, uint32_t outbuf,
                          uint64_t base, uint64_t count, uint64_t chunk, mpccl_pool_t *pool, uint32_t *rd)
{
    uint64_t rounds = ring_rounds(g->n, count, chunk);
    for (uint64_t c = 0; c < rounds && count; c++) {
        mpccl_segs_t segs = {base + mpccl_split_off(count, rounds, c), 0, mpccl_split_len(count, rounds, c)};
        mpccl_ref_t mine = mpccl_ref(outbuf, mpccl_seg_off(&segs, g->n, g->me));
        uint32_t fin = mpccl_ring_rs(b, g, inbuf, &segs, mine, pool, rd);
        mpccl_ring_ag(b, g, mine, fin, outbuf, &segs, rd);
    }
}

mpccl_status_t mpccl_algo_allreduce_ring(mpccl_gen_t *g)
{
    int n = g->world.n;
    uint64_t count = g->d->count;
    uint32_t *rd = malloc((size_t)n * sizeof(uint32_t));
    if (!rd) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory building a ring allreduce for %d ranks", n);
    mpccl_pool_t pool;
    mpccl_pool_init(g->b, &pool, n > 1 ? 4 : 0, mpccl_ring_allreduce_slot(n, count, g->chunk));
    mpccl_ring_allreduce(g->b, &g->world, MPCCL_BUF_IN, MPCCL_BUF_OUT, 0, count, g->chunk, &pool, rd);
    free(rd);
    if (g->d->divide) mpccl_gen_divide(g, count);
    return MPCCL_OK;
}

/* Index of the core (power-of-two) participant that virtual rank v stands for. */
static int rd_rank(const mpccl_group_t *g, int extra, int v)
{
    return g->ranks[v < extra ? 2 * v + 1 : v + extra];
}

/* Every exchange sends the whole current vector: latency-bound sizes only. */
void mpccl_rd_allreduce(mpccl_build_t *b, const mpccl_group_t *g, mpccl_ref_t in, mpccl_ref_t out,
                        uint64_t count, mpccl_pool_t *pool)
{
    int n = g->n, me = g->me;
    if (n == 1) {
        mpccl_b_copy(b, out, in, count, NULL, 0);
        return;
    }
    int p = 1;
    while (p * 2 <= n) p *= 2;
    int extra = n - p, v;
    mpccl_ref_t cur = in, slot;
    uint32_t last = MPCCL_NONE, war, si;
    if (me < 2 * extra) {
        int partner = g->ranks[me ^ 1];
        if (!(me & 1)) {
            /* Folded out: hand my input over, get the result back at the end. */
            uint32_t sd = mpccl_b_send(b, partner, in, count, NULL, 0);
            mpccl_b_recv(b, partner, out, count, MPCCL_DEPS(sd));
            return;
        }
        si = mpccl_pool_get(pool, &slot, &war);
        uint32_t rv = mpccl_b_recv(b, partner, slot, count, MPCCL_DEPS(war));
        last = mpccl_b_reduce(b, out, in, slot, count, MPCCL_DEPS(rv));
        mpccl_pool_put(pool, si, last);
        cur = out;
        v = me / 2;
    } else {
        v = me - extra;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
        int peer = rd_rank(g, extra, v ^ mask);
        si = mpccl_pool_get(pool, &slot, &war);
        uint32_t sd = mpccl_b_send(b, peer, cur, count, MPCCL_DEPS(last));
        uint32_t rv = mpccl_b_recv(b, peer, slot, count, MPCCL_DEPS(war));
        /* Waits for the send too: out may be what was being sent. */
        last = mpccl_b_reduce(b, out, cur, slot, count, MPCCL_DEPS(rv, sd, last));
        mpccl_pool_put(pool, si, last);
        cur = out;
    }
    if (me < 2 * extra) mpccl_b_send(b, g->ranks[me ^ 1], out, count, MPCCL_DEPS(last));
}

mpccl_status_t mpccl_algo_allreduce_rd(mpccl_gen_t *g)
{
    uint64_t count = g->d->count;
    mpccl_pool_t pool;
    mpccl_pool_init(g->b, &pool, g->world.n > 1 ? 2 : 0, count);
    mpccl_rd_allreduce(g->b, &g->world, mpccl_ref(MPCCL_BUF_IN, 0), mpccl_ref(MPCCL_BUF_OUT, 0), count, &pool);
    if (g->d->divide) mpccl_gen_divide(g, count);
    return MPCCL_OK;
}
