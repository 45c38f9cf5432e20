/* Flat kernels, host side: the region, the geometry of a launch, the launch. */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "util/config.h"
#include "util/datatype.h"
#include "gpu/gpu_flat_geometry.h"
#include "gpu/gpu_flat.h"
#include "gpu/gpu_flat_ce.h"
#include "cuda/cuda_ipc.h"
#include "kernels/flat.h"
#include "util/log.h"
#include "gpu/gpu_win.h"

/* Settings every rank must share: rank 0's win. */
typedef struct {
    int32_t want;       /* this rank can and may run flat kernels */
    int32_t max_ctas;
    int32_t p2p;        /* send/recv groups use the flat p2p kernel */
    int32_t allreduce;  /* 0 by size, 1 one-shot, 2 two-shot (MPCCL_FLAT_ALLREDUCE) */
    int32_t p2p_ctas;   /* most CTAs one send/recv message uses */
    int32_t win;        /* collectives on symmetric windows skip the region (MPCCL_FLAT_WIN) */
    int32_t reg;        /* ... and so do those on registered buffers (MPCCL_FLAT_REG) */
    uint64_t slice_bytes, cta_bytes, max_bytes, oneshot_bytes, ll_max, p2p_slice;
    uint64_t p2p_direct; /* send/recv messages from this size ask for a direct (registered) receive */
    uint64_t p2p_ll;     /* send/recv messages up to this size go as LL units (MPCCL_FLAT_P2P_LL_BYTES) */
    uint64_t win_bytes; /* smallest call (bytes per rank) for the window path */
    uint64_t ce_bytes;  /* smallest window call moved by the copy engines (0: never) */
    uint64_t root_split; /* 3+ ranks: broadcast and reduce from this size are split in two launches (0: never) */
} flat_settings_t;

struct mpccl_flat_comm {
    int rank, nranks, dev;
    flat_settings_t set;
    int p2p_pull;  /* MPCCL_FLAT_P2P_PULL: registered send buffers offer themselves (local: the sender's say) */
    int self_ctas; /* alltoall from self_bytes per block: CTAs for the own block (local: MPCCL_FLAT_SELF_CTAS) */
    uint64_t self_bytes;
    int ll_threads; /* threads per CTA of an LL launch, 0: by its units (local: MPCCL_FLAT_LL_THREADS) */
    mpccl_gpu_abort_ctl_t *abort; /* the communicator's abort word (gpu_abort.h) */
    void *region;
    mpccl_ipc_desc_t *desc;                  /* [nranks] */
    char *peer[MPCCL_FLAT_MAX_RANKS];        /* every region as this device sees it */
    unsigned char imported[MPCCL_FLAT_MAX_RANKS];
    mpccl_flat_ce_t *ce; /* copy-engine streams, made at first use (not const through f) */
};

static uint64_t clamp_u64(int64_t v, uint64_t lo, uint64_t hi)
{
    if (v < (int64_t)lo) return lo;
    if ((uint64_t)v > hi) return hi;
    return (uint64_t)v;
}

