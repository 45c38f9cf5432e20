/* Hierarchical collectives (gpu_hier.h).  A call becomes, per chunk, a phase
 * inside the node (flat kernels of the node child), a phase between nodes
 * (the rail child, over UCX) and another phase inside the node:
 *
 *   allreduce       reduce-scatter in the node, allreduce of each rank's
 *                   share between nodes, allgather in the node
 *   broadcast       scatter from the root in its node, broadcast of each
 *                   share from the root's node, allgather in the node
 *   reduce          reduce-scatter in the node, reduce of each share to the
 *                   root's node, gather to the root in its node
 *   allgather       allgather between nodes (each rank's own piece), then
 *                   allgather in the node and a reorder into rank order
 *   reduce_scatter  reorder, reduce-scatter in the node, then between nodes
 *
 * The node phases run on one private stream, the rail phases on another;
 * events let chunk c's rail phase run while the node stream works on its
 * neighbours, so NVLink and the network overlap.  Every rank enqueues the
 * same sequence of child calls, which is what keeps the children's own
 * ordering rules (one launch after another per communicator). */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/comm_hier.h"
#include "cuda/cuda_rt.h"
#include "gpu/gpu_hier.h"
#include "gpu/gpu_hier_geometry.h"
#include "gpu/gpu_launch.h"
#include "gpu/gpu_state.h"
#include "util/log.h"

#define HIER_RING 4 /* events per kind in flight: chunk c waits for c - 1 and c - 2 */
/* Reduce has one crossing between nodes on the engine, three phases here:
 * below this the engine was faster (2 simulated nodes x 2 H100s, 2026-11-26:
 * 1.02-1.13x at 8 B - 128 KB, 0.91x at 512 KB). */
#define HIER_REDUCE_MIN_BYTES (256u << 10)
/* Allreduce, broadcast and reduce up to this size skip the split into
 * shares: the whole buffer goes through a node phase and a rail phase (two
 * phases instead of three; every rail carries all of it, which costs little
 * while a crossing's latency dominates). */
#define HIER_WHOLE_BYTES (32u << 10)

struct mpccl_gpu_hier {
    cudaStream_t node_stream, rail_stream;
    cudaEvent_t fork, pre_done, node_join, rail_join;
    cudaEvent_t rail_done[HIER_RING], post_done[HIER_RING];
    scratch_block_t *scratch; /* used only on the private streams, which serialize hierarchical calls */
};

/* One call as its phases see it. */
typedef struct hier_call {
    ncclComm_t comm;
    const mpccl_hier_t *h;
    mpccl_gpu_hier_t *gh;
    const mpccl_call_t *call;
    uint64_t esize, chunk, nchunks;
    int whole; /* one chunk, no shares: everything is the "tail" (HIER_WHOLE_BYTES) */
    int G, N, l, n, root_node, root_local;
    const char *in;
    char *out;
    char *tmp[2], *reorder; /* scratch: a ring of two per-chunk buffers, the reorder buffer */
} hier_call_t;

mpccl_status_t mpccl_gpu_hier_create(ncclComm_t comm, mpccl_gpu_hier_t **out)
{
    *out = NULL;
    if (!mpccl_comm_hier_possible(comm)) return MPCCL_OK;
    mpccl_gpu_hier_t *gh = calloc(1, sizeof(*gh));
    if (!gh) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the hierarchical state of comm 0x%llx",
                               (unsigned long long)comm->id);
    *out = gh;
    MPCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&gh->node_stream, cudaStreamNonBlocking));
    MPCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&gh->rail_stream, cudaStreamNonBlocking));
    cudaEvent_t *ev[] = {&gh->fork, &gh->pre_done, &gh->node_join, &gh->rail_join};
    for (size_t i = 0; i < sizeof(ev) / sizeof(ev[0]); i++)
        MPCCL_CUDA_CHECK(cudaEventCreateWithFlags(ev[i], cudaEventDisableTiming));
    for (int i = 0; i < HIER_RING; i++) {
        MPCCL_CUDA_CHECK(cudaEventCreateWithFlags(&gh->rail_done[i], cudaEventDisableTiming));
        MPCCL_CUDA_CHECK(cudaEventCreateWithFlags(&gh->post_done[i], cudaEventDisableTiming));
    }
    return MPCCL_OK;
}

