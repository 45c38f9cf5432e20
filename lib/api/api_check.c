/* Argument checks shared by every API function. */
#include <stdint.h>

#include "api/api_check.h"
#include "core/comm_fail.h"
#include "util/datatype.h"

mpccl_status_t mpccl_check_ptr(const char *fn, const char *arg, const void *p)
{
    if (p == NULL) return mpccl_fail(MPCCL_ERR_ARG, "%s: argument %s is NULL, expected a valid pointer", fn, arg);
    return MPCCL_OK;
}

mpccl_status_t mpccl_check_comm(const char *fn, ncclComm_t comm)
{
    if (comm == NULL) return mpccl_fail(MPCCL_ERR_ARG, "%s: argument comm is NULL, expected a communicator", fn);
    if (comm->magic != MPCCL_COMM_MAGIC)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument comm = %p is not a live mpccl communicator (destroyed, or never created)",
                          fn, (void *)comm);
    /* NCCL's rule and result for a nonblocking communicator whose last
     * operation (init, split, shrink, finalize) still runs in the background. */
    if (mpccl_comm_async_pending(comm))
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: comm %p rank %d: attempt to use the communicator before its previous operation "
                          "returned ncclSuccess (poll ncclCommGetAsyncError until it does)",
                          fn, (void *)comm, comm->rank);
    if (comm->state == MPCCL_COMM_INITIALIZING)
        return mpccl_fail(MPCCL_ERR_USAGE,
                          "%s: comm %p is still being initialised (call ncclGroupEnd first, or wait until "
                          "ncclCommGetAsyncError reports ncclSuccess)",
                          fn, (void *)comm);
    if (comm->state == MPCCL_COMM_FINALIZED)
        return mpccl_fail(MPCCL_ERR_USAGE, "%s: comm %p was finalized; only ncclCommDestroy may follow", fn,
                          (void *)comm);
    if (comm->state == MPCCL_COMM_FAILED)
        return mpccl_fail(MPCCL_ERR_USAGE, "%s: comm %p has failed (%s); abort or destroy it", fn, (void *)comm,
                          ncclGetErrorString(comm->async_error));
    return MPCCL_OK;
}

mpccl_status_t mpccl_check_comm_live(const char *fn, ncclComm_t comm)
{
    MPCCL_CHECK(mpccl_check_comm(fn, comm));
    if (comm->revoked)
        return mpccl_fail(MPCCL_ERR_USAGE,
                          "%s: comm %p was revoked (ncclCommRevoke); shrink it, or destroy or abort it", fn,
                          (void *)comm);
    /* after the revoked check: a rank that revoked the communicator itself
     * gets ncclInvalidUsage, whatever its peers' revokes did */
    if (mpccl_comm_failed(comm)) {
        /* A host communicator's calls drive its transport: tell the peers now
         * if no wait loop did (the failure came while the caller was away). */
        if (!comm->gpu) mpccl_comm_send_revoke(comm);
        return mpccl_comm_fail_report(comm, fn);
    }
    if (comm->suspended)
        return mpccl_fail(MPCCL_ERR_USAGE, "%s: comm %p is suspended (ncclCommSuspend); call ncclCommResume first",
                          fn, (void *)comm);
    return MPCCL_OK;
}

mpccl_status_t mpccl_check_dtype(const char *fn, ncclDataType_t dt)
{
    if ((int)dt < 0 || (int)dt >= ncclNumTypes)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument datatype = %d, expected a value in [0, %d) (ncclInt8 .. ncclFloat8e5m2)", fn,
                          (int)dt, (int)ncclNumTypes);
    return MPCCL_OK;
}

mpccl_status_t mpccl_check_op(const char *fn, ncclComm_t comm, ncclRedOp_t op, ncclDataType_t dt)
{
    if ((int)op >= 0 && (int)op < ncclNumOps) return MPCCL_OK;
    int slot = (int)op - ncclNumOps;
    if ((int)op < 0 || slot >= MPCCL_MAX_CUSTOM_OPS)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument op = %d, expected ncclSum..ncclAvg (0..4) or an op from "
                          "ncclRedOpCreatePreMulSum on this communicator",
                          fn, (int)op);
    pthread_mutex_lock(&comm->redop_lock);
    mpccl_redop_slot_t s = comm->redops[slot];
    pthread_mutex_unlock(&comm->redop_lock);
    if (!s.in_use)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument op = %d is not a live custom op of comm %p (destroyed, or created on "
                          "another communicator)",
                          fn, (int)op, (void *)comm);
    if (s.dt != dt)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument op = %d was created for datatype %s, but datatype = %s", fn,
                          (int)op, mpccl_dtype_name(s.dt), mpccl_dtype_name(dt));
    return MPCCL_OK;
}

/* Does count * multiplier elements of dt fit in size_t? */
static mpccl_status_t check_size(const char *fn, const char *arg, size_t count, size_t multiplier,
                                 ncclDataType_t dt)
{
    size_t esize = mpccl_dtype_size(dt);
    if (multiplier && count > SIZE_MAX / multiplier / esize)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument %s = %zu elements of %s (x%zu ranks) overflows the address space", fn, arg,
                          count, mpccl_dtype_name(dt), multiplier);
    return MPCCL_OK;
}

