/* Communicator lifecycle and queries: init (unique id, in process, out of band),
 * split, finalize, destroy, abort, custom reduction ops. */
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "api/api.h"
#include "api/api_check.h"
#include "api/api_nvtx.h" /* NVTX ranges: one line atop each init and teardown function */
#include "core/comm.h"
#include "core/group.h"
#include "util/log.h"
#include "mpccl.h"
#include "onesided/onesided_win.h"
#ifdef MPCCL_HAVE_CUDA
#include "gpu/gpu_launch.h"
#endif

/* What a deferred init needs; freed by the init function. */
typedef struct init_job {
    ncclComm_t comm;
    ncclComm_t *user_slot; /* set to NULL if the init fails */
    ncclConfig_t config;
    int rank, nranks;
    ncclUniqueId id;                 /* unique id inits */
    mpccl_inproc_group_t *inproc;    /* ncclCommInitAll */
    const mpcclOobOps_t *oob;        /* mpcclCommInitOob */
    void *oob_ctx;
    ncclComm_t parent;               /* ncclCommSplit, ncclCommGrow */
    int color, key;
    int has_id;                      /* ncclCommGrow: this rank was given the id */
    int *survivors;                  /* ncclCommShrink: parent ranks kept, ascending */
    int cuda_dev;                    /* the device it binds to; -1: host */
} init_job_t;

/* Finishes an init: on failure the communicator is released and the user's
 * handle cleared, as a failed blocking init in NCCL leaves nothing to destroy. */
static mpccl_status_t finish_init(init_job_t *job, mpccl_bootstrap_t *bs, mpccl_status_t st)
{
    /* A bootstrap that failed to form has released itself; one that formed now
     * belongs to the communicator, which releases it on failure. */
    if (st == MPCCL_OK) st = mpccl_comm_enter_device(job->cuda_dev);
    if (st == MPCCL_OK) st = mpccl_comm_setup(job->comm, bs, &job->config, job->cuda_dev);
    if (st != MPCCL_OK) {
        job->comm->state = MPCCL_COMM_FAILED;
        mpccl_comm_release(job->comm, 1);
        if (job->user_slot) *job->user_slot = NULL;
    }
    free(job);
    return st;
}

static mpccl_status_t init_from_unique_id(void *arg)
{
    init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    mpccl_log_set_rank(job->rank);
    mpccl_status_t st = mpccl_socket_bootstrap_create(job->id.internal, job->rank, job->nranks, &bs);
    return finish_init(job, &bs, st);
}

static mpccl_status_t init_in_process(void *arg)
{
    init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    mpccl_log_set_rank(job->rank);
    mpccl_status_t st = mpccl_inproc_bootstrap_create(job->inproc, job->rank, &bs);
    return finish_init(job, &bs, st);
}

static mpccl_status_t init_out_of_band(void *arg)
{
    init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    mpccl_log_set_rank(job->rank);
    mpccl_status_t st = mpccl_oob_bootstrap_create(job->oob, job->oob_ctx, job->rank, job->nranks, &bs);
    if (st != MPCCL_OK && job->oob->release) job->oob->release(job->oob_ctx);
    return finish_init(job, &bs, st);
}

static init_job_t *new_job(ncclComm_t *slot, const ncclConfig_t *config, int rank, int nranks)
{
    init_job_t *job = calloc(1, sizeof(*job));
    if (!job) return NULL;
    job->comm = mpccl_comm_alloc();
    if (!job->comm) {
        free(job);
        return NULL;
    }
    job->user_slot = slot;
    job->config = *config;
    job->rank = rank;
    job->nranks = nranks;
    job->cuda_dev = mpccl_comm_device_for_init(); /* grouped inits run in other threads */
    *slot = job->comm;
    return job;
}

