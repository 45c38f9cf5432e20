/* The shared-device path (gpu_shared.h): setup, the shared segment, and one
 * call on the leader and on a follower. */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "bootstrap/bootstrap.h"
#include "core/comm_fail.h"
#include "core/topo.h"
#include "gpu/gpu_abort.h"
#include "cuda/cuda_ipc.h"
#include "gpu/gpu_launch.h"
#include "gpu/gpu_shared.h"
#include "gpu/gpu_shared_impl.h"
#include "util/shm_map.h"
#include "gpu/gpu_state.h"
#include "kernels/engine.h"
#include "kernels/shared_dev.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/datatype.h"
#include "util/log.h"

/* ---- memory identity ---------------------------------------------------------------- */

/* The description of the allocation holding p, exported once per allocation
 * (a follower's side).  0: CUDA IPC cannot share it. */
int mpccl_shr_export_ref(mpccl_gpu_shared_t *sh, const void *p, buf_ref_t *ref)
{
    uint64_t base, size, id;
    if (!mpccl_mem_device_range(p, &base, &size, &id)) return 0;
    cache_ent_t *victim = &sh->exports[0];
    sh->tick++;
    for (int i = 0; i < SHR_CACHE; i++) {
        cache_ent_t *e = &sh->exports[i];
        if (e->base == base && e->buffer_id == id && e->size) {
            e->used = sh->tick;
            ref->desc = e->desc;
            goto found;
        }
        if (e->used < victim->used) victim = e;
    }
    mpccl_ipc_desc_t d;
    if (mpccl_ipc_export((void *)(uintptr_t)base, size, &d) != MPCCL_OK) {
        mpccl_clear_last_error();
        return 0;
    }
    /* cuMem allocations (ncclMemAlloc) travel as file descriptors through
     * the fd server, a round trip per new buffer: staged instead */
    if (d.vmm) {
        mpccl_ipc_unexport(&d);
        return 0;
    }
    if (victim->size && victim->desc.vmm) mpccl_ipc_unexport(&victim->desc);
    victim->base = base;
    victim->size = size;
    victim->buffer_id = id;
    victim->desc = d;
    victim->used = sh->tick;
    ref->desc = d;
found:
    ref->present = 1;
    ref->offset = (uint64_t)(uintptr_t)p - base;
    ref->buffer_id = id;
    return 1;
}

/* A mapping goes only once no launch of the leader can still read it. */
static void release_sync(mpccl_gpu_shared_t *sh)
{
    if (sh->have_last && cudaEventSynchronize(sh->last_done) != cudaSuccess) (void)cudaGetLastError();
}

/* The leader's pointer to a rank's buffer (its import, cached). */
mpccl_status_t mpccl_shr_import_ref(mpccl_gpu_shared_t *sh, int r, const buf_ref_t *ref, char **out)
{
    cache_ent_t *row = &sh->imports[(size_t)r * SHR_CACHE], *victim = &row[0];
    sh->tick++;
    for (int i = 0; i < SHR_CACHE; i++) {
        cache_ent_t *e = &row[i];
        if (e->mapped && e->base == ref->desc.base && e->buffer_id == ref->buffer_id) {
            e->used = sh->tick;
            *out = (char *)e->mapped + ref->offset;
            return MPCCL_OK;
        }
        if (e->mapped && e->base == ref->desc.base) { /* freed and reallocated at the same address */
            release_sync(sh);
            mpccl_ipc_release(&e->desc);
            e->mapped = NULL;
        }
        if (!e->mapped || (victim->mapped && e->used < victim->used)) victim = e;
    }
    void *p = NULL;
    mpccl_status_t st = mpccl_ipc_import(&ref->desc, sh->comm->cuda_dev, &p);
    if (st != MPCCL_OK)
        return mpccl_fail(st, "shared-device path: rank %d cannot map rank %d's buffer (allocation 0x%llx, %llu "
                          "bytes): %s", sh->rank, r, (unsigned long long)ref->desc.base,
                          (unsigned long long)ref->desc.size, mpccl_last_error());
    if (victim->mapped) {
        release_sync(sh);
        mpccl_ipc_release(&victim->desc);
    }
    victim->mapped = p;
    victim->base = ref->desc.base;
    victim->buffer_id = ref->buffer_id;
    victim->desc = ref->desc;
    victim->used = sh->tick;
    *out = (char *)p + ref->offset;
    return MPCCL_OK;
}

