/* What GPU launches keep between calls: a cache of plans, one per call shape
 * (the schedule and its upload to the device), and scratch memory that only
 * grows. */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "algo/algo.h"
#include "cuda/cuda_rt.h"
#include "gpu/gpu_state.h"
#include "kernels/engine.h"
#include "kernels/plan.h"
#include "kernels/plan_small.h"
#include "util/config.h"
#include "util/log.h"

static unsigned key_hash(const plan_key_t *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < sizeof(*k); i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return (unsigned)(h % PLAN_BUCKETS);
}

/* Where IN lies relative to OUT, for the engine's hazard analysis. */
static void inout_of(const mpccl_coll_desc_t *d, int rank, mpccl_inout_t *io, int64_t *in_off)
{
    *in_off = 0;
    *io = MPCCL_INOUT_DISTINCT;
    if (!d->in_place || d->prescale) return;
    *io = MPCCL_INOUT_OFFSET;
    int64_t c = (int64_t)d->count;
    switch (d->coll) {
    case MPCCL_COLL_ALLGATHER: *in_off = rank * c; break;      /* in == out + rank*count */
    case MPCCL_COLL_REDUCESCATTER: *in_off = -rank * c; break; /* out == in + rank*count */
    case MPCCL_COLL_GATHER: *in_off = d->root * c; break;
    case MPCCL_COLL_SCATTER: *in_off = -d->root * c; break;
    default: break;
    }
}

static plan_entry_t *find_plan(mpccl_gpu_state_t *s, const plan_key_t *k)
{
    for (plan_entry_t *e = s->plans[key_hash(k)]; e; e = e->next)
        if (!memcmp(&e->key, k, sizeof(*k))) return e;
    return NULL;
}

static void keep_plan(ncclComm_t comm, mpccl_gpu_state_t *s, plan_entry_t *e)
{
    unsigned b = key_hash(&e->key);
    e->next = s->plans[b];
    s->plans[b] = e;
    if (++s->nplans % 4096 == 0)
        MPCCL_WARN(MPCCL_SUB_COLL, "comm 0x%llx holds %u cached GPU plans (one per distinct call shape)",
                   (unsigned long long)comm->id, s->nplans);
}

/* Between nodes: the pieces a launch of e's plan moves per channel with each
 * remote peer (es bytes per element), which it posts to the proxy. */
static mpccl_status_t count_pieces(ncclComm_t comm, const mpccl_gpu_state_t *s, plan_entry_t *e, uint32_t es)
{
    if (!s->g->proxy_peers) return MPCCL_OK;
    /* Small calls between nodes: the one-CTA kernel where the plan fits it
     * (chosen once per plan: a plan's counters belong to one kernel). */
    if (mpccl_config_int("ENGINE_SMALL") != 0 &&
        mpccl_gpu_plan_small(&e->sched, es, s->g->nctas, s->g->cta_min_bytes, s->g->proxy_ll_bytes, e->gp.window,
                             s->g->links_host, comm->nranks, NULL)) {
        mpccl_dev_comm_t hdr;
        memset(&hdr, 0, sizeof(hdr));
        hdr.nctas = s->g->nctas;
        hdr.nslots = s->g->nslots;
        hdr.tx_seq = s->g->tx_seq;
        hdr.rx_seq = s->g->rx_seq;
        hdr.tx_acked = s->g->tx_acked;
        hdr.rx_clean = s->g->rx_clean;
        MPCCL_CHECK(mpccl_gpu_small_upload(&e->sched, s->g->links_host, &hdr, &e->gp));
        e->gp.small_overlap = mpccl_config_int("ENGINE_SMALL_OVERLAP") != 0;
    }
    const mpccl_gpu_cut_t cut = {s->g->nctas, s->g->cta_min_bytes, s->g->slot_bytes, s->g->proxy_whole_bytes,
                                 s->g->proxy_eager_bytes};
    return mpccl_gpu_plan_pieces(&e->sched, es, &cut, s->g->links_host, comm->nranks, &e->gp.due, &e->gp.ndue);
}