void mpccl_gpu_hier_destroy(mpccl_gpu_hier_t *gh, int leak)
{
    if (!gh) return;
    if (!leak) {
        mpccl_gpu_scratch_free(&gh->scratch);
    }
    cudaEvent_t ev[] = {gh->fork, gh->pre_done, gh->node_join, gh->rail_join};
    for (size_t i = 0; i < sizeof(ev) / sizeof(ev[0]); i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    for (int i = 0; i < HIER_RING; i++) {
        if (gh->rail_done[i]) cudaEventDestroy(gh->rail_done[i]);
        if (gh->post_done[i]) cudaEventDestroy(gh->post_done[i]);
    }
    if (gh->node_stream) cudaStreamDestroy(gh->node_stream);
    if (gh->rail_stream) cudaStreamDestroy(gh->rail_stream);
    free(gh);
}

uint64_t mpccl_gpu_hier_mem_bytes(const mpccl_gpu_hier_t *gh)
{
    return mpccl_gpu_scratch_bytes(gh ? gh->scratch : NULL);
}

int mpccl_gpu_hier_takes(ncclComm_t comm, const mpccl_gpu_hier_t *gh, const mpccl_coll_desc_t *d)
{
    if (!gh || !comm->hier || d->count == 0) return 0;
    uint64_t bytes = d->count * mpccl_dtype_size(d->dt);
    switch (d->coll) {
    case MPCCL_COLL_ALLREDUCE:
    case MPCCL_COLL_BROADCAST: break;
    case MPCCL_COLL_REDUCE:
        if (bytes < HIER_REDUCE_MIN_BYTES) return 0;
        break;
    case MPCCL_COLL_ALLGATHER:
    case MPCCL_COLL_REDUCESCATTER: bytes *= (uint64_t)comm->nranks; break;
    default: return 0;
    }
    return bytes >= comm->hier->min_bytes;
}

/* One call of a child on one of the private streams.  scale: the parent's
 * prescale (float average, PreMulSum) applies here, at the first reduction;
 * divide: the parent's integer average applies here, at the last. */
static mpccl_status_t child(const hier_call_t *x, ncclComm_t c, mpccl_coll_t coll, const void *in, void *out,
                            uint64_t count, int root, int in_place, int scale, int divide, cudaStream_t stream)
{
    if (count == 0) return MPCCL_OK; /* the same on every rank of the child */
    mpccl_call_t k;
    memset(&k, 0, sizeof(k));
    k.comm = c;
    k.stream = (void *)stream;
    k.desc.coll = coll;
    k.desc.count = count;
    k.desc.dt = x->call->desc.dt;
    k.desc.op = x->call->desc.op;
    k.desc.root = root;
    k.desc.in_place = in_place;
    k.desc.prescale = scale && x->call->desc.prescale;
    k.desc.divide = divide && x->call->desc.divide;
    k.task = x->call->task;
    k.task.sched = NULL;
    k.task.in = in;
    k.task.out = out;
    mpccl_status_t st = mpccl_gpu_launch(&k);
    if (st == MPCCL_OK) return MPCCL_OK;
    char why[512];
    snprintf(why, sizeof(why), "%s", mpccl_last_error()); /* mpccl_fail rewrites the buffer it points to */
    return mpccl_fail(st, "comm 0x%llx rank %d: hierarchical %s: the %s phase (%s of %llu elements) failed: %s",
                      (unsigned long long)x->comm->id, x->comm->rank, mpccl_coll_name(x->call->desc.coll),
                      c == x->h->node ? "node" : "rail", mpccl_coll_name(coll), (unsigned long long)count, why);
}

/* Chunk c of allreduce, broadcast or reduce. */
static mpccl_hier_slice_t slice_of(const hier_call_t *x, uint64_t c)
{
    mpccl_hier_slice_t s = mpccl_hier_slice(x->call->desc.count, x->chunk, x->G, c);
    if (x->whole) {
        s.share = 0;
        s.tail = s.len;
    }
    return s;
}

/* Piece c of every rank's block of all_gather or reduce_scatter: elements
 * [*a, *a + *p) of S. */
static void piece_of(const hier_call_t *x, uint64_t c, uint64_t *a, uint64_t *p)
{
    uint64_t S = x->call->desc.count;
    *a = c * x->chunk;
    *p = S - *a < x->chunk ? S - *a : x->chunk;
}

static char *at(const hier_call_t *x, const void *base, uint64_t elems)
{
    return (char *)base + elems * x->esize;
}

/* Copies piece [a, a + p) of every rank's block between rank order (blocks of
 * S elements in `ranked`) and rail order (rows of p elements, local index
 * major, node minor, in `packed`). */
static mpccl_status_t reorder(const hier_call_t *x, char *ranked, char *packed, uint64_t S, uint64_t a, uint64_t p,
                              int to_ranked, cudaStream_t st)
{
    size_t w = (size_t)(p * x->esize);
    for (int l = 0; l < x->G; l++) {
        char *rows = packed + (size_t)l * x->N * w;
        int64_t stride;
        /* 2-D copies take pitches below 2 GB (cudaDevAttrMaxPitch) */
        if (mpccl_hier_rail_stride(x->h->rank_of, x->N, x->G, l, &stride) &&
            (uint64_t)stride * S * x->esize < (1ull << 31)) {
            char *first = at(x, ranked, (uint64_t)x->h->rank_of[l] * S + a);
            size_t pitch = (size_t)stride * S * x->esize;
            if (pitch == 0) pitch = w;
            cudaError_t e = to_ranked ? cudaMemcpy2DAsync(first, pitch, rows, w, w, x->N, cudaMemcpyDeviceToDevice, st)
                                      : cudaMemcpy2DAsync(rows, w, first, pitch, w, x->N, cudaMemcpyDeviceToDevice, st);
            if (e != cudaSuccess) return mpccl_cuda_error(e, "cudaMemcpy2DAsync(hierarchical reorder)");
            continue;
        }
        for (int n = 0; n < x->N; n++) {
            char *blk = at(x, ranked, (uint64_t)x->h->rank_of[n * x->G + l] * S + a);
            cudaError_t e = cudaMemcpyAsync(to_ranked ? blk : rows + (size_t)n * w, to_ranked ? rows + (size_t)n * w : blk,
                                            w, cudaMemcpyDeviceToDevice, st);
            if (e != cudaSuccess) return mpccl_cuda_error(e, "cudaMemcpyAsync(hierarchical reorder)");
        }
    }
    return MPCCL_OK;
}

/* ---- the phases of chunk c: pre and post on the node stream, rail on the rail stream ---- */

static mpccl_status_t phase_pre(const hier_call_t *x, uint64_t c, cudaStream_t st)
{
    const mpccl_hier_t *h = x->h;
    const mpccl_coll_desc_t *d = &x->call->desc;
    int ip = x->in == x->out;
    if (d->coll == MPCCL_COLL_ALLGATHER) return MPCCL_OK;
    if (d->coll == MPCCL_COLL_REDUCESCATTER) {
        uint64_t S = d->count, a, p;
        piece_of(x, c, &a, &p);
        MPCCL_CHECK(reorder(x, (char *)x->in, x->reorder, S, a, p, 0, st));
        return child(x, h->node, MPCCL_COLL_REDUCESCATTER, x->reorder, x->tmp[c % 2], (uint64_t)x->N * p, 0, 0, 1, 0,
                     st);
    }
    mpccl_hier_slice_t s = slice_of(x, c);
    const char *in = at(x, x->in, s.off), *in_tail = at(x, x->in, s.off + s.share * x->G);
    char *mine = at(x, x->out, s.off + x->l * s.share), *tail = at(x, x->out, s.off + s.share * x->G);
    switch (d->coll) {
    case MPCCL_COLL_ALLREDUCE:
        MPCCL_CHECK(child(x, h->node, MPCCL_COLL_REDUCESCATTER, in, mine, s.share, 0, ip, 1, 0, st));
        return child(x, h->node, MPCCL_COLL_ALLREDUCE, in_tail, tail, s.tail, 0, ip, 1, 0, st);
    case MPCCL_COLL_BROADCAST:
        if (x->n != x->root_node) return MPCCL_OK;
        MPCCL_CHECK(child(x, h->node, MPCCL_COLL_SCATTER, in, mine, s.share, x->root_local, ip && x->l == x->root_local,
                          0, 0, st));
        return child(x, h->node, MPCCL_COLL_BROADCAST, in_tail, tail, s.tail, x->root_local, ip, 0, 0, st);
    case MPCCL_COLL_REDUCE: {
        char *t = x->tmp[c % 2];
        MPCCL_CHECK(child(x, h->node, MPCCL_COLL_REDUCESCATTER, in, t, s.share, 0, 0, 1, 0, st));
        return child(x, h->node, MPCCL_COLL_ALLREDUCE, in_tail, at(x, t, s.share), s.tail, 0, 0, 1, 0, st);
    }
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "hierarchical %s", mpccl_coll_name(d->coll));
    }
}

