/* GPU communicators and calls: setup, teardown, buffer checks, launch (the
 * plan cache and scratch memory: gpu_plan_cache.c). */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "util/config.h"
#include "cuda/cuda_rt.h"
#include "gpu/gpu_lsa.h"
#include "gpu/gpu_abort.h"
#include "gpu/gpu_comm.h"
#include "gpu/gpu_flat.h"
#include "gpu/gpu_hier.h"
#include "gpu/gpu_kernels_load.h"
#include "gpu/gpu_launch.h"
#include "gpu/gpu_path.h"
#include "algo/algo.h"
#include "kernels/plan.h"
#include "gpu/gpu_proxy_mem.h"
#include "gpu/gpu_proxy_work.h"
#include "kernels/engine.h"
#include "util/log.h"
#include "gpu/gpu_win_remote.h"
#include "gpu/gpu_win_rma.h"
#include "proxy/proxy.h"
#include "gpu/gpu_shared.h"
#include "gpu/gpu_state.h"


/* Whether the stream is being captured into a CUDA graph. */
static int stream_capturing(cudaStream_t stream)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess) (void)cudaGetLastError();
    return cs != cudaStreamCaptureStatusNone;
}

mpccl_status_t mpccl_gpu_setup(ncclComm_t comm)
{
    mpccl_status_t st = MPCCL_OK;
    int saved = -1;
    mpccl_gpu_state_t *s = calloc(1, sizeof(*s));
    if (!s) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the GPU state of comm %p", (void *)comm);
    comm->gpu = s;
    MPCCL_CHECK_GOTO(mpccl_cuda_push_device(comm->cuda_dev, &saved), st, out);
    MPCCL_CHECK_GOTO(mpccl_gpu_kernels_load(comm->cuda_dev), st, out);
    int proxied = mpccl_gpu_path_needs_proxy(&comm->topo, comm->rank);
    if (proxied) s->net = mpccl_gpu_proxy_net(comm->cuda_dev, s->net_why, sizeof(s->net_why));
    MPCCL_CHECK_GOTO(mpccl_gpu_comm_create(&comm->bs, &comm->topo, comm->cuda_dev, s->net, &s->g), st, out);
    MPCCL_CHECK_GOTO(mpccl_gpu_abort_create(&s->g->abort), st, out);
    /* Between nodes the engine needs the proxy from the start; a node's peers
     * without P2P need it only for one-sided operations, so it waits for the
     * first window (mpccl_gpu_onesided_channel): until then the communicator
     * can be shrunk. */
    if (proxied) MPCCL_CHECK_GOTO(mpccl_gpu_attach_proxy(comm, s), st, out);
    MPCCL_CHECK_GOTO(mpccl_gpu_comm_commit(s->g), st, out);
    MPCCL_CHECK_GOTO(mpccl_flat_create(&comm->bs, &comm->topo, s->g, &s->flat), st, out);
    MPCCL_CHECK_GOTO(mpccl_gpu_hier_create(comm, &s->hier), st, out);
    MPCCL_CHECK_GOTO(mpccl_lsa_setup(comm, s->g->links_host), st, out);
    MPCCL_CHECK_GOTO(mpccl_gpu_shared_create(comm, &s->shared, NULL), st, out);
    /* Peers push their registered buffers to this process (cuda_ipc_push.c); the
     * barrier below makes sure every rank serves before anyone registers. */
    if (mpccl_flat_reg_peer(s->flat, comm->rank)) MPCCL_CHECK_GOTO(mpccl_ipc_serve(), st, out);
    s->check_pointers = mpccl_config_int("CHECK_POINTERS") != 0;
    cudaError_t e = cudaEventCreateWithFlags(&s->last_done, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming);
    if (e != cudaSuccess) st = mpccl_cuda_error(e, "cudaEventCreate");
    /* Every rank's links must be in place before anyone launches into them. */
    if (st == MPCCL_OK) st = mpccl_bootstrap_barrier(&comm->bs);
out:
    if (saved >= 0) mpccl_cuda_restore_device(saved);
    return st;
}