static mpccl_status_t check_buf(const char *fn, const char *arg, const void *p, size_t elems_nonzero)
{
    if (p == NULL && elems_nonzero)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument %s is NULL while count > 0, expected a buffer", fn, arg);
    return MPCCL_OK;
}

static mpccl_status_t check_rank(const char *fn, const char *arg, int v, int nranks)
{
    if (v < 0 || v >= nranks)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument %s = %d, expected a rank in [0, %d)", fn, arg, v, nranks);
    return MPCCL_OK;
}

mpccl_status_t mpccl_check_coll(const char *fn, mpccl_coll_t coll, const void *sendbuf, const void *recvbuf,
                                size_t count, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm)
{
    MPCCL_CHECK(mpccl_check_comm_live(fn, comm));
    MPCCL_CHECK(mpccl_check_dtype(fn, dt));
    int n = comm->nranks, me = comm->rank, is_root = (root == me);
    size_t nn = (size_t)n;
    switch (coll) {
    case MPCCL_COLL_ALLREDUCE:
    case MPCCL_COLL_REDUCESCATTER:
    case MPCCL_COLL_REDUCE:
        MPCCL_CHECK(mpccl_check_op(fn, comm, op, dt));
        break;
    default:
        break;
    }
    switch (coll) {
    case MPCCL_COLL_BROADCAST:
    case MPCCL_COLL_REDUCE:
    case MPCCL_COLL_GATHER:
    case MPCCL_COLL_SCATTER:
        MPCCL_CHECK(check_rank(fn, "root", root, n));
        break;
    case MPCCL_COLL_SEND:
    case MPCCL_COLL_RECV:
        MPCCL_CHECK(check_rank(fn, "peer", root, n));
        break;
    default:
        break;
    }
    /* The count that names the buffers is "count"; sendcount/recvcount where NCCL
     * calls it so. */
    const char *cname = coll == MPCCL_COLL_ALLGATHER ? "sendcount" : coll == MPCCL_COLL_REDUCESCATTER ? "recvcount" : "count";
    switch (coll) {
    case MPCCL_COLL_ALLREDUCE:
        MPCCL_CHECK(check_size(fn, cname, count, 1, dt));
        MPCCL_CHECK(check_buf(fn, "sendbuff", sendbuf, count));
        MPCCL_CHECK(check_buf(fn, "recvbuff", recvbuf, count));
        break;
    case MPCCL_COLL_BROADCAST:
        MPCCL_CHECK(check_size(fn, cname, count, 1, dt));
        if (is_root) MPCCL_CHECK(check_buf(fn, "sendbuff", sendbuf, count));
        MPCCL_CHECK(check_buf(fn, "recvbuff", recvbuf, count));
        break;
    case MPCCL_COLL_REDUCE:
        MPCCL_CHECK(check_size(fn, cname, count, 1, dt));
        MPCCL_CHECK(check_buf(fn, "sendbuff", sendbuf, count));
        if (is_root) MPCCL_CHECK(check_buf(fn, "recvbuff", recvbuf, count));
        break;
    case MPCCL_COLL_ALLGATHER:
        MPCCL_CHECK(check_size(fn, cname, count, nn, dt));
        MPCCL_CHECK(check_buf(fn, "sendbuff", sendbuf, count));
        MPCCL_CHECK(check_buf(fn, "recvbuff", recvbuf, count));
        break;
    case MPCCL_COLL_REDUCESCATTER:
    case MPCCL_COLL_ALLTOALL:
        MPCCL_CHECK(check_size(fn, cname, count, nn, dt));
        MPCCL_CHECK(check_buf(fn, "sendbuff", sendbuf, count));
        MPCCL_CHECK(check_buf(fn, "recvbuff", recvbuf, count));
        break;
    case MPCCL_COLL_GATHER:
        MPCCL_CHECK(check_size(fn, cname, count, nn, dt));
        MPCCL_CHECK(check_buf(fn, "sendbuff", sendbuf, count));
        if (is_root) MPCCL_CHECK(check_buf(fn, "recvbuff", recvbuf, count));
        break;
    case MPCCL_COLL_SCATTER:
        MPCCL_CHECK(check_size(fn, cname, count, nn, dt));
        if (is_root) MPCCL_CHECK(check_buf(fn, "sendbuff", sendbuf, count));
        MPCCL_CHECK(check_buf(fn, "recvbuff", recvbuf, count));
        break;
    case MPCCL_COLL_SEND:
        MPCCL_CHECK(check_size(fn, cname, count, 1, dt));
        MPCCL_CHECK(check_buf(fn, "sendbuff", sendbuf, count));
        break;
    case MPCCL_COLL_RECV:
        MPCCL_CHECK(check_size(fn, cname, count, 1, dt));
        MPCCL_CHECK(check_buf(fn, "recvbuff", recvbuf, count));
        break;
    default:
        return mpccl_fail(MPCCL_ERR_INTERNAL, "%s: unknown collective %d", fn, (int)coll);
    }
    return MPCCL_OK;
}
