/* The GPU executor: its table (core/exec.h), and how a group's GPU calls
 * become launches.  Built in every build: without CUDA there is no GPU
 * executor (none registers: mpccl_exec_gpu returns NULL). */
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "core/comm_fail.h"
#include "core/exec.h"

#ifdef MPCCL_HAVE_CUDA
#include "algo/algo_p2p_schedule.h"
#include "core/group.h"
#include "cuda/cuda_rt.h"
#include "gpu/gpu_abort.h"
#include "gpu/gpu_launch.h"
#include "gpu/gpu_win.h"
#include "util/log.h"

/* A communicator's p2p calls of a group: one launch when its call table holds
 * them, else launches cut so that none waits for a later one on another rank
 * (algo_p2p_schedule.h). */
static mpccl_status_t launch_p2p_calls(ncclComm_t comm, mpccl_call_t **p2p, int np, int prepare)
{
    enum { TABLE = MPCCL_ENGINE_MAX_BUFS - 3 };
    mpccl_status_t (*run)(mpccl_call_t **, int) = prepare ? mpccl_gpu_prepare_p2p : mpccl_gpu_launch_p2p;
    if (np <= TABLE) return run(p2p, np);
    mpccl_p2p_call_ref_t *refs = malloc((size_t)np * sizeof(*refs));
    int *order = malloc((size_t)np * sizeof(*order));
    uint64_t *key = malloc((size_t)np * sizeof(*key));
    mpccl_call_t **batch = malloc((size_t)TABLE * sizeof(*batch));
    mpccl_status_t st = MPCCL_OK;
    int launches = -1;
    if (refs && order && key && batch) {
        for (int i = 0; i < np; i++) {
            refs[i].peer = p2p[i]->desc.root;
            refs[i].send = p2p[i]->desc.coll == MPCCL_COLL_SEND;
        }
        launches = mpccl_p2p_schedule(comm->rank, comm->nranks, refs, np, TABLE, order, key);
    }
    if (launches < 0) st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory scheduling a group of %d send/recv calls", np);
    else if (!prepare)
        MPCCL_INFO(MPCCL_SUB_P2P, "group of %d send/recv calls on rank %d: %d launches", np, comm->rank, launches);
    for (int i = 0; i < np && st == MPCCL_OK;) {
        int m = 0;
        for (uint64_t k = key[i]; i < np && key[i] == k; i++) batch[m++] = p2p[order[i]];
        st = run(batch, m);
    }
    free(refs);
    free(order);
    free(key);
    free(batch);
    return st;
}
/* One pass over a group's calls, per communicator (in order of first
 * appearance): its collectives in program order, then its p2p calls as one
 * launch.  prepare = 1 only plans, uploads and allocates (mpccl_gpu_prepare);
 * 0 launches.  done[n] and p2p[n] are the caller's scratch. */
static mpccl_status_t group_pass(mpccl_call_t *ops, mpccl_call_t **p2p, char *done, int n, int prepare)
{
    mpccl_status_t st = MPCCL_OK;
    memset(done, 0, (size_t)n);
    int i = 0;
    for (mpccl_call_t *first = ops; first && st == MPCCL_OK; first = first->next, i++) {
        if (done[i]) continue;
        ncclComm_t comm = first->comm;
        int np = 0, j = i;
        for (mpccl_call_t *op = first; op && st == MPCCL_OK; op = op->next, j++) {
            if (op->comm != comm) continue;
            done[j] = 1;
            if (op->is_p2p) p2p[np++] = op;
            else st = prepare ? mpccl_gpu_prepare(op) : mpccl_gpu_launch(op);
        }
        if (np > 0 && st == MPCCL_OK) st = launch_p2p_calls(comm, p2p, np, prepare);
        if (st != MPCCL_OK) mpccl_comm_set_error(comm, st);
    }
    return st;
}

/* GPU calls only enqueue work on their streams.  Every rank must put messages
 * into a pair's channels in the same order, and NCCL lets ranks order a
 * group's p2p and collectives differently, so the order is made canonical
 * (NCCL gives no order inside a group either).  A first pass prepares every
 * call, so that once the group's first kernel runs -- and between nodes waits
 * on the proxy -- its later launches make no CUDA call that may wait for the
 * device (plan uploads, allocations; doc/GPU_DESIGN.md, GPU-direct). */
