/* Communicator lifecycle and queries: the argument checks of init (unique id,
 * in process, out of band), split, grow, shrink, revoke, suspend, finalize,
 * destroy, abort; the work is the core's (core/comm_init.h, core/comm.h). */
#include <stdlib.h>
#include <string.h>

#include "core/hang_report.h"
#include "api/api.h"
#include "api/api_check.h"
#include "api/api_nvtx.h" /* NVTX ranges: one line atop each init and teardown function */
#include "core/comm.h"
#include "core/comm_init.h"
#include "core/comm_hier.h"
#include "core/group.h"
#include "mpccl.h"

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
    return mpccl_comm_init_rank(fn, comm, &cfg, rank, nranks, id);
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
    return mpccl_result(mpccl_comm_init_all(fn, comms, ndev, devlist));
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
    return mpccl_result(mpccl_comm_init_oob(fn, comm, &cfg, rank, nranks, ops, ctx));
fail:
    if (ops && ops->release) ops->release(ctx);
    return mpccl_result(st);
}

/* ---- split ---- */

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
    return mpccl_result(mpccl_comm_split(fn, comm, color, key, &cfg, newcomm));
}

/* ---- grow ---- */

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
    return mpccl_result(mpccl_comm_grow(fn, comm, nRanks, uniqueId, rank, &cfg, newcomm));
}

/* ---- revoke ---- */

/* The executor stops the work in flight, or says why it cannot (GPU
 * communicators: launched kernels cannot be stopped yet); a revoked
 * communicator takes no more work and keeps its transport for ncclCommShrink. */
MPCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags)
{
    static const char fn[] = "ncclCommRevoke";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK && revokeFlags != 0)
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: argument revokeFlags = %#x, expected 0 (no flags are defined)", fn,
                        revokeFlags);
    if (st == MPCCL_OK) st = mpccl_comm_revoke(fn, comm);
    return mpccl_result(st);
}

/* ---- suspend, resume, memory statistics ---- */

/* Suspending releases nothing and only stops the communicator taking work
 * until ncclCommResume; the executor refuses where memory would have to go
 * (GPU communicators: peers map it, captured graphs may hold it). */
MPCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags)
{
    static const char fn[] = "ncclCommSuspend";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK && (flags & ~NCCL_SUSPEND_MEM))
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: argument flags = %#x has unknown bits (expected NCCL_SUSPEND_MEM or 0)", fn,
                        flags);
    if (st == MPCCL_OK && comm->suspended)
        st = mpccl_fail(MPCCL_ERR_USAGE, "%s: comm %p is suspended already", fn, (void *)comm);
    if (st == MPCCL_OK) st = comm->exec->can_suspend(comm, fn);
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
    uint64_t held = comm->exec->mem_bytes(comm);
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
    if ((st = comm->exec->can_shrink(comm, fn, shrinkFlags == NCCL_SHRINK_ABORT)) != MPCCL_OK)
        return mpccl_result(st);
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
    if (st != MPCCL_OK) {
        free(survivors);
        return mpccl_result(st);
    }
    return mpccl_result(mpccl_comm_shrink(fn, comm, survivors, count, newrank, &cfg, shrinkFlags == NCCL_SHRINK_ABORT, newcomm));
}

/* ---- teardown ---- */

MPCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
{
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), "ncclCommFinalize(): commHash 0x%llx", MPCCL_NVTX_HASH(comm));
    mpccl_status_t st = mpccl_check_comm("ncclCommFinalize", comm);
    if (st != MPCCL_OK) return mpccl_result(st);
    return mpccl_result(mpccl_comm_finalize_call(comm)); /* ncclInProgress when nonblocking */
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
    mpccl_comm_destroy(comm);
    return ncclSuccess;
}

MPCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm)
{
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), "ncclCommAbort(): commHash 0x%llx, nranks %d, rank %d, cudaDev %d", MPCCL_NVTX_HASH(comm), comm->nranks, comm->rank, comm->cuda_dev);
    mpccl_status_t st = check_handle("ncclCommAbort", comm);
    if (st != MPCCL_OK || comm == NULL) return mpccl_result(st);
    return mpccl_result(mpccl_comm_abort(comm));
}

/* ---- queries ---- */

MPCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError)
{
    mpccl_status_t st = check_handle("ncclCommGetAsyncError", comm);
    if (st == MPCCL_OK && comm == NULL) st = mpccl_fail(MPCCL_ERR_ARG, "ncclCommGetAsyncError: argument comm is NULL");
    if (st == MPCCL_OK) st = mpccl_check_ptr("ncclCommGetAsyncError", "asyncError", asyncError);
    if (st != MPCCL_OK) return mpccl_result(st);
    /* A background operation (nonblocking init, split, shrink, finalize) runs:
     * nothing else of comm may be read yet. */
    if (mpccl_comm_async_pending(comm)) {
        *asyncError = ncclInProgress;
        return ncclSuccess;
    }
    (void)mpccl_comm_async_result(comm); /* a failed one's message becomes ncclGetLastError's */
    if (comm->state == MPCCL_COMM_READY || comm->state == MPCCL_COMM_FINALIZED) {
        comm->exec->poll_error(comm);
        mpccl_comm_hier_poll_error(comm);
    }
    *asyncError = comm->state == MPCCL_COMM_INITIALIZING ? ncclInProgress : comm->async_error;
    return ncclSuccess;
}

static mpccl_status_t check_query(const char *fn, ncclComm_t comm, const char *arg, const void *out)
{
    MPCCL_CHECK(mpccl_check_ptr(fn, "comm", comm));
    MPCCL_CHECK(check_handle(fn, comm));
    /* A nonblocking init's worker still fills in what a query reads (NCCL
     * refuses queries then too). */
    if (mpccl_comm_async_pending(comm) && comm->state == MPCCL_COMM_INITIALIZING)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: comm %p: attempt to use the communicator before its init returned ncclSuccess "
                          "(poll ncclCommGetAsyncError until it does)", fn, (void *)comm);
    return mpccl_check_ptr(fn, arg, out);
}

MPCCL_EXPORT ncclResult_t mpcclCommDumpState(ncclComm_t comm, FILE *out)
{
    mpccl_status_t st = mpccl_check_comm("mpcclCommDumpState", comm);
    if (st == MPCCL_OK && comm->state != MPCCL_COMM_READY)
        st = mpccl_fail(MPCCL_ERR_USAGE, "mpcclCommDumpState: comm %p is not ready (state %d)", (void *)comm,
                        (int)comm->state);
    if (st == MPCCL_OK) mpccl_hang_dump(comm, out);
    return mpccl_result(st);
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
