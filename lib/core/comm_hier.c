/* The node and rail children of a GPU communicator spanning nodes (comm_hier.h). */
#include <stdio.h>
#include <stdlib.h>

#include "core/comm_fail.h"
#include "core/comm_hier.h"
#include "core/comm_init.h"
#include "algo/algo.h"
#include "util/config.h"
#include "util/log.h"

int mpccl_comm_hier_possible(ncclComm_t comm)
{
    const mpccl_topo_t *t = &comm->topo;
    return comm->cuda_dev >= 0 && t->nnodes >= 2 && mpccl_hier_possible(t) && t->node_size[0] >= 2;
}

/* What each rank's environment says, agreed over the bootstrap. */
typedef struct hier_wish {
    int64_t on, min_bytes, chunk_bytes;
} hier_wish_t;

static mpccl_status_t agree(ncclComm_t comm, hier_wish_t *out)
{
    hier_wish_t *all = calloc((size_t)comm->nranks, sizeof(*all));
    if (!all) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for %d ranks' settings", comm->nranks);
    hier_wish_t *me = &all[comm->rank];
    me->on = mpccl_config_int("HIER") != 0;
    me->min_bytes = mpccl_config_int("HIER_MIN_BYTES");
    me->chunk_bytes = mpccl_config_int("HIER_CHUNK_BYTES");
    if (me->min_bytes < 0) me->min_bytes = 0;
    if (me->chunk_bytes <= 0) me->chunk_bytes = 4 << 20;
    mpccl_status_t st = mpccl_bootstrap_allgather(&comm->bs, all, sizeof(*all));
    *out = *me;
    for (int r = 0; st == MPCCL_OK && r < comm->nranks; r++) {
        out->on &= all[r].on;
        if (all[r].min_bytes > out->min_bytes) out->min_bytes = all[r].min_bytes;
        if (all[r].chunk_bytes < out->chunk_bytes) out->chunk_bytes = all[r].chunk_bytes;
    }
    free(all);
    return st;
}

/* One child over comm's bootstrap: color and key as ncclCommSplit; a
 * blocking communicator on comm's device, whatever comm's config says (it is
 * made inside comm's own setup). */
static mpccl_status_t make_child(ncclComm_t comm, int color, int key, const char *what, ncclComm_t *out)
{
    mpccl_bootstrap_t bs = {0};
    int newrank, count;
    *out = NULL;
    MPCCL_CHECK(mpccl_split_bootstrap(&comm->bs, color, key, &newrank, &count, &bs));
    ncclComm_t child = mpccl_comm_alloc();
    if (!child) {
        mpccl_bootstrap_close(&bs);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "comm 0x%llx: out of memory for its %s communicator",
                          (unsigned long long)comm->id, what);
    }
    ncclConfig_t config = comm->config;
    config.blocking = 1;
    child->config = config;
    mpccl_status_t st = mpccl_comm_setup(child, &bs, &config, comm->cuda_dev);
    mpccl_log_set_rank(comm->rank);
    if (st != MPCCL_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", mpccl_last_error()); /* mpccl_fail rewrites the buffer it points to */
        mpccl_comm_release(child, 1);
        return mpccl_fail(st, "comm 0x%llx rank %d: setting up its %s communicator (%d ranks) failed: %s",
                          (unsigned long long)comm->id, comm->rank, what, count, why);
    }
    *out = child;
    return MPCCL_OK;
}