/* ---- waiting ------------------------------------------------------------------------ */

/* Spins briefly (the peer is usually a few microseconds away), then yields,
 * then sleeps: ranks may outnumber the cores.  Every millisecond or so it
 * checks the communicator's abort word, its failure state (a dead peer) and
 * MPCCL_OP_TIMEOUT (counted from the last progress).  what names the wait. */
mpccl_status_t mpccl_shr_idle(mpccl_gpu_shared_t *sh, mpccl_shr_waiter_t *w, const char *fn, const char *what)
{
    unsigned n = w->n++;
    if (n < 2000) return MPCCL_OK;
    if (n < 4000) {
        sched_yield();
        return MPCCL_OK;
    }
    struct timespec ts = {0, n < 20000 ? 20000 : 100000};
    nanosleep(&ts, NULL);
    if ((n & 15) != 0) return MPCCL_OK;
    ncclComm_t comm = sh->comm;
    if (w->start == 0) {
        w->start = mpccl_now_seconds();
        w->timeout = mpccl_config_int("OP_TIMEOUT");
    }
    mpccl_gpu_abort_ctl_t *ab = mpccl_gpu_abort_ctl(comm);
    if (ab && mpccl_gpu_abort_raised(ab))
        return mpccl_fail(MPCCL_ERR_REMOTE, "%s: rank %d: the communicator was aborted while %s", fn, sh->rank, what);
    if (mpccl_comm_failed_idle(comm)) return mpccl_comm_fail_report(comm, fn);
    if (w->timeout > 0 && mpccl_now_seconds() - w->start > (double)w->timeout)
        return mpccl_fail(MPCCL_ERR_REMOTE, "%s: rank %d: %s took longer than MPCCL_OP_TIMEOUT=%lld s", fn, sh->rank,
                          what, (long long)w->timeout);
    return MPCCL_OK;
}

mpccl_status_t mpccl_shr_wait(mpccl_gpu_shared_t *sh, uint64_t seq, ready_fn_t ready, const char *fn,
                              const char *what)
{
    mpccl_shr_waiter_t w = {0, 0, 0};
    while (!ready(sh, seq)) MPCCL_CHECK(mpccl_shr_idle(sh, &w, fn, what));
    return MPCCL_OK;
}

static int followers_arrived(const mpccl_gpu_shared_t *sh, uint64_t seq)
{
    for (int r = 0; r < sh->nranks; r++)
        if (r != sh->leader && __atomic_load_n(&sh->seg->slot[r].arrive, __ATOMIC_ACQUIRE) < seq) return 0;
    return 1;
}

static int leader_done(const mpccl_gpu_shared_t *sh, uint64_t seq)
{
    return __atomic_load_n(&sh->seg->done, __ATOMIC_ACQUIRE) >= seq ||
           __atomic_load_n(&sh->seg->fail_seq, __ATOMIC_ACQUIRE) >= seq;
}

/* ---- setup -------------------------------------------------------------------------- */

static int mps_enabled(int dev)
{
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMpsEnabled, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return v ? 1 : 0;
}

static mpccl_status_t map_segment(mpccl_gpu_shared_t *sh, const char *name, int create)
{
    void *p = NULL;
    MPCCL_CHECK(mpccl_shm_map(name, sh->seg_bytes, create, "shared-device path", &p));
    sh->seg = p;
    return MPCCL_OK;
}

/* The leader's device-side resources: the done word as the GPU sees it, the
 * CTA counter, the import table. */
