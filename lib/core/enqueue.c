/* From an API call to a planned, queued operation. */
#include <stdlib.h>
#include <string.h>

#include "core/check_mode.h"
#include "core/enqueue.h"
#include "core/group.h"
#include "util/log.h"

/* ncclAvg and PreMulSum become element-wise ops the schedules know: floats scale
 * the input first (as NCCL, so fp16 sums do not overflow before dividing),
 * integers sum and then divide (truncating, as NCCL). */
static mpccl_status_t map_op(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t dt, mpccl_coll_desc_t *d,
                             mpccl_task_t *t)
{
    switch ((int)op) {
    case ncclSum: d->op = MPCCL_OP_SUM; return MPCCL_OK;
    case ncclProd: d->op = MPCCL_OP_PROD; return MPCCL_OK;
    case ncclMax: d->op = MPCCL_OP_MAX; return MPCCL_OK;
    case ncclMin: d->op = MPCCL_OP_MIN; return MPCCL_OK;
    case ncclAvg:
        d->op = MPCCL_OP_SUM;
        if (mpccl_dtype_is_float(dt)) {
            d->prescale = 1;
            mpccl_dtype_from_double(dt, 1.0 / (double)comm->nranks, t->scalar);
        } else {
            d->divide = 1;
            t->divisor = (uint64_t)comm->nranks;
        }
        return MPCCL_OK;
    default:
        break;
    }
    /* A PreMulSum op, already validated by argcheck. */
    pthread_mutex_lock(&comm->redop_lock);
    mpccl_redop_slot_t s = comm->redops[(int)op - ncclNumOps];
    pthread_mutex_unlock(&comm->redop_lock);
    d->op = MPCCL_OP_SUM;
    d->prescale = 1;
    /* On a host communicator the "device" scalar is host memory read at the
     * call, which is when the reduction would read it on the stream. */
    if (s.residence == ncclScalarHostImmediate) memcpy(t->scalar, s.scalar, mpccl_dtype_size(dt));
    else if (comm->exec->on_streams) t->scalar_dev = s.scalar_ptr; /* device memory: read on the stream */
    else memcpy(t->scalar, s.scalar_ptr, mpccl_dtype_size(dt));
    return MPCCL_OK;
}

static int is_in_place(mpccl_coll_t coll, const void *in, const void *out, size_t bytes, int rank, int root)
{
    const char *i = in, *o = out;
    switch (coll) {
    case MPCCL_COLL_ALLREDUCE:
    case MPCCL_COLL_BROADCAST:
    case MPCCL_COLL_REDUCE:
    case MPCCL_COLL_ALLTOALL: return i == o;
    case MPCCL_COLL_ALLGATHER: return o && i == o + (size_t)rank * bytes;
    case MPCCL_COLL_REDUCESCATTER: return i && o == i + (size_t)rank * bytes;
    case MPCCL_COLL_GATHER: return rank == root && o && i == o + (size_t)root * bytes;
    case MPCCL_COLL_SCATTER: return rank == root && i && o == i + (size_t)root * bytes;
    default: return 0;
    }
}

mpccl_status_t mpccl_launch(const char *fn, mpccl_coll_t coll, const void *sendbuf, void *recvbuf, size_t count,
                            ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    const mpccl_executor_t *exec = comm->exec;
    mpccl_status_t st = exec->check_buffers(fn, comm, coll, sendbuf, recvbuf, count, dt, root);
    if (st != MPCCL_OK) {
        mpccl_group_discard_comm(comm);
        return st;
    }
    mpccl_log_set_rank(comm->rank);
    /* An eager call (on streams, outside a group) is launched before this
     * returns: it lives on the stack. */
    mpccl_call_t eager_call;
    int eager = exec->on_streams && mpccl_group_depth() == 0;
    mpccl_call_t *call = eager ? memset(&eager_call, 0, sizeof(eager_call)) : mpccl_call_alloc();
    if (!call) return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
    call->comm = comm;
    call->stream = (void *)stream; /* host communicators ignore it: they complete before returning */
    call->is_p2p = (coll == MPCCL_COLL_SEND || coll == MPCCL_COLL_RECV);
    mpccl_coll_desc_t *d = &call->desc;
    d->coll = coll;
    d->count = count;
    d->dt = dt;
    d->root = root;
    d->in_place = is_in_place(coll, sendbuf, recvbuf, count * mpccl_dtype_size(dt), comm->rank, root);
    call->task.dt = dt;
    call->user_op = (int)op;
    if (coll == MPCCL_COLL_ALLREDUCE || coll == MPCCL_COLL_REDUCE || coll == MPCCL_COLL_REDUCESCATTER)
        MPCCL_CHECK_GOTO(map_op(comm, op, dt, d, &call->task), st, fail);
    call->task.op = d->op;
    /* The GPU executor plans at launch, from the communicator's plan cache (or
     * not at all: flat kernels); only host calls carry a schedule. */
    if (exec->plans_at_call) MPCCL_CHECK_GOTO(mpccl_plan(&comm->topo, d, &comm->params, &call->sched), st, fail);
    call->task.sched = &call->sched;
    call->task.in = sendbuf;
    call->task.out = recvbuf;
    MPCCL_INFO(call->is_p2p ? MPCCL_SUB_P2P : MPCCL_SUB_COLL,
               "%s: comm 0x%llx count %zu type %s op %s root %d in-place %d memory %s algorithm %s (%u steps)",
               fn, (unsigned long long)comm->id, count, mpccl_dtype_name(dt),
               (int)op < ncclNumOps ? (const char *[]){"sum", "prod", "max", "min", "avg"}[(int)op] : "premulsum",
               root, d->in_place, exec->memory,
               exec->plans_at_call ? mpccl_algo_name((mpccl_algo_t)call->sched.algo) : "chosen at launch",
               call->sched.nsteps);
    /* The progress record (core/progress.h): a few stores. */
    mpccl_progress_enter(&comm->progress, coll, count, dt, op, root, (void *)stream, mpccl_group_depth() > 0);
    if (!eager) return mpccl_group_enqueue(call);
    /* Straight to the executor's launch code (doc/MAP.md), as a user of comm
     * (an abort from another thread waits for the launch, comm_async.h). */
    st = mpccl_comm_enter(comm, fn);
    if (st != MPCCL_OK) {
        mpccl_progress_leave(&comm->progress, 0);
        return st;
    }
    if (comm->check) st = mpccl_check_calls(call); /* check mode: the peers' calls first */
    if (st == MPCCL_OK) st = call->is_p2p ? exec->launch_p2p(&call, 1) : exec->launch(call);
    if (st != MPCCL_OK && st != MPCCL_ERR_USAGE) mpccl_comm_set_error(comm, st);
    mpccl_progress_leave(&comm->progress, st == MPCCL_OK);
    mpccl_comm_leave(comm);
    return st;
fail:
    if (!eager) mpccl_call_free(call); /* an eager call has no schedule to free */
    mpccl_group_discard_comm(comm);
    return st;
}
