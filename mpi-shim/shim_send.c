/* The sending side of a device-buffer message.
 *
 * Small, non-contiguous, or to a process on another host that UCX cannot
 * reach (MPCCL_SHIM_NET): a host copy sent
 * as a plain MPI message (eager: the send completes locally, so "both ranks
 * send first" works as MPI's eager protocol makes it work; any receiver
 * understands it).  Otherwise an envelope on the user's source, tag and
 * communicator, and the send completes when the receiver answers: DONE (it
 * copied the data itself, GPU to GPU), FAIL (its buffer was too small), or
 * PUSH (it cannot reach our memory: we send the bytes on the private
 * communicator).  To another host the envelope names our buffer for UCX
 * (shim_ucx.c). */
#include <string.h>
#include <unistd.h>

#include "shim_p2p.h"

static void send_done(shim_op_t *op, MPI_Status *st)
{
    int cancelled = 0;
    if (st->MPI_ERROR != MPI_SUCCESS) op->error = st->MPI_ERROR;
    PMPI_Test_cancelled(st, &cancelled);
    op->cancelled = cancelled;
    mpccl_shim_op_finish(op);
}

static void send_answered(shim_op_t *op, MPI_Status *st)
{
    if (op->env.kind == SHIM_ENV_UCX) {
        mpccl_shim_ucx_send_answered(op, st);
        return;
    }
    mpccl_shim_count_p2p(1, op->answer == SHIM_ANS_PUSH ? SHIM_ROUTE_STAGED : SHIM_ROUTE_MPCCL);
    if (st->MPI_ERROR != MPI_SUCCESS || op->answer != SHIM_ANS_PUSH) {
        if (st->MPI_ERROR != MPI_SUCCESS) op->error = st->MPI_ERROR;
        mpccl_shim_op_finish(op);
        return;
    }
    /* The receiver cannot map our memory: send the bytes themselves. */
    const void *src = op->buf;
    size_t bytes = op->env.bytes;
    if (op->device) {
        op->bounce = mpccl_shim_bounce_get(bytes);
        if (op->bounce == NULL || mpccl_shim_copy(op->bounce, op->buf, bytes) != MPI_SUCCESS) {
            op->error = MPI_ERR_NO_MEM;
            mpccl_shim_op_finish(op);
            return;
        }
        src = op->bounce;
    }
    op->step = send_done;
    int rc = PMPI_Isend(src, (int)bytes, MPI_BYTE, (int)op->peer_world, (int)op->env.tag + 1, mpccl_shim_private_comm(),
                        &op->ireq);
    if (rc != MPI_SUCCESS) {
        op->error = rc;
        mpccl_shim_op_finish(op);
    }
}