static mpccl_status_t phase_rail(const hier_call_t *x, uint64_t c, cudaStream_t st)
{
    const mpccl_hier_t *h = x->h;
    const mpccl_coll_desc_t *d = &x->call->desc;
    if (d->coll == MPCCL_COLL_ALLGATHER || d->coll == MPCCL_COLL_REDUCESCATTER) {
        uint64_t a, p;
        piece_of(x, c, &a, &p);
        if (d->coll == MPCCL_COLL_ALLGATHER)
            return child(x, h->rail, MPCCL_COLL_ALLGATHER, at(x, x->in, a), x->tmp[c % 2], p, 0, 0, 0, 0, st);
        return child(x, h->rail, MPCCL_COLL_REDUCESCATTER, x->tmp[c % 2], at(x, x->out, a), p, 0, 0, 0, 1, st);
    }
    mpccl_hier_slice_t s = slice_of(x, c);
    char *mine = at(x, x->out, s.off + x->l * s.share), *tail = at(x, x->out, s.off + s.share * x->G);
    switch (d->coll) {
    case MPCCL_COLL_ALLREDUCE:
        MPCCL_CHECK(child(x, h->rail, MPCCL_COLL_ALLREDUCE, mine, mine, s.share, 0, 1, 0, 1, st));
        return child(x, h->rail, MPCCL_COLL_ALLREDUCE, tail, tail, s.tail, 0, 1, 0, 1, st);
    case MPCCL_COLL_BROADCAST:
        MPCCL_CHECK(child(x, h->rail, MPCCL_COLL_BROADCAST, mine, mine, s.share, x->root_node, 1, 0, 0, st));
        return child(x, h->rail, MPCCL_COLL_BROADCAST, tail, tail, s.tail, x->root_node, 1, 0, 0, st);
    case MPCCL_COLL_REDUCE: {
        char *t = x->tmp[c % 2];
        MPCCL_CHECK(child(x, h->rail, MPCCL_COLL_REDUCE, t, t, s.share, x->root_node, 1, 0, 1, st));
        return child(x, h->rail, MPCCL_COLL_REDUCE, at(x, t, s.share), at(x, t, s.share), s.tail, x->root_node, 1, 0,
                     1, st);
    }
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "hierarchical %s", mpccl_coll_name(d->coll));
    }
}