static void read_settings(const mpccl_topo_t *topo, const mpccl_gpu_comm_t *g, flat_settings_t *s)
{
    int n = g->nranks;
    s->want = mpccl_config_int("FLAT") != 0 && topo->nnodes == 1 && n >= 2 && n <= MPCCL_FLAT_MAX_RANKS;
    for (int j = 0; j < n && s->want; j++)
        if (g->links_host[j].kind != MPCCL_LINK_NVLINK) s->want = 0;
    int64_t slice = mpccl_config_int("FLAT_SLICE_BYTES");
    if (slice <= 0) {
        slice = (128ll << 20) / (2 * (n > 0 ? n : 1));
        if (slice > (16ll << 20)) slice = 16ll << 20;
    }
    s->slice_bytes = clamp_u64(slice, 64 << 10, 1ull << 30) & ~(uint64_t)255;
    s->max_ctas = (int32_t)clamp_u64(mpccl_config_int("FLAT_CTAS"), 1, MPCCL_FLAT_MAX_CTAS);
    s->cta_bytes = clamp_u64(mpccl_config_int("FLAT_CTA_BYTES"), 16, 1ull << 30);
    s->max_bytes = clamp_u64(mpccl_config_int("FLAT_MAX_BYTES"), 0, UINT64_MAX >> 1);
    s->oneshot_bytes = clamp_u64(mpccl_config_int("FLAT_ONESHOT_BYTES"), 0, UINT64_MAX >> 8);
    s->ll_max = clamp_u64(mpccl_config_int("FLAT_LL_BYTES"), 0, 1ull << 24) & ~(uint64_t)15;
    s->p2p = mpccl_config_int("FLAT_P2P") != 0;
    s->p2p_ctas = (int32_t)clamp_u64(mpccl_config_int("FLAT_P2P_CTAS"), 1, MPCCL_FLAT_MAX_CTAS);
    s->win = mpccl_config_int("FLAT_WIN") != 0;
    s->reg = mpccl_config_int("FLAT_REG") != 0;
    s->win_bytes = clamp_u64(mpccl_config_int("FLAT_WIN_BYTES"), 0, UINT64_MAX >> 1);
    s->ce_bytes = clamp_u64(mpccl_config_int("FLAT_CE_BYTES"), 0, UINT64_MAX >> 1);
    s->root_split = clamp_u64(mpccl_config_int("FLAT_ROOT_SPLIT_BYTES"), 0, UINT64_MAX >> 1);
    s->p2p_direct = clamp_u64(mpccl_config_int("FLAT_P2P_DIRECT_BYTES"), 1, UINT64_MAX >> 1);
    s->p2p_ll = clamp_u64(mpccl_config_int("FLAT_P2P_LL_BYTES"), 0, UINT64_MAX >> 1);
    const char *ar = mpccl_config_str("FLAT_ALLREDUCE");
    s->allreduce = ar && !strcmp(ar, "oneshot") ? 1 : ar && !strcmp(ar, "twoshot") ? 2 : 0;
    if (ar && s->allreduce == 0 && strcmp(ar, "auto"))
        MPCCL_WARN(MPCCL_SUB_INIT, "MPCCL_FLAT_ALLREDUCE=%s: expected auto, oneshot or twoshot; using auto", ar);
    int64_t p2p_slice = mpccl_config_int("FLAT_P2P_BYTES");
    if (p2p_slice <= 0) {
        /* 16 MB per peer and parity with 2 ranks: 4 MB slices held a 1 GB
         * send/recv at 338 GB/s on 2 x H200, 16 MB reach 364, the SMs'
         * NVLink limit (mpccl-floor); from 8 ranks on it stays 4 MB. */
        p2p_slice = (64ll << 20) / (2 * (n > 0 ? n : 1));
        if (p2p_slice > (16ll << 20)) p2p_slice = 16ll << 20;
    }
    s->p2p_slice = clamp_u64(p2p_slice, 64 << 10, 1ull << 30) & ~(uint64_t)255;
}

const mpccl_ipc_desc_t *mpccl_flat_reg_peer(const mpccl_flat_comm_t *f, int r)
{
    return f && f->set.reg && r >= 0 && r < f->nranks ? &f->desc[r] : NULL;
}

uint64_t mpccl_flat_region_size(const mpccl_flat_comm_t *f)
{
    return f ? mpccl_flat_region_bytes(f->nranks, f->set.slice_bytes, f->set.ll_max, f->set.p2p_slice) : 0;
}

void mpccl_flat_destroy(mpccl_flat_comm_t *f, int leak_device_memory)
{
    if (!f) return;
    if (!leak_device_memory) {
        for (int j = 0; j < f->nranks; j++)
            if (f->imported[j]) mpccl_ipc_release(&f->desc[j]);
        if (f->region) cudaFree(f->region);
    }
    mpccl_flat_ce_destroy(f->ce);
    free(f->ce);
    free(f->desc);
    free(f);
}