static mpccl_status_t leader_setup(mpccl_gpu_shared_t *sh)
{
    cudaError_t e = cudaHostRegister(sh->seg, sh->seg_bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) return mpccl_cuda_error(e, "cudaHostRegister (shared-device segment)");
    void *d = NULL;
    e = cudaHostGetDevicePointer(&d, (void *)&sh->seg->done, 0);
    if (e != cudaSuccess) return mpccl_cuda_error(e, "cudaHostGetDevicePointer (shared-device segment)");
    sh->done_dev = d;
    MPCCL_CUDA_CHECK(cudaMalloc((void **)&sh->counter, 256));
    MPCCL_CUDA_CHECK(cudaMemset(sh->counter, 0, 256));
    MPCCL_CHECK(mpccl_shr_load());
    MPCCL_CUDA_CHECK(cudaEventCreateWithFlags(&sh->last_done, cudaEventDisableTiming));
    sh->imports = calloc((size_t)sh->nranks * SHR_CACHE, sizeof(cache_ent_t));
    if (!sh->imports) return mpccl_fail(MPCCL_ERR_SYSTEM, "shared-device path: out of memory");
    int sms = 0;
    MPCCL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, sh->comm->cuda_dev));
    sh->nctas = sms > 0 ? sms : 32;
    return MPCCL_OK;
}

mpccl_status_t mpccl_gpu_shared_create(ncclComm_t comm, mpccl_gpu_shared_t **out, mpccl_shared_route_t *route_out)
{
    *out = NULL;
    mpccl_bootstrap_t *bs = &comm->bs;
    mpccl_dev_ident_t *ids = calloc((size_t)comm->nranks, sizeof(*ids));
    if (!ids) return mpccl_fail(MPCCL_ERR_SYSTEM, "shared-device path: out of memory");
    mpccl_dev_ident_t *me = &ids[comm->rank];
    me->host_hash = mpccl_topo_host_hash();
    me->pid = (int32_t)getpid();
    me->mps = mps_enabled(comm->cuda_dev);
    mpccl_status_t st = mpccl_ipc_device_uuid(comm->cuda_dev, me->uuid);
    if (st == MPCCL_OK) st = mpccl_bootstrap_allgather(bs, ids, sizeof(*ids));
    mpccl_shared_route_t route;
    char why[320];
    if (st == MPCCL_OK) st = mpccl_shared_route(ids, comm->nranks, mpccl_config_str("SHARED_GPU"), &route, why, sizeof why);
    free(ids);
    if (st != MPCCL_OK) return st;
    if (route_out) *route_out = route;
    if (route.mode == MPCCL_SHARED_NONE) return MPCCL_OK;
    if (comm->rank == 0) {
        if (route.mode == MPCCL_SHARED_SLICED) MPCCL_WARN(MPCCL_SUB_INIT, "comm 0x%llx: %s", (unsigned long long)comm->id, why);
        else MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx: %s", (unsigned long long)comm->id, why);
    }
    if (route.mode != MPCCL_SHARED_LEADER) return MPCCL_OK;

    mpccl_gpu_shared_t *sh = calloc(1, sizeof(*sh));
    if (!sh) return mpccl_fail(MPCCL_ERR_SYSTEM, "shared-device path: out of memory");
    sh->comm = comm;
    sh->rank = comm->rank;
    sh->nranks = comm->nranks;
    sh->leader = route.leader;
    sh->sent = calloc((size_t)comm->nranks, sizeof(uint64_t));
    sh->recvd = calloc((size_t)comm->nranks, sizeof(uint64_t));
    if (!sh->sent || !sh->recvd) {
        mpccl_gpu_shared_destroy(sh);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "shared-device path: out of memory");
    }
    long page = sysconf(_SC_PAGESIZE);
    sh->rings_off = sizeof(seg_t) + (size_t)comm->nranks * sizeof(slot_t);
    size_t bytes = sh->rings_off + (size_t)comm->nranks * (size_t)comm->nranks * sizeof(mpccl_shr_ring_t);
    sh->seg_bytes = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    /* The leader names the segment; everyone maps it; the name goes at once. */
    uint64_t nonce = 0;
    if (comm->rank == sh->leader && getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t)sizeof nonce)
        nonce = (uint64_t)getpid() << 32 ^ (uint64_t)mpccl_now_seconds();
    uint64_t *nonces = calloc((size_t)comm->nranks, sizeof(uint64_t));
    if (!nonces) {
        free(sh);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "shared-device path: out of memory");
    }
    nonces[comm->rank] = nonce;
    st = mpccl_bootstrap_allgather(bs, nonces, sizeof(uint64_t));
    nonce = nonces[sh->leader];
    free(nonces);
    char name[64];
    snprintf(name, sizeof name, "/mpccl-shr-%016llx", (unsigned long long)nonce);
    mpccl_status_t mine = st;
    if (mine == MPCCL_OK && comm->rank == sh->leader) mine = map_segment(sh, name, 1);
    if (st == MPCCL_OK) st = mpccl_bootstrap_agree(bs, mine, 0, "shared-device path (creating its segment)");
    if (st == MPCCL_OK && comm->rank != sh->leader) mine = map_segment(sh, name, 0);
    if (st == MPCCL_OK) st = mpccl_bootstrap_agree(bs, mine, 0, "shared-device path (mapping its segment)");
    if (comm->rank == sh->leader) shm_unlink(name);
    if (st == MPCCL_OK) {
        mine = comm->rank == sh->leader ? leader_setup(sh) : MPCCL_OK;
        st = mpccl_bootstrap_agree(bs, mine, 0, "shared-device path (setting up the leader)");
    }
    if (st != MPCCL_OK) {
        mpccl_gpu_shared_destroy(sh);
        return st;
    }
    *out = sh;
    return MPCCL_OK;
}