void mpccl_gpu_finalize(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    if (!s || !s->proxy) return;
    int saved = -1;
    if (mpccl_cuda_push_device(comm->cuda_dev, &saved) != MPCCL_OK) saved = -1;
    /* Kernels of this communicator still queued need the proxy to finish. */
    if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
    mpccl_proxy_work_fini(&s->work, 0);
    mpccl_proxy_detach(s->proxy, 0);
    s->proxy = NULL;
    mpccl_gpu_close_lanes(s, 0);
    /* Remote keys of GPU-direct puts live on the transport's endpoints, which
     * close next (mpccl_comm_finalize). */
    mpccl_os_rma_drop_keys(mpccl_os_remote_rma(s->os_remote));
    if (saved >= 0) mpccl_cuda_restore_device(saved);
}

/* ncclCommAbort, NCCL_SHRINK_ABORT: the kernels were told to stop
 * (mpccl_gpu_stop); wait, boundedly, until they exited.  Memory a kernel that
 * outlived the bound may still use stays allocated (mpccl_gpu_release). */
void mpccl_gpu_abort(ncclComm_t comm)
{
    mpccl_gpu_comm_stop(comm);
    mpccl_gpu_comm_drain_logged(comm);
}

void mpccl_gpu_stop(ncclComm_t comm)
{
    mpccl_gpu_comm_stop(comm);
}

/* ncclCommRevoke: launched kernels leave their wait loops (the abort word,
 * gpu_abort.c) and exit; later calls are refused by the core. */
mpccl_status_t mpccl_gpu_revoke(ncclComm_t comm, const char *fn)
{
    (void)fn;
    mpccl_gpu_comm_stop(comm);
    return MPCCL_OK;
}

void mpccl_gpu_release(ncclComm_t comm, int force)
{
    mpccl_gpu_state_t *s = comm->gpu;
    int saved = -1;
    if (!s) return;
    mpccl_cuda_push_device(comm->cuda_dev, &saved);
    /* Abort: every kernel of the communicator leaves its wait loops (its abort
     * word), then the launches are given a bounded time to exit. */
    int drained = 0;
    if (comm->aborting) {
        mpccl_gpu_comm_stop(comm);
        drained = mpccl_gpu_comm_drain(comm, MPCCL_GPU_ABORT_DRAIN_MS);
        if (!drained)
            MPCCL_WARN(MPCCL_SUB_INIT, "comm 0x%llx rank %d aborted: its kernels did not exit within %d ms; its "
                       "device memory is left allocated", (unsigned long long)comm->id, comm->rank,
                       MPCCL_GPU_ABORT_DRAIN_MS);
    }
    /* Work still queued on user streams uses these resources (NCCL's destroy
     * waits for it too). */
    if (!force) cudaDeviceSynchronize();
    mpccl_proxy_work_fini(&s->work, comm->aborting);
    if (s->proxy) mpccl_proxy_detach(s->proxy, force);
    s->proxy = NULL;
    mpccl_gpu_close_lanes(s, force || comm->aborting);
    mpccl_os_remote_free(s->os_remote); /* the proxy no longer delivers into it */
    s->os_remote = NULL;
    if (comm->aborting) {
        /* Peers (which may still run) map the mailboxes and the flat region,
         * captured graphs may still hold launches, and cudaFree would wait
         * for every kernel of the device (another communicator's, not aborted
         * yet, may still spin): the device memory stays allocated for the
         * life of the process. */
        MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx aborted: its kernels %s; its device memory is left allocated",
                   (unsigned long long)comm->id, drained ? "exited" : "may still be running");
        mpccl_flat_destroy(s->flat, 1);
        mpccl_gpu_hier_destroy(s->hier, 1);
        if (saved >= 0) mpccl_cuda_restore_device(saved);
        comm->gpu = NULL;
        return;
    }
    mpccl_gpu_plans_free(s);
    mpccl_gpu_shared_destroy(s->shared);
    mpccl_flat_destroy(s->flat, 0);
    mpccl_gpu_hier_destroy(s->hier, 0);
    mpccl_gpu_scratch_free(&s->scratch);
    if (s->last_done) cudaEventDestroy(s->last_done);
    if (s->join) cudaEventDestroy(s->join);
    if (s->g) mpccl_gpu_comm_destroy(s->g);
    if (saved >= 0) mpccl_cuda_restore_device(saved);
    free(s);
    comm->gpu = NULL;
}

/* ---- buffer checks ---- */