static mpccl_status_t check_init_args(const char *fn, ncclComm_t *comm, int nranks, int rank)
{
    MPCCL_CHECK(mpccl_check_ptr(fn, "comm", comm));
    if (nranks < 1) return mpccl_fail(MPCCL_ERR_ARG, "%s: argument nranks = %d, expected >= 1", fn, nranks);
    if (rank < 0 || rank >= nranks)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument rank = %d, expected a rank in [0, %d)", fn, rank, nranks);
    return MPCCL_OK;
}

static mpccl_status_t check_unique_id(const char *fn, const ncclUniqueId *id)
{
    static const ncclUniqueId zero;
    if (memcmp(id, &zero, sizeof(zero)) == 0)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument commId is all zeros: it was never filled by ncclGetUniqueId (or not "
                          "broadcast to this rank)",
                          fn);
    return MPCCL_OK;
}

static mpccl_status_t init_rank_config(const char *fn, ncclComm_t *comm, int nranks, const ncclUniqueId *id,
                                       int rank, ncclConfig_t *config)
{
    ncclConfig_t cfg;
    if (comm) *comm = NULL;
    MPCCL_CHECK(check_init_args(fn, comm, nranks, rank));
    MPCCL_CHECK(check_unique_id(fn, id));
    MPCCL_CHECK(mpccl_config_normalize(config, &cfg, fn));
    init_job_t *job = new_job(comm, &cfg, rank, nranks);
    if (!job) return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
    job->id = *id;
    return mpccl_group_defer_init(init_from_unique_id, job);
}

MPCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId)
{
    if (uniqueId == NULL)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG, "ncclGetUniqueId: argument uniqueId is NULL"));
    return mpccl_result(mpccl_socket_get_unique_id(uniqueId->internal));
}

MPCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    MPCCL_NVTX_RANGE("ncclCommInitRank(): nranks %d, rank %d", nranks, rank);
    return mpccl_result(init_rank_config("ncclCommInitRank", comm, nranks, &commId, rank, NULL));
}

MPCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
          ncclConfig_t *config)
{
    MPCCL_NVTX_RANGE("ncclCommInitRankConfig(): nranks %d, rank %d", nranks, rank);
    return mpccl_result(init_rank_config("ncclCommInitRankConfig", comm, nranks, &commId, rank, config));
}

MPCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank, int nId,
          ncclUniqueId *commIds, ncclConfig_t *config)
{
    MPCCL_NVTX_RANGE("ncclCommInitRankScalable(): nranks %d, rank %d", nranks, myrank);
    const char *fn = "ncclCommInitRankScalable";
    if (nId < 1)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG, "%s: argument nId = %d, expected >= 1", fn, nId));
    mpccl_status_t st = mpccl_check_ptr(fn, "commIds", commIds);
    if (st != MPCCL_OK) return mpccl_result(st);
    /* One root serves every rank here: the bootstrap's root only exchanges
     * addresses, so it is not the bottleneck NCCL spreads over several ids. */
    return mpccl_result(init_rank_config(fn, newcomm, nranks, &commIds[0], myrank, config));
}

MPCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist)
{
    MPCCL_NVTX_RANGE("ncclCommInitAll(): ndev %d", ndev);
    const char *fn = "ncclCommInitAll";
    mpccl_status_t st = mpccl_check_ptr(fn, "comms", comms);
    if (st != MPCCL_OK) return mpccl_result(st);
    if (ndev < 1) return mpccl_result(mpccl_fail(MPCCL_ERR_ARG, "%s: argument ndev = %d, expected >= 1", fn, ndev));
    if (mpccl_group_depth() > 0)
        return mpccl_result(mpccl_fail(MPCCL_ERR_USAGE, "%s: called inside ncclGroupStart/End; it forms its own "
                                       "group (call it outside any group)", fn));
    ncclConfig_t cfg;
    st = mpccl_config_normalize(NULL, &cfg, fn);
    if (st != MPCCL_OK) return mpccl_result(st);
    mpccl_inproc_group_t *g = NULL;
    st = mpccl_inproc_group_create(ndev, &g);
    if (st != MPCCL_OK) return mpccl_result(st);
    for (int i = 0; i < ndev; i++) comms[i] = NULL;
    mpccl_group_start();
    for (int i = 0; i < ndev && st == MPCCL_OK; i++) {
        init_job_t *job = new_job(&comms[i], &cfg, i, ndev);
        if (!job) {
            st = mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
            break;
        }
        job->inproc = g;
        /* NCCL: rank i uses devlist[i], or device i without a list. */
        if (job->cuda_dev >= 0) job->cuda_dev = devlist ? devlist[i] : i;
        st = mpccl_group_defer_init(init_in_process, job);
    }
    mpccl_status_t end = mpccl_group_end();
    mpccl_inproc_group_release(g); /* each rank's bootstrap holds its own reference */
    if (st == MPCCL_OK) st = end;
    if (st != MPCCL_OK)
        for (int i = 0; i < ndev; i++)
            if (comms[i]) {
                mpccl_comm_release(comms[i], 1);
                comms[i] = NULL;
            }
    return mpccl_result(st);
}

