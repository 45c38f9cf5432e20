/* Bootstrap over the user's out-of-band callbacks (mpcclCommInitOob; mpccl_mpi.h
 * builds them over MPI).  The callbacks own all waiting and failure detection;
 * here a nonzero return becomes MPCCL_ERR_REMOTE. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap/bootstrap.h"
#include "mpccl.h"

typedef struct {
    mpcclOobOps_t ops; /* a copy: the caller's struct may be a temporary */
    void *ctx;
} oob_bs_t;

static mpccl_status_t oob_allgather(mpccl_bootstrap_t *bs, void *buf, size_t bytes)
{
    oob_bs_t *o = bs->impl;
    /* MPI_Allgather forbids overlapping send and receive buffers, so the own slot
     * travels from a copy. */
    void *tmp = malloc(bytes ? bytes : 1);
    if (tmp == NULL)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory (%zu bytes) in oob allgather", bytes);
    if (bytes) memcpy(tmp, (char *)buf + (size_t)bs->rank * bytes, bytes);
    int rc = o->ops.allgather(o->ctx, tmp, buf, bytes);
    free(tmp);
    if (rc != 0)
        return mpccl_fail(MPCCL_ERR_REMOTE,
                          "out-of-band allgather callback failed with %d on rank %d of %d "
                          "(%zu bytes per rank)",
                          rc, bs->rank, bs->nranks, bytes);
    return MPCCL_OK;
}

static mpccl_status_t oob_barrier(mpccl_bootstrap_t *bs)
{
    oob_bs_t *o = bs->impl;
    if (o->ops.barrier) {
        int rc = o->ops.barrier(o->ctx);
        if (rc != 0)
            return mpccl_fail(MPCCL_ERR_REMOTE,
                              "out-of-band barrier callback failed with %d on rank %d of %d", rc,
                              bs->rank, bs->nranks);
        return MPCCL_OK;
    }
    char *tmp = calloc((size_t)bs->nranks, 1);
    if (tmp == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory in oob barrier");
    mpccl_status_t st = oob_allgather(bs, tmp, 1);
    free(tmp);
    return st;
}

static void oob_close(mpccl_bootstrap_t *bs)
{
    oob_bs_t *o = bs->impl;
    if (o) {
        if (o->ops.release) o->ops.release(o->ctx);
        free(o);
    }
    bs->impl = NULL; /* a second close finds nothing: release runs once */
    bs->ops = NULL;
}

static const struct mpccl_bootstrap_ops oob_ops = {
    .allgather = oob_allgather, .barrier = oob_barrier, .close = oob_close};

mpccl_status_t mpccl_oob_bootstrap_create(const struct mpcclOobOps *ops, void *ctx, int rank,
                                          int nranks, mpccl_bootstrap_t *out)
{
    if (ops == NULL || ops->allgather == NULL || out == NULL)
        return mpccl_fail(MPCCL_ERR_ARG, "oob bootstrap: %s",
                          out == NULL ? "NULL output"
                                      : "ops or ops->allgather is NULL (allgather is required)");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return mpccl_fail(MPCCL_ERR_ARG, "oob bootstrap: rank %d / nranks %d, expected "
                                         "0 <= rank < nranks",
                          rank, nranks);
    oob_bs_t *o = malloc(sizeof(*o));
    if (o == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for an oob bootstrap");
    o->ops = *ops;
    o->ctx = ctx;
    out->rank = rank;
    out->nranks = nranks;
    out->ops = &oob_ops;
    out->impl = o;
    return MPCCL_OK;
}