static mpccl_status_t phase_post(const hier_call_t *x, uint64_t c, cudaStream_t st)
{
    const mpccl_hier_t *h = x->h;
    const mpccl_coll_desc_t *d = &x->call->desc;
    if (d->coll == MPCCL_COLL_REDUCESCATTER) return MPCCL_OK;
    if (d->coll == MPCCL_COLL_ALLGATHER) {
        uint64_t S = d->count, a, p;
        piece_of(x, c, &a, &p);
        MPCCL_CHECK(child(x, h->node, MPCCL_COLL_ALLGATHER, x->tmp[c % 2], x->reorder, (uint64_t)x->N * p, 0, 0, 0, 0,
                          st));
        return reorder(x, x->out, x->reorder, S, a, p, 1, st);
    }
    mpccl_hier_slice_t s = slice_of(x, c);
    char *base = at(x, x->out, s.off), *mine = at(x, x->out, s.off + x->l * s.share);
    switch (d->coll) {
    case MPCCL_COLL_ALLREDUCE:
    case MPCCL_COLL_BROADCAST:
        return child(x, h->node, MPCCL_COLL_ALLGATHER, mine, base, s.share, 0, 1, 0, 0, st);
    case MPCCL_COLL_REDUCE: {
        if (x->n != x->root_node) return MPCCL_OK;
        char *t = x->tmp[c % 2];
        MPCCL_CHECK(child(x, h->node, MPCCL_COLL_GATHER, t, base, s.share, x->root_local, 0, 0, 0, st));
        if (s.tail == 0 || x->l != x->root_local) return MPCCL_OK;
        MPCCL_CUDA_CHECK(cudaMemcpyAsync(at(x, x->out, s.off + s.share * x->G), at(x, t, s.share), s.tail * x->esize,
                                         cudaMemcpyDeviceToDevice, st));
        return MPCCL_OK;
    }
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "hierarchical %s", mpccl_coll_name(d->coll));
    }
}

