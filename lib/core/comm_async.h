/* Nonblocking communicators (config.blocking = 0) and abort from another
 * thread: the background worker of a communicator's pending operation, and
 * the count of threads inside calls on it.
 *
 * Ownership.  A communicator and everything it points to stay alive while
 * any thread uses them: a calling thread between mpccl_comm_enter and
 * mpccl_comm_leave, or the worker of a pending operation (init, split,
 * shrink, finalize), which counts as a user until it has stored its result.
 * ncclCommAbort and ncclCommDestroy release a communicator only after
 * mpccl_comm_quiesce: abort first raises comm->aborting and fails the
 * communicator ("aborted"), so host wait loops and the bootstrap's polls see
 * it within milliseconds and their threads leave; quiesce then waits for the
 * count to reach zero and joins the worker.  A thread that leaves must not
 * touch the communicator afterwards.  Calls that enter after abort began are
 * refused, so nobody enters a communicator that is being freed (a call that
 * starts after the release returned uses a dead handle: the user's error, as
 * in NCCL). */
#ifndef MPCCL_COMM_ASYNC_H
#define MPCCL_COMM_ASYNC_H

#include <pthread.h>

#include "nccl.h"
#include "util/status.h"

typedef struct mpccl_comm_async {
    pthread_mutex_t mu;
    pthread_cond_t idle;  /* signalled when users drops to zero */
    int users;            /* threads inside a call, plus a running worker */
    int pending;          /* atomic: a background operation runs (ncclInProgress) */
    int has_worker;       /* worker was started and not joined yet */
    pthread_t worker;
    mpccl_status_t result; /* of the last background operation */
    char msg[512];         /* its error message, for ncclGetLastError */
} mpccl_comm_async_t;

/* The operation a worker runs; it owns arg. */
typedef mpccl_status_t (*mpccl_async_fn_t)(void *arg);

void mpccl_comm_async_init(ncclComm_t comm);
void mpccl_comm_async_destroy(ncclComm_t comm);

/* Whether comm was created with config.blocking = 0. */
int mpccl_comm_nonblocking(ncclComm_t comm);

/* A call on comm begins (fn names it): refused with ncclInvalidUsage once
 * ncclCommAbort began.  Every successful enter is paired with a leave. */
mpccl_status_t mpccl_comm_enter(ncclComm_t comm, const char *fn);
void mpccl_comm_leave(ncclComm_t comm);

/* Runs fn(arg) in a new worker thread owned by comm and returns
 * MPCCL_INPROGRESS; ncclCommGetAsyncError reports ncclInProgress until it
 * finished.  The worker sees comm->aborting in the bootstrap's waits.  When
 * no thread can be started, fn runs here and its status is returned. */
mpccl_status_t mpccl_comm_async_start(ncclComm_t comm, mpccl_async_fn_t fn, void *arg);
/* Whether a background operation of comm is still running. */
int mpccl_comm_async_pending(ncclComm_t comm);
/* After it finished: its status, with its message recorded as this thread's
 * last error when it failed (no log line: the worker logged it). */
mpccl_status_t mpccl_comm_async_result(ncclComm_t comm);

/* Raises comm->aborting and, when a thread is inside a call or a worker runs,
 * fails comm with a message that says it was aborted, so that they leave. */
void mpccl_comm_async_abort(ncclComm_t comm);
/* Waits until no thread uses comm and joins its worker (abort, destroy). */
void mpccl_comm_quiesce(ncclComm_t comm);

#endif