/* Every rank learns whether all succeeded. */
static mpccl_status_t all_ok(mpccl_bootstrap_t *bs, mpccl_status_t mine, int *ok)
{
    int32_t *v = calloc((size_t)bs->nranks, sizeof(int32_t));
    if (!v) return mpccl_fail(MPCCL_ERR_SYSTEM, "flat setup: out of memory");
    v[bs->rank] = (int32_t)mine;
    mpccl_status_t st = mpccl_bootstrap_allgather(bs, v, sizeof(int32_t));
    *ok = 1;
    for (int r = 0; r < bs->nranks; r++)
        if (v[r] != MPCCL_OK) *ok = 0;
    free(v);
    return st;
}

static mpccl_status_t map_region(mpccl_flat_comm_t *f, mpccl_bootstrap_t *bs, size_t bytes)
{
    MPCCL_CUDA_CHECK(cudaMalloc(&f->region, bytes));
    MPCCL_CUDA_CHECK(cudaMemset(f->region, 0, bytes));
    MPCCL_CUDA_CHECK(cudaDeviceSynchronize());
    return mpccl_ipc_export(f->region, bytes, &f->desc[bs->rank]);
}

static mpccl_status_t import_peers(mpccl_flat_comm_t *f)
{
    for (int j = 0; j < f->nranks; j++) {
        if (j == f->rank) {
            f->peer[j] = f->region;
            continue;
        }
        void *p = NULL;
        MPCCL_CHECK(mpccl_ipc_import(&f->desc[j], f->dev, &p));
        f->imported[j] = 1;
        f->peer[j] = p;
    }
    return MPCCL_OK;
}

mpccl_status_t mpccl_flat_create(mpccl_bootstrap_t *bs, const mpccl_topo_t *topo, const mpccl_gpu_comm_t *g,
                                 mpccl_flat_comm_t **out)
{
    *out = NULL;
    int n = bs->nranks;
    flat_settings_t *all = calloc((size_t)n, sizeof(*all));
    if (!all) return mpccl_fail(MPCCL_ERR_SYSTEM, "flat setup: out of memory");
    read_settings(topo, g, &all[bs->rank]);
    mpccl_status_t st = mpccl_bootstrap_allgather(bs, all, sizeof(*all));
    int want = 1;
    for (int r = 0; r < n && st == MPCCL_OK; r++) want = want && all[r].want;
    flat_settings_t set = all[0];
    free(all);
    if (st != MPCCL_OK || !want) return st;

    mpccl_flat_comm_t *f = calloc(1, sizeof(*f));
    if (!f || !(f->desc = calloc((size_t)n, sizeof(*f->desc))) || !(f->ce = calloc(1, sizeof(*f->ce)))) {
        if (f) free(f->desc);
        free(f);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "flat setup: out of memory");
    }
    f->rank = bs->rank;
    f->abort = g->abort;
    f->nranks = n;
    f->dev = g->dev;
    f->set = set;
    f->p2p_pull = mpccl_config_int("FLAT_P2P_PULL") != 0;
    f->self_ctas = (int)clamp_u64(mpccl_config_int("FLAT_SELF_CTAS"), 0, MPCCL_FLAT_MAX_CTAS / 2);
    f->self_bytes = clamp_u64(mpccl_config_int("FLAT_SELF_BYTES"), 0, UINT64_MAX >> 1);
    f->ll_threads = (int)clamp_u64(mpccl_config_int("FLAT_LL_THREADS"), 0, MPCCL_FLAT_THREADS) & ~31;
    size_t bytes = (size_t)mpccl_flat_region_bytes(n, set.slice_bytes, set.ll_max, set.p2p_slice);
    int ok = 0;
    mpccl_status_t mine = map_region(f, bs, bytes);
    MPCCL_CHECK_GOTO(all_ok(bs, mine, &ok), st, fail);
    if (ok) {
        MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(bs, f->desc, sizeof(*f->desc)), st, fail);
        mine = import_peers(f);
        MPCCL_CHECK_GOTO(all_ok(bs, mine, &ok), st, fail);
    }
    if (!ok) {
        MPCCL_WARN(MPCCL_SUB_INIT, "rank %d: a rank could not set up the flat kernels' region (%zu bytes)%s; "
                   "collectives use the engine", bs->rank, bytes, mine != MPCCL_OK ? ", this one among them" : "");
        mpccl_flat_destroy(f, 0);
        return MPCCL_OK;
    }
    MPCCL_INFO(MPCCL_SUB_INIT, "rank %d/%d: flat kernels, region %zu bytes (%llu per peer and parity), up to %d "
               "CTAs", bs->rank, n, bytes, (unsigned long long)set.slice_bytes, (int)set.max_ctas);
    *out = f;
    return MPCCL_OK;