MPCCL_EXPORT ncclResult_t mpcclCommInitOob(ncclComm_t *comm, int nranks, int rank, const mpcclOobOps_t *ops,
                                           void *ctx, ncclConfig_t *config)
{
    const char *fn = "mpcclCommInitOob";
    ncclConfig_t cfg;
    mpccl_status_t st;
    if (comm) *comm = NULL;
    MPCCL_CHECK_GOTO(check_init_args(fn, comm, nranks, rank), st, fail);
    MPCCL_CHECK_GOTO(mpccl_check_ptr(fn, "ops", ops), st, fail);
    if (ops->allgather == NULL) {
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: ops->allgather is NULL, expected a callback", fn);
        goto fail;
    }
    MPCCL_CHECK_GOTO(mpccl_config_normalize(config, &cfg, fn), st, fail);
    init_job_t *job = new_job(comm, &cfg, rank, nranks);
    if (!job) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
        goto fail;
    }
    job->oob = ops;
    job->oob_ctx = ctx;
    return mpccl_result(mpccl_group_defer_init(init_out_of_band, job));
fail:
    if (ops && ops->release) ops->release(ctx);
    return mpccl_result(st);
}

/* ---- split ---- */

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

static mpccl_status_t init_split(void *arg)
{
    init_job_t *job = arg;
    ncclComm_t parent = job->parent;
    int n = parent->nranks, me = parent->rank;
    mpccl_status_t st;
    mpccl_bootstrap_t bs = {0};
    split_entry_t *all = calloc((size_t)n, sizeof(*all)), *mine = calloc((size_t)n, sizeof(*mine));
    ncclUniqueId *ids = calloc((size_t)n, sizeof(*ids));
    mpccl_log_set_rank(me);
    if (!all || !mine || !ids) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "ncclCommSplit: out of memory for %d ranks", n);
        goto done;
    }
    all[me] = (split_entry_t){job->color, job->key, me};
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&parent->bs, all, sizeof(*all)), st, done);
    int count = 0, newrank = -1;
    for (int r = 0; r < n; r++)
        if (job->color != NCCL_SPLIT_NOCOLOR && all[r].color == job->color) mine[count++] = all[r];
    qsort(mine, (size_t)count, sizeof(*mine), split_cmp);
    for (int i = 0; i < count; i++)
        if (mine[i].rank == me) newrank = i;
    /* The new rank 0 of each color creates the child's bootstrap root; a second
     * allgather over the parent tells its members the id.  Children are then
     * independent of the parent (either may be destroyed first). */
    if (newrank == 0) MPCCL_CHECK_GOTO(mpccl_socket_get_unique_id(ids[me].internal), st, done);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&parent->bs, ids, sizeof(*ids)), st, done);
    if (job->color == NCCL_SPLIT_NOCOLOR) {
        mpccl_comm_release(job->comm, 1);
        *job->user_slot = NULL;
        free(job);
        job = NULL;
        st = MPCCL_OK;
        goto done;
    }
    job->rank = newrank;
    job->nranks = count;
    mpccl_log_set_rank(newrank);
    st = mpccl_socket_bootstrap_create(ids[mine[0].rank].internal, newrank, count, &bs);
    MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommSplit: parent rank %d color %d key %d -> rank %d of %d", me, all[me].color,
               job->key, newrank, count);
