/* ncclPutSignal / ncclSignal / ncclWaitSignal after the argument checks
 * (api/api_win.c):
 * dispatch through the communicator's executor (core/exec.h: host
 * communicators over UCX RMA, GPU communicators with kernels on the stream),
 * and group semantics of waits.
 *
 * Groups: puts and signals are issued when called (they never wait for a
 * peer, so issuing them early cannot deadlock, and one peer's operations keep
 * program order) and, on host communicators, complete together at
 * ncclGroupEnd; waits are deferred to ncclGroupEnd, after everything the
 * group issues, so {wait; put} on both ranks of a pair completes as in NCCL.
 * The deferral rides on the group's deferred-init list (group.h), which runs
 * at the outermost ncclGroupEnd before the group's collectives. */
#include <stdlib.h>
#include <string.h>

#include "core/group.h"
#include "util/log.h"
#include "onesided/onesided_win.h"

mpccl_status_t mpccl_put_signal(const char *fn, ncclComm_t comm, const void *buf, size_t bytes, int peer,
                                struct mpccl_win *win, size_t offset, int sig, int ctx, cudaStream_t stream)
{
    mpccl_log_set_rank(comm->rank);
    MPCCL_INFO(MPCCL_SUB_P2P, "%s: comm 0x%llx peer %d bytes %zu offset %zu sigIdx %d ctx %d", fn,
               (unsigned long long)comm->id, peer, bytes, offset, sig, ctx);
    /* As a user of comm: an abort from another thread waits for it (core/comm_async.h). */
    MPCCL_CHECK(mpccl_comm_enter(comm, fn));
    mpccl_status_t st = comm->exec->put_signal(comm, buf, bytes, peer, win, offset, sig, ctx, stream);
    mpccl_comm_leave(comm);
    return st;
}

typedef struct wait_batch {
    ncclComm_t comm;
    cudaStream_t stream;
    int n;
    ncclWaitSignalDesc_t descs[];
} wait_batch_t;

static mpccl_status_t run_wait(ncclComm_t comm, int n, const ncclWaitSignalDesc_t *d, cudaStream_t stream)
{
    /* As a user of comm: an abort from another thread waits for it (core/comm_async.h). */
    MPCCL_CHECK(mpccl_comm_enter(comm, "ncclWaitSignal"));
    mpccl_status_t st = comm->exec->wait_signal(comm, n, d, stream);
    mpccl_comm_leave(comm);
    return st;
}

/* Runs at ncclGroupEnd, maybe in a thread of its own (beside other deferred
 * work of the group): one wait per communicator at a time. */
static mpccl_status_t run_deferred(void *arg)
{
    wait_batch_t *b = arg;
    ncclComm_t comm = b->comm;
    /* (GPU waits make the communicator's device current themselves.) */
    mpccl_log_set_rank(comm->rank);
    pthread_mutex_lock(&comm->win->wait_lock);
    mpccl_status_t st = run_wait(comm, b->n, b->descs, b->stream);
    pthread_mutex_unlock(&comm->win->wait_lock);
    free(b);
    return st;
}

mpccl_status_t mpccl_wait_signal(int ndesc, const ncclWaitSignalDesc_t *descs, ncclComm_t comm,
                                 cudaStream_t stream)
{
    static const char fn[] = "ncclWaitSignal";
    mpccl_log_set_rank(comm->rank);
    MPCCL_INFO(MPCCL_SUB_P2P, "%s: comm 0x%llx %d descriptors%s", fn, (unsigned long long)comm->id, ndesc,
               mpccl_group_depth() ? " (at ncclGroupEnd)" : "");
    if (ndesc == 0) return MPCCL_OK;
    if (mpccl_group_depth() == 0) return run_wait(comm, ndesc, descs, stream);
    wait_batch_t *b = malloc(sizeof(*b) + (size_t)ndesc * sizeof(*descs));
    if (!b) return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory deferring %d descriptors", fn, ndesc);
    b->comm = comm;
    b->stream = stream;
    b->n = ndesc;
    memcpy(b->descs, descs, (size_t)ndesc * sizeof(*descs));
    mpccl_status_t st = mpccl_group_defer_init(run_deferred, b);
    if (st != MPCCL_OK) free(b);
    return st;
}