/* A plan whose schedule was built (st says whether it was): uploaded for
 * the kernels and counted for the proxy, then kept; on any failure freed.
 * es: bytes per element of the schedule's counts. */
static mpccl_status_t finish_plan(ncclComm_t comm, mpccl_gpu_state_t *s, plan_entry_t *e, mpccl_status_t st,
                                  mpccl_inout_t io, int64_t in_off, uint32_t es, plan_entry_t **out)
{
    if (st == MPCCL_OK) {
        st = mpccl_gpu_plan_upload_io(&e->sched, s->g->nctas, MPCCL_ENGINE_MAX_WINDOW, io, in_off, &e->gp);
        if (st == MPCCL_OK && (st = count_pieces(comm, s, e, es)) != MPCCL_OK) mpccl_gpu_plan_free(&e->gp);
        if (st != MPCCL_OK) mpccl_sched_free(&e->sched);
    }
    if (st != MPCCL_OK) {
        free(e);
        return st;
    }
    keep_plan(comm, s, e);
    *out = e;
    return MPCCL_OK;
}

mpccl_status_t mpccl_gpu_plan_lookup(ncclComm_t comm, mpccl_gpu_state_t *s, const mpccl_coll_desc_t *d,
                                     plan_entry_t **out)
{
    plan_key_t k;
    memset(&k, 0, sizeof(k));
    k.coll = d->coll;
    k.dt = d->dt;
    k.op = d->op;
    k.root = d->root;
    k.prescale = (uint8_t)d->prescale;
    k.divide = (uint8_t)d->divide;
    k.in_place = (uint8_t)d->in_place;
    k.count = d->count;
    if ((*out = find_plan(s, &k)) != NULL) return MPCCL_OK;
    plan_entry_t *e = calloc(1, sizeof(*e));
    if (!e) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a plan");
    e->key = k;
    /* The device engine keeps whole shares per chunk: its pieces and
     * mailboxes were sized and measured that way (the split is the host's). */
    mpccl_plan_params_t params = comm->params;
    params.split_shares = 0;
    /* Where every peer is on another node, a ring's chunk fills a pair's
     * mailbox (every slot of every CTA): over TCP 512 KB chunks moved an
     * all_gather's pieces a quarter full, at 0.55-0.6x send/recv's rate
     * (doc/PERFORMANCE.md, 2026-11-27). */
    if (comm->topo.nnodes > 1 && comm->topo.nnodes == comm->nranks) {
        uint64_t fill = (uint64_t)s->g->nslots * s->g->slot_bytes;
        if (params.chunk_bytes < fill) params.chunk_bytes = fill;
    }
    mpccl_inout_t io;
    int64_t in_off;
    inout_of(d, comm->rank, &io, &in_off);
    return finish_plan(comm, s, e, mpccl_plan(&comm->topo, d, &params, &e->sched), io, in_off,
                       (uint32_t)mpccl_dtype_size(d->dt), out);
}

/* ---- grouped point-to-point ---- */

/* The order a group's p2p calls go into the schedule: by distance to the peer
 * (a send to me+d and a receive from me-d share distance d, so the matching
 * receive of my send sits at the same place in the peer's schedule), then in
 * program order, which keeps each peer's messages in order.  The engine works
 * on a window of steps, and users may post all sends before all receives. */
static void p2p_pairwise_order(ncclComm_t comm, mpccl_call_t **calls, int n, int *order)
{
    int nr = comm->nranks, me = comm->rank, k = 0;
    for (int d = 0; d < nr; d++)
        for (int i = 0; i < n; i++) {
            int peer = calls[i]->desc.root;
            int dist = calls[i]->desc.coll == MPCCL_COLL_SEND ? (peer - me + nr) % nr : (me - peer + nr) % nr;
            if (dist == d) order[k++] = i;
        }
}

/* A group's p2p calls of one communicator become one launch: their sends and
 * receives progress together, so every rank exchanging with every other cannot
 * deadlock on full mailboxes.  Bytes move, so the schedule is in bytes; buffer 3+k
 * is call k's.  Plans are cached by the calls' shape. */