/* ---- the call ---- */

/* Chunking and scratch of the call. */
static mpccl_status_t call_setup(hier_call_t *x)
{
    const mpccl_coll_desc_t *d = &x->call->desc;
    mpccl_gpu_hier_t *gh = x->gh;
    size_t tmp = 0, reord = 0;
    if (d->coll == MPCCL_COLL_ALLGATHER || d->coll == MPCCL_COLL_REDUCESCATTER) {
        x->chunk = mpccl_hier_piece_elems(d->count, x->esize, x->N, x->h->chunk_bytes);
        x->nchunks = mpccl_hier_nchunks(d->count, x->chunk);
        tmp = (size_t)(x->N * x->chunk * x->esize);
        reord = tmp * (size_t)x->G;
    } else {
        x->chunk = mpccl_hier_chunk_elems(x->esize, x->G, x->h->chunk_bytes);
        x->whole = d->count * x->esize <= HIER_WHOLE_BYTES;
        if (x->whole) x->chunk = d->count;
        x->nchunks = mpccl_hier_nchunks(d->count, x->chunk);
        if (d->coll == MPCCL_COLL_REDUCE) tmp = (size_t)((x->chunk < d->count ? x->chunk : d->count) * x->esize);
    }
    tmp = (tmp + 255) & ~(size_t)255;
    if (tmp + reord == 0) return MPCCL_OK;
    void *p = NULL;
    MPCCL_CHECK(mpccl_gpu_scratch_get(&gh->scratch, 2 * tmp + reord, &p));
    x->tmp[0] = p;
    x->tmp[1] = (char *)p + tmp;
    x->reorder = (char *)p + 2 * tmp;
    return MPCCL_OK;
}

