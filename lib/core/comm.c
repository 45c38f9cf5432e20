/* Communicator setup and teardown: the parts every executor shares; the
 * executor (core/exec.h) builds and releases its own. */
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/random.h>

#include "core/check_mode.h"
#include "core/hang_report.h"
#include "core/side_channel.h"
#include "core/stall_watch.h"
#include "core/comm.h"
#include "core/tags.h"
#include "core/comm_fail.h"
#include "core/comm_hier.h"
#include "core/group.h"
#include "core/topo.h"
#include "util/clock.h"
#include "util/keyed_hash.h"
#include "ucx/ucx.h"
#include "core/comm_hooks.h"
#include "util/log.h"

ncclComm_t mpccl_comm_alloc(void)
{
    ncclComm_t comm = calloc(1, sizeof(*comm));
    if (!comm) return NULL;
    comm->magic = MPCCL_COMM_MAGIC;
    comm->cuda_dev = -1;
    comm->exec = mpccl_exec_host(); /* until setup picks one */
    comm->state = MPCCL_COMM_INITIALIZING;
    comm->async_error = ncclSuccess;
    pthread_mutex_init(&comm->redop_lock, NULL);
    pthread_mutex_init(&comm->hook_lock, NULL);
    mpccl_comm_async_init(comm);
    return comm;
}

mpccl_status_t mpccl_config_normalize(const ncclConfig_t *user, ncclConfig_t *out, const char *fn)
{
    ncclConfig_t dflt = NCCL_CONFIG_INITIALIZER;
    *out = dflt;
    if (user == NULL) return MPCCL_OK;
    if (user->magic != dflt.magic)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument config has magic 0x%x, expected 0x%x: initialise it with "
                          "NCCL_CONFIG_INITIALIZER",
                          fn, user->magic, dflt.magic);
    /* The oldest NCCL config (2.14) already had size, magic, version, blocking. */
    size_t oldest = offsetof(ncclConfig_t, blocking) + sizeof(int);
    if (user->size < oldest)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument config has size %zu, expected at least %zu",
                          fn, user->size, oldest);
    /* A program built against an older header passes a shorter struct: take the
     * fields it has, keep defaults for the rest; a newer one passes a longer
     * struct whose extra fields we do not know. */
    size_t n = user->size < sizeof(*out) ? user->size : sizeof(*out);
    memcpy(out, user, n);
    out->size = sizeof(*out);
    if (out->blocking != NCCL_CONFIG_UNDEF_INT && out->blocking != 0 && out->blocking != 1)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: config.blocking = %d, expected 0 or 1", fn, out->blocking);
    return MPCCL_OK;
}

static mpccl_status_t alloc_seq(uint64_t **a, int n, uint64_t base)
{
    *a = malloc((size_t)n * sizeof(uint64_t));
    if (!*a) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for %d message counters", n);
    for (int i = 0; i < n; i++) (*a)[i] = base;
    return MPCCL_OK;
}

/* Every rank must agree on host or GPU: a mixture cannot form one data path.
 * The same exchange tells whether every rank lives in this process. */
static mpccl_status_t agree_on_device(ncclComm_t comm, int cuda_dev)
{
    int32_t (*info)[2] = calloc((size_t)comm->nranks, sizeof(*info)); /* device, pid */
    mpccl_status_t st;
    if (!info) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for %d device ids", comm->nranks);
    info[comm->rank][0] = cuda_dev;
    info[comm->rank][1] = (int32_t)getpid();
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&comm->bs, info, sizeof(*info)), st, out);
    comm->all_in_process = 1;
    for (int r = 0; r < comm->nranks; r++) {
        if ((info[r][0] < 0) != (cuda_dev < 0)) {
            st = mpccl_fail(MPCCL_ERR_USAGE,
                            "rank %d has %s but rank %d has %s: every rank of a communicator must have a "
                            "current CUDA device, or none",
                            comm->rank, cuda_dev < 0 ? "no CUDA device" : "a CUDA device", r,
                            info[r][0] < 0 ? "none" : "one");
            goto out;
        }
        if (info[r][1] != info[comm->rank][1] || comm->topo.node_of[r] != comm->topo.node_of[comm->rank])
            comm->all_in_process = 0;
    }
    comm->cuda_dev = cuda_dev;