mpccl_status_t mpccl_gpu_check_buffers(const char *fn, ncclComm_t comm, mpccl_coll_t coll, const void *in,
                                       const void *out, size_t count, ncclDataType_t dt, int root)
{
    size_t e = mpccl_dtype_size(dt), n = (size_t)comm->nranks, one = count * e, all = one * n;
    int is_root = comm->rank == root, dev = comm->cuda_dev;
    size_t in_bytes = 0, out_bytes = 0;
    switch (coll) {
    case MPCCL_COLL_ALLREDUCE: in_bytes = out_bytes = one; break;
    case MPCCL_COLL_BROADCAST: in_bytes = is_root ? one : 0; out_bytes = one; break;
    case MPCCL_COLL_REDUCE: in_bytes = one; out_bytes = is_root ? one : 0; break;
    case MPCCL_COLL_ALLGATHER: in_bytes = one; out_bytes = all; break;
    case MPCCL_COLL_REDUCESCATTER: in_bytes = all; out_bytes = one; break;
    case MPCCL_COLL_ALLTOALL: in_bytes = out_bytes = all; break;
    case MPCCL_COLL_GATHER: in_bytes = one; out_bytes = is_root ? all : 0; break;
    case MPCCL_COLL_SCATTER: in_bytes = is_root ? all : 0; out_bytes = one; break;
    case MPCCL_COLL_SEND: in_bytes = one; break;
    case MPCCL_COLL_RECV: out_bytes = one; break;
    default: break;
    }
    if (!comm->gpu->check_pointers) { /* NCCL's default: no driver query per call */
        if (in_bytes && !in)
            return mpccl_fail(MPCCL_ERR_ARG, "%s: sendbuff is NULL but %zu bytes are to be read", fn, in_bytes);
        if (out_bytes && !out)
            return mpccl_fail(MPCCL_ERR_ARG, "%s: recvbuff is NULL but %zu bytes are to be written", fn, out_bytes);
        return MPCCL_OK;
    }
    if (in_bytes) MPCCL_CHECK(mpccl_check_gpu_buffer(fn, "sendbuff", in, in_bytes, dev));
    if (out_bytes) MPCCL_CHECK(mpccl_check_gpu_buffer(fn, "recvbuff", out, out_bytes, dev));
    return MPCCL_OK;
}

/* ---- scratch ---- */

static size_t align256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

static mpccl_status_t get_scratch(mpccl_gpu_state_t *s, size_t bytes, void **out)
{
    return mpccl_gpu_scratch_get(&s->scratch, bytes, out);
}

static mpccl_status_t before_launch(mpccl_gpu_state_t *s, cudaStream_t stream, int *capturing);
static mpccl_status_t launch_engine(ncclComm_t comm, mpccl_gpu_state_t *s, mpccl_engine_args_t *a,
                                    cudaStream_t stream, const mpccl_gpu_plan_t *gp);
static mpccl_status_t after_launch(mpccl_gpu_state_t *s, cudaStream_t stream, int capturing);

/* ---- grouped point-to-point ---- */

/* The launch runs on the first call's stream; the other calls' streams join
 * before it and wait for it after (NCCL's group semantics across streams). */
static mpccl_status_t join_streams(mpccl_gpu_state_t *s, mpccl_call_t **calls, int n, int after)
{
    cudaStream_t s0 = (cudaStream_t)calls[0]->stream;
    for (int i = 1; i < n; i++) {
        cudaStream_t si = (cudaStream_t)calls[i]->stream;
        if (si == s0) continue;
        MPCCL_CUDA_CHECK(cudaEventRecord(s->join, after ? s0 : si));
        MPCCL_CUDA_CHECK(cudaStreamWaitEvent(after ? si : s0, s->join, 0));
    }
    return MPCCL_OK;
}

/* ---- abort (gpu_abort.c) ---- */

mpccl_gpu_abort_ctl_t *mpccl_gpu_abort_ctl(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    return s && s->g ? s->g->abort : NULL;
}

int mpccl_gpu_launches_done(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    if (!s || !s->have_last) return 1;
    cudaError_t e = cudaEventQuery(s->last_done);
    if (e == cudaErrorNotReady) return 0;
    if (e != cudaSuccess) (void)cudaGetLastError();
    return 1;
}