mpccl_status_t mpccl_comm_hier_setup(ncclComm_t comm)
{
    hier_wish_t w = {0, 0, 0};
    if (!mpccl_comm_hier_possible(comm)) return MPCCL_OK;
    MPCCL_CHECK(agree(comm, &w));
    if (!w.on) {
        MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx: not hierarchical (MPCCL_HIER=0 on some rank): every step on the engine",
                   (unsigned long long)comm->id);
        return MPCCL_OK;
    }
    const mpccl_topo_t *t = &comm->topo;
    mpccl_hier_t *h = calloc(1, sizeof(*h));
    if (!h) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the children of comm 0x%llx",
                              (unsigned long long)comm->id);
    h->min_bytes = (uint64_t)w.min_bytes;
    h->chunk_bytes = (uint64_t)w.chunk_bytes;
    h->nnodes = t->nnodes;
    h->node_size = t->node_size[0];
    h->rank_of = malloc((size_t)comm->nranks * sizeof(int));
    h->node_ranks = malloc((size_t)h->node_size * sizeof(int));
    h->rail_ranks = malloc((size_t)h->nnodes * sizeof(int));
    if (!h->rank_of || !h->node_ranks || !h->rail_ranks) {
        free(h->rank_of);
        free(h->node_ranks);
        free(h->rail_ranks);
        free(h);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the children of comm 0x%llx",
                          (unsigned long long)comm->id);
    }
    for (int r = 0; r < comm->nranks; r++) h->rank_of[t->node_of[r] * h->node_size + t->local_rank[r]] = r;
    comm->hier = h;
    int me = comm->rank;
    for (int l = 0; l < h->node_size; l++) h->node_ranks[l] = h->rank_of[t->node_of[me] * h->node_size + l];
    for (int n = 0; n < h->nnodes; n++) h->rail_ranks[n] = h->rank_of[n * h->node_size + t->local_rank[me]];
    mpccl_status_t st = make_child(comm, t->node_of[me], t->local_rank[me], "node", &h->node);
    if (st == MPCCL_OK) st = make_child(comm, t->local_rank[me], t->node_of[me], "rail", &h->rail);
    if (st != MPCCL_OK) return st; /* the parent's release frees what was made */
    h->node->parent_ranks = h->node_ranks;
    h->rail->parent_ranks = h->rail_ranks;
    MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx rank %d: hierarchical, %d nodes x %d ranks: node comm 0x%llx (rank %d), "
               "rail comm 0x%llx (rank %d); from %llu bytes, chunks of %llu bytes", (unsigned long long)comm->id, me,
               h->nnodes, h->node_size, (unsigned long long)h->node->id, h->node->rank,
               (unsigned long long)h->rail->id, h->rail->rank, (unsigned long long)h->min_bytes,
               (unsigned long long)h->chunk_bytes);
    return MPCCL_OK;
}

static ncclComm_t child_at(mpccl_hier_t *h, int i)
{
    return i == 0 ? h->node : h->rail;
}

void mpccl_comm_hier_stop(ncclComm_t comm)
{
    mpccl_hier_t *h = comm->hier;
    if (!h) return;
    for (int i = 0; i < 2; i++) {
        ncclComm_t c = child_at(h, i);
        if (!c || c->state != MPCCL_COMM_READY) continue;
        __atomic_store_n(&c->aborting, 1, __ATOMIC_RELEASE);
        c->exec->stop(c);
    }
}

void mpccl_comm_hier_finalize(ncclComm_t comm)
{
    mpccl_hier_t *h = comm->hier;
    if (!h) return;
    for (int i = 0; i < 2; i++) {
        ncclComm_t c = child_at(h, i);
        if (c && c->state == MPCCL_COMM_READY) mpccl_comm_finalize(c);
    }
}

void mpccl_comm_hier_release(ncclComm_t comm, int force)
{
    mpccl_hier_t *h = comm->hier;
    if (!h) return;
    comm->hier = NULL;
    for (int i = 0; i < 2; i++) {
        ncclComm_t c = child_at(h, i);
        if (!c) continue;
        /* A child that failed, or whose parent is aborted, goes as an abort:
         * its kernels are told to stop and drained, boundedly. */
        int abort = force || __atomic_load_n(&c->aborting, __ATOMIC_ACQUIRE) || c->state == MPCCL_COMM_FAILED ||
                    c->async_error != ncclSuccess;
        if (abort) {
            __atomic_store_n(&c->aborting, 1, __ATOMIC_RELEASE);
            if (c->state == MPCCL_COMM_READY || c->state == MPCCL_COMM_FINALIZED) c->exec->abort(c);
        }
        mpccl_comm_release(c, abort);
    }
    free(h->rank_of);
    free(h->node_ranks);
    free(h->rail_ranks);
    free(h);
}

void mpccl_comm_hier_poll_error(ncclComm_t comm)
{
    mpccl_hier_t *h = comm->hier;
    if (!h) return;
    for (int i = 0; i < 2; i++) {
        ncclComm_t c = child_at(h, i);
        if (!c || (c->state != MPCCL_COMM_READY && c->state != MPCCL_COMM_FINALIZED)) continue;
        c->exec->poll_error(c); /* a timed-out kernel: its message becomes the last error */
        ncclResult_t e = __atomic_load_n(&c->async_error, __ATOMIC_ACQUIRE);
        if (e == ncclSuccess || e == ncclInProgress || comm->async_error != ncclSuccess) continue;
        /* A child failed by a peer's death keeps its message: make it the last error too. */
        if (mpccl_comm_failed(c)) (void)mpccl_comm_fail_report(c, "the hierarchical phase");
        char why[512];
        snprintf(why, sizeof(why), "%s", mpccl_last_error());
        mpccl_comm_fail(comm, e, "its %s communicator 0x%llx failed: %s", i == 0 ? "node" : "rail",
                        (unsigned long long)c->id, why);
    }
}