static mpccl_status_t gpu_run_group(mpccl_call_t *ops)
{
    int n = 0;
    for (mpccl_call_t *op = ops; op; op = op->next) n++;
    /* groups of up to SMALL_GROUP calls (nearly all) allocate nothing */
    enum { SMALL_GROUP = 64 };
    mpccl_call_t *p2p_small[SMALL_GROUP];
    char done_small[SMALL_GROUP];
    int small = n <= SMALL_GROUP;
    mpccl_call_t **p2p = small ? p2p_small : calloc((size_t)n, sizeof(*p2p));
    char *done = small ? done_small : calloc((size_t)n, 1);
    if (!p2p || !done) {
        if (!small) {
            free(p2p);
            free(done);
        }
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory launching a group of %d calls", n);
    }
    mpccl_status_t st = group_pass(ops, p2p, done, n, 1);
    if (st == MPCCL_OK) st = group_pass(ops, p2p, done, n, 0);
    if (!small) {
        free(p2p);
        free(done);
    }
    return st;
}

static mpccl_status_t gpu_enter_device(int cuda_dev)
{
    cudaError_t e = cudaSetDevice(cuda_dev);
    return e == cudaSuccess ? MPCCL_OK : mpccl_cuda_error(e, "cudaSetDevice(communicator's device)");
}

/* Peer stores within a node; between nodes only over the proxy's one-sided
 * channel. */
static int gpu_rma_reaches_all(ncclComm_t comm)
{
    return comm->topo.nnodes == 1 || mpccl_gpu_os_remote(comm) != NULL;
}

static mpccl_status_t gpu_can_shrink(ncclComm_t comm, const char *fn, int abort)
{
    (void)abort; /* NCCL_SHRINK_ABORT: the core stops the parent's kernels first */
    /* The proxy thread owns the transport of a communicator it serves (one
     * spanning nodes always has it, mpccl_gpu_setup).  The shrink leaves that
     * transport alone where every rank has a door: its id goes over sockets,
     * the child gets a transport of its own.  Without the doors the id would
     * go over the parent's transport from this thread, racing the proxy. */
    if (mpccl_gpu_proxy(comm) != NULL && !mpccl_comm_doors_complete(comm))
        return mpccl_fail(MPCCL_ERR_USAGE,
                          "%s: a GPU communicator with peers served by the proxy thread (on other nodes, or, once a "
                          "window was registered, on this node without P2P) can be shrunk only where every rank "
                          "listens on a socket for the survivors' rendezvous, and some rank could not open one "
                          "(MPCCL_SOCKET_IFNAME: no usable interface?)",
                          fn);
    return MPCCL_OK;
}

/* Suspending releases nothing (its peers map the memory; captured graphs may
 * hold it): the communicator's launches complete first (gpu_abort.c). */
static mpccl_status_t gpu_can_suspend(ncclComm_t comm, const char *fn)
{
    return mpccl_gpu_comm_quiesce(comm, fn);
}

/* A kernel that hit MPCCL_OP_TIMEOUT left a hang record: it becomes the
 * communicator's asynchronous error. */
static void gpu_poll_error(ncclComm_t comm)
{
    (void)mpccl_gpu_comm_check_hang(comm);
}

/* launch and launch_p2p lead straight to the launch code (gpu_launch.c). */
static const mpccl_executor_t gpu_executor = {
    .name = "gpu",
    .memory = "device",
    .current_device = mpccl_cuda_current_device,
    .enter_device = gpu_enter_device,
    .setup = mpccl_gpu_setup,
    .finalize = mpccl_gpu_finalize,
    .release = mpccl_gpu_release,
    .mem_bytes = mpccl_gpu_mem_bytes,
    .check_buffers = mpccl_gpu_check_buffers,
    .plans_at_call = 0,
    .on_streams = 1,
    .launch = mpccl_gpu_launch,
    .launch_p2p = mpccl_gpu_launch_p2p,
    .run_group = gpu_run_group,
    .takes_flat = mpccl_gpu_takes_flat,
    .sig_setup = mpccl_gpu_sig_setup,
    .sig_free = mpccl_gpu_sig_free,
    .win_setup = mpccl_gpu_win_setup,
    .win_free = mpccl_gpu_win_free,
    .win_stop = mpccl_gpu_win_stop,
    .reg_export = mpccl_gpu_reg_export,
    .reg_free = mpccl_gpu_reg_free,
    .put_signal = mpccl_gpu_put_signal,
    .wait_signal = mpccl_gpu_wait_signal,
    .rma_reaches_all = gpu_rma_reaches_all,
    .device_api = 1,
    .stop = mpccl_gpu_stop,
    .abort = mpccl_gpu_abort,
    .revoke = mpccl_gpu_revoke,
    .can_shrink = gpu_can_shrink,
    .can_suspend = gpu_can_suspend,
    .poll_error = gpu_poll_error,
    .describe = mpccl_gpu_comm_describe,
    .stalled = mpccl_gpu_comm_stalled,
};

/* When the library loads (core/exec.h). */
__attribute__((constructor)) static void register_gpu_executor(void)
{
    mpccl_exec_register(&gpu_executor, 1);
}

#endif