/* Blocking calls wait here; nonblocking ones get the handle. */
static int launch(shim_op_t *op, MPI_Request *req)
{
    int rc = MPI_SUCCESS;
    if (req && (rc = mpccl_shim_op_handle(op, req)) != MPI_SUCCESS) {
        if (op->ireq != MPI_REQUEST_NULL) {
            PMPI_Cancel(&op->ireq);
            PMPI_Request_free(&op->ireq);
        }
        if (op->bounce) mpccl_shim_bounce_put(op->bounce);
        if (op->env.kind == SHIM_ENV_UCX) mpccl_shim_ucx_send_abort(op);
        mpccl_shim_op_free(op);
        return rc;
    }
    mpccl_shim_op_start(op);
    if (req) return MPI_SUCCESS;
    rc = mpccl_shim_op_wait(op);
    MPI_Comm comm = op->comm;
    mpccl_shim_op_free(op);
    /* our own failures go through the communicator's handler, as MPI's do */
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

static int send_eager(shim_op_t *op, int dest, int tag, int sync, MPI_Request *req)
{
    ptrdiff_t lb = 0;
    size_t span = 0;
    int rc;
    if (!mpccl_shim_span(op->dt, (size_t)op->count, &lb, &span)) {
        mpccl_shim_op_free(op);
        return MPI_ERR_TYPE;
    }
    op->bounce = mpccl_shim_bounce_get(span);
    if (op->bounce == NULL) {
        mpccl_shim_op_free(op);
        return MPI_ERR_NO_MEM;
    }
    mpccl_shim_count_p2p(1, SHIM_ROUTE_STAGED);
    /* cudaMemcpy waits for the legacy default stream: the kernel that wrote
     * the buffer before the call has finished. */
    rc = mpccl_shim_copy(op->bounce, (char *)op->buf + lb, span);
    const void *hp = (char *)op->bounce - lb;
    if (rc == MPI_SUCCESS && req == NULL) {
        rc = sync ? PMPI_Ssend(hp, op->count, op->dt, dest, tag, op->comm)
                  : PMPI_Send(hp, op->count, op->dt, dest, tag, op->comm);
    } else if (rc == MPI_SUCCESS) {
        rc = sync ? PMPI_Issend(hp, op->count, op->dt, dest, tag, op->comm, &op->ireq)
                  : PMPI_Isend(hp, op->count, op->dt, dest, tag, op->comm, &op->ireq);
        op->step = send_done;
        op->cancellable = 1;
        if (rc == MPI_SUCCESS) return launch(op, req);
    }
    mpccl_shim_bounce_put(op->bounce);
    mpccl_shim_op_free(op);
    return rc;
}

/* The envelope's fields every kind has. */
static void env_fill(shim_env_t *e, size_t bytes)
{
    memset(e, 0, sizeof(*e));
    e->sender = (uint32_t)mpccl_shim_my_world_rank();
    e->bytes = bytes;
    e->tag = (uint32_t)mpccl_shim_next_tag();
    e->pid = (int32_t)getpid();
    e->hostid = mpccl_shim_hostid();
}

int mpccl_shim_send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, int sync,
                    MPI_Request *req, const char *what)
{
    const shim_settings_t *s = mpccl_shim_settings();
    int tsize = 0, rc;
    size_t esz = 0;
    if (!mpccl_shim_p2p_wanted(buf, comm) || dest == MPI_PROC_NULL || count <= 0 ||
        PMPI_Type_size(dt, &tsize) != MPI_SUCCESS || tsize <= 0 || !mpccl_shim_is_device(buf))
        return mpccl_shim_send_mpi(buf, count, dt, dest, tag, comm, sync, req);
    shim_op_t *op = mpccl_shim_op_new();
    if (op == NULL) return MPI_ERR_NO_MEM;
    op->what = what;
    op->buf = (void *)buf;
    op->count = count;
    op->dt = dt;
    op->comm = comm;
    op->device = 1;
    op->contiguous = mpccl_shim_contiguous(dt, &esz);
    size_t bytes = (size_t)count * (size_t)tsize;
    int peer = mpccl_shim_world_rank(comm, dest);
    op->peer_world = peer;
    int same_host = peer >= 0 && mpccl_shim_peer_host(peer) == mpccl_shim_hostid();
    /* another host: through UCX where both ends have it (shim_ucx.c) */
    int net = peer >= 0 && !same_host && mpccl_shim_ucx_reaches(peer);
    if (!op->contiguous || peer < 0 || bytes <= s->eager_bytes || bytes <= SHIM_ENV_BYTES || bytes > 0x7fffffffu ||
        !(same_host || net || s->host_mode))
        return send_eager(op, dest, tag, sync, req);

    shim_env_t *e = &op->env;
    env_fill(e, bytes);
    if (!net || mpccl_shim_ucx_send_prepare(op) != MPI_SUCCESS) {
        if (!(same_host || s->host_mode)) return send_eager(op, dest, tag, sync, req);
        env_fill(e, bytes);
        mpccl_shim_ipc_export(buf, e);
        if (e->kind == SHIM_ENV_PUSH) e->base = (uint64_t)(uintptr_t)buf, e->offset = 0;
    }
    mpccl_shim_env_seal(e);
    if (e->kind == SHIM_ENV_IPC) mpccl_shim_sync_legacy(); /* the receiver reads it directly */
    op->step = send_answered;
    rc = PMPI_Irecv(&op->answer, 1, MPI_UINT32_T, peer, (int)e->tag, mpccl_shim_private_comm(), &op->ireq);
    /* The envelope is small: MPI sends it eagerly, in order with the other
     * messages on this source, tag and communicator. */
    if (rc == MPI_SUCCESS) rc = PMPI_Send(e, SHIM_ENV_BYTES, MPI_BYTE, dest, tag, comm);
    if (rc != MPI_SUCCESS) {
        if (op->ireq != MPI_REQUEST_NULL) {
            PMPI_Cancel(&op->ireq);
            PMPI_Request_free(&op->ireq);
        }
        if (e->kind == SHIM_ENV_UCX) mpccl_shim_ucx_send_abort(op);
        mpccl_shim_op_free(op);
        return rc;
    }
    return launch(op, req);
}

int mpccl_shim_send_mpi(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, int sync,
                        MPI_Request *req)
{
    mpccl_shim_count_p2p(1, SHIM_ROUTE_MPI);
    if (req) return sync ? PMPI_Issend(buf, count, dt, dest, tag, comm, req)
                         : PMPI_Isend(buf, count, dt, dest, tag, comm, req);
    if (!mpccl_shim_ops_active())
        return sync ? PMPI_Ssend(buf, count, dt, dest, tag, comm) : PMPI_Send(buf, count, dt, dest, tag, comm);
    /* Our transfers in flight may be what the receiver waits for. */
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = sync ? PMPI_Issend(buf, count, dt, dest, tag, comm, &r) : PMPI_Isend(buf, count, dt, dest, tag, comm, &r);
    return rc == MPI_SUCCESS ? mpccl_shim_wait_mpi(&r, MPI_STATUS_IGNORE) : rc;
}
