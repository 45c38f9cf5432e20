/* ncclCommSplit: ranks of one color form a child, ordered by key. */
#include <stdlib.h>

#include "core/comm_init.h"
#include "core/group.h"
#include "util/log.h"

typedef struct split_entry {
    int color, key, rank;
} split_entry_t;

/* New rank order inside a color: by key, then by parent rank (NCCL's rule). */
static int split_cmp(const void *a, const void *b)
{
    const split_entry_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : (x->rank > y->rank);
}

mpccl_status_t mpccl_split_bootstrap(mpccl_bootstrap_t *parent, int color, int key, int *newrank, int *count,
                                     mpccl_bootstrap_t *out)
{
    int n = parent->nranks, me = parent->rank;
    mpccl_status_t st;
    split_entry_t *all = calloc((size_t)n, sizeof(*all)), *mine = calloc((size_t)n, sizeof(*mine));
    ncclUniqueId *ids = calloc((size_t)n, sizeof(*ids));
    *newrank = -1;
    *count = 0;
    if (!all || !mine || !ids) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "splitting a communicator: out of memory for %d ranks", n);
        goto done;
    }
    all[me] = (split_entry_t){color, key, me};
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(parent, all, sizeof(*all)), st, done);
    int c = 0;
    for (int r = 0; r < n; r++)
        if (color != NCCL_SPLIT_NOCOLOR && all[r].color == color) mine[c++] = all[r];
    qsort(mine, (size_t)c, sizeof(*mine), split_cmp);
    for (int i = 0; i < c; i++)
        if (mine[i].rank == me) *newrank = i;
    /* The new rank 0 of each color creates the child's bootstrap root; a second
     * allgather over the parent tells its members the id.  Children are then
     * independent of the parent (either may be destroyed first). */
    if (*newrank == 0) MPCCL_CHECK_GOTO(mpccl_socket_get_unique_id(ids[me].internal), st, done);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(parent, ids, sizeof(*ids)), st, done);
    st = MPCCL_OK;
    if (color == NCCL_SPLIT_NOCOLOR) goto done;
    *count = c;
    st = mpccl_socket_bootstrap_create(ids[mine[0].rank].internal, *newrank, c, out);
done:
    free(all);
    free(mine);
    free(ids);
    return st;
}

static mpccl_status_t init_split(void *arg)
{
    mpccl_init_job_t *job = arg;
    ncclComm_t parent = job->parent;
    mpccl_status_t st;
    mpccl_bootstrap_t bs = {0};
    int newrank, count;
    mpccl_log_set_rank(parent->rank);
    /* The bootstrap's waits give up when either communicator is aborted. */
    if (job->color != NCCL_SPLIT_NOCOLOR) mpccl_bootstrap_set_cancel(&job->comm->aborting, &parent->aborting);
    st = mpccl_split_bootstrap(&parent->bs, job->color, job->key, &newrank, &count, &bs);
    if (st == MPCCL_OK && job->color == NCCL_SPLIT_NOCOLOR) {
        mpccl_comm_release(job->comm, 1);
        *job->user_slot = NULL;
        free(job);
        job = NULL;
    } else if (st == MPCCL_OK) {
        job->rank = newrank;
        job->nranks = count;
        mpccl_log_set_rank(newrank);
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommSplit: parent rank %d color %d key %d -> rank %d of %d", parent->rank,
                   job->color, job->key, newrank, count);
    }
    mpccl_comm_leave(parent); /* entered by mpccl_comm_split */
    if (job) st = mpccl_init_job_finish(job, &bs, st);
    mpccl_bootstrap_set_cancel(NULL, NULL); /* the child may be gone */
    return st;
}
mpccl_status_t mpccl_comm_split(const char *fn, ncclComm_t parent, int color, int key, const ncclConfig_t *config,
                                ncclComm_t *slot)
{
    /* The split uses the parent until it is done: an abort of the parent
     * from another thread waits for it (comm_async.h). */
    MPCCL_CHECK(mpccl_comm_enter(parent, fn));
    mpccl_init_job_t *job = mpccl_init_job_new(slot, config, parent->rank, parent->nranks);
    if (!job) {
        mpccl_comm_leave(parent);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
    }
    job->cuda_dev = parent->cuda_dev; /* a child lives on its parent's device */
    job->parent = parent;
    job->color = color;
    job->key = key;
    /* A rank that gets no communicator has no handle to poll: its part runs
     * before returning, even with config.blocking = 0. */
    if (color == NCCL_SPLIT_NOCOLOR) return mpccl_group_defer_init(init_split, job);
    return mpccl_group_defer_comm_init(job->comm, init_split, job);
}
