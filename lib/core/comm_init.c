/* Communicator inits: from a unique id, in process (ncclCommInitAll), out of
 * band; the job every way of creating a communicator goes through. */
#include <stdlib.h>
#include <string.h>

#include "core/comm_init.h"
#include "core/group.h"
#include "util/log.h"

mpccl_init_job_t *mpccl_init_job_new(ncclComm_t *slot, const ncclConfig_t *config, int rank, int nranks)
{
    mpccl_init_job_t *job = calloc(1, sizeof(*job));
    if (!job) return NULL;
    job->comm = mpccl_comm_alloc();
    if (!job->comm) {
        free(job);
        return NULL;
    }
    job->user_slot = slot;
    job->config = *config;
    job->comm->config = *config; /* blocking or not, before setup copies it again */
    job->rank = rank;
    job->nranks = nranks;
    job->cuda_dev = mpccl_comm_device_for_init(); /* grouped inits run in other threads */
    /* The init is a user of the communicator until it finished (comm_async.h):
     * an abort from another thread waits for it.  Nobody else knows comm yet. */
    job->comm->async.users = 1;
    *slot = job->comm;
    return job;
}

mpccl_status_t mpccl_init_job_finish(mpccl_init_job_t *job, mpccl_bootstrap_t *bs, mpccl_status_t st)
{
    /* A bootstrap that failed to form has released itself; one that formed now
     * belongs to the communicator, which releases it on failure. */
    if (st == MPCCL_OK) st = mpccl_comm_enter_device(job->cuda_dev);
    if (st == MPCCL_OK) st = mpccl_comm_setup(job->comm, bs, &job->config, job->cuda_dev);
    if (st != MPCCL_OK) {
        job->comm->state = MPCCL_COMM_FAILED;
        /* An init running in the background (nonblocking) leaves the
         * communicator for the user to read the error (ncclCommGetAsyncError)
         * and abort; one being aborted is released by the abort, which waits
         * for this thread (comm_async.h). */
        if (!mpccl_comm_async_pending(job->comm) && !__atomic_load_n(&job->comm->aborting, __ATOMIC_ACQUIRE)) {
            mpccl_comm_release(job->comm, 1);
            if (job->user_slot) *job->user_slot = NULL;
            free(job);
            return st;
        }
    }
    mpccl_comm_leave(job->comm);
    free(job);
    return st;
}

static mpccl_status_t init_from_unique_id(void *arg)
{
    mpccl_init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    mpccl_log_set_rank(job->rank);
    /* Its waits give up when the communicator is aborted, whichever thread runs it. */
    mpccl_bootstrap_set_cancel(&job->comm->aborting, NULL);
    mpccl_status_t st = mpccl_socket_bootstrap_create(job->id.internal, job->rank, job->nranks, &bs);
    st = mpccl_init_job_finish(job, &bs, st);
    mpccl_bootstrap_set_cancel(NULL, NULL); /* the communicator may be gone */
    return st;
}

static mpccl_status_t init_in_process(void *arg)
{
    mpccl_init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    mpccl_log_set_rank(job->rank);
    mpccl_status_t st = mpccl_inproc_bootstrap_create(job->inproc, job->rank, &bs);
    return mpccl_init_job_finish(job, &bs, st);
}

static mpccl_status_t init_out_of_band(void *arg)
{
    mpccl_init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    mpccl_log_set_rank(job->rank);
    mpccl_status_t st = mpccl_oob_bootstrap_create(job->oob, job->oob_ctx, job->rank, job->nranks, &bs);
    if (st != MPCCL_OK && job->oob->release) job->oob->release(job->oob_ctx);
    return mpccl_init_job_finish(job, &bs, st);
}

mpccl_status_t mpccl_comm_init_rank(const char *fn, ncclComm_t *slot, const ncclConfig_t *config, int rank, int nranks,
                                    const ncclUniqueId *id)
{
    mpccl_init_job_t *job = mpccl_init_job_new(slot, config, rank, nranks);
    if (!job) return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
    job->id = *id;
    return mpccl_group_defer_comm_init(job->comm, init_from_unique_id, job);
}

mpccl_status_t mpccl_comm_init_all(const char *fn, ncclComm_t *comms, int ndev, const int *devlist)
{
    ncclConfig_t cfg;
    mpccl_status_t st = mpccl_config_normalize(NULL, &cfg, fn);
    if (st != MPCCL_OK) return st;
    mpccl_inproc_group_t *g = NULL;
    MPCCL_CHECK(mpccl_inproc_group_create(ndev, &g));
    for (int i = 0; i < ndev; i++) comms[i] = NULL;
    mpccl_group_start();
    for (int i = 0; i < ndev && st == MPCCL_OK; i++) {
        mpccl_init_job_t *job = mpccl_init_job_new(&comms[i], &cfg, i, ndev);
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
    return st;
}

mpccl_status_t mpccl_comm_init_oob(const char *fn, ncclComm_t *slot, const ncclConfig_t *config, int rank, int nranks,
                                   const mpcclOobOps_t *ops, void *ctx)
{
    mpccl_init_job_t *job = mpccl_init_job_new(slot, config, rank, nranks);
    if (!job) {
        if (ops->release) ops->release(ctx);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
    }
    job->oob = ops;
    job->oob_ctx = ctx;
    /* Always before returning, even with config.blocking = 0: the callbacks
     * are the caller's (MPI for mpcclCommInitMPI), which need not be callable
     * from another thread. */
    return mpccl_group_defer_init(init_out_of_band, job);
}
