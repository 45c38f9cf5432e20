/* Nonblocking collectives complete in MPI_Wait/MPI_Test, not in the call.
 *
 * Through mpccl, the collective is enqueued on the communicator's stream and
 * an event recorded after it; the user's request completes once the event
 * has (polled while the program waits or tests, like every transfer of the
 * shim).  Staged, MPI's own nonblocking collective runs on the host copies
 * and the copies go back to the device when it completes. */
#include <stdlib.h>
#include <string.h>

#include "shim_p2p.h"

#ifdef MPCCL_HAVE_CUDA
#include <cuda_runtime_api.h>

static int event_poll(shim_op_t *op)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)op->ctx);
    if (e == cudaErrorNotReady) return 0;
    if (e != cudaSuccess) {
        SHIM_WARN("%s: the collective's GPU work failed: %s", op->what, cudaGetErrorString(e));
        (void)cudaGetLastError();
        op->error = MPI_ERR_OTHER;
    }
    return 1;
}

static void event_done(shim_op_t *op)
{
    cudaEventDestroy((cudaEvent_t)op->ctx);
    op->ctx = NULL;
}
#endif

int mpccl_shim_async_stream(void *stream, MPI_Comm comm, const char *what, MPI_Request *req)
{
#ifdef MPCCL_HAVE_CUDA
    cudaEvent_t ev;
    if (stream == NULL) return mpccl_shim_done_request(req); /* host communicators finish in the call */
    shim_op_t *op = mpccl_shim_op_new();
    if (op == NULL) return MPI_ERR_NO_MEM;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(ev, (cudaStream_t)stream) != cudaSuccess) {
        SHIM_WARN("%s: recording its completion failed: %s", what, cudaGetErrorString(cudaGetLastError()));
        mpccl_shim_op_free(op);
        return MPI_ERR_OTHER;
    }
    op->what = what;
    op->comm = comm;
    op->ctx = ev;
    op->poll = event_poll;
    op->finish = event_done;
    int rc = mpccl_shim_op_handle(op, req);
    if (rc != MPI_SUCCESS) {
        cudaEventDestroy(ev);
        mpccl_shim_op_free(op);
        return rc;
    }
    mpccl_shim_op_start(op);
    return MPI_SUCCESS;
#else
    (void)stream, (void)comm, (void)what;
    return mpccl_shim_done_request(req);
#endif
}

static void staged_done(shim_op_t *op, MPI_Status *st)
{
    shim_call_t *c = op->ctx;
    op->error = mpccl_shim_stage_out(c, st->MPI_ERROR);
    free(c);
    op->ctx = NULL;
    mpccl_shim_op_finish(op);
}

int mpccl_shim_async_staged(shim_call_t *c, MPI_Request ireq, MPI_Request *req)
{
    shim_op_t *op = mpccl_shim_op_new();
    shim_call_t *copy = malloc(sizeof(*copy));
    if (op == NULL || copy == NULL) {
        free(op), free(copy);
        PMPI_Wait(&ireq, MPI_STATUS_IGNORE); /* then finish in place */
        int rc = mpccl_shim_stage_out(c, MPI_SUCCESS);
        return rc == MPI_SUCCESS ? mpccl_shim_done_request(req) : rc;
    }
    *copy = *c; /* the bounces go with it */
    op->what = mpccl_shim_coll_name(c->coll);
    op->comm = c->comm;
    op->ctx = copy;
    op->ireq = ireq;
    op->step = staged_done;
    int rc = mpccl_shim_op_handle(op, req);
    if (rc != MPI_SUCCESS) {
        PMPI_Wait(&op->ireq, MPI_STATUS_IGNORE);
        mpccl_shim_stage_out(copy, MPI_SUCCESS);
        free(copy);
        mpccl_shim_op_free(op);
        return rc;
    }
    mpccl_shim_op_start(op);
    return MPI_SUCCESS;
}