void mpccl_gpu_shared_destroy(mpccl_gpu_shared_t *sh)
{
    if (!sh) return;
    if (sh->imports) {
        for (int i = 0; i < sh->nranks * SHR_CACHE; i++)
            if (sh->imports[i].mapped) mpccl_ipc_release(&sh->imports[i].desc);
        free(sh->imports);
    }
    for (int i = 0; i < SHR_CACHE; i++)
        if (sh->exports[i].size && sh->exports[i].desc.vmm) mpccl_ipc_unexport(&sh->exports[i].desc);
    mpccl_gpu_scratch_free(&sh->stage_in);
    mpccl_gpu_scratch_free(&sh->stage_out);
    mpccl_gpu_scratch_free(&sh->scratch);
    mpccl_gpu_scratch_free(&sh->stage_p2p);
    free(sh->sent);
    free(sh->recvd);
    if (sh->counter) cudaFree(sh->counter);
    if (sh->last_done) cudaEventDestroy(sh->last_done);
    if (sh->seg) {
        if (sh->done_dev) cudaHostUnregister(sh->seg);
        munmap(sh->seg, sh->seg_bytes);
    }
    free(sh);
}

/* ---- one call ----------------------------------------------------------------------- */

int mpccl_gpu_shared_takes(const mpccl_gpu_shared_t *sh, const mpccl_call_t *call)
{
    if (!sh) return 0;
    switch (call->desc.coll) {
    case MPCCL_COLL_ALLREDUCE: case MPCCL_COLL_BROADCAST: case MPCCL_COLL_REDUCE: case MPCCL_COLL_ALLGATHER:
    case MPCCL_COLL_REDUCESCATTER: case MPCCL_COLL_ALLTOALL: case MPCCL_COLL_GATHER: case MPCCL_COLL_SCATTER:
        return 1;
    default:
        return 0;
    }
}

/* Elements of rank r's input and output for the call (0: the rank passes none). */
static void io_elems(const mpccl_coll_desc_t *d, int r, int n, uint64_t *in, uint64_t *out)
{
    uint64_t c = d->count, nc = c * (uint64_t)n;
    int root = r == d->root;
    switch (d->coll) {
    case MPCCL_COLL_ALLREDUCE: *in = c, *out = c; break;
    case MPCCL_COLL_BROADCAST: *in = root ? c : 0, *out = c; break;
    case MPCCL_COLL_REDUCE: *in = c, *out = root ? c : 0; break;
    case MPCCL_COLL_ALLGATHER: *in = c, *out = nc; break;
    case MPCCL_COLL_REDUCESCATTER: *in = nc, *out = c; break;
    case MPCCL_COLL_ALLTOALL: *in = nc, *out = nc; break;
    case MPCCL_COLL_GATHER: *in = c, *out = root ? nc : 0; break;
    case MPCCL_COLL_SCATTER: *in = root ? nc : 0, *out = c; break;
    default: *in = 0, *out = 0; break;
    }
}