/* A timed-out kernel or a stopped communicator takes no new work. */
static mpccl_status_t check_stopped(ncclComm_t comm)
{
    MPCCL_CHECK(mpccl_gpu_comm_check_hang(comm));
    if (mpccl_gpu_abort_raised(mpccl_gpu_abort_ctl(comm)))
        return mpccl_fail(MPCCL_ERR_REMOTE, "comm 0x%llx rank %d: the communicator's GPU kernels were stopped "
                          "(a peer failed); abort or shrink it",
                          (unsigned long long)comm->id, comm->rank);
    return MPCCL_OK;
}

mpccl_status_t mpccl_gpu_launch_p2p(mpccl_call_t **calls, int n)
{
    ncclComm_t comm = calls[0]->comm;
    mpccl_gpu_state_t *s = comm->gpu;
    plan_entry_t *pe = NULL;
    int saved = -1;
    mpccl_status_t st;
    if (n > MPCCL_ENGINE_MAX_BUFS - 3)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "p2p launch of %d calls (at most %d)", n, MPCCL_ENGINE_MAX_BUFS - 3);
    if ((st = check_stopped(comm)) != MPCCL_OK) return st;
    if (s->proxy && (st = mpccl_proxy_error(s->proxy)) != MPCCL_OK) return st;
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    cudaStream_t stream = (cudaStream_t)calls[0]->stream;
    int capturing = 0;
    if (mpccl_gpu_shared_takes_p2p(s->shared) && !stream_capturing(stream)) {
        st = mpccl_gpu_shared_p2p(s->shared, calls, n);
        goto out;
    }
    if (mpccl_flat_takes_p2p(s->flat)) {
        MPCCL_CHECK_GOTO(before_launch(s, stream, &capturing), st, out);
        MPCCL_CHECK_GOTO(join_streams(s, calls, n, 0), st, out);
        MPCCL_CHECK_GOTO(mpccl_flat_launch_p2p(s->flat, calls, n, stream), st, out);
        MPCCL_CHECK_GOTO(join_streams(s, calls, n, 1), st, out);
        st = after_launch(s, stream, capturing);
        goto out;
    }
    MPCCL_CHECK_GOTO(mpccl_gpu_plan_lookup_p2p(comm, s, calls, n, &pe), st, out);
    MPCCL_CHECK_GOTO(before_launch(s, stream, &capturing), st, out);
    MPCCL_CHECK_GOTO(join_streams(s, calls, n, 0), st, out);
    mpccl_engine_args_t a;
    memset(&a, 0, sizeof(a));
    a.comm = s->g->dcomm;
    a.plan = pe->gp.dev;
    for (int i = 0; i < n; i++)
        a.buf[3 + i] = calls[i]->desc.coll == MPCCL_COLL_SEND ? (void *)calls[i]->task.in : calls[i]->task.out;
    a.dtype = ncclUint8;
    a.op = MPCCL_OP_SUM;
    a.ab = mpccl_gpu_abort_arg(s->g->abort);
    if (pe->sched.nsteps) MPCCL_CHECK_GOTO(launch_engine(comm, s, &a, stream, &pe->gp), st, out);
    MPCCL_CHECK_GOTO(join_streams(s, calls, n, 1), st, out);
    st = after_launch(s, stream, capturing);
out:
    if (saved >= 0) mpccl_cuda_restore_device(saved);
    return st;
}

/* ---- launch ---- */

/* An engine launch; between nodes it posts its pieces to the proxy
 * (gpu_proxy_work.h). */
static mpccl_status_t launch_engine(ncclComm_t comm, mpccl_gpu_state_t *s, mpccl_engine_args_t *a,
                                    cudaStream_t stream, const mpccl_gpu_plan_t *gp)
{
    mpccl_proxy_work_token_t tok;
    mpccl_proxy_work_args_t pa;
    if (!s->g->proxy_peers) return mpccl_engine_launch(a, s->g->nctas, stream);
    MPCCL_CHECK(mpccl_proxy_work_begin(&s->work, stream, MPCCL_PROXY_WORK_ENGINE, gp->due, gp->ndue, &pa, &tok));
    mpccl_status_t st;
    if (gp->small) {
        a->small = gp->small;
        a->small_nsteps = gp->small_nsteps;
        a->nslots = s->g->nslots;
        a->slot_bytes = s->g->slot_bytes;
        st = mpccl_engine_small_launch(a, stream, gp->small_overlap);
    } else {
        st = mpccl_engine_launch(a, s->g->nctas, stream);
    }
    mpccl_status_t e = mpccl_proxy_work_end(&s->work, stream, &tok, st);
    return st != MPCCL_OK ? st : e;
}

