/* Communicator setup and teardown. */
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/random.h>

#include "build_config.h"
#include "core/comm.h"
#include "core/comm_fail.h"
#include "devapi/devapi_comm.h"
#include "util/log.h"
#include "core/topo.h"
#include "onesided/onesided_win.h"
#ifdef MPCCL_HAVE_CUDA
#include "gpu/gpu_cuda_rt.h"
#include "gpu/gpu_launch.h"
#endif

ncclComm_t mpccl_comm_alloc(void)
{
    ncclComm_t comm = calloc(1, sizeof(*comm));
    if (!comm) return NULL;
    comm->magic = MPCCL_COMM_MAGIC;
    comm->cuda_dev = -1;
    comm->state = MPCCL_COMM_INITIALIZING;
    comm->async_error = ncclSuccess;
    pthread_mutex_init(&comm->redop_lock, NULL);
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

mpccl_status_t mpccl_comm_setup(ncclComm_t comm, mpccl_bootstrap_t *bs, const ncclConfig_t *config, int cuda_dev)
{
    mpccl_status_t st = MPCCL_OK;
    uint64_t *ids = NULL;
    comm->bs = *bs;
    comm->rank = bs->rank;
    comm->nranks = bs->nranks;
    comm->lsa_first = comm->rank;
    comm->lsa_size = 1;
    comm->lsa_uniform = 1;
    mpccl_log_set_rank(comm->rank);
    if (config) comm->config = *config;
    else MPCCL_CHECK(mpccl_config_normalize(NULL, &comm->config, "init"));

    ids = calloc((size_t)comm->nranks, sizeof(uint64_t));
    if (!ids) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for %d ids", comm->nranks);
    if (getrandom(&ids[comm->rank], sizeof(uint64_t), 0) != sizeof(uint64_t)) ids[comm->rank] = (uint64_t)(uintptr_t)comm;
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&comm->bs, ids, sizeof(uint64_t)), st, out);
    comm->id = ids[0];

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
    MPCCL_CHECK_GOTO(mpccl_ucx_transport_create_local(&comm->bs, mpccl_comm_same_machine(comm), &comm->transport),
                     st, out);
    mpccl_comm_fail_attach(comm);
    MPCCL_CHECK_GOTO(agree_on_device(comm, cuda_dev), st, out);
#ifdef MPCCL_HAVE_CUDA
    if (comm->cuda_dev >= 0) MPCCL_CHECK_GOTO(mpccl_gpu_setup(comm), st, out);
#endif
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
    mpccl_devcomm_release_all(comm);
    mpccl_win_release(comm); /* before the transport: remote keys live on its endpoints */
#ifdef MPCCL_HAVE_CUDA
    /* Before the transport: the proxy drives it. */
    if (comm->gpu) mpccl_gpu_release(comm, force);
#endif
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
    comm->magic = MPCCL_COMM_DEAD;
    free(comm);
}

int mpccl_comm_device_for_init(void)
{
#ifdef MPCCL_HAVE_CUDA
    return mpccl_cuda_current_device();
#else
    return -1;
#endif
}

mpccl_status_t mpccl_comm_enter_device(int cuda_dev)
{
#ifdef MPCCL_HAVE_CUDA
    if (cuda_dev >= 0) {
        cudaError_t e = cudaSetDevice(cuda_dev);
        if (e != cudaSuccess) return mpccl_cuda_error(e, "cudaSetDevice(communicator's device)");
    }
#else
    (void)cuda_dev;
#endif
    return MPCCL_OK;
}