done:
    free(all);
    free(mine);
    free(ids);
    return job ? finish_init(job, &bs, st) : st;
}

MPCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
          ncclConfig_t *config)
{
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), "ncclCommSplit(): parent commHash 0x%llx, color %d, key %d", MPCCL_NVTX_HASH(comm), color, key);
    const char *fn = "ncclCommSplit";
    ncclConfig_t cfg;
    mpccl_status_t st;
    if (newcomm) *newcomm = NULL;
    if ((st = mpccl_check_comm_live(fn, comm)) != MPCCL_OK ||
        (st = mpccl_check_ptr(fn, "newcomm", newcomm)) != MPCCL_OK)
        return mpccl_result(st);
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG,
                                       "%s: argument color = %d, expected >= 0 or NCCL_SPLIT_NOCOLOR (%d)", fn, color,
                                       NCCL_SPLIT_NOCOLOR));
    /* Without a config the child inherits the parent's (as NCCL). */
    if (config) {
        if ((st = mpccl_config_normalize(config, &cfg, fn)) != MPCCL_OK) return mpccl_result(st);
    } else {
        cfg = comm->config;
    }
    init_job_t *job = new_job(newcomm, &cfg, comm->rank, comm->nranks);
    if (!job) return mpccl_result(mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn));
    job->cuda_dev = comm->cuda_dev; /* a child lives on its parent's device */
    job->parent = comm;
    job->color = color;
    job->key = key;
    return mpccl_result(mpccl_group_defer_init(init_split, job));
}

/* ---- grow ---- */

/* Existing ranks learn the coordinator's id through the parent (they all call
 * ncclCommGrow: the parent's allgather is safe), then every rank, existing and
 * new, joins a socket bootstrap of nRanks as ncclCommInitRank does, existing
 * ranks with their parent rank.  A last allgather checks that ranks
 * 0..parent size - 1 are exactly the parent's. */
typedef struct grow_slot {
    int32_t has_id, nranks;
    ncclUniqueId id;
} grow_slot_t;

static mpccl_status_t grow_agree_id(init_job_t *job)
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

static mpccl_status_t grow_check_layout(init_job_t *job, mpccl_bootstrap_t *bs)
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
    init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    mpccl_log_set_rank(job->rank);
    mpccl_status_t st = job->parent ? grow_agree_id(job) : MPCCL_OK;
    if (st == MPCCL_OK) st = mpccl_socket_bootstrap_create(job->id.internal, job->rank, job->nranks, &bs);
    if (st == MPCCL_OK && (st = grow_check_layout(job, &bs)) != MPCCL_OK) mpccl_bootstrap_close(&bs);
    if (st == MPCCL_OK)
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommGrow: rank %d of %d (%s)", job->rank, job->nranks,
                   job->parent ? "existing" : "new");
    return finish_init(job, &bs, st);
}

MPCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId *uniqueId)
{
    static const char fn[] = "ncclCommGetUniqueId";
    mpccl_status_t st = mpccl_check_comm_live(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "uniqueId", uniqueId);
    /* The id names the grown communicator's bootstrap root, served from here. */
    if (st == MPCCL_OK) st = mpccl_socket_get_unique_id(uniqueId->internal);
    return mpccl_result(st);
}

MPCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
          ncclComm_t *newcomm, ncclConfig_t *config)
{
    static const char fn[] = "ncclCommGrow";
    ncclConfig_t cfg;
    mpccl_status_t st = mpccl_check_ptr(fn, "newcomm", newcomm);
    if (st != MPCCL_OK) return mpccl_result(st);
    *newcomm = NULL;
    if (comm) {
        /* An existing rank: keeps its rank, inherits the parent's config and device. */
        if ((st = mpccl_check_comm_live(fn, comm)) != MPCCL_OK) return mpccl_result(st);
        if (rank != -1)
            return mpccl_result(mpccl_fail(MPCCL_ERR_ARG,
                                           "%s: argument rank = %d on an existing rank, expected -1 (existing ranks "
                                           "keep their rank, %d)",
                                           fn, rank, comm->rank));
        if (nRanks <= comm->nranks)
            return mpccl_result(mpccl_fail(MPCCL_ERR_ARG, "%s: argument nRanks = %d, expected more than the parent's %d",
                                           fn, nRanks, comm->nranks));
        if (uniqueId && (st = check_unique_id(fn, uniqueId)) != MPCCL_OK) return mpccl_result(st);
        rank = comm->rank;
    } else {
        if ((st = mpccl_check_ptr(fn, "uniqueId", uniqueId)) != MPCCL_OK ||
            (st = check_unique_id(fn, uniqueId)) != MPCCL_OK)
            return mpccl_result(st);
        if (nRanks < 2 || rank < 0 || rank >= nRanks)
            return mpccl_result(mpccl_fail(MPCCL_ERR_ARG,
                                           "%s: a new rank needs nRanks >= 2 and rank in [parent size, nRanks); got "
                                           "nRanks = %d, rank = %d",
                                           fn, nRanks, rank));
    }
    if (config || !comm) {
        if ((st = mpccl_config_normalize(config, &cfg, fn)) != MPCCL_OK) return mpccl_result(st);
    } else {
        cfg = comm->config;
    }
    init_job_t *job = new_job(newcomm, &cfg, rank, nRanks);
    if (!job) return mpccl_result(mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn));
    if (comm) job->cuda_dev = comm->cuda_dev;
    job->parent = comm;
    job->has_id = uniqueId != NULL;
    if (uniqueId) job->id = *uniqueId;
    return mpccl_result(mpccl_group_defer_init(init_grow, job));
}

/* ---- revoke ---- */

/* Host communicators: a call returns when its data is complete, so nothing is
 * in flight to stop; the communicator stops taking work and keeps its
 * transport for ncclCommShrink.  GPU communicators: launched kernels cannot
 * be stopped yet (the flat kernels have no abort word), so it is refused
 * rather than pretending. */
MPCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags)
{
    static const char fn[] = "ncclCommRevoke";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK && revokeFlags != 0)
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: argument revokeFlags = %#x, expected 0 (no flags are defined)", fn,
                        revokeFlags);
    if (st == MPCCL_OK && comm->cuda_dev >= 0)
        st = mpccl_fail(MPCCL_ERR_USAGE,
                        "%s: GPU communicators cannot be revoked yet: kernels already launched cannot be stopped "
                        "(ncclCommAbort releases the communicator instead)",
                        fn);
    if (st == MPCCL_OK) {
        comm->revoked = 1;
        MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx rank %d revoked", (unsigned long long)comm->id, comm->rank);
    }
    return mpccl_result(st);
}

/* ---- suspend, resume, memory statistics ---- */

/* A host communicator holds no GPU memory: suspending it releases nothing and
 * only stops it taking work until ncclCommResume.  A GPU communicator's
 * memory (mapped by its peers, possibly held by captured graphs) cannot be
 * released and restored yet, so suspending one is refused. */
MPCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags)
{
    static const char fn[] = "ncclCommSuspend";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK && (flags & ~NCCL_SUSPEND_MEM))
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: argument flags = %#x has unknown bits (expected NCCL_SUSPEND_MEM or 0)", fn,
                        flags);
    if (st == MPCCL_OK && comm->suspended)
        st = mpccl_fail(MPCCL_ERR_USAGE, "%s: comm %p is suspended already", fn, (void *)comm);
    if (st == MPCCL_OK && comm->cuda_dev >= 0)
        st = mpccl_fail(MPCCL_ERR_USAGE,
                        "%s: releasing a GPU communicator's memory is not supported yet (its peers map it; captured "
                        "graphs may hold it)",
                        fn);
    if (st == MPCCL_OK) comm->suspended = 1;
    return mpccl_result(st);
}

MPCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm)
{
    static const char fn[] = "ncclCommResume";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK && !comm->suspended)
        st = mpccl_fail(MPCCL_ERR_USAGE, "%s: comm %p is not suspended", fn, (void *)comm);
    if (st == MPCCL_OK) comm->suspended = 0;
    return mpccl_result(st);
}

MPCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value)
{
    static const char fn[] = "ncclCommMemStats";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "value", value);
    if (st != MPCCL_OK) return mpccl_result(st);
    uint64_t held = 0;
#ifdef MPCCL_HAVE_CUDA
    held = mpccl_gpu_mem_bytes(comm);
#endif
    switch (stat) {
    case ncclStatGpuMemSuspend: *value = 0; break; /* a suspend releases nothing (see ncclCommSuspend) */
    case ncclStatGpuMemSuspended: *value = (uint64_t)comm->suspended; break;
    case ncclStatGpuMemPersist:
    case ncclStatGpuMemTotal: *value = held; break;
    default:
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG,
                                       "%s: argument stat = %d, expected ncclStatGpuMemSuspend, ...Suspended, "
                                       "...Persist or ...Total",
                                       fn, (int)stat));
    }
    return ncclSuccess;
}

/* ---- shrink ---- */

/* The excluded ranks may be dead, so nothing collective over the parent can
 * be used: the lowest surviving rank makes the child's bootstrap id and sends
 * it to every other survivor over the parent's transport (point to point,
 * never touching an excluded rank); then the survivors join that bootstrap as
 * ncclCommInitRank does, in parent order.  The tag is reserved: the proxy's
 * tag space with a CTA index no launch uses. */
#define SHRINK_TAG(sender) (((uint64_t)(sender) << 40) | (3ULL << 38) | (0xffULL << 30) | 0x3fffffffULL)

static mpccl_status_t wait_req(mpccl_transport_t *t, mpccl_req_t *req)
{
    while (!req->done)
        if (t->ops->progress(t) == 0) t->ops->idle(t);
    return req->status;
}

static mpccl_status_t shrink_share_id(init_job_t *job)
{
    ncclComm_t parent = job->parent;
    mpccl_transport_t *t = parent->transport;
    if (t == NULL)
        return mpccl_fail(MPCCL_ERR_USAGE, "ncclCommShrink: the parent communicator was finalized (its transport "
                          "is closed)");
    int root = job->survivors[0];
    mpccl_status_t st = MPCCL_OK;
    if (parent->rank == root) {
        MPCCL_CHECK(mpccl_socket_get_unique_id(job->id.internal));
        for (int i = 1; i < job->nranks && st == MPCCL_OK; i++) {
            mpccl_req_t req = {0};
            st = t->ops->isend(t, job->survivors[i], SHRINK_TAG(root), &job->id, sizeof(job->id), &req);
            if (st == MPCCL_OK) st = wait_req(t, &req);
        }
    } else {
        mpccl_req_t req = {0};
        st = t->ops->irecv(t, root, SHRINK_TAG(root), &job->id, sizeof(job->id), &req);
        if (st == MPCCL_OK) st = wait_req(t, &req);
    }
    return st;
}

static mpccl_status_t init_shrink(void *arg)
{
    init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    mpccl_log_set_rank(job->rank);
    mpccl_status_t st = shrink_share_id(job);
    if (st == MPCCL_OK) st = mpccl_socket_bootstrap_create(job->id.internal, job->rank, job->nranks, &bs);
    if (st == MPCCL_OK)
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommShrink: parent rank %d -> rank %d of %d", job->parent->rank, job->rank,
                   job->nranks);
    free(job->survivors);
    job->survivors = NULL;
    return finish_init(job, &bs, st);
}

MPCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
          ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), "ncclCommShrink(): parent commHash 0x%llx, excluded %d", MPCCL_NVTX_HASH(comm), excludeRanksCount);
    static const char fn[] = "ncclCommShrink";
    ncclConfig_t cfg;
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "newcomm", newcomm);
    if (st != MPCCL_OK) return mpccl_result(st);
    *newcomm = NULL;
    int n = comm->nranks;
    if (excludeRanksCount < 0 || excludeRanksCount >= n || (excludeRanksCount > 0 && !excludeRanksList))
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG,
                                       "%s: argument excludeRanksCount = %d (list %p), expected 0..%d with a list",
                                       fn, excludeRanksCount, (void *)excludeRanksList, n - 1));
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG,
                                       "%s: argument shrinkFlags = %#x, expected NCCL_SHRINK_DEFAULT or "
                                       "NCCL_SHRINK_ABORT",
                                       fn, shrinkFlags));
    if (shrinkFlags == NCCL_SHRINK_ABORT && comm->cuda_dev >= 0)
        return mpccl_result(mpccl_fail(MPCCL_ERR_USAGE,
                                       "%s: NCCL_SHRINK_ABORT on a GPU communicator: stopping kernels that wait for "
                                       "a failed peer is not supported yet (ncclCommAbort the parent instead)",
                                       fn));
#ifdef MPCCL_HAVE_CUDA
    /* Spanning nodes always has the proxy attached (mpccl_gpu_setup). */
    if (comm->gpu != NULL && mpccl_gpu_proxy(comm) != NULL)
        return mpccl_result(mpccl_fail(MPCCL_ERR_USAGE,
                                       "%s: a GPU communicator with peers served by the proxy thread (on other "
                                       "nodes, or, once a window was registered, on this node without P2P) cannot "
                                       "be shrunk yet: the proxy drives its transport, which the survivors' "
                                       "rendezvous would race",
                                       fn));
#endif
    unsigned char *out = calloc((size_t)n, 1);
    int *survivors = calloc((size_t)n, sizeof(int));
    if (!out || !survivors) {
        free(out);
        free(survivors);
        return mpccl_result(mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn));
    }
    for (int i = 0; i < excludeRanksCount && st == MPCCL_OK; i++) {
        int r = excludeRanksList[i];
        if (r < 0 || r >= n || out[r])
            st = mpccl_fail(MPCCL_ERR_ARG, "%s: excludeRanksList[%d] = %d is %s", fn, i, r,
                            r < 0 || r >= n ? "not a rank of the communicator" : "listed twice");
        else out[r] = 1;
    }
    if (st == MPCCL_OK && out[comm->rank])
        st = mpccl_fail(MPCCL_ERR_USAGE, "%s: rank %d excludes itself; excluded ranks do not call ncclCommShrink", fn,
                        comm->rank);
    int count = 0, newrank = -1;
    for (int r = 0; r < n && st == MPCCL_OK; r++) {
        if (out[r]) continue;
        if (r == comm->rank) newrank = count;
        survivors[count++] = r;
    }
    free(out);
    if (st == MPCCL_OK) {
        if (config) st = mpccl_config_normalize(config, &cfg, fn);
        else cfg = comm->config;
    }
    init_job_t *job = st == MPCCL_OK ? new_job(newcomm, &cfg, newrank, count) : NULL;
    if (st == MPCCL_OK && !job) st = mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
    if (st != MPCCL_OK) {
        free(survivors);
        return mpccl_result(st);
    }
    job->cuda_dev = comm->cuda_dev;
    job->parent = comm;
    job->survivors = survivors;
    return mpccl_result(mpccl_group_defer_init(init_shrink, job));
}

/* ---- teardown ---- */

MPCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
{
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), "ncclCommFinalize(): commHash 0x%llx", MPCCL_NVTX_HASH(comm));
    mpccl_status_t st = mpccl_check_comm("ncclCommFinalize", comm);
    if (st != MPCCL_OK) return mpccl_result(st);
    /* Host operations are complete when their call returns; what is left to
     * flush is the network: release windows (their UCX keys belong to the
     * transport's worker), then close the transport gracefully. */
    mpccl_win_release(comm);
#ifdef MPCCL_HAVE_CUDA
    /* GPU communicators with proxied peers (other nodes, or no P2P): the
     * proxy thread drives the transport until it lets go (it would progress
     * a closed one otherwise). */
    mpccl_gpu_finalize(comm);
#endif
    if (comm->transport) comm->transport->ops->close(comm->transport, comm->all_in_process);
    comm->transport = NULL;
    comm->state = MPCCL_COMM_FINALIZED;
    return ncclSuccess;
}

static mpccl_status_t check_handle(const char *fn, ncclComm_t comm)
{
    if (comm == NULL) return MPCCL_OK; /* NCCL accepts NULL in destroy/abort */
    if (comm->magic != MPCCL_COMM_MAGIC)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument comm = %p is not a live mpccl communicator", fn, (void *)comm);
    return MPCCL_OK;
}

MPCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm)
{
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), "ncclCommDestroy(): commHash 0x%llx, nranks %d, rank %d, cudaDev %d", MPCCL_NVTX_HASH(comm), comm->nranks, comm->rank, comm->cuda_dev);
    mpccl_status_t st = check_handle("ncclCommDestroy", comm);
    if (st != MPCCL_OK || comm == NULL) return mpccl_result(st);
    /* A failed communicator's kernels may wait on a dead peer forever: release
     * it like an abort. */
    comm->aborting = comm->state == MPCCL_COMM_FAILED || comm->async_error != ncclSuccess;
    mpccl_comm_release(comm, comm->aborting);
    return ncclSuccess;
}

MPCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm)
{
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), "ncclCommAbort(): commHash 0x%llx, nranks %d, rank %d, cudaDev %d", MPCCL_NVTX_HASH(comm), comm->nranks, comm->rank, comm->cuda_dev);
    mpccl_status_t st = check_handle("ncclCommAbort", comm);
    if (st != MPCCL_OK || comm == NULL) return mpccl_result(st);
    comm->aborting = 1;
    mpccl_comm_release(comm, 1);
    return ncclSuccess;
}

/* ---- queries ---- */

MPCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError)
{
    mpccl_status_t st = check_handle("ncclCommGetAsyncError", comm);
    if (st == MPCCL_OK && comm == NULL) st = mpccl_fail(MPCCL_ERR_ARG, "ncclCommGetAsyncError: argument comm is NULL");
    if (st == MPCCL_OK) st = mpccl_check_ptr("ncclCommGetAsyncError", "asyncError", asyncError);
    if (st != MPCCL_OK) return mpccl_result(st);
    *asyncError = comm->state == MPCCL_COMM_INITIALIZING ? ncclInProgress : comm->async_error;
    return ncclSuccess;
}

static mpccl_status_t check_query(const char *fn, ncclComm_t comm, const char *arg, const void *out)
{
    MPCCL_CHECK(mpccl_check_ptr(fn, "comm", comm));
    MPCCL_CHECK(check_handle(fn, comm));
    return mpccl_check_ptr(fn, arg, out);
}

MPCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
{
    mpccl_status_t st = check_query("ncclCommCount", comm, "count", count);
    if (st == MPCCL_OK) *count = comm->nranks;
    return mpccl_result(st);
}

MPCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank)
{
    mpccl_status_t st = check_query("ncclCommUserRank", comm, "rank", rank);
    if (st == MPCCL_OK) *rank = comm->rank;
    return mpccl_result(st);
}

/* A host communicator has no device: -1 (documented in the README). */
MPCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device)
{
    mpccl_status_t st = check_query("ncclCommCuDevice", comm, "device", device);
    if (st == MPCCL_OK) *device = comm->cuda_dev;
    return mpccl_result(st);
}
