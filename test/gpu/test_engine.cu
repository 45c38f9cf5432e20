/* The device engine on a real GPU: N ranks (2, 3, 4, 8) of one communicator
 * simulated in one process on one device -- each rank's mailboxes and acks in
 * device memory, NVLINK-kind links with plain device pointers -- every
 * collective with every algorithm planned per rank, uploaded, and launched on N
 * streams at once.  The bytes every rank's buffers end up with must equal, bit
 * for bit, what the host engine (lib/host/host_exec.c, through the simulated
 * transport of test/unit/sim_exec.c) makes of the same schedules and inputs:
 * 12 datatypes x sum/prod/max/min/avg, counts 0..65537 (and 4M elements),
 * in place and not, misaligned buffers.  Also: a plan launched twice, a launch
 * captured in a CUDA graph and replayed (counters checked), PreMulSum.
 * Seed: MPCCL_TEST_SEED.  Exit 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "nccl.h"
extern "C" {
#include "algo/algo.h"
#include "kernels/plan.h"
#include "../unit/sim_exec.h"
}
#include "kernels/engine.h"
/* The engine is compiled into this program: the library hides its symbols. */
#include "kernels/engine.cu"

#define MAXN 8
#define CHUNK_BYTES 8192
#define CASE_TIMEOUT_S 30

static uint64_t seed, rng;
static long ncases, nlaunches;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