fail:
    mpccl_flat_destroy(f, 0);
    return st;
}

/* ---- per call ---- */

static int block_count(const mpccl_flat_comm_t *f, mpccl_coll_t c)
{
    switch (c) {
    case MPCCL_COLL_REDUCESCATTER:
    case MPCCL_COLL_ALLGATHER:
    case MPCCL_COLL_ALLTOALL:
    case MPCCL_COLL_GATHER:
    case MPCCL_COLL_SCATTER: return f->nranks;
    default: return 1;
    }
}

static int mode_of(const mpccl_flat_comm_t *f, const mpccl_coll_desc_t *d)
{
    uint64_t n = (uint64_t)f->nranks, bytes = d->count * mpccl_dtype_size(d->dt);
    switch (d->coll) {
    case MPCCL_COLL_ALLREDUCE:
        if (f->set.allreduce) return f->set.allreduce == 1 ? MPCCL_FLAT_ALLREDUCE_1 : MPCCL_FLAT_ALLREDUCE_2;
        return bytes * (n - 1) * (n - 2) <= f->set.oneshot_bytes * n ? MPCCL_FLAT_ALLREDUCE_1 : MPCCL_FLAT_ALLREDUCE_2;
    case MPCCL_COLL_REDUCESCATTER: return MPCCL_FLAT_REDUCESCATTER;
    case MPCCL_COLL_ALLGATHER: return MPCCL_FLAT_ALLGATHER;
    case MPCCL_COLL_ALLTOALL: return MPCCL_FLAT_ALLTOALL;
    case MPCCL_COLL_BROADCAST: return MPCCL_FLAT_BROADCAST;
    case MPCCL_COLL_REDUCE: return MPCCL_FLAT_REDUCE;
    case MPCCL_COLL_GATHER: return MPCCL_FLAT_GATHER;
    case MPCCL_COLL_SCATTER: return MPCCL_FLAT_SCATTER;
    default: return -1;
    }
}

int mpccl_flat_takes(const mpccl_flat_comm_t *f, const mpccl_coll_desc_t *d)
{
    if (!f || d->count == 0 || mode_of(f, d) < 0 || (unsigned)d->op >= MPCCL_NUM_OPS) return 0;
    uint64_t bytes = d->count * mpccl_dtype_size(d->dt) * (uint64_t)block_count(f, d->coll);
    return f->set.max_bytes == 0 || bytes <= f->set.max_bytes;
}

static mpccl_flat_geom_params_t geom_params(const mpccl_flat_comm_t *f)
{
    mpccl_flat_geom_params_t p = {f->nranks, (uint32_t)f->set.max_ctas, f->set.slice_bytes, f->set.cta_bytes,
                                  f->set.ll_max, f->set.p2p_slice, (uint32_t)f->set.p2p_ctas};
    return p;
}

/* ---- collectives on symmetric windows ---- */

/* The window kernel's mode for d, and whether it reaches the peers' input and
 * output (those must lie in windows); -1 when the call stays on the region. */