/* A launch on another stream than the previous one waits for it.  Inside a
 * capture the graph's own order applies (an event recorded there cannot order
 * work outside it); NCCL asks the same of its users. */
static mpccl_status_t before_launch(mpccl_gpu_state_t *s, cudaStream_t stream, int *capturing)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &cs);
    *capturing = cs != cudaStreamCaptureStatusNone;
    if (*capturing || !s->have_last || s->last_stream == stream) return MPCCL_OK;
    MPCCL_CUDA_CHECK(cudaStreamWaitEvent(stream, s->last_done, 0));
    return MPCCL_OK;
}

static mpccl_status_t after_launch(mpccl_gpu_state_t *s, cudaStream_t stream, int capturing)
{
    if (capturing) return MPCCL_OK;
    MPCCL_CUDA_CHECK(cudaEventRecord(s->last_done, stream));
    s->last_stream = stream;
    s->have_last = 1;
    return MPCCL_OK;
}

/* pre = the call's input times its PreMulSum / float-avg scalar (host value,
 * or read on the device when the scalar lives there), n elements. */
static mpccl_status_t scale_input(const mpccl_call_t *call, void *pre, uint64_t n, cudaStream_t stream)
{
    return mpccl_gpu_scale_launch_dev(call->desc.dt, pre, call->task.in,
                                      call->task.scalar_dev ? NULL : call->task.scalar, call->task.scalar_dev, n,
                                      stream);
}

/* Elements of the input a prescaled call reads (reductions only). */
static uint64_t in_elems(const ncclComm_t comm, const mpccl_coll_desc_t *d)
{
    return d->coll == MPCCL_COLL_REDUCESCATTER ? d->count * (uint64_t)comm->nranks : d->count;
}

/* Scratch of a flat call: the prescaled input, then what the flat launch
 * itself needs (gpu_flat.h). */
static size_t flat_pre_bytes(ncclComm_t comm, const mpccl_coll_desc_t *d)
{
    return d->prescale ? align256(in_elems(comm, d) * mpccl_dtype_size(d->dt)) : 0;
}

static size_t flat_scratch_bytes(ncclComm_t comm, mpccl_gpu_state_t *s, const mpccl_coll_desc_t *d)
{
    return flat_pre_bytes(comm, d) + align256(mpccl_flat_scratch_bytes(s->flat, d));
}

static mpccl_status_t launch_flat(ncclComm_t comm, mpccl_gpu_state_t *s, mpccl_call_t *call, cudaStream_t stream)
{
    int capturing = 0;
    const void *in = call->task.in;
    size_t pre_bytes = flat_pre_bytes(comm, &call->desc), bytes = flat_scratch_bytes(comm, s, &call->desc);
    char *scratch = NULL;
    MPCCL_CHECK(before_launch(s, stream, &capturing));
    if (bytes) MPCCL_CHECK(get_scratch(s, bytes, (void **)&scratch));
    if (call->desc.prescale) {
        MPCCL_CHECK(scale_input(call, scratch, in_elems(comm, &call->desc), stream));
        in = scratch;
    }
    MPCCL_CHECK(mpccl_flat_launch_call(s->flat, call, in, bytes > pre_bytes ? scratch + pre_bytes : NULL, stream));
    return after_launch(s, stream, capturing);
}

uint64_t mpccl_gpu_mem_bytes(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    if (!s) return 0;
    uint64_t total = (s->g ? s->g->mailbox_bytes : 0) + mpccl_flat_region_size(s->flat);
    total += mpccl_gpu_scratch_bytes(s->scratch) + mpccl_gpu_plans_bytes(s);
    total += mpccl_gpu_hier_mem_bytes(s->hier);
    return total;
}

int mpccl_gpu_link_kind(ncclComm_t comm, int peer)
{
    mpccl_gpu_state_t *s = comm->gpu;
    if (!s || !s->g || peer < 0 || peer >= comm->nranks) return MPCCL_LINK_NONE;
    return (int)s->g->links_host[peer].kind;
}

struct mpccl_flat_comm *mpccl_gpu_flat(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    return s ? s->flat : NULL;
}