out:
    free(info);
    return st;
}

/* SIGUSR2 (core/side_channel.h): the job-wide report in the log. */
static void dump_to_log(ncclComm_t comm)
{
    mpccl_hang_dump(comm, NULL);
}

mpccl_status_t mpccl_comm_setup(ncclComm_t comm, mpccl_bootstrap_t *bs, const ncclConfig_t *config, int cuda_dev)
{
    mpccl_status_t st = MPCCL_OK;
    struct {
        uint64_t id;
        unsigned char secret[sizeof(comm->secret)];
    } *ids = NULL;
    comm->bs = *bs;
    comm->rank = bs->rank;
    comm->nranks = bs->nranks;
    comm->lsa_first = comm->rank;
    comm->lsa_size = 1;
    comm->lsa_uniform = 1;
    mpccl_log_set_rank(comm->rank);
    if (config) comm->config = *config;
    else MPCCL_CHECK(mpccl_config_normalize(NULL, &comm->config, "init"));

    ids = calloc((size_t)comm->nranks, sizeof(*ids));
    if (!ids) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for %d ids", comm->nranks);
    if (getrandom(&ids[comm->rank].id, sizeof(uint64_t), 0) != sizeof(uint64_t))
        ids[comm->rank].id = (uint64_t)(uintptr_t)comm;
    MPCCL_CHECK_GOTO(mpccl_random_bytes(ids[comm->rank].secret, sizeof(ids[comm->rank].secret)), st, out);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&comm->bs, ids, sizeof(*ids)), st, out);
    comm->id = ids[0].id;
    memcpy(comm->secret, ids[0].secret, sizeof(comm->secret));
    memset(ids, 0, (size_t)comm->nranks * sizeof(*ids)); /* no copies of the secret left about */

    MPCCL_CHECK_GOTO(mpccl_topo_build(&comm->bs, &comm->topo), st, out);
    MPCCL_CHECK_GOTO(mpccl_plan_params_init(&comm->params), st, out);
    MPCCL_CHECK_GOTO(alloc_seq(&comm->coll_send_seq, comm->nranks, 0), st, out);
    MPCCL_CHECK_GOTO(alloc_seq(&comm->coll_recv_seq, comm->nranks, 0), st, out);
    MPCCL_CHECK_GOTO(alloc_seq(&comm->p2p_send_seq, comm->nranks, MPCCL_P2P_SEQ_BASE), st, out);
    MPCCL_CHECK_GOTO(alloc_seq(&comm->p2p_recv_seq, comm->nranks, MPCCL_P2P_SEQ_BASE), st, out);
    /* Even one rank needs the transport: ncclSend/ncclRecv to itself.  Peers
     * of this machine are watched (comm_fail.c), so UCX may use shared memory
     * to them. */
    MPCCL_CHECK_GOTO(mpccl_comm_fail_setup(comm), st, out);
    MPCCL_CHECK_GOTO(mpccl_check_setup(comm), st, out);
    mpccl_side_set_dump(dump_to_log); /* SIGUSR2 */
    mpccl_stall_watch_install();       /* GPU kernels that wait too long */
    MPCCL_CHECK_GOTO(mpccl_ucx_transport_create_local(&comm->bs, mpccl_comm_same_machine(comm), &comm->transport),
                     st, out);
    mpccl_comm_fail_attach(comm);
    MPCCL_CHECK_GOTO(agree_on_device(comm, cuda_dev), st, out);
    if (comm->cuda_dev >= 0) {
        comm->exec = mpccl_exec_gpu();
        if (!comm->exec) {
            comm->exec = mpccl_exec_host();
            st = mpccl_fail(MPCCL_ERR_INTERNAL, "a CUDA device in a build without CUDA");
            goto out;
        }
    }
    MPCCL_CHECK_GOTO(comm->exec->setup(comm), st, out);
    comm->exec_ready = 1;
    MPCCL_CHECK_GOTO(mpccl_comm_hier_setup(comm), st, out);
    comm->state = MPCCL_COMM_READY;
    if (comm->cuda_dev >= 0)
        MPCCL_INFO(MPCCL_SUB_INIT, "comm %p id 0x%llx rank %d of %d ready (CUDA device %d, %d node(s))",
                   (void *)comm, (unsigned long long)comm->id, comm->rank, comm->nranks, comm->cuda_dev,
                   comm->topo.nnodes);
    else
        MPCCL_INFO(MPCCL_SUB_INIT, "comm %p id 0x%llx rank %d of %d ready (host memory, %d node(s))", (void *)comm,
                   (unsigned long long)comm->id, comm->rank, comm->nranks, comm->topo.nnodes);