static int win_mode(const mpccl_coll_desc_t *d, int *in_remote, int *out_remote)
{
    *in_remote = *out_remote = 0;
    switch (d->coll) {
    case MPCCL_COLL_ALLREDUCE: *in_remote = *out_remote = 1; return MPCCL_FLAT_ALLREDUCE_2;
    case MPCCL_COLL_REDUCESCATTER: *in_remote = 1; return MPCCL_FLAT_REDUCESCATTER;
    case MPCCL_COLL_REDUCE: *in_remote = 1; return MPCCL_FLAT_REDUCE;
    case MPCCL_COLL_ALLGATHER: *out_remote = 1; return MPCCL_FLAT_ALLGATHER;
    case MPCCL_COLL_BROADCAST: *out_remote = 1; return MPCCL_FLAT_BROADCAST;
    /* in place, peers would overwrite blocks this rank has still to send */
    case MPCCL_COLL_ALLTOALL: *out_remote = 1; return d->in_place ? -1 : MPCCL_FLAT_ALLTOALL;
    default: return -1;
    }
}

/* The peers' buffers for the window kernel: from symmetric windows (the same
 * offset on every rank, exchange 0), else from registrations (exchange 1:
 * NCCL uses registrations when input and output are registered on every
 * rank, so both must be).  0: the call stays on the region. */
static int window_buffers(const mpccl_flat_comm_t *f, const mpccl_call_t *call, uint64_t in_bytes,
                          uint64_t out_bytes, int in_remote, int out_remote, mpccl_flat_win_args_t *a)
{
    ncclComm_t comm = call->comm;
    if (f->set.win && (!in_remote || mpccl_gpu_win_sym_peers(comm, call->task.in, in_bytes, a->in)) &&
        (!out_remote || mpccl_gpu_win_sym_peers(comm, call->task.out, out_bytes, a->out)))
        return 1;
    if (f->set.reg && mpccl_gpu_reg_peers(comm, call->task.in, in_bytes, a->in) &&
        mpccl_gpu_reg_peers(comm, call->task.out, out_bytes, a->out)) {
        a->exchange = 1;
        return 1;
    }
    return 0;
}

/* Launches the call as a window kernel when its buffers allow (*took = 1).
 * Every rank decides alike as long as the user keeps NCCL's contracts: for
 * NCCL_WIN_COLL_SYMMETRIC windows, every rank's buffers at the same offset of
 * the same (collectively registered) window; for registrations, registered
 * buffers on every rank or on none. */
static mpccl_status_t launch_window(const mpccl_flat_comm_t *f, const mpccl_call_t *call, cudaStream_t stream,
                                    int *took)
{
    const mpccl_coll_desc_t *d = &call->desc;
    int in_remote, out_remote, mode = win_mode(d, &in_remote, &out_remote);
    *took = 0;
    if (mode < 0 || d->prescale) return MPCCL_OK;
    uint64_t esz = mpccl_dtype_size(d->dt), n = (uint64_t)f->nranks, blocks = (uint64_t)block_count(f, d->coll);
    if (d->count * esz * blocks < f->set.win_bytes) return MPCCL_OK;
    mpccl_flat_win_args_t a;
    memset(&a, 0, sizeof(a));
    uint64_t in_bytes = d->count * esz * (d->coll == MPCCL_COLL_REDUCESCATTER ? n : 1);
    uint64_t out_bytes = d->count * esz * (d->coll == MPCCL_COLL_ALLGATHER || d->coll == MPCCL_COLL_ALLTOALL ? n : 1);
    if (!window_buffers(f, call, in_bytes, out_bytes, in_remote, out_remote, &a)) return MPCCL_OK;
    a.ab = mpccl_gpu_abort_arg(f->abort);
    a.in[f->rank] = (char *)call->task.in;
    a.out[f->rank] = (char *)call->task.out;
    uint64_t woff = mpccl_flat_win_off(f->nranks, f->set.slice_bytes, f->set.ll_max, f->set.p2p_slice);
    for (int j = 0; j < f->nranks; j++) a.bar[j] = (uint32_t *)(f->peer[j] + woff);
    a.count = d->count;
    a.divisor = d->divide ? call->task.divisor : 0;
    a.rank = f->rank;
    a.nranks = f->nranks;
    a.root = d->root;
    a.mode = mode;
    a.dtype = d->dt;
    a.op = (mode == MPCCL_FLAT_ALLREDUCE_2 || mode == MPCCL_FLAT_REDUCESCATTER || mode == MPCCL_FLAT_REDUCE)
               ? (int)d->op : MPCCL_OP_SUM;
    *took = 1;
    if (!a.exchange && mpccl_flat_ce_takes(mode, f->nranks, d->count * esz * blocks, f->set.ce_bytes))
        return mpccl_flat_ce_launch(f->ce, &a, esz, stream);
    mpccl_flat_geom_params_t gp = geom_params(f);
    uint32_t ctas = mpccl_flat_win_geometry(&gp, mode, d->count, esz, &a.sub);
    return mpccl_flat_win_launch(&a, ctas, stream);
}