struct mpccl_os_remote *mpccl_gpu_os_remote(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    return s ? s->os_remote : NULL;
}

mpccl_proxy_comm_t *mpccl_gpu_proxy(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    return s ? s->proxy : NULL;
}

struct mpccl_proxy_work *mpccl_gpu_proxy_work(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    return s && s->proxy ? &s->work : NULL;
}

int mpccl_gpu_takes_flat(ncclComm_t comm, const mpccl_coll_desc_t *d)
{
    mpccl_gpu_state_t *s = comm->gpu;
    if (!s || !s->flat) return 0;
    if (d->coll == MPCCL_COLL_SEND || d->coll == MPCCL_COLL_RECV) return mpccl_flat_takes_p2p(s->flat);
    return mpccl_flat_takes(s->flat, d);
}

/* A communicator of one rank: a collective's result is its input, so it is
 * one copy on the stream (none in place) -- a copy-engine node in a graph, no
 * kernel.  Scaled calls (PreMulSum, float average) still take the kernels.
 * The copy touches no state shared with the communicator's kernels, so it
 * needs no ordering with its other launches. */
static int single_rank_copy(ncclComm_t comm, const mpccl_call_t *call, cudaStream_t stream, mpccl_status_t *st)
{
    const mpccl_coll_desc_t *d = &call->desc;
    if (comm->nranks != 1 || d->prescale || d->coll == MPCCL_COLL_SEND || d->coll == MPCCL_COLL_RECV) return 0;
    size_t bytes = d->count * mpccl_dtype_size(d->dt);
    *st = MPCCL_OK;
    if (bytes == 0 || call->task.in == call->task.out) return 1;
    cudaError_t e = cudaMemcpyAsync(call->task.out, call->task.in, bytes, cudaMemcpyDefault, stream);
    if (e != cudaSuccess)
        *st = mpccl_fail(MPCCL_ERR_CUDA, "one-rank collective: copying %zu bytes on the stream failed: %s", bytes,
                         cudaGetErrorString(e));
    return 1;
}

/* Processes sharing the GPU without MPS (gpu_shared.h): the leader's process
 * runs the call for all of them.  A stream being captured keeps the usual
 * kernels: the path waits on the host, which a graph cannot replay. */
static int shared_launch(mpccl_gpu_state_t *s, mpccl_call_t *call, cudaStream_t stream, mpccl_status_t *st)
{
    if (!mpccl_gpu_shared_takes(s->shared, call) || stream_capturing(stream)) return 0;
    *st = mpccl_gpu_shared_run(s->shared, call);
    return 1;
}

/* Scratch bytes an engine call of schedule sc needs: temporaries, then the
 * prescaled input. */
static void engine_scratch(const mpccl_sched_t *sc, ncclDataType_t dt, size_t *tmp_bytes, size_t *pre_bytes)
{
    size_t esize = mpccl_dtype_size(dt);
    *tmp_bytes = align256(sc->tmp_elems * esize);
    *pre_bytes = sc->needs_prescale ? align256(sc->in_elems * esize) : 0;
}

/* Plans (uploaded) and scratch of one call, without launching: the group's
 * first pass (gpu_exec.c), so that no plan upload or scratch allocation --
 * CUDA calls that may wait for the device -- runs while a kernel of the group
 * already waits on the proxy (doc/GPU_DESIGN.md, GPU-direct). */
mpccl_status_t mpccl_gpu_prepare(mpccl_call_t *call)
{
    ncclComm_t comm = call->comm;
    mpccl_gpu_state_t *s = comm->gpu;
    const mpccl_coll_desc_t *d = &call->desc;
    if (comm->nranks == 1 && !d->prescale) return MPCCL_OK; /* single_rank_copy: nothing to prepare */
    if (mpccl_gpu_shared_takes(s->shared, call)) return MPCCL_OK; /* shared_launch: nothing to prepare */
    if (mpccl_gpu_hier_takes(comm, s->hier, d)) return MPCCL_OK; /* its children prepare at launch */
    int saved = -1;
    mpccl_status_t st = MPCCL_OK;
    void *scratch = NULL;
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    if (mpccl_flat_takes(s->flat, d)) {
        size_t bytes = flat_scratch_bytes(comm, s, d);
        if (bytes) st = get_scratch(s, bytes, &scratch);
    } else {
        plan_entry_t *pe = NULL;
        size_t tmp_bytes = 0, pre_bytes = 0;
        if ((st = mpccl_gpu_plan_lookup(comm, s, d, &pe)) == MPCCL_OK) engine_scratch(&pe->sched, d->dt, &tmp_bytes, &pre_bytes);
        if (tmp_bytes + pre_bytes) st = get_scratch(s, tmp_bytes + pre_bytes, &scratch);
    }
    if (saved >= 0) mpccl_cuda_restore_device(saved);
    return st;
}

