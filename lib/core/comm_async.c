/* Nonblocking communicators and abort from another thread (comm_async.h):
 * the pending operation's worker, the users count, quiescing before a release. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/comm_async.h"
#include "core/comm_fail.h"
#include "util/log.h"

void mpccl_comm_async_init(ncclComm_t comm)
{
    mpccl_comm_async_t *a = &comm->async;
    memset(a, 0, sizeof(*a));
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->idle, NULL);
}

void mpccl_comm_async_destroy(ncclComm_t comm)
{
    pthread_cond_destroy(&comm->async.idle);
    pthread_mutex_destroy(&comm->async.mu);
}

int mpccl_comm_nonblocking(ncclComm_t comm)
{
    return comm->config.blocking == 0;
}

mpccl_status_t mpccl_comm_enter(ncclComm_t comm, const char *fn)
{
    mpccl_comm_async_t *a = &comm->async;
    pthread_mutex_lock(&a->mu);
    /* Under the lock: abort raises the word under it too, so either this
     * call sees it or abort counts this call and waits for it. */
    int refused = comm->aborting;
    if (!refused) a->users++;
    pthread_mutex_unlock(&a->mu);
    if (refused)
        return mpccl_fail(MPCCL_ERR_USAGE, "%s: comm %p rank %d is being aborted (ncclCommAbort)", fn, (void *)comm,
                          comm->rank);
    return MPCCL_OK;
}

void mpccl_comm_leave(ncclComm_t comm)
{
    mpccl_comm_async_t *a = &comm->async;
    pthread_mutex_lock(&a->mu);
    if (--a->users == 0) pthread_cond_broadcast(&a->idle);
    /* Nothing of comm may be touched after the unlock: a waiting abort frees it. */
    pthread_mutex_unlock(&a->mu);
}

typedef struct async_job {
    ncclComm_t comm;
    mpccl_async_fn_t fn;
    void *arg;
} async_job_t;

static void *worker_main(void *p)
{
    async_job_t job = *(async_job_t *)p;
    free(p);
    ncclComm_t comm = job.comm;
    mpccl_comm_async_t *a = &comm->async;
    /* The bootstrap's waits of this thread end when comm is aborted. */
    mpccl_bootstrap_set_cancel(&comm->aborting, NULL);
    mpccl_clear_last_error();
    mpccl_status_t st = job.fn(job.arg);
    mpccl_bootstrap_set_cancel(NULL, NULL);
    pthread_mutex_lock(&a->mu);
    a->result = st;
    if (st != MPCCL_OK) {
        snprintf(a->msg, sizeof(a->msg), "%s", mpccl_last_error());
        /* The communicator is unusable: GetAsyncError reports why, and only
         * abort or destroy remain (as a failed nonblocking init in NCCL). */
        if (comm->async_error == ncclSuccess) comm->async_error = mpccl_comm_fail_result(st);
        comm->state = MPCCL_COMM_FAILED;
    }
    __atomic_store_n(&a->pending, 0, __ATOMIC_RELEASE);
    if (--a->users == 0) pthread_cond_broadcast(&a->idle);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

mpccl_status_t mpccl_comm_async_start(ncclComm_t comm, mpccl_async_fn_t fn, void *arg)
{
    mpccl_comm_async_t *a = &comm->async;
    async_job_t *job = malloc(sizeof(*job));
    pthread_mutex_lock(&a->mu);
    int busy = a->pending || comm->aborting;
    if (!busy && job) {
        /* The previous worker (a finished init before this finalize) is done. */
        if (a->has_worker) pthread_join(a->worker, NULL);
        a->has_worker = 0;
        *job = (async_job_t){comm, fn, arg};
        a->pending = 1;
        a->users++;
        a->result = MPCCL_OK;
        a->msg[0] = '\0';
        if (pthread_create(&a->worker, NULL, worker_main, job) == 0) {
            a->has_worker = 1;
            pthread_mutex_unlock(&a->mu);
            return MPCCL_INPROGRESS;
        }
        a->pending = 0;
        a->users--;
    }
    pthread_mutex_unlock(&a->mu);
    free(job);
    if (busy) {
        /* Callers checked that nothing is pending; an abort may have begun
         * since.  fn owns arg, which stays with comm's release. */
        return mpccl_fail(MPCCL_ERR_USAGE, "comm %p rank %d: %s", (void *)comm, comm->rank,
                          comm->aborting ? "being aborted (ncclCommAbort)"
                                         : "its previous operation has not returned ncclSuccess yet");
    }
    MPCCL_WARN(MPCCL_SUB_INIT, "comm %p: no thread for a nonblocking operation: it runs before returning",
               (void *)comm);
    return fn(arg);
}

int mpccl_comm_async_pending(ncclComm_t comm)
{
    return __atomic_load_n(&comm->async.pending, __ATOMIC_ACQUIRE);
}

mpccl_status_t mpccl_comm_async_result(ncclComm_t comm)
{
    mpccl_comm_async_t *a = &comm->async;
    pthread_mutex_lock(&a->mu);
    mpccl_status_t st = a->pending ? MPCCL_INPROGRESS : a->result;
    char msg[sizeof(a->msg)];
    snprintf(msg, sizeof(msg), "%s", a->msg);
    pthread_mutex_unlock(&a->mu);
    if (st != MPCCL_OK && st != MPCCL_INPROGRESS && msg[0]) mpccl_record_error(msg);
    return st;
}

void mpccl_comm_async_abort(ncclComm_t comm)
{
    mpccl_comm_async_t *a = &comm->async;
    pthread_mutex_lock(&a->mu);
    __atomic_store_n(&comm->aborting, 1, __ATOMIC_RELEASE);
    /* Only when someone is inside a built communicator: a plain abort of an
     * idle one is not a failure worth a warning, and a pending init (still
     * being built by its worker) gives up in the bootstrap's waits, which
     * read the aborting word.  Host wait loops check the failed mark on every
     * pass; GPU kernels stop through the executor's stop hook. */
    int busy = a->users > 0 && comm->state == MPCCL_COMM_READY;
    pthread_mutex_unlock(&a->mu);
    if (busy)
        mpccl_comm_fail(comm, ncclRemoteError, "the communicator was aborted (ncclCommAbort from another thread)");
}

void mpccl_comm_quiesce(ncclComm_t comm)
{
    mpccl_comm_async_t *a = &comm->async;
    pthread_mutex_lock(&a->mu);
    while (a->users > 0) pthread_cond_wait(&a->idle, &a->mu);
    int join = a->has_worker;
    a->has_worker = 0;
    pthread_mutex_unlock(&a->mu);
    if (join) pthread_join(a->worker, NULL);
}