static int is_reduction(mpccl_coll_t c)
{
    return c == MPCCL_COLL_ALLREDUCE || c == MPCCL_COLL_REDUCE || c == MPCCL_COLL_REDUCESCATTER;
}

/* A follower's buffer for the leader: its own allocation, or the staging
 * block (grown to bytes) when CUDA IPC cannot share it. */
static mpccl_status_t ref_or_stage(mpccl_gpu_shared_t *sh, const void *p, size_t bytes, scratch_block_t **stage,
                                   buf_ref_t *ref, void **staged)
{
    memset(ref, 0, sizeof(*ref));
    *staged = NULL;
    if (bytes == 0 || p == NULL) return MPCCL_OK;
    if (mpccl_shr_export_ref(sh, p, ref)) return MPCCL_OK;
    MPCCL_CHECK(mpccl_gpu_scratch_get(stage, bytes, staged));
    if (!mpccl_shr_export_ref(sh, *staged, ref))
        return mpccl_fail(MPCCL_ERR_CUDA, "shared-device path: rank %d cannot share its staging buffer", sh->rank);
    return MPCCL_OK;
}

static mpccl_status_t follower_call(mpccl_gpu_shared_t *sh, mpccl_call_t *call, uint64_t seq, const char *fn)
{
    const mpccl_coll_desc_t *d = &call->desc;
    cudaStream_t stream = (cudaStream_t)call->stream;
    slot_t *slot = &sh->seg->slot[sh->rank];
    size_t es = mpccl_dtype_size(d->dt);
    uint64_t nin, nout;
    io_elems(d, sh->rank, sh->nranks, &nin, &nout);
    void *in_stage = NULL, *out_stage = NULL;
    MPCCL_CHECK(ref_or_stage(sh, call->task.in, nin * es, &sh->stage_in, &slot->in, &in_stage));
    /* A device-resident PreMulSum scalar is this rank's to apply: its input is
     * scaled into the staging buffer, which the leader then reads as is. */
    int scale_here = d->prescale && call->task.scalar_dev && nin;
    if (scale_here && !in_stage) {
        MPCCL_CHECK(mpccl_gpu_scratch_get(&sh->stage_in, nin * es, &in_stage));
        if (!mpccl_shr_export_ref(sh, in_stage, &slot->in))
            return mpccl_fail(MPCCL_ERR_CUDA, "%s: rank %d cannot share its staging buffer", fn, sh->rank);
    }
    MPCCL_CHECK(ref_or_stage(sh, call->task.out, nout * es, &sh->stage_out, &slot->out, &out_stage));
    if (scale_here)
        MPCCL_CHECK(mpccl_gpu_scale_launch_dev(d->dt, in_stage, call->task.in, NULL, call->task.scalar_dev, nin, stream));
    else if (in_stage)
        MPCCL_CUDA_CHECK(cudaMemcpyAsync(in_stage, call->task.in, nin * es, cudaMemcpyDeviceToDevice, stream));
    /* The input is final and the output free once the stream drained. */
    MPCCL_CUDA_CHECK(cudaStreamSynchronize(stream));
    slot->coll = d->coll;
    slot->dt = d->dt;
    slot->op = d->op;
    slot->root = d->root;
    slot->count = d->count;
    slot->scaled = d->prescale && !scale_here;
    memcpy(&slot->scalar, call->task.scalar, sizeof slot->scalar);
    slot->divisor = d->divide ? call->task.divisor : 0;
    __atomic_store_n(&slot->arrive, seq, __ATOMIC_RELEASE);
    MPCCL_CHECK(mpccl_shr_wait(sh, seq, leader_done, fn, "waiting for the leader rank's launch"));
    if (__atomic_load_n(&sh->seg->done, __ATOMIC_ACQUIRE) < seq)
        return mpccl_fail(MPCCL_ERR_USAGE, "%s: %s", fn, sh->seg->fail_msg);
    if (out_stage)
        MPCCL_CUDA_CHECK(cudaMemcpyAsync(call->task.out, out_stage, nout * es, cudaMemcpyDeviceToDevice, stream));
    return MPCCL_OK;
}