mpccl_status_t mpccl_gpu_prepare_p2p(mpccl_call_t **calls, int n)
{
    ncclComm_t comm = calls[0]->comm;
    plan_entry_t *pe = NULL;
    int saved = -1;
    if (n > MPCCL_ENGINE_MAX_BUFS - 3 || mpccl_flat_takes_p2p(comm->gpu->flat) ||
        mpccl_gpu_shared_takes_p2p(comm->gpu->shared))
        return MPCCL_OK; /* see launch */
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    mpccl_status_t st = mpccl_gpu_plan_lookup_p2p(comm, comm->gpu, calls, n, &pe);
    if (saved >= 0) mpccl_cuda_restore_device(saved);
    return st;
}

mpccl_status_t mpccl_gpu_launch(mpccl_call_t *call)
{
    ncclComm_t comm = call->comm;
    mpccl_gpu_state_t *s = comm->gpu;
    cudaStream_t stream = (cudaStream_t)call->stream;
    plan_entry_t *pe = NULL;
    int saved = -1;
    mpccl_status_t st;
    if ((st = check_stopped(comm)) != MPCCL_OK) return st;
    if (s->proxy && (st = mpccl_proxy_error(s->proxy)) != MPCCL_OK) return st;
    if (mpccl_gpu_hier_takes(comm, s->hier, &call->desc)) return mpccl_gpu_hier_launch(comm, s->hier, call);
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    if (single_rank_copy(comm, call, stream, &st)) goto out;
    if (shared_launch(s, call, stream, &st)) goto out;
    if (mpccl_flat_takes(s->flat, &call->desc)) {
        st = launch_flat(comm, s, call, stream);
        goto out;
    }
    MPCCL_CHECK_GOTO(mpccl_gpu_plan_lookup(comm, s, &call->desc, &pe), st, out);
    const mpccl_sched_t *sc = &pe->sched;
    size_t tmp_bytes, pre_bytes;
    engine_scratch(sc, call->desc.dt, &tmp_bytes, &pre_bytes);
    void *scratch = NULL;
    if (tmp_bytes + pre_bytes) MPCCL_CHECK_GOTO(get_scratch(s, tmp_bytes + pre_bytes, &scratch), st, out);
    int capturing = 0;
    MPCCL_CHECK_GOTO(before_launch(s, stream, &capturing), st, out);

    mpccl_engine_args_t a;
    memset(&a, 0, sizeof(a));
    a.comm = s->g->dcomm;
    a.plan = pe->gp.dev;
    a.buf[MPCCL_BUF_IN] = (void *)call->task.in;
    a.buf[MPCCL_BUF_OUT] = call->task.out;
    a.buf[MPCCL_BUF_TMP] = scratch;
    a.dtype = call->desc.dt;
    a.op = call->desc.op;
    a.divisor = call->task.divisor;
    memcpy(a.scalar, call->task.scalar, sizeof(a.scalar));
    a.ab = mpccl_gpu_abort_arg(s->g->abort);
    if (sc->needs_prescale && sc->in_elems) {
        void *pre = (char *)scratch + tmp_bytes;
        MPCCL_CHECK_GOTO(scale_input(call, pre, sc->in_elems, stream), st, out);
        a.buf[MPCCL_BUF_IN] = pre;
    }
    if (sc->nsteps) MPCCL_CHECK_GOTO(launch_engine(comm, s, &a, stream, &pe->gp), st, out);
    MPCCL_TRACE(MPCCL_SUB_COLL, "comm 0x%llx: engine launch: %s, %zu elements, %u steps", (unsigned long long)comm->id,
                mpccl_coll_name(call->desc.coll), (size_t)call->desc.count, sc->nsteps);
    st = after_launch(s, stream, capturing);
out:
    if (saved >= 0) mpccl_cuda_restore_device(saved);
    return st;
}
#endif