out:
    free(ids);
    return st;
}

void mpccl_comm_release(ncclComm_t comm, int force)
{
    if (!comm) return;
    mpccl_comm_fail_release(comm); /* first: no failure reported on comm from here */
    mpccl_check_release(comm);
    mpccl_comm_hier_release(comm, force || comm->aborting); /* their launches ran on comm's behalf */
    /* Device communicators, then windows: before the transport, since remote
     * keys live on its endpoints. */
    mpccl_comm_hooks_release(comm);
    /* Before the transport: the GPU executor's proxy drives it. */
    comm->exec->release(comm, force);
    /* Ranks of one process are destroyed one after another by one thread: a
     * flushing close would wait for peers that cannot progress until it
     * returns.  Their work is complete by now, so nothing is lost. */
    if (comm->transport) comm->transport->ops->close(comm->transport, force || comm->all_in_process);
    comm->transport = NULL;
    mpccl_bootstrap_close(&comm->bs);
    memset(&comm->bs, 0, sizeof(comm->bs));
    mpccl_topo_free(&comm->topo);
    free(comm->coll_send_seq);
    free(comm->coll_recv_seq);
    free(comm->p2p_send_seq);
    free(comm->p2p_recv_seq);
    pthread_mutex_destroy(&comm->redop_lock);
    pthread_mutex_destroy(&comm->hook_lock);
    mpccl_comm_async_destroy(comm);
    comm->magic = MPCCL_COMM_DEAD;
    free(comm);
}

void mpccl_comm_finalize(ncclComm_t comm)
{
    /* Host operations are complete when their call returns; what is left to
     * flush is the network: release windows (their UCX keys belong to the
     * transport's worker), then close the transport gracefully. */
    mpccl_comm_hooks_finalize(comm);
    mpccl_comm_hier_finalize(comm);
    /* The executor lets go of the transport (the GPU proxy thread drives it
     * for proxied peers, and would progress a closed one otherwise). */
    comm->exec->finalize(comm);
    if (comm->transport) comm->transport->ops->close(comm->transport, comm->all_in_process);
    comm->transport = NULL;
    comm->state = MPCCL_COMM_FINALIZED;
}

static mpccl_status_t finalize_in_background(void *arg)
{
    ncclComm_t comm = arg;
    MPCCL_CHECK(mpccl_comm_enter_device(comm->cuda_dev)); /* the GPU executor's finalize */
    mpccl_comm_finalize(comm);
    return MPCCL_OK;
}

mpccl_status_t mpccl_comm_finalize_call(ncclComm_t comm)
{
    if (mpccl_comm_nonblocking(comm)) return mpccl_comm_async_start(comm, finalize_in_background, comm);
    mpccl_comm_finalize(comm);
    return MPCCL_OK;
}

static mpccl_status_t abort_release(void *arg)
{
    ncclComm_t comm = arg;
    /* Threads still inside a call on comm, and a pending operation's worker,
     * leave first: they use what the release frees (comm_async.h). */
    mpccl_comm_quiesce(comm);
    /* GPU: waits, boundedly, for its kernels to exit; a communicator whose
     * init failed or was given up launched none. */
    if (comm->state == MPCCL_COMM_READY || comm->state == MPCCL_COMM_FINALIZED) comm->exec->abort(comm);
    mpccl_comm_release(comm, 1);
    return MPCCL_OK;
}