/* The leader refuses call seq: every follower returns msg. */
static mpccl_status_t refuse(mpccl_gpu_shared_t *sh, uint64_t seq, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mpccl_status_t refuse(mpccl_gpu_shared_t *sh, uint64_t seq, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sh->seg->fail_msg, sizeof sh->seg->fail_msg, fmt, ap);
    va_end(ap);
    __atomic_store_n(&sh->seg->fail_seq, seq, __ATOMIC_RELEASE);
    return mpccl_fail(MPCCL_ERR_USAGE, "%s", sh->seg->fail_msg);
}

/* Every follower's call must be the leader's: a mismatch would move wrong
 * data, so all ranks fail instead, naming the rank and the argument. */
static mpccl_status_t check_match(mpccl_gpu_shared_t *sh, const mpccl_coll_desc_t *d, uint64_t seq, const char *fn)
{
    for (int r = 0; r < sh->nranks; r++) {
        if (r == sh->leader) continue;
        const slot_t *s = &sh->seg->slot[r];
        const char *arg = NULL;
        long long mine = 0, theirs = 0;
        if (s->coll != (int32_t)d->coll) arg = "operation", mine = d->coll, theirs = s->coll;
        else if (s->count != d->count) arg = "count", mine = (long long)d->count, theirs = (long long)s->count;
        else if (s->dt != (int32_t)d->dt) arg = "datatype", mine = d->dt, theirs = s->dt;
        else if (is_reduction(d->coll) && s->op != (int32_t)d->op) arg = "reduction op", mine = d->op, theirs = s->op;
        else if (s->root != d->root && (d->coll == MPCCL_COLL_BROADCAST || d->coll == MPCCL_COLL_REDUCE ||
                                        d->coll == MPCCL_COLL_GATHER || d->coll == MPCCL_COLL_SCATTER))
            arg = "root", mine = d->root, theirs = s->root;
        if (arg) {
            const char *what = !strcmp(arg, "operation") ? mpccl_coll_name((mpccl_coll_t)theirs) : NULL;
            if (what)
                return refuse(sh, seq, "%s: call #%llu: rank %d called %s where rank %d called %s", fn,
                              (unsigned long long)seq, r, what, sh->leader, mpccl_coll_name(d->coll));
            return refuse(sh, seq, "%s: call #%llu: rank %d passed %s %lld where rank %d passed %lld", fn,
                          (unsigned long long)seq, r, arg, theirs, sh->leader, mine);
        }
    }
    return MPCCL_OK;
}

static void add_group(mpccl_shr_args_t *a, uint64_t count, int src_sel, uint64_t src_off, int dst_sel,
                      uint64_t dst_off)
{
    mpccl_shr_group_t *g = &a->g[a->ngroups++];
    g->count = count;
    g->src_sel = (int16_t)src_sel;
    g->src_off = src_off;
    g->dst_sel = (int16_t)dst_sel;
    g->dst_off = dst_off;
    g->unit0 = a->nunits;
    a->nunits += (uint32_t)((count + a->unit_elems - 1) / a->unit_elems);
}

static mpccl_status_t launch(mpccl_gpu_shared_t *sh, mpccl_shr_args_t *a, int signal, cudaStream_t stream)
{
    a->done = signal ? sh->done_dev : NULL;
    uint32_t nctas = a->nunits < (uint32_t)sh->nctas ? a->nunits : (uint32_t)sh->nctas;
    MPCCL_CHECK(mpccl_shr_launch(a, nctas ? nctas : 1, stream));
    MPCCL_CUDA_CHECK(cudaEventRecord(sh->last_done, stream));
    sh->last_stream = stream;
    sh->have_last = 1;
    a->ngroups = 0;
    a->nunits = 0;
    return MPCCL_OK;
}