mpccl_status_t mpccl_gpu_plan_lookup_p2p(ncclComm_t comm, mpccl_gpu_state_t *s, mpccl_call_t **calls, int n,
                                         plan_entry_t **out)
{
    plan_key_t k;
    memset(&k, 0, sizeof(k));
    k.coll = -1; /* never a collective's key */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++) {
        uint64_t v[3] = {(uint64_t)calls[i]->desc.coll, (uint64_t)(uint32_t)calls[i]->desc.root,
                         calls[i]->desc.count * mpccl_dtype_size(calls[i]->desc.dt)};
        for (int j = 0; j < 3; j++) h = (h ^ v[j]) * 0x100000001b3ULL;
    }
    k.count = h;
    k.root = n;
    if ((*out = find_plan(s, &k)) != NULL) return MPCCL_OK;
    plan_entry_t *e = calloc(1, sizeof(*e));
    if (!e) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a plan");
    e->key = k;
    mpccl_build_t bld;
    mpccl_status_t st = mpccl_build_init(&bld, &e->sched, comm->rank, comm->nranks);
    if (st == MPCCL_OK) {
        int order[MPCCL_ENGINE_MAX_BUFS];
        p2p_pairwise_order(comm, calls, n, order);
        for (int k = 0; k < n; k++) {
            int i = order[k];
            uint64_t bytes = calls[i]->desc.count * mpccl_dtype_size(calls[i]->desc.dt);
            mpccl_ref_t r = mpccl_ref((uint32_t)(3 + i), 0);
            if (calls[i]->desc.coll == MPCCL_COLL_SEND) mpccl_b_send(&bld, calls[i]->desc.root, r, bytes, NULL, 0);
            else mpccl_b_recv(&bld, calls[i]->desc.root, r, bytes, NULL, 0);
        }
        st = mpccl_build_finish(&bld);
    }
    return finish_plan(comm, s, e, st, MPCCL_INOUT_UNKNOWN, 0, 1, out); /* grouped p2p plans count bytes */
}

void mpccl_gpu_plans_free(mpccl_gpu_state_t *s)
{
    for (int b = 0; b < PLAN_BUCKETS; b++) {
        plan_entry_t *e = s->plans[b];
        while (e) {
            plan_entry_t *next = e->next;
            mpccl_gpu_plan_free(&e->gp);
            mpccl_sched_free(&e->sched);
            free(e);
            e = next;
        }
        s->plans[b] = NULL;
    }
}

uint64_t mpccl_gpu_plans_bytes(const mpccl_gpu_state_t *s)
{
    uint64_t total = 0;
    for (int i = 0; i < PLAN_BUCKETS; i++)
        for (const plan_entry_t *e = s->plans[i]; e; e = e->next) total += e->gp.bytes;
    return total;
}

/* ---- scratch ---- */

mpccl_status_t mpccl_gpu_scratch_get(scratch_block_t **head, size_t bytes, void **out)
{
    if (*head && (*head)->bytes >= bytes) {
        *out = (*head)->ptr;
        return MPCCL_OK;
    }
    size_t want = *head ? (*head)->bytes * 2 : (1u << 20);
    while (want < bytes) want *= 2;
    scratch_block_t *blk = calloc(1, sizeof(*blk));
    if (!blk) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory");
    /* cudaMalloc is not allowed while a stream is being captured in global mode;
     * growing scratch is rare (the first call of a larger size), so relax the
     * capture mode for this thread around it. */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaMalloc(&blk->ptr, want);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) {
        free(blk);
        return mpccl_cuda_error(e, "cudaMalloc(scratch)");
    }
    blk->bytes = want;
    blk->older = *head;
    *head = blk;
    *out = blk->ptr;
    return MPCCL_OK;
}

void mpccl_gpu_scratch_free(scratch_block_t **head)
{
    while (*head) {
        scratch_block_t *older = (*head)->older;
        cudaFree((*head)->ptr);
        free(*head);
        *head = older;
    }
}

uint64_t mpccl_gpu_scratch_bytes(const scratch_block_t *head)
{
    uint64_t total = 0;
    for (const scratch_block_t *b = head; b; b = b->older) total += b->bytes;
    return total;
}

#endif /* MPCCL_HAVE_CUDA */