/* Threads per CTA.  An LL launch takes one per 8-byte unit of its CTA's
 * part, rounded up to a warp: a tiny call's CTA then starts and meets its
 * barriers with one or a few warps (inside CUDA graphs on 2 x H100, 16 B -
 * 1 KB calls 0.1-0.3 us faster than on 512 threads), and fewer threads than
 * units would pay in their loops (a 4 KB part: 4.6 us on 256 threads, 5.7 on
 * 128, against 3.5 on 512). */
static uint32_t launch_threads(const mpccl_flat_comm_t *f, const mpccl_flat_args_t *a, uint64_t esz)
{
    if (!a->ll_bytes) return MPCCL_FLAT_THREADS;
    if (f->ll_threads) return (uint32_t)f->ll_threads;
    uint64_t units = ((uint64_t)a->sub_elems * esz + 7) / 8, t = (units + 31) & ~(uint64_t)31;
    return t < 32 ? 32 : t > MPCCL_FLAT_THREADS ? MPCCL_FLAT_THREADS : (uint32_t)t;
}

/* Broadcast and reduce of 3 or more ranks from MPCCL_FLAT_ROOT_SPLIT_BYTES
 * run as two launches plus the elements N does not divide as a direct call:
 * broadcast a scatter of root's input in N blocks and an allgather in place,
 * reduce a reduce_scatter (into root's output, on the others into scratch)
 * and a gather.  The direct kernels have the root store every byte into N-1
 * peers or load it from them, so they move at most the root's link / (N-1):
 * 122 GB/s on 4 x H100 (NVSwitch) where NCCL's rings reach 360.  Split,
 * every rank sends (N-1)/N of the bytes twice. */
static int split_root(const mpccl_flat_comm_t *f, const mpccl_coll_desc_t *d)
{
    return f->nranks > 2 && (d->coll == MPCCL_COLL_BROADCAST || d->coll == MPCCL_COLL_REDUCE) && f->set.root_split &&
           d->count / (uint64_t)f->nranks > 0 && d->count * mpccl_dtype_size(d->dt) >= f->set.root_split;
}

uint64_t mpccl_flat_scratch_bytes(const mpccl_flat_comm_t *f, const mpccl_coll_desc_t *d)
{
    if (!f || !split_root(f, d) || d->coll != MPCCL_COLL_REDUCE) return 0;
    return d->count / (uint64_t)f->nranks * mpccl_dtype_size(d->dt);
}

/* One launch of the split: call with coll, count, in and out replaced (and
 * no prescale: in is already the scaled input). */
static mpccl_status_t launch_part(const mpccl_flat_comm_t *f, const mpccl_call_t *call, mpccl_coll_t coll,
                                  uint64_t count, const char *in, char *out, cudaStream_t stream)
{
    mpccl_call_t part = *call;
    uint64_t esz = mpccl_dtype_size(call->desc.dt);
    part.desc.coll = coll;
    part.desc.count = count;
    part.desc.prescale = 0;
    part.desc.divide = coll == MPCCL_COLL_GATHER ? 0 : call->desc.divide;
    /* in place as NCCL defines it for the part's collective; only the root's matters where only it sends */
    uint64_t at = coll == MPCCL_COLL_SCATTER || coll == MPCCL_COLL_REDUCESCATTER ? (uint64_t)f->rank * count * esz : 0;
    uint64_t at_out = coll == MPCCL_COLL_ALLGATHER || coll == MPCCL_COLL_GATHER ? (uint64_t)f->rank * count * esz : 0;
    part.desc.in_place = in && out && in + at == out + at_out;
    part.task.in = in;
    part.task.out = out;
    return mpccl_flat_launch_call(f, &part, in, NULL, stream);
}