/* The groups of the call (shared_dev.h), launched in batches of at most
 * MPCCL_SHR_MAX_GROUPS; the last launch writes the done word. */
static mpccl_status_t launch_groups(mpccl_gpu_shared_t *sh, mpccl_shr_args_t *a, const mpccl_coll_desc_t *d,
                                    cudaStream_t stream)
{
    const int n = sh->nranks;
    const uint64_t c = d->count;
    const int ALL = MPCCL_SHR_ALL;
#define GROUP(cnt, ss, so, ds, dof)                                                    \
    do {                                                                               \
        if (a->ngroups == MPCCL_SHR_MAX_GROUPS) MPCCL_CHECK(launch(sh, a, 0, stream)); \
        add_group(a, cnt, ss, so, ds, dof);                                            \
    } while (0)
    if (c) {
        switch (d->coll) {
        case MPCCL_COLL_ALLREDUCE: GROUP(c, ALL, 0, ALL, 0); break;
        case MPCCL_COLL_BROADCAST: GROUP(c, d->root, 0, ALL, 0); break;
        case MPCCL_COLL_REDUCE: GROUP(c, ALL, 0, d->root, 0); break;
        case MPCCL_COLL_ALLGATHER:
            for (int i = 0; i < n; i++) GROUP(c, i, 0, ALL, (uint64_t)i * c);
            break;
        case MPCCL_COLL_REDUCESCATTER:
            for (int r = 0; r < n; r++) GROUP(c, ALL, (uint64_t)r * c, r, 0);
            break;
        case MPCCL_COLL_ALLTOALL:
            for (int i = 0; i < n; i++)
                for (int r = 0; r < n; r++) GROUP(c, i, (uint64_t)r * c, r, (uint64_t)i * c);
            break;
        case MPCCL_COLL_GATHER:
            for (int i = 0; i < n; i++) GROUP(c, i, 0, d->root, (uint64_t)i * c);
            break;
        case MPCCL_COLL_SCATTER:
            for (int r = 0; r < n; r++) GROUP(c, d->root, (uint64_t)r * c, r, 0);
            break;
        default: break;
        }
    }
#undef GROUP
    return launch(sh, a, 1, stream);
}

