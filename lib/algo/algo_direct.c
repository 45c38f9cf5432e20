/* Direct exchanges: AlltoAll, Gather, Scatter and point-to-point Send / Recv.
 * Peers are visited starting next to me so that ranks do not all hit the same
 * peer at once. */
#include <stdlib.h>

#include "algo/algo.h"

static int mod(int a, int n) { return ((a % n) + n) % n; }

mpccl_status_t mpccl_algo_alltoall_direct(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n, me = g->world.me;
    uint64_t count = g->d->count;
    uint32_t *sent = malloc((size_t)n * sizeof(uint32_t)), *got = malloc((size_t)n * sizeof(uint32_t));
    if (!sent || !got) {
        free(sent);
        free(got);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory building an alltoall for %d ranks", n);
    }
    /* In place, what arrives from p may not land before my block for p is sent:
     * it waits in its own slot of TMP (reusing slots could make the waits cyclic). */
    uint64_t stage = g->alias && n > 1 ? mpccl_b_tmp(b, (uint64_t)(n - 1) * count) : 0;
    /* Pairwise order: at step i I send to me+i and receive from me-i, which is
     * sending to me at its step i.  An executor that keeps only a window of
     * steps in progress (the GPU engine) then never waits on a message whose
     * sender has not reached it yet, whatever the rank count. */
    for (int i = 1; i < n; i++) {
        int to = mod(me + i, n), from = mod(me - i, n);
        sent[to] = mpccl_b_send(b, to, mpccl_ref(MPCCL_BUF_IN, (uint64_t)to * count), count, NULL, 0);
        mpccl_ref_t dst = g->alias ? mpccl_ref(MPCCL_BUF_TMP, stage + (uint64_t)(i - 1) * count)
                                   : mpccl_ref(MPCCL_BUF_OUT, (uint64_t)from * count);
        got[from] = mpccl_b_recv(b, from, dst, count, NULL, 0);
    }
    for (int i = 1; i < n && g->alias; i++) {
        int from = mod(me - i, n);
        mpccl_ref_t slot = mpccl_ref(MPCCL_BUF_TMP, stage + (uint64_t)(i - 1) * count);
        mpccl_b_copy(b, mpccl_ref(MPCCL_BUF_OUT, (uint64_t)from * count), slot, count,
                     MPCCL_DEPS(got[from], sent[from]));
    }
    free(got);
    if (!g->alias)
        mpccl_b_copy(b, mpccl_ref(MPCCL_BUF_OUT, (uint64_t)me * count), mpccl_ref(MPCCL_BUF_IN, (uint64_t)me * count),
                     count, NULL, 0);
    free(sent);
    return MPCCL_OK;
}

mpccl_status_t mpccl_algo_gather_direct(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n, me = g->world.me, root = g->d->root;
    uint64_t count = g->d->count;
    if (me != root) {
        mpccl_b_send(b, root, mpccl_ref(MPCCL_BUF_IN, 0), count, NULL, 0);
        return MPCCL_OK;
    }
    for (int i = 1; i < n; i++) {
        int from = mod(me + i, n);
        mpccl_b_recv(b, from, mpccl_ref(MPCCL_BUF_OUT, (uint64_t)from * count), count, NULL, 0);
    }
    if (!g->alias)
        mpccl_b_copy(b, mpccl_ref(MPCCL_BUF_OUT, (uint64_t)me * count), mpccl_ref(MPCCL_BUF_IN, 0), count, NULL, 0);
    return MPCCL_OK;
}

mpccl_status_t mpccl_algo_scatter_direct(mpccl_gen_t *g)
{
    mpccl_build_t *b = g->b;
    int n = g->world.n, me = g->world.me, root = g->d->root;
    uint64_t count = g->d->count;
    if (me != root) {
        mpccl_b_recv(b, root, mpccl_ref(MPCCL_BUF_OUT, 0), count, NULL, 0);
        return MPCCL_OK;
    }
    for (int i = 1; i < n; i++) {
        int to = mod(me + i, n);
        mpccl_b_send(b, to, mpccl_ref(MPCCL_BUF_IN, (uint64_t)to * count), count, NULL, 0);
    }
    if (!g->alias)
        mpccl_b_copy(b, mpccl_ref(MPCCL_BUF_OUT, 0), mpccl_ref(MPCCL_BUF_IN, (uint64_t)me * count), count, NULL, 0);
    return MPCCL_OK;
}

/* Point-to-point: d->root is the peer.  A message to myself goes through the
 * transport like any other (the matching call is another task). */
mpccl_status_t mpccl_algo_send(mpccl_gen_t *g)
{
    mpccl_b_send(g->b, g->d->root, mpccl_ref(MPCCL_BUF_IN, 0), g->d->count, NULL, 0);
    return MPCCL_OK;
}

mpccl_status_t mpccl_algo_recv(mpccl_gen_t *g)
{
    mpccl_b_recv(g->b, g->d->root, mpccl_ref(MPCCL_BUF_OUT, 0), g->d->count, NULL, 0);
    return MPCCL_OK;
}
