/* Broadcast and Reduce: a pipelined chain through all ranks starting (or ending)
 * at the root, and a binomial tree.  v is the rank's distance from the root. */
#include "algo/algo.h"

static int vrank(const mpccl_gen_t *g) { return (g->world.me - g->d->root + g->world.n) % g->world.n; }
static int real(const mpccl_gen_t *g, int v) { return (v + g->d->root) % g->world.n; }

static uint64_t nchunks(const mpccl_gen_t *g)
{
    uint64_t c = mpccl_div_up(g->d->count, g->chunk);
    return c ? c : 1;
}

mpccl_status_t mpccl_algo_bcast_ring(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n, v = vrank(g);
    uint64_t count = g->d->count, nc = nchunks(g);
    int next = v + 1 < n ? real(g, v + 1) : -1;
    for (uint64_t c = 0; c < nc && count; c++) {
        uint64_t off = mpccl_split_off(count, nc, c), len = mpccl_split_len(count, nc, c);
        if (v == 0) {
            if (next >= 0) mpccl_b_send(b, next, mpccl_ref(MPCCL_BUF_IN, off), len, NULL, 0);
            continue;
        }
        mpccl_ref_t dst = mpccl_ref(MPCCL_BUF_OUT, off);
        uint32_t rv = mpccl_b_recv(b, real(g, v - 1), dst, len, NULL, 0);
        if (next >= 0) mpccl_b_send(b, next, dst, len, MPCCL_DEPS(rv));
    }
    /* The root's own copy after its sends: the data leaves first (an executor
     * taking steps in order would otherwise copy before the first send). */
    if (v == 0 && !g->alias) mpccl_b_copy(b, mpccl_ref(MPCCL_BUF_OUT, 0), mpccl_ref(MPCCL_BUF_IN, 0), count, NULL, 0);
    return MPCCL_OK;
}

/* Binomial tree: v receives from v minus its lowest set bit and sends to v + m for
 * every power of two m below that bit, largest subtree first. */
mpccl_status_t mpccl_algo_bcast_tree(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n, v = vrank(g);
    uint64_t count = g->d->count;
    mpccl_ref_t src = mpccl_ref(MPCCL_BUF_IN, 0), out = mpccl_ref(MPCCL_BUF_OUT, 0);
    uint32_t have = MPCCL_NONE;
    int low = 1;
    while (low < n) low <<= 1;
    if (v != 0) {
        low = v & -v;
        have = mpccl_b_recv(b, real(g, v - low), out, count, NULL, 0);
        src = out;
    }
    for (int m = low >> 1; m >= 1; m >>= 1)
        if (v + m < n) mpccl_b_send(b, real(g, v + m), src, count, MPCCL_DEPS(have));
    if (v == 0 && !g->alias) mpccl_b_copy(b, out, src, count, NULL, 0); /* after the sends, as in the chain */
    return MPCCL_OK;
}

mpccl_status_t mpccl_algo_reduce_ring(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n, v = vrank(g);
    uint64_t count = g->d->count, nc = nchunks(g);
    if (n == 1) {
        if (!g->alias) mpccl_b_copy(b, mpccl_ref(MPCCL_BUF_OUT, 0), mpccl_ref(MPCCL_BUF_IN, 0), count, NULL, 0);
    } else {
        mpccl_pool_t pool;
        mpccl_pool_init(b, &pool, v == n - 1 ? 0 : 4, mpccl_div_up(count, nc));
        for (uint64_t c = 0; c < nc && count; c++) {
            uint64_t off = mpccl_split_off(count, nc, c), len = mpccl_split_len(count, nc, c);
            mpccl_ref_t in = mpccl_ref(MPCCL_BUF_IN, off), slot;
            if (v == n - 1) {
                mpccl_b_send(b, real(g, v - 1), in, len, NULL, 0);
                continue;
            }
            uint32_t war, si = mpccl_pool_get(&pool, &slot, &war);
            uint32_t rv = mpccl_b_recv(b, real(g, v + 1), slot, len, MPCCL_DEPS(war));
            if (v == 0) {
                uint32_t red = mpccl_b_reduce(b, mpccl_ref(MPCCL_BUF_OUT, off), slot, in, len, MPCCL_DEPS(rv));
                mpccl_pool_put(&pool, si, red);
            } else {
                /* Partial results stay in the slot until forwarded. */
                uint32_t red = mpccl_b_reduce(b, slot, slot, in, len, MPCCL_DEPS(rv));
                mpccl_pool_put(&pool, si, mpccl_b_send(b, real(g, v - 1), slot, len, MPCCL_DEPS(red)));
            }
        }
    }
    if (g->d->divide && v == 0) mpccl_gen_divide(g, count);
    return MPCCL_OK;
}

/* Binomial tree toward the root.  Non-root ranks accumulate in TMP: their OUT
 * need not exist. */
mpccl_status_t mpccl_algo_reduce_tree(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n, v = vrank(g);
    uint64_t count = g->d->count;
    int nchild = 0;
    for (int m = 1; m < n && !(v & m); m <<= 1)
        if (v + m < n) nchild++;
    mpccl_ref_t cur = mpccl_ref(MPCCL_BUF_IN, 0), acc = mpccl_ref(MPCCL_BUF_OUT, 0), slot;
    if (v != 0 && nchild) acc = mpccl_ref(MPCCL_BUF_TMP, mpccl_b_tmp(b, count));
    mpccl_pool_t pool;
    mpccl_pool_init(b, &pool, (uint32_t)(nchild < 2 ? nchild : 2), count);
    uint32_t last = MPCCL_NONE;
    for (int m = 1; m < n; m <<= 1) {
        if (v & m) {
            mpccl_b_send(b, real(g, v - m), cur, count, MPCCL_DEPS(last));
            break;
        }
        if (v + m >= n) continue;
        uint32_t war, si = mpccl_pool_get(&pool, &slot, &war);
        uint32_t rv = mpccl_b_recv(b, real(g, v + m), slot, count, MPCCL_DEPS(war));
        last = mpccl_b_reduce(b, acc, cur, slot, count, MPCCL_DEPS(rv, last));
        mpccl_pool_put(&pool, si, last);
        cur = acc;
    }
    if (v == 0 && nchild == 0 && !g->alias) mpccl_b_copy(b, acc, cur, count, NULL, 0);
    if (g->d->divide && v == 0) mpccl_gen_divide(g, count);
    return MPCCL_OK;
}