static mpccl_status_t leader_call(mpccl_gpu_shared_t *sh, mpccl_call_t *call, uint64_t seq, const char *fn)
{
    const mpccl_coll_desc_t *d = &call->desc;
    cudaStream_t stream = (cudaStream_t)call->stream;
    const int n = sh->nranks;
    size_t es = mpccl_dtype_size(d->dt);
    MPCCL_CHECK(mpccl_shr_wait(sh, seq, followers_arrived, fn, "waiting for the other ranks sharing the GPU to call"));
    MPCCL_CHECK(check_match(sh, d, seq, fn));
    /* kept in the communicator: no allocation per call (the launch copies it) */
    mpccl_shr_args_t *a = &sh->args;
    memset(a, 0, sizeof(*a));
    mpccl_status_t st = MPCCL_OK;
    a->nranks = n;
    a->dtype = d->dt;
    a->op = d->op;
    a->counter = sh->counter;
    a->seq = seq;
    a->unit_elems = (uint32_t)(SHR_UNIT_BYTES / es);
    a->divisor = d->divide ? call->task.divisor : 0;
    a->scaled = d->prescale;
    const void *my_in = call->task.in;
    uint64_t nin, nout;
    io_elems(d, sh->rank, n, &nin, &nout);
    if (sh->have_last && sh->last_stream != stream) {
        cudaError_t e = cudaStreamWaitEvent(stream, sh->last_done, 0);
        if (e != cudaSuccess) st = mpccl_cuda_error(e, "cudaStreamWaitEvent (shared-device path)");
    }
    if (st == MPCCL_OK && d->prescale && call->task.scalar_dev && nin) { /* the leader's own device scalar: scaled first */
        void *pre = NULL;
        st = mpccl_gpu_scratch_get(&sh->scratch, nin * es, &pre);
        if (st == MPCCL_OK)
            st = mpccl_gpu_scale_launch_dev(d->dt, pre, my_in, NULL, call->task.scalar_dev, nin, stream);
        my_in = pre;
    }
    for (int r = 0; r < n && st == MPCCL_OK; r++) {
        if (r == sh->rank) {
            a->src[r] = my_in;
            a->dst[r] = call->task.out;
            memcpy(&a->scalar[r], call->task.scalar, sizeof a->scalar[r]);
            if (d->prescale && call->task.scalar_dev) { /* already scaled: times one */
                a->scalar[r] = 0;
                mpccl_dtype_from_double(d->dt, 1.0, &a->scalar[r]);
            }
            continue;
        }
        const slot_t *s = &sh->seg->slot[r];
        char *p = NULL;
        if (s->in.present && (st = mpccl_shr_import_ref(sh, r, &s->in, &p)) == MPCCL_OK) a->src[r] = p;
        if (st == MPCCL_OK && s->out.present && (st = mpccl_shr_import_ref(sh, r, &s->out, &p)) == MPCCL_OK) a->dst[r] = p;
        a->scalar[r] = s->scalar;
        if (d->prescale && !s->scaled) { /* scaled by its own rank already: times one */
            a->scalar[r] = 0;
            mpccl_dtype_from_double(d->dt, 1.0, &a->scalar[r]);
        }
    }
    /* Alltoall in place: every block is read before any is written, through
     * a copy of all inputs. */
    if (st == MPCCL_OK && d->coll == MPCCL_COLL_ALLTOALL && d->count) {
        int in_place = 0;
        for (int r = 0; r < n; r++) in_place |= a->src[r] == a->dst[r];
        if (in_place) {
            char *copy = NULL;
            uint64_t per = d->count * (uint64_t)n * es;
            st = mpccl_gpu_scratch_get(&sh->scratch, per * (uint64_t)n, (void **)&copy);
            if (st == MPCCL_OK) {
                for (int r = 0; r < n && st == MPCCL_OK; r++)
                {
                    cudaError_t e = cudaMemcpyAsync(copy + r * per, a->src[r], per, cudaMemcpyDeviceToDevice, stream);
                    if (e != cudaSuccess) st = mpccl_cuda_error(e, "cudaMemcpyAsync (in-place alltoall)");
                }
                for (int r = 0; r < n; r++) a->src[r] = copy + r * per;
            }
        }
    }
    if (st == MPCCL_OK) st = launch_groups(sh, a, d, stream);
    if (st != MPCCL_OK) {
        if (__atomic_load_n(&sh->seg->fail_seq, __ATOMIC_ACQUIRE) < seq)
            (void)refuse(sh, seq, "%s: the leader rank %d failed: %s", fn, sh->rank, mpccl_last_error());
        return st;
    }
    return MPCCL_OK;
}

static const char *api_name(mpccl_coll_t c)
{
    switch (c) {
    case MPCCL_COLL_ALLREDUCE: return "ncclAllReduce";
    case MPCCL_COLL_BROADCAST: return "ncclBroadcast";
    case MPCCL_COLL_REDUCE: return "ncclReduce";
    case MPCCL_COLL_ALLGATHER: return "ncclAllGather";
    case MPCCL_COLL_REDUCESCATTER: return "ncclReduceScatter";
    case MPCCL_COLL_ALLTOALL: return "ncclAlltoAll";
    case MPCCL_COLL_GATHER: return "ncclGather";
    case MPCCL_COLL_SCATTER: return "ncclScatter";
    default: return "collective";
    }
}

mpccl_status_t mpccl_gpu_shared_run(mpccl_gpu_shared_t *sh, mpccl_call_t *call)
{
    const char *fn = api_name(call->desc.coll);
    uint64_t seq = ++sh->seq;
    return sh->rank == sh->leader ? leader_call(sh, call, seq, fn) : follower_call(sh, call, seq, fn);
}
#endif /* MPCCL_HAVE_CUDA */