#define CK(call)                                                                                      \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)
#define MK(call)                                                                                      \
    do {                                                                                              \
        mpccl_status_t s_ = (call);                                                                   \
        if (s_ != MPCCL_OK) {                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, mpccl_last_error());    \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

/* ---- One communicator of n ranks on this device ---------------------------------- */

struct world {
    int n;
    uint32_t G, K, slot_bytes;
    mpccl_dev_comm_t *dcomm[MAXN]; /* device */
    cudaStream_t stream[MAXN];
    void *pair[MAXN][MAXN];        /* mailbox of s -> r: slots, ready, len, ack */
    mpccl_dev_link_t *dlinks[MAXN];
    uint32_t *seqs[MAXN];
    /* per-rank buffers, grown on demand */
    void *mem[MAXN], *tmp[MAXN], *scaled[MAXN];
    size_t mem_sz[MAXN], tmp_sz[MAXN], scaled_sz[MAXN];
};

struct pair_layout {
    size_t slots, ready, len, ack, bytes;
};

static pair_layout playout(const world *w)
{
    pair_layout l;
    l.slots = 0;
    l.ready = (size_t)w->G * w->K * w->slot_bytes;
    l.len = l.ready + (size_t)w->G * w->K * 4;
    l.ack = l.len + (size_t)w->G * w->K * 4;
    l.bytes = l.ack + (size_t)w->G * 4;
    return l;
}

static void world_init(world *w, int n, uint32_t G, uint32_t K, uint32_t slot_bytes, uint32_t cta_min_bytes)
{
    memset(w, 0, sizeof(*w));
    w->n = n, w->G = G, w->K = K, w->slot_bytes = slot_bytes;
    pair_layout l = playout(w);
    for (int s = 0; s < n; s++)
        for (int r = 0; r < n; r++) {
            CK(cudaMalloc(&w->pair[s][r], l.bytes));
            CK(cudaMemset(w->pair[s][r], 0, l.bytes));
        }
    for (int r = 0; r < n; r++) {
        mpccl_dev_link_t links[MAXN];
        memset(links, 0, sizeof(links)); /* no tx_word / rx_word: these are NVLINK links */
        for (int p = 0; p < n; p++) {
            char *tx = (char *)w->pair[r][p], *rx = (char *)w->pair[p][r];
            links[p].kind = MPCCL_LINK_NVLINK;
            links[p].pad = 0;
            links[p].tx_slots = tx + l.slots;
            links[p].tx_ready = (volatile uint32_t *)(tx + l.ready);
            links[p].tx_len = (volatile uint32_t *)(tx + l.len);
            links[p].tx_ack = (volatile uint32_t *)(tx + l.ack); /* the receiver p writes it */
            links[p].rx_slots = rx + l.slots;
            links[p].rx_ready = (volatile uint32_t *)(rx + l.ready);
            links[p].rx_len = (volatile uint32_t *)(rx + l.len);
            links[p].rx_ack = (volatile uint32_t *)(rx + l.ack);
        }
        CK(cudaMalloc(&w->dlinks[r], n * sizeof(mpccl_dev_link_t)));
        CK(cudaMemcpy(w->dlinks[r], links, n * sizeof(mpccl_dev_link_t), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&w->seqs[r], 3 * (size_t)n * G * 4)); /* tx_seq, rx_seq, tx_acked */
        CK(cudaMemset(w->seqs[r], 0, 3 * (size_t)n * G * 4));
        mpccl_dev_comm_t c;
        memset(&c, 0, sizeof(c));
        c.rank = r, c.nranks = n, c.nctas = G, c.nslots = K, c.slot_bytes = slot_bytes;
        c.cta_min_bytes = cta_min_bytes;
        c.links = w->dlinks[r];
        c.tx_seq = w->seqs[r];
        c.rx_seq = w->seqs[r] + (size_t)n * G;
        c.tx_acked = w->seqs[r] + 2 * (size_t)n * G;
        CK(cudaMalloc(&w->dcomm[r], sizeof(c)));
        CK(cudaMemcpy(w->dcomm[r], &c, sizeof(c), cudaMemcpyHostToDevice));
        CK(cudaStreamCreateWithFlags(&w->stream[r], cudaStreamNonBlocking));
    }
}

static void world_free(world *w)
{
    CK(cudaDeviceSynchronize());
    for (int s = 0; s < w->n; s++) {
        for (int r = 0; r < w->n; r++) CK(cudaFree(w->pair[s][r]));
        CK(cudaFree(w->dlinks[s]));
        CK(cudaFree(w->seqs[s]));
        CK(cudaFree(w->dcomm[s]));
        CK(cudaFree(w->mem[s]));
        CK(cudaFree(w->tmp[s]));
        CK(cudaFree(w->scaled[s]));
        CK(cudaStreamDestroy(w->stream[s]));
    }
}

static void *grow(void **p, size_t *sz, size_t need)
{
    if (need > *sz) {
        CK(cudaFree(*p));
        *p = NULL;
        size_t n = need < 4096 ? 4096 : need;
        CK(cudaMalloc(p, n));
        *sz = n;
    }
    return *p;
}

/* ---- Cases ---------------------------------------------------------------------- */

struct tcase {
    mpccl_coll_t coll;
    mpccl_algo_t algo;
    uint64_t count;
    int root, in_place;
    ncclDataType_t dt;
    int opm;      /* 0..3 mpccl_op_t, 4 avg */
    int misalign; /* elements of padding before the rank's buffers */
    int reps;     /* extra launches of the same plans (out of place) */
    int graph;    /* capture one launch per rank and replay it 3 times */
    int premul;   /* PreMulSum with a random scalar instead of the op */
};

static const char *opname(const tcase *c) { return c->premul ? "premulsum" : c->opm == 4 ? "avg" : mpccl_op_name((mpccl_op_t)c->opm); }

static void describe(const world *w, const tcase *c, char *buf, size_t len)
{
    snprintf(buf, len, "seed %llu n=%d G=%u %s/%s count=%llu root=%d %s %s %s misalign=%d", (unsigned long long)seed,
             w->n, w->G, mpccl_coll_name(c->coll), mpccl_algo_name(c->algo), (unsigned long long)c->count, c->root,
             c->in_place ? "in-place" : "out-of-place", mpccl_dtype_name(c->dt), opname(c), c->misalign);
}

static double random_value(const tcase *c)
{
    int prod = c->opm == MPCCL_OP_PROD && !c->premul;
    if (mpccl_dtype_is_float(c->dt)) {
        double u = (double)(rnd() % 2001) / 1000.0 - 1.0;
        return prod ? 1.0 + u / 2 : u;
    }
    if (prod) {
        int v = (int)(rnd() % 4);
        return v < 2 ? v - 2 : v - 1;
    }
    if (c->dt == ncclUint8 || c->dt == ncclUint32 || c->dt == ncclUint64) return (double)(rnd() % 200);
    return (double)((int)(rnd() % 201) - 100);
}

struct rankio {
    mpccl_sched_t sched[2];   /* [1]: the recv of a send/recv pair */
    mpccl_sched_t joined;     /* what the GPU runs */
    mpccl_gpu_plan_t plan;
    size_t es, bytes;         /* the rank's allocation: pad + region(s) */
    size_t in_at, out_at;     /* byte offsets of IN / OUT in it */
    uint64_t nin, nout, in_elems;
    unsigned char *init, *sim, *gpu;
    mpccl_coll_desc_t d[2];
    unsigned char scalar[8];
};

/* Steps of a then b (b's dependencies shifted; b may be NULL): one launch for a
 * send/recv pair, as a group would run it. */
static void concat(const mpccl_sched_t *a, const mpccl_sched_t *b, mpccl_sched_t *out)
{
    const mpccl_sched_t none = {};
    if (!b) b = &none;
    memset(out, 0, sizeof(*out));
    out->nsteps = out->steps_cap = a->nsteps + b->nsteps;
    out->ndeps = out->deps_cap = a->ndeps + b->ndeps;
    out->steps = (mpccl_step_t *)malloc((out->nsteps + 1) * sizeof(mpccl_step_t));
    out->deps = (uint32_t *)malloc((out->ndeps + 1) * sizeof(uint32_t));
    memcpy(out->steps, a->steps, a->nsteps * sizeof(mpccl_step_t));
    memcpy(out->deps, a->deps, a->ndeps * sizeof(uint32_t));
    for (uint32_t i = 0; i < b->nsteps; i++) {
        mpccl_step_t t = b->steps[i];
        t.dep_first += a->ndeps;
        out->steps[a->nsteps + i] = t;
    }
    for (uint32_t j = 0; j < b->ndeps; j++) out->deps[a->ndeps + j] = b->deps[j] + a->nsteps;
    out->tmp_elems = a->tmp_elems > b->tmp_elems ? a->tmp_elems : b->tmp_elems;
    out->in_elems = a->in_elems;
    out->needs_prescale = a->needs_prescale;
    out->algo = a->algo;
}

static int wait_all(world *w, const char *what)
{
    time_t t0 = time(NULL);
    for (;;) {
        int busy = 0;
        for (int r = 0; r < w->n; r++) {
            cudaError_t e = cudaStreamQuery(w->stream[r]);
            if (e == cudaErrorNotReady) busy = 1;
            else if (e != cudaSuccess) {
                fprintf(stderr, "FAIL %s: rank %d: %s\n", what, r, cudaGetErrorString(e));
                exit(1);
            }
        }
        if (!busy) return 0;
        if (time(NULL) - t0 > CASE_TIMEOUT_S) {
            fprintf(stderr, "FAIL %s: still running after %d s (deadlock?)\n", what, CASE_TIMEOUT_S);
            exit(1);
        }
    }
}

static void enqueue(world *w, rankio *io, const tcase *c, int r)
{
    rankio *x = &io[r];
    char *mem = (char *)w->mem[r];
    mpccl_engine_args_t a;
    memset(&a, 0, sizeof(a));
    a.comm = w->dcomm[r];
    a.plan = x->plan.dev;
    a.buf[MPCCL_BUF_IN] = mem + x->in_at;
    a.buf[MPCCL_BUF_OUT] = mem + x->out_at;
    a.buf[MPCCL_BUF_TMP] = w->tmp[r];
    if (x->joined.needs_prescale && x->in_elems) {
        MK(mpccl_gpu_scale_launch(c->dt, w->scaled[r], mem + x->in_at, x->scalar, x->in_elems, w->stream[r]));
        a.buf[MPCCL_BUF_IN] = w->scaled[r];
    }
    a.dtype = c->dt;
    a.op = c->opm == 4 || c->premul ? MPCCL_OP_SUM : c->opm;
    a.divisor = (uint64_t)w->n;
    memcpy(a.scalar, x->scalar, 8);
    MK(mpccl_engine_launch(&a, w->G, w->stream[r]));
    nlaunches++;
}

/* Downloads every rank's allocation and compares it with the host engine's. */
static int compare(world *w, rankio *io, const char *what, const char *phase)
{
    for (int r = 0; r < w->n; r++) {
        rankio *x = &io[r];
        CK(cudaMemcpy(x->gpu, w->mem[r], x->bytes, cudaMemcpyDeviceToHost));
        if (memcmp(x->gpu, x->sim, x->bytes) == 0) continue;
        size_t b = 0;
        while (x->gpu[b] == x->sim[b]) b++;
        size_t el = (b - (b >= x->out_at ? x->out_at : x->in_at)) / x->es;
        const char *where = b >= x->out_at && b < x->out_at + x->nout * x->es ? "OUT" : "IN/other";
        double g = 0, s = 0;
        size_t eb = b - (b - x->out_at) % x->es;
        if (b >= x->out_at) {
            g = mpccl_dtype_to_double(io[0].d[0].dt, x->gpu + eb);
            s = mpccl_dtype_to_double(io[0].d[0].dt, x->sim + eb);
        }
        fprintf(stderr, "FAIL %s (%s): rank %d byte %zu (%s element %zu): gpu %.9g host %.9g\n", what, phase, r, b,
                where, el, g, s);
        return 1;
    }
    return 0;
}

static int reduction(mpccl_coll_t c)
{
    return c == MPCCL_COLL_ALLREDUCE || c == MPCCL_COLL_REDUCE || c == MPCCL_COLL_REDUCESCATTER;
}

/* Plans, runs on the GPU and on the host engine, compares.  0 on success. */
static int run_case(world *w, const tcase *c)
{
    int n = w->n, p2p = c->coll == MPCCL_COLL_SEND, bad = 1;
    char what[256];
    describe(w, c, what, sizeof(what));
    rankio io[MAXN];
    memset(io, 0, sizeof(io));
    int node_of[MAXN], local[MAXN], size[2], nn = n % 2 == 0 ? 2 : 1;
    for (int x = 0; x < n; x++) node_of[x] = x / (n / nn), local[x] = x % (n / nn);
    size[0] = size[1] = n / nn;
    mpccl_plan_params_t pp;
    memset(&pp, 0, sizeof(pp));
    pp.chunk_bytes = CHUNK_BYTES;
    pp.forced[c->coll] = c->algo;
    double scalar = c->premul ? (double)(1 + rnd() % 3) / 2.0 : 1.0 / n; /* 0.5, 1, 1.5 */
    int prescale = c->premul || (c->opm == 4 && mpccl_dtype_is_float(c->dt));
    int divide = c->opm == 4 && !mpccl_dtype_is_float(c->dt);
    uint64_t k = c->count;
    for (int r = 0; r < n; r++) {
        rankio *x = &io[r];
        mpccl_topo_t topo = {r, n, nn, node_of, local, size};
        x->es = mpccl_dtype_size(c->dt);
        mpccl_dtype_from_double(c->dt, scalar, x->scalar);
        for (int j = 0; j < (p2p ? 2 : 1); j++) {
            mpccl_coll_desc_t *d = &x->d[j];
            *d = (mpccl_coll_desc_t){c->coll, k, c->dt, c->opm == 4 || c->premul ? MPCCL_OP_SUM : (mpccl_op_t)c->opm,
                                     prescale, divide, c->root, c->in_place};
            if (p2p) d->coll = j ? MPCCL_COLL_RECV : MPCCL_COLL_SEND, d->root = j ? (r + n - 1) % n : (r + 1) % n;
            if ((c->coll == MPCCL_COLL_GATHER || c->coll == MPCCL_COLL_SCATTER) && r != c->root) d->in_place = 0;
            if (p2p) d->in_place = 0;
            MK(mpccl_plan(&topo, d, &pp, &x->sched[j]));
        }
        concat(&x->sched[0], p2p ? &x->sched[1] : NULL, &x->joined);
        /* Layout: pad, then IN and OUT (one region when in place). */
        const mpccl_coll_desc_t *d0 = &x->d[0];
        x->nin = mpccl_coll_in_elems(d0, r, n);
        x->nout = p2p ? mpccl_coll_out_elems(&x->d[1], r, n) : mpccl_coll_out_elems(d0, r, n);
        x->in_elems = x->joined.in_elems;
        size_t es = x->es, pad = (size_t)c->misalign * es;
        int inp = d0->in_place;
        mpccl_inout_t rel = MPCCL_INOUT_DISTINCT;
        int64_t in_off = 0;
        if (inp) {
            int big = c->coll == MPCCL_COLL_ALLGATHER || c->coll == MPCCL_COLL_REDUCESCATTER ||
                      c->coll == MPCCL_COLL_GATHER || c->coll == MPCCL_COLL_SCATTER;
            uint64_t memn = big ? (uint64_t)n * k : (x->nout > x->nin ? x->nout : x->nin);
            x->in_at = x->out_at = pad;
            switch (c->coll) {
            case MPCCL_COLL_ALLGATHER: x->in_at += (uint64_t)r * k * es, in_off = (int64_t)(r * k); break;
            case MPCCL_COLL_REDUCESCATTER: x->out_at += (uint64_t)r * k * es, in_off = -(int64_t)(r * k); break;
            case MPCCL_COLL_GATHER: x->in_at += (uint64_t)c->root * k * es, in_off = (int64_t)(c->root * k); break;
            case MPCCL_COLL_SCATTER: x->out_at += (uint64_t)c->root * k * es, in_off = -(int64_t)(c->root * k); break;
            default: break;
            }
            x->bytes = pad + memn * es;
            rel = MPCCL_INOUT_OFFSET;
        } else {
            x->in_at = pad;
            x->out_at = (pad + x->nin * es + 64 + 15) / 16 * 16 + pad;
            x->bytes = x->out_at + x->nout * es;
        }
        if (x->bytes == 0) x->bytes = 1;
        /* Half the ranks use the exact IN/OUT relation, half the safe default. */
        if ((r + (int)c->count) % 2) rel = MPCCL_INOUT_UNKNOWN;
        MK(mpccl_gpu_plan_upload_io(&x->joined, w->G, 8, rel, in_off, &x->plan));
        x->init = (unsigned char *)malloc(x->bytes);
        x->sim = (unsigned char *)malloc(x->bytes);
        x->gpu = (unsigned char *)malloc(x->bytes);
        for (size_t b = 0; b < x->bytes; b++) x->init[b] = (unsigned char)rnd();
        for (uint64_t i = 0; i < x->nin; i++) mpccl_dtype_from_double(c->dt, random_value(c), x->init + x->in_at + i * es);
        memcpy(x->sim, x->init, x->bytes);
        grow(&w->mem[r], &w->mem_sz[r], x->bytes);
        grow(&w->tmp[r], &w->tmp_sz[r], x->joined.tmp_elems * es + 16);
        grow(&w->scaled[r], &w->scaled_sz[r], x->in_elems * es + 16);
        CK(cudaMemcpy(w->mem[r], x->init, x->bytes, cudaMemcpyHostToDevice));
    }
    /* The host engine's answer. */
    {
        mpccl_task_t tasks[2 * MAXN];
        int ranks[2 * MAXN], nt = 0;
        char msg[4096];
        for (int r = 0; r < n; r++)
            for (int j = 0; j < (p2p ? 2 : 1); j++) {
                rankio *x = &io[r];
                mpccl_task_t *t = &tasks[nt];
                memset(t, 0, sizeof(*t));
                t->sched = &x->sched[j];
                t->in = j == 0 ? x->sim + x->in_at : NULL;
                t->out = p2p && j == 0 ? NULL : x->sim + x->out_at;
                t->dt = c->dt;
                t->op = x->d[0].op;
                memcpy(t->scalar, x->scalar, 8);
                t->divisor = (uint64_t)n;
                ranks[nt++] = r;
            }
        sim_world_t *sw = sim_create(n, seed ^ c->count);
        mpccl_status_t st = sim_run(sw, tasks, ranks, nt, msg, sizeof(msg));
        sim_destroy(sw);
        if (st != MPCCL_OK) {
            fprintf(stderr, "FAIL %s: host engine: %s\n", what, msg);
            goto out;
        }
    }
    for (int r = 0; r < n; r++) enqueue(w, io, c, r);
    wait_all(w, what);
    if (compare(w, io, what, "first launch")) goto out;
    for (int rep = 0; rep < c->reps; rep++) {
        /* Poison OUT so that a launch doing nothing cannot pass. */
        for (int r = 0; r < n; r++)
            CK(cudaMemset((char *)w->mem[r] + io[r].out_at, 0xA5, io[r].nout * io[r].es));
        for (int r = 0; r < n; r++) enqueue(w, io, c, r);
        wait_all(w, what);
        if (compare(w, io, what, "relaunch")) goto out;
    }
    if (c->graph) {
        cudaGraphExec_t ge[MAXN];
        for (int r = 0; r < n; r++) {
            cudaGraph_t g;
            CK(cudaStreamBeginCapture(w->stream[r], cudaStreamCaptureModeThreadLocal));
            enqueue(w, io, c, r);
            nlaunches--;
            CK(cudaStreamEndCapture(w->stream[r], &g));
            CK(cudaGraphInstantiate(&ge[r], g, 0));
            CK(cudaGraphDestroy(g));
        }
        for (int rep = 0; rep < 3; rep++) {
            for (int r = 0; r < n; r++)
                CK(cudaMemset((char *)w->mem[r] + io[r].out_at, 0x5A, io[r].nout * io[r].es));
            for (int r = 0; r < n; r++) {
                CK(cudaGraphLaunch(ge[r], w->stream[r]));
                nlaunches++;
            }
            wait_all(w, what);
            if (compare(w, io, what, "graph replay")) goto out;
        }
        for (int r = 0; r < n; r++) CK(cudaGraphExecDestroy(ge[r]));
    }
    /* Counters: every launch advanced the epoch and every CTA counted every step. */
    {
        uint32_t launches = 1 + (uint32_t)c->reps + (c->graph ? 3u : 0u);
        for (int r = 0; r < n; r++) {
            mpccl_dev_plan_t h;
            CK(cudaMemcpy(&h, io[r].plan.dev, sizeof(h), cudaMemcpyDeviceToHost));
            uint32_t cnt[2], *done = (uint32_t *)malloc((h.nsteps + 1) * 4);
            mpccl_dev_step_t *st = (mpccl_dev_step_t *)malloc((h.nsteps + 1) * sizeof(*st));
            CK(cudaMemcpy(&cnt[0], h.launches, 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(&cnt[1], h.ctas_finished, 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(done, h.step_done, h.nsteps * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(st, h.steps, h.nsteps * sizeof(*st), cudaMemcpyDeviceToHost));
            int ok = cnt[0] == launches && cnt[1] == launches * w->G;
            /* a step is counted only where a later step waits for its counter */
            for (uint32_t i = 0; ok && i < h.nsteps; i++)
                ok = done[i] == ((st[i].flags & MPCCL_DEV_STEP_COUNTED) ? launches * w->G : 0u);
            free(done);
            free(st);
            if (!ok) {
                fprintf(stderr, "FAIL %s: rank %d counters: launches %u ctas_finished %u (or a counted step's count) after %u launches\n", what, r,
                        cnt[0], cnt[1], launches);
                goto out;
            }
        }
    }
    ncases++;
    bad = 0;
out:
    for (int r = 0; r < n; r++) {
        mpccl_gpu_plan_free(&io[r].plan);
        mpccl_sched_free(&io[r].sched[0]);
        mpccl_sched_free(&io[r].sched[1]);
        free(io[r].joined.steps);
        free(io[r].joined.deps);
        free(io[r].init);
        free(io[r].sim);
        free(io[r].gpu);
    }
    return bad;
}

static const struct {
    mpccl_coll_t coll;
    mpccl_algo_t algo;
} combos[] = {
    {MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_RING},       {MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_RD},
    {MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_HIER},       {MPCCL_COLL_BROADCAST, MPCCL_ALGO_RING},
    {MPCCL_COLL_BROADCAST, MPCCL_ALGO_TREE},       {MPCCL_COLL_REDUCE, MPCCL_ALGO_RING},
    {MPCCL_COLL_REDUCE, MPCCL_ALGO_TREE},          {MPCCL_COLL_ALLGATHER, MPCCL_ALGO_RING},
    {MPCCL_COLL_ALLGATHER, MPCCL_ALGO_DIRECT},     {MPCCL_COLL_REDUCESCATTER, MPCCL_ALGO_RING},
    {MPCCL_COLL_REDUCESCATTER, MPCCL_ALGO_DIRECT}, {MPCCL_COLL_ALLTOALL, MPCCL_ALGO_DIRECT},
    {MPCCL_COLL_GATHER, MPCCL_ALGO_DIRECT},        {MPCCL_COLL_SCATTER, MPCCL_ALGO_DIRECT},
    {MPCCL_COLL_SEND, MPCCL_ALGO_DIRECT},
};

static const ncclDataType_t all_types[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,
                                           ncclInt64,   ncclUint64,  ncclFloat16,  ncclFloat32,
                                           ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

static int run_world(int n, uint32_t G, uint32_t cta_min_bytes, int quick)
{
    world w;
    world_init(&w, n, G, 4, 4096, cta_min_bytes);
    int fails = 0;
    long before = ncases;
    const uint64_t counts[] = {0, 1, 7, 1021, 65537};
    for (size_t ci = 0; ci < sizeof(combos) / sizeof(combos[0]); ci++)
        for (size_t ki = 0; ki < 5; ki++)
            for (int inp = 0; inp < 2; inp++) {
                tcase c;
                memset(&c, 0, sizeof(c));
                c.coll = combos[ci].coll, c.algo = combos[ci].algo, c.count = counts[ki], c.in_place = inp;
                if (c.coll == MPCCL_COLL_SEND && inp) continue;
                int full = c.coll == MPCCL_COLL_ALLREDUCE && !quick;
                for (int ti = 0; ti < 12; ti++)
                    for (int om = 0; om < 5; om++) {
                        /* Allreduce: every type x op.  Other reductions: every
                         * type, ops rotating.  Data movement: two types. */
                        if (!full) {
                            if (reduction(c.coll) ? om != (int)((ti + ki + inp) % 5) : om != 0) continue;
                            if (!reduction(c.coll) && ti != 0 && ti != (int)(3 + (ki * 2 + inp) % 9)) continue;
                        }
                        c.dt = all_types[ti], c.opm = om;
                        c.root = (int)(rnd() % (uint64_t)n);
                        c.misalign = (int)(rnd() % 3 == 0);
                        c.premul = reduction(c.coll) && om == 0 && rnd() % 4 == 0;
                        if (run_case(&w, &c)) fails++;
                        if (fails > 10) goto done;
                    }
            }
done:
    printf("n=%d G=%u min=%u: %ld cases, %d failed\n", n, G, cta_min_bytes, ncases - before, fails);
    fflush(stdout);
    world_free(&w);
    return fails;
}

/* Relaunch, graph replay and large counts, with timings. */
static int run_special(int n, uint32_t G, uint32_t cta_min_bytes)
{
    world w;
    world_init(&w, n, G, 4, 16384, cta_min_bytes);
    int fails = 0;
    tcase c;
    memset(&c, 0, sizeof(c));
    c.coll = MPCCL_COLL_ALLREDUCE, c.algo = MPCCL_ALGO_RING, c.count = 65537, c.dt = ncclFloat32, c.opm = 0;
    c.reps = 2, c.graph = 1;
    fails += run_case(&w, &c);
    c.coll = MPCCL_COLL_ALLGATHER, c.dt = ncclBfloat16, c.count = 1021;
    fails += run_case(&w, &c);
    c.coll = MPCCL_COLL_SEND, c.algo = MPCCL_ALGO_DIRECT, c.dt = ncclInt8, c.count = 100000;
    fails += run_case(&w, &c);
    c.reps = 0, c.graph = 0;
    /* 4M elements. */
    const struct { mpccl_coll_t coll; mpccl_algo_t algo; ncclDataType_t dt; int opm; } big[] = {
        {MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_RING, ncclFloat32, MPCCL_OP_SUM},
        {MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_RING, ncclBfloat16, 4},
        {MPCCL_COLL_ALLGATHER, MPCCL_ALGO_RING, ncclFloat16, 0},
        {MPCCL_COLL_REDUCESCATTER, MPCCL_ALGO_DIRECT, ncclInt32, MPCCL_OP_MAX},
    };
    for (size_t b = 0; b < sizeof(big) / sizeof(big[0]); b++) {
        c.coll = big[b].coll, c.algo = big[b].algo, c.dt = big[b].dt, c.opm = big[b].opm;
        c.count = 4u << 20;
        c.in_place = (int)(b % 2);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fails += run_case(&w, &c);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("  4M %s/%s %s n=%d: case %.2f s (planning, host reference and checks included)\n",
               mpccl_coll_name(c.coll), mpccl_algo_name(c.algo), mpccl_dtype_name(c.dt), n,
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    }
    printf("special n=%d G=%u min=%u: %d failed\n", n, G, cta_min_bytes, fails);
    world_free(&w);
    return fails;
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_engine: no GPU, skipped\n");
        return 77;
    }
    const char *e = getenv("MPCCL_TEST_SEED");
    seed = e ? strtoull(e, NULL, 0) : 20261123;
    rng = seed * 0x9e3779b97f4a7c15ull + 1;
    /* "quick": fewer allreduce type x op cases; "nospecial": skip relaunch/graph/4M. */
    int quick = 0, special = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "quick") == 0) quick = 1;
        if (strcmp(argv[i], "nospecial") == 0) special = 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("test_engine: seed %llu (set MPCCL_TEST_SEED to repeat another), device %s, %d SMs%s\n",
           (unsigned long long)seed, prop.name, prop.multiProcessorCount, quick ? ", quick" : "");
    fflush(stdout);
    int fails = 0;
    const int ns[] = {2, 3, 4, 8};
    const uint32_t gs[] = {4, 1, 2, 3};
    /* CTAs' minimum share of a step (MPCCL_GPU_CTA_MIN_BYTES): none (every CTA
     * a sliver), an odd 48 bytes, two slots' worth, more than the counts here
     * (CTA 0 alone); G = 1 ignores it */
    const uint32_t special_min[] = {0, 0, 8192, 1u << 20}, world_min[] = {48, 0, 1u << 20, 8192};
    for (int i = 0; i < 4 && special; i++) fails += run_special(ns[i], gs[i], special_min[i]);
    for (int i = 0; i < 4 && fails < 10; i++) fails += run_world(ns[i], gs[i], world_min[i], quick);
    printf("test_engine: %ld cases, %ld launches, %d failed\n", ncases, nlaunches, fails);
    return fails ? 1 : 0;
}