static mpccl_status_t launch_split_root(const mpccl_flat_comm_t *f, const mpccl_call_t *call, const char *in,
                                        void *scratch, cudaStream_t stream)
{
    const mpccl_coll_desc_t *d = &call->desc;
    uint64_t esz = mpccl_dtype_size(d->dt), blk = d->count / (uint64_t)f->nranks, whole = blk * (uint64_t)f->nranks;
    int root = f->rank == d->root;
    char *out = root || d->coll == MPCCL_COLL_BROADCAST ? call->task.out : NULL; /* a reduce's is root's only */
    if (d->coll == MPCCL_COLL_BROADCAST) {
        char *mine = out + (uint64_t)f->rank * blk * esz;
        if (!root) in = NULL; /* others' input is not read */
        MPCCL_CHECK(launch_part(f, call, MPCCL_COLL_SCATTER, blk, in, mine, stream));
        MPCCL_CHECK(launch_part(f, call, MPCCL_COLL_ALLGATHER, blk, mine, out, stream));
    } else {
        char *mine = root ? out + (uint64_t)f->rank * blk * esz : scratch;
        if (!mine) return mpccl_fail(MPCCL_ERR_INTERNAL, "split reduce without scratch");
        MPCCL_CHECK(launch_part(f, call, MPCCL_COLL_REDUCESCATTER, blk, in, mine, stream));
        MPCCL_CHECK(launch_part(f, call, MPCCL_COLL_GATHER, blk, mine, out, stream));
    }
    if (whole == d->count) return MPCCL_OK;
    /* fewer elements than ranks: not split again */
    return launch_part(f, call, d->coll, d->count - whole, in ? in + whole * esz : NULL,
                       out ? out + whole * esz : NULL, stream);
}

mpccl_status_t mpccl_flat_launch_call(const mpccl_flat_comm_t *f, const mpccl_call_t *call, const void *in,
                                      void *scratch, cudaStream_t stream)
{
    const mpccl_coll_desc_t *d = &call->desc;
    if (split_root(f, d)) return launch_split_root(f, call, in, scratch, stream);
    if (f->set.win || f->set.reg) {
        int took = 0;
        MPCCL_CHECK(launch_window(f, call, stream, &took));
        if (took) return MPCCL_OK;
    }
    mpccl_flat_args_t a;
    memset(&a, 0, sizeof(a));
    for (int j = 0; j < f->nranks; j++) a.region[j] = f->peer[j];
    a.in = in;
    a.out = call->task.out;
    a.count = d->count;
    a.slice_bytes = f->set.slice_bytes;
    a.divisor = d->divide ? call->task.divisor : 0;
    a.rank = f->rank;
    a.nranks = f->nranks;
    a.root = d->root;
    a.mode = mode_of(f, d);
    a.dtype = d->dt;
    a.op = (d->coll == MPCCL_COLL_ALLREDUCE || d->coll == MPCCL_COLL_REDUCE || d->coll == MPCCL_COLL_REDUCESCATTER)
               ? (int)d->op : MPCCL_OP_SUM;
    mpccl_flat_geom_params_t gp = geom_params(f);
    mpccl_flat_geom_t geo;
    mpccl_flat_geometry(&gp, a.mode, d->count, mpccl_dtype_size(d->dt), &geo);
    a.sub_elems = geo.sub_elems;
    a.stride = geo.stride;
    a.ll_bytes = geo.ll_bytes;
    /* A large alltoall or allgather out of place copies its own block on
     * self_ctas CTAs of its own, beside the full grid on the peers' blocks,
     * instead of every CTA copying its share after each chunk's wait: the
     * move kernel fits them (two CTAs per SM).  The geometry stays as it is,
     * so in place and the peers (in place or not) are untouched: a rank's
     * own choice. */
    if ((a.mode == MPCCL_FLAT_ALLTOALL || a.mode == MPCCL_FLAT_ALLGATHER) && !d->in_place && !geo.ll_bytes &&
        d->count * mpccl_dtype_size(d->dt) >= f->self_bytes)
        a.self_ctas = f->self_ctas;
    a.ab = mpccl_gpu_abort_arg(f->abort);
    return mpccl_flat_launch(&a, geo.ctas + (uint32_t)a.self_ctas, launch_threads(f, &a, mpccl_dtype_size(d->dt)),
                             stream);
}
#endif