void mpccl_comm_destroy(ncclComm_t comm)
{
    /* A pending init has nothing to flush: it is abandoned as by an abort,
     * rather than waited for (its peers may never come). */
    if (mpccl_comm_async_pending(comm) && comm->state == MPCCL_COMM_INITIALIZING) {
        mpccl_comm_async_abort(comm);
        abort_release(comm);
        return;
    }
    mpccl_comm_quiesce(comm); /* a nonblocking finalize completes first */
    /* A failed communicator's kernels may wait on a dead peer forever: release
     * it like an abort. */
    comm->aborting = comm->state == MPCCL_COMM_FAILED || comm->async_error != ncclSuccess;
    mpccl_comm_release(comm, comm->aborting);
}

/* The work in flight stops at once: calls stuck in other threads return
 * (the communicator is failed as aborted) and a pending init gives up.  Inside
 * a group the release runs at ncclGroupEnd, after every communicator aborted
 * in the group was stopped: their kernels may share streams, and one must not
 * wait for another's that nobody stopped yet. */
/* ncclCommAbort while a call of comm has waited a while (host), or while a
 * kernel of it waits (GPU): the job-wide report first, so the abort says why. */
static void report_stall(ncclComm_t comm)
{
    if (comm->state != MPCCL_COMM_READY || !comm->side) return;
    mpccl_progress_t p;
    mpccl_progress_read(&comm->progress, &p);
    int stalled = p.state == MPCCL_PROGRESS_RUNNING && p.wait_since > 0 &&
                  mpccl_now_seconds() - p.wait_since >= MPCCL_ABORT_REPORT_S;
    char kernels[200] = "";
    if (comm->exec_ready) comm->exec->describe(comm, kernels, sizeof(kernels));
    if (!stalled && !strstr(kernels, "waited for")) return;
    char summary[1024];
    mpccl_hang_report(comm, "ncclCommAbort after a stall", 1, summary, sizeof(summary));
}

mpccl_status_t mpccl_comm_abort(ncclComm_t comm)
{
    report_stall(comm);
    mpccl_comm_async_abort(comm);
    /* A communicator its worker still builds, or whose init failed, has
     * launched nothing. */
    if (comm->state == MPCCL_COMM_READY || comm->state == MPCCL_COMM_FINALIZED) comm->exec->stop(comm);
    mpccl_comm_hier_stop(comm);
    return mpccl_group_defer_init(abort_release, comm);
}

mpccl_status_t mpccl_comm_revoke(const char *fn, ncclComm_t comm)
{
    MPCCL_CHECK(comm->exec->revoke(comm, fn));
    mpccl_comm_hier_stop(comm);
    comm->revoked = 1;
    /* Every other live rank learns it: their calls on comm then fail with
     * ncclRemoteError (the revoke message of comm_fail.c). */
    if (!comm->exec->on_streams) mpccl_comm_send_revoke(comm);
    MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx rank %d revoked", (unsigned long long)comm->id, comm->rank);
    return MPCCL_OK;
}

void mpccl_comm_set_error(ncclComm_t comm, mpccl_status_t st)
{
    /* A peer or the network failed: the communicator is unusable, and every
     * rank learns it (comm_fail.c). */
    if (st == MPCCL_ERR_REMOTE) {
        mpccl_comm_fail(comm, ncclRemoteError, "%s", mpccl_last_error());
        return;
    }
    if (comm->async_error == ncclSuccess) {
        switch (st) {
        case MPCCL_ERR_REMOTE: comm->async_error = ncclRemoteError; break;
        case MPCCL_ERR_SYSTEM: comm->async_error = ncclSystemError; break;
        case MPCCL_ERR_CUDA: comm->async_error = ncclUnhandledCudaError; break;
        default: comm->async_error = ncclInternalError; break;
        }
    }
}

/* The GPU executor where this build has one: a communicator binds to the
 * current device, as in NCCL. */
int mpccl_comm_device_for_init(void)
{
    const mpccl_executor_t *gpu = mpccl_exec_gpu();
    return gpu ? gpu->current_device() : -1;
}

mpccl_status_t mpccl_comm_enter_device(int cuda_dev)
{
    const mpccl_executor_t *gpu = mpccl_exec_gpu();
    return gpu && cuda_dev >= 0 ? gpu->enter_device(cuda_dev) : MPCCL_OK;
}