static mpccl_status_t run_chunks(hier_call_t *x, cudaStream_t user)
{
    mpccl_gpu_hier_t *gh = x->gh;
    cudaStream_t ns = gh->node_stream, rs = gh->rail_stream;
    MPCCL_CUDA_CHECK(cudaEventRecord(gh->fork, user));
    MPCCL_CUDA_CHECK(cudaStreamWaitEvent(ns, gh->fork, 0));
    MPCCL_CUDA_CHECK(cudaStreamWaitEvent(rs, gh->fork, 0));
    for (uint64_t c = 0; c <= x->nchunks; c++) {
        if (c < x->nchunks) {
            MPCCL_CHECK(phase_pre(x, c, ns));
            MPCCL_CUDA_CHECK(cudaEventRecord(gh->pre_done, ns));
            MPCCL_CUDA_CHECK(cudaStreamWaitEvent(rs, gh->pre_done, 0));
            /* Chunk c reuses the scratch buffer of chunk c - 2, read by its post phase. */
            if (c >= 2) MPCCL_CUDA_CHECK(cudaStreamWaitEvent(rs, gh->post_done[(c - 2) % HIER_RING], 0));
            MPCCL_CHECK(phase_rail(x, c, rs));
            MPCCL_CUDA_CHECK(cudaEventRecord(gh->rail_done[c % HIER_RING], rs));
        }
        /* The previous chunk's post phase, after this chunk's pre phase: the
         * node stream has work while the rail phase runs. */
        if (c >= 1) {
            uint64_t p = c - 1;
            MPCCL_CUDA_CHECK(cudaStreamWaitEvent(ns, gh->rail_done[p % HIER_RING], 0));
            MPCCL_CHECK(phase_post(x, p, ns));
            MPCCL_CUDA_CHECK(cudaEventRecord(gh->post_done[p % HIER_RING], ns));
        }
    }
    MPCCL_CUDA_CHECK(cudaEventRecord(gh->node_join, ns));
    MPCCL_CUDA_CHECK(cudaEventRecord(gh->rail_join, rs));
    MPCCL_CUDA_CHECK(cudaStreamWaitEvent(user, gh->node_join, 0));
    MPCCL_CUDA_CHECK(cudaStreamWaitEvent(user, gh->rail_join, 0));
    return MPCCL_OK;
}

mpccl_status_t mpccl_gpu_hier_launch(ncclComm_t comm, mpccl_gpu_hier_t *gh, const mpccl_call_t *call)
{
    const mpccl_hier_t *h = comm->hier;
    const mpccl_topo_t *t = &comm->topo;
    hier_call_t x;
    memset(&x, 0, sizeof(x));
    x.comm = comm;
    x.h = h;
    x.gh = gh;
    x.call = call;
    x.esize = mpccl_dtype_size(call->desc.dt);
    x.G = h->node_size;
    x.N = h->nnodes;
    x.l = t->local_rank[comm->rank];
    x.n = t->node_of[comm->rank];
    int root = call->desc.root;
    if (call->desc.coll == MPCCL_COLL_BROADCAST || call->desc.coll == MPCCL_COLL_REDUCE) {
        x.root_node = t->node_of[root];
        x.root_local = t->local_rank[root];
    }
    x.in = call->task.in;
    x.out = call->task.out;
    int saved = -1;
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    mpccl_status_t st = call_setup(&x);
    if (st == MPCCL_OK) st = run_chunks(&x, (cudaStream_t)call->stream);
    MPCCL_TRACE(MPCCL_SUB_COLL, "comm 0x%llx: hierarchical %s, %llu elements in %llu chunks", (unsigned long long)comm->id,
                mpccl_coll_name(call->desc.coll), (unsigned long long)call->desc.count,
                (unsigned long long)x.nchunks);
    if (saved >= 0) mpccl_cuda_restore_device(saved);
    return st;
}
#endif