/* ---- point-to-point ---- */

int mpccl_flat_takes_p2p(const mpccl_flat_comm_t *f)
{
    return f && f->set.p2p;
}

/* A direct message's buffer as the peer sees it, when it is
 * ncclCommRegister'd here and mapped there (else NULL). */
static char *peer_view(const mpccl_call_t *c, const void *buf, uint64_t bytes)
{
    char *peers[MPCCL_FLAT_MAX_RANKS];
    if (!mpccl_gpu_reg_peers(c->comm, buf, bytes, peers)) return NULL;
    return peers[c->desc.root];
}

mpccl_status_t mpccl_flat_launch_p2p(const mpccl_flat_comm_t *f, mpccl_call_t **calls, int n, cudaStream_t stream)
{
    if (n > MPCCL_FLAT_P2P_MAX_OPS)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "flat p2p launch of %d calls (at most %d)", n, MPCCL_FLAT_P2P_MAX_OPS);
    static __thread mpccl_flat_p2p_args_t a; /* 2.7 KB: not on the stack, not allocated per call */
    memset(&a.h, 0, sizeof(a.h));
    for (int j = 0; j < f->nranks; j++) a.h.region[j] = f->peer[j];
    a.h.p2p_off = mpccl_flat_p2p_off(f->nranks, f->set.slice_bytes, f->set.ll_max);
    a.h.p2p_slice = f->set.p2p_slice;
    mpccl_flat_geom_params_t gp = geom_params(f);
    a.h.stride = mpccl_flat_p2p_stride(&gp);
    a.h.rank = f->rank;
    a.h.nranks = f->nranks;
    uint32_t send_grid = 0, recv_grid = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const mpccl_call_t *c = calls[i];
        uint64_t bytes = c->desc.count * mpccl_dtype_size(c->desc.dt);
        if (bytes == 0) continue; /* both ends skip it */
        mpccl_flat_p2p_op_t *op = &a.ops[k++];
        int send = c->desc.coll == MPCCL_COLL_SEND;
        op->buf = send ? (char *)c->task.in : (char *)c->task.out;
        op->bytes = bytes;
        op->peer = c->desc.root;
        op->send = (uint8_t)send;
        /* both ends decide alike: from the size and the agreed settings */
        op->ll = (uint8_t)(bytes <= f->set.p2p_ll);
        op->sync = (uint8_t)(!op->ll && f->set.reg && bytes >= f->set.p2p_direct && op->peer != f->rank);
        op->peer_buf = op->sync && (!send || f->p2p_pull) ? peer_view(c, op->buf, bytes) : NULL;
        if (op->ll) mpccl_flat_p2p_ll_geometry(&gp, bytes, &op->ctas, &op->sub);
        else mpccl_flat_p2p_geometry(&gp, bytes, &op->ctas, &op->sub);
        uint32_t *grid = send ? &send_grid : &recv_grid;
        if (op->ctas > *grid) *grid = op->ctas;
    }
    a.h.nops = k;
    a.h.send_ctas = send_grid;
    if (k == 0) return MPCCL_OK;
    a.h.ab = mpccl_gpu_abort_arg(f->abort);
    return mpccl_flat_p2p_launch(&a, send_grid + recv_grid, stream);
}
