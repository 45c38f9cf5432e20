/* ncclCommGrow: existing ranks and new ones form a larger communicator. */
#include <stdlib.h>

#include "core/comm_init.h"
#include "core/group.h"
#include "util/log.h"

/* Existing ranks learn the coordinator's id through the parent (they all call
 * ncclCommGrow: the parent's allgather is safe), then every rank, existing and
 * new, joins a socket bootstrap of nRanks as ncclCommInitRank does, existing
 * ranks with their parent rank.  A last allgather checks that ranks
 * 0..parent size - 1 are exactly the parent's. */
typedef struct grow_slot {
    int32_t has_id, nranks;
    ncclUniqueId id;
} grow_slot_t;

static mpccl_status_t grow_agree_id(mpccl_init_job_t *job)
{
    ncclComm_t parent = job->parent;
    int n = parent->nranks, me = parent->rank, roots = 0;
    grow_slot_t *all = calloc((size_t)n, sizeof(*all));
    if (!all) return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclCommGrow: out of memory");
    all[me].has_id = job->has_id;
    all[me].nranks = job->nranks;
    all[me].id = job->id;
    mpccl_status_t st = mpccl_bootstrap_allgather(&parent->bs, all, sizeof(*all));
    for (int r = 0; r < n && st == MPCCL_OK; r++) {
        if (all[r].nranks != job->nranks)
            st = mpccl_fail(MPCCL_ERR_ARG, "ncclCommGrow: argument nRanks = %d on rank %d but %d on rank %d", job->nranks,
                            me, all[r].nranks, r);
        if (all[r].has_id && roots++ == 0) job->id = all[r].id;
    }
    if (st == MPCCL_OK && roots != 1)
        st = mpccl_fail(MPCCL_ERR_USAGE,
                        "ncclCommGrow: %d existing ranks passed a uniqueId; exactly one must (the one that called "
                        "ncclCommGetUniqueId), the others pass NULL",
                        roots);
    free(all);
    return st;
}

static mpccl_status_t grow_check_layout(mpccl_init_job_t *job, mpccl_bootstrap_t *bs)
{
    int n = job->nranks;
    int32_t *old = calloc((size_t)n, sizeof(*old));
    if (!old) return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclCommGrow: out of memory");
    old[job->rank] = job->parent ? job->parent->nranks : -1;
    mpccl_status_t st = mpccl_bootstrap_allgather(bs, old, sizeof(*old));
    int parent_n = 0;
    for (int r = 0; r < n && st == MPCCL_OK; r++)
        if (old[r] > parent_n) parent_n = old[r];
    for (int r = 0; r < n && st == MPCCL_OK; r++)
        if ((r < parent_n) != (old[r] == parent_n))
            st = mpccl_fail(MPCCL_ERR_ARG,
                            "ncclCommGrow: rank %d of the grown communicator is %s, but the parent has %d ranks: new "
                            "ranks take %d..%d",
                            r, old[r] < 0 ? "a new rank" : "an existing rank", parent_n, parent_n, n - 1);
    free(old);
    return st;
}

static mpccl_status_t init_grow(void *arg)
{
    mpccl_init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    ncclComm_t parent = job->parent;
    mpccl_log_set_rank(job->rank);
    /* The bootstrap's waits give up when the new communicator (or, while it
     * is used, the parent) is aborted. */
    mpccl_bootstrap_set_cancel(&job->comm->aborting, parent ? &parent->aborting : NULL);
    mpccl_status_t st = parent ? grow_agree_id(job) : MPCCL_OK;
    if (parent) {
        mpccl_bootstrap_set_cancel(&job->comm->aborting, NULL);
        mpccl_comm_leave(parent); /* entered by mpccl_comm_grow */
    }
    if (st == MPCCL_OK) st = mpccl_socket_bootstrap_create(job->id.internal, job->rank, job->nranks, &bs);
    if (st == MPCCL_OK && (st = grow_check_layout(job, &bs)) != MPCCL_OK) mpccl_bootstrap_close(&bs);
    if (st == MPCCL_OK)
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommGrow: rank %d of %d (%s)", job->rank, job->nranks,
                   parent ? "existing" : "new");
    st = mpccl_init_job_finish(job, &bs, st);
    mpccl_bootstrap_set_cancel(NULL, NULL); /* the new communicator may be gone */
    return st;
}

mpccl_status_t mpccl_comm_grow(const char *fn, ncclComm_t parent, int nranks, const ncclUniqueId *id, int rank,
                               const ncclConfig_t *config, ncclComm_t *slot)
{
    /* An existing rank uses the parent until the id is agreed: an abort of
     * the parent from another thread waits for it (comm_async.h). */
    if (parent) MPCCL_CHECK(mpccl_comm_enter(parent, fn));
    mpccl_init_job_t *job = mpccl_init_job_new(slot, config, rank, nranks);
    if (!job) {
        if (parent) mpccl_comm_leave(parent);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
    }
    if (parent) job->cuda_dev = parent->cuda_dev;
    job->parent = parent;
    job->has_id = id != NULL;
    if (id) job->id = *id;
    /* config.blocking = 0: returns ncclInProgress, finishes on a worker */
    return mpccl_group_defer_comm_init(job->comm, init_grow, job);
}
