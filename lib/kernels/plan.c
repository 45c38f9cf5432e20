/* Device plans: schedule -> device steps and dependencies (with the `local`
 * rule of devplan.h), laid out in one allocation with the counters zeroed.
 * See plan.h. */
#include <stdlib.h>
#include <string.h>

#include "kernels/plan.h"
#include "util/log.h"

#if defined(MPCCL_HAVE_CUDA) && !defined(MPCCL_GPU_PLAN_CONVERT_ONLY)
#include <cuda_runtime_api.h>
#endif

/* ---- The locality rule ------------------------------------------------------- */

/* Regions a step and its local ancestors touch (all of the step's count long).
 * Bounded per step: past the bound the step is "opaque" and every dependency on
 * it waits for all CTAs, which keeps the conversion linear in the plan size. */
#define COVER_MAX 12

typedef struct region {
    int64_t off;
    uint8_t buf;   /* canonical: IN folded into OUT when in place */
    uint8_t write;
} region_t;

typedef struct cover_set {
    region_t *r; /* all steps' regions, back to back */
    size_t n, cap;
    uint32_t *first, *count; /* per step */
    uint8_t *opaque;         /* per step */
} cover_set_t;

/* The references of a step, canonicalised.  Returns how many. */
static int step_refs(const mpccl_step_t *st, mpccl_inout_t io, int64_t in_off, region_t out[3])
{
    mpccl_ref_t r[3];
    uint8_t w[3];
    int n = 0;
    switch (st->kind) {
    case MPCCL_STEP_SEND: r[n] = st->src0, w[n++] = 0; break;
    case MPCCL_STEP_RECV: r[n] = st->dst, w[n++] = 1; break;
    case MPCCL_STEP_REDUCE:
        r[n] = st->dst, w[n++] = 1;
        r[n] = st->src0, w[n++] = 0;
        r[n] = st->src1, w[n++] = 0;
        break;
    case MPCCL_STEP_COPY:
    case MPCCL_STEP_SCALE:
    case MPCCL_STEP_DIVIDE:
        r[n] = st->dst, w[n++] = 1;
        r[n] = st->src0, w[n++] = 0;
        break;
    default: break; /* NOP */
    }
    for (int k = 0; k < n; k++) {
        out[k].buf = (uint8_t)r[k].buf;
        out[k].off = (int64_t)r[k].off;
        out[k].write = w[k];
        if (io == MPCCL_INOUT_OFFSET && r[k].buf == MPCCL_BUF_IN) {
            out[k].buf = MPCCL_BUF_OUT;
            out[k].off += in_off;
        }
    }
    return n;
}

/* 1 when a and b (both cnt elements long) may touch one element at different
 * positions of their ranges with one of them writing: partition g of one would
 * meet another partition of the other. */
static int misaligned(const region_t *a, const region_t *b, uint64_t cnt, mpccl_inout_t io)
{
    if (!a->write && !b->write) return 0;
    if (a->buf == b->buf) {
        int64_t n = (int64_t)cnt;
        return a->off != b->off && a->off < b->off + n && b->off < a->off + n;
    }
    /* IN against OUT with unknown placement: assume the worst. */
    return io == MPCCL_INOUT_UNKNOWN && a->buf + b->buf == MPCCL_BUF_IN + MPCCL_BUF_OUT &&
           a->buf != MPCCL_BUF_TMP && b->buf != MPCCL_BUF_TMP;
}

/* Adds *add to the regions [first, cs->n) of the step being built; 0 if full.
 * add may point into cs->r (a dependency's regions), which the growth below
 * moves: it is copied first. */
static int cover_add(cover_set_t *cs, size_t first, const region_t *add, mpccl_status_t *st)
{
    const region_t r = *add;
    for (size_t k = first; k < cs->n; k++)
        if (cs->r[k].buf == r.buf && cs->r[k].off == r.off) {
            cs->r[k].write |= r.write;
            return 1;
        }
    if (cs->n - first >= COVER_MAX) return 0;
    if (cs->n == cs->cap) {
        size_t ncap = cs->cap ? cs->cap * 2 : 1024;
        region_t *p = realloc(cs->r, ncap * sizeof(*p));
        if (!p) {
            *st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory converting a schedule (%zu regions)", ncap);
            return 0;
        }
        cs->r = p;
        cs->cap = ncap;
    }
    cs->r[cs->n++] = r;
    return 1;
}

static mpccl_status_t convert_step(const mpccl_sched_t *s, uint32_t i, mpccl_dev_step_t *out)
{
    const mpccl_step_t *st = &s->steps[i];
    if (st->kind > MPCCL_STEP_NOP)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "gpu plan: step %u has kind %d", i, st->kind);
    if (st->dep_first > s->ndeps || st->ndeps > s->ndeps - st->dep_first)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "gpu plan: step %u dependencies out of range", i);
    if (st->dst.buf >= MPCCL_ENGINE_MAX_BUFS || st->src0.buf >= MPCCL_ENGINE_MAX_BUFS ||
        st->src1.buf >= MPCCL_ENGINE_MAX_BUFS)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "gpu plan: step %u names buffer %u, beyond the %d a launch has", i,
                          st->dst.buf, MPCCL_ENGINE_MAX_BUFS);
    memset(out, 0, sizeof(*out));
    out->kind = st->kind;
    out->dst_buf = (uint8_t)st->dst.buf;
    out->src0_buf = (uint8_t)st->src0.buf;
    out->src1_buf = (uint8_t)st->src1.buf;
    out->peer = st->peer;
    out->dep_first = st->dep_first;
    out->ndeps = st->ndeps;
    out->count = st->kind == MPCCL_STEP_NOP ? 0 : st->count;
    out->dst_off = st->dst.off;
    out->src0_off = st->src0.off;
    out->src1_off = st->src1.off;
    return MPCCL_OK;
}

mpccl_status_t mpccl_gpu_plan_convert(const mpccl_sched_t *s, mpccl_inout_t io, int64_t in_off,
                                      mpccl_dev_step_t *steps, mpccl_dev_dep_t *deps)
{
    mpccl_status_t st = MPCCL_OK;
    if (s->needs_prescale) io = MPCCL_INOUT_DISTINCT; /* IN is the scaled copy in scratch */
    uint32_t n = s->nsteps;
    cover_set_t cs = {0};
    cs.first = malloc((n ? n : 1) * sizeof(uint32_t));
    cs.count = malloc((n ? n : 1) * sizeof(uint32_t));
    cs.opaque = malloc(n ? n : 1);
    if (!cs.first || !cs.count || !cs.opaque) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory converting a schedule of %u steps", n);
        goto out;
    }
    for (uint32_t i = 0; i < n && st == MPCCL_OK; i++) {
        MPCCL_CHECK_GOTO(convert_step(s, i, &steps[i]), st, out);
        const mpccl_step_t *t = &s->steps[i];
        uint64_t cnt = steps[i].count;
        region_t mine[3];
        int nm = step_refs(t, io, in_off, mine);
        size_t first = cs.n;
        int opaque = 0;
        for (int k = 0; k < nm; k++)
            if (!cover_add(&cs, first, &mine[k], &st)) opaque = 1;
        for (uint32_t j = 0; j < t->ndeps; j++) {
            uint32_t d = s->deps[t->dep_first + j];
            if (d >= i) {
                st = mpccl_fail(MPCCL_ERR_INTERNAL, "gpu plan: step %u depends on step %u (not earlier)", i, d);
                goto out;
            }
            int local = steps[d].count == cnt && !cs.opaque[d];
            for (uint32_t k = 0; local && k < cs.count[d]; k++)
                for (int m = 0; local && m < nm; m++)
                    if (misaligned(&mine[m], &cs.r[cs.first[d] + k], cnt, io)) local = 0;
            deps[t->dep_first + j].step = d;
            deps[t->dep_first + j].local = (uint32_t)local;
            if (!local) steps[d].flags |= MPCCL_DEV_STEP_COUNTED;
            /* What d guarantees locally, i now guarantees too. */
            for (uint32_t k = 0; local && k < cs.count[d] && !opaque; k++)
                if (!cover_add(&cs, first, &cs.r[cs.first[d] + k], &st)) opaque = 1;
            if (local && cs.opaque[d]) opaque = 1;
        }
        if (st != MPCCL_OK) goto out;
        cs.first[i] = (uint32_t)first;
        cs.count[i] = (uint32_t)(cs.n - first);
        cs.opaque[i] = (uint8_t)opaque;
    }
out:
    free(cs.r);
    free(cs.first);
    free(cs.count);
    free(cs.opaque);
    return st;
}

/* ---- Layout ------------------------------------------------------------------ */

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

typedef struct layout {
    size_t steps, deps, counters, step_done, bytes;
} layout_t;

static layout_t plan_layout(const mpccl_sched_t *s)
{
    layout_t l;
    l.steps = align_up(sizeof(mpccl_dev_plan_t), 64);
    l.deps = align_up(l.steps + (size_t)s->nsteps * sizeof(mpccl_dev_step_t), 16);
    l.counters = align_up(l.deps + (size_t)s->ndeps * sizeof(mpccl_dev_dep_t), 16); /* launches, ctas_finished */
    l.step_done = l.counters + 16;
    l.bytes = align_up(l.step_done + (size_t)s->nsteps * sizeof(uint32_t), 64);
    return l;
}

mpccl_status_t mpccl_gpu_plan_image(const mpccl_sched_t *s, mpccl_inout_t io, int64_t in_off, uint32_t window,
                                    uintptr_t base, void **image, size_t *bytes, uint32_t *nlocal)
{
    *image = NULL;
    if (window < 1 || window > MPCCL_ENGINE_MAX_WINDOW)
        return mpccl_fail(MPCCL_ERR_ARG, "gpu plan: window %u, expected 1..%d", window, MPCCL_ENGINE_MAX_WINDOW);
    layout_t l = plan_layout(s);
    char *img = calloc(1, l.bytes);
    if (!img) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a %zu-byte device plan image", l.bytes);
    mpccl_dev_step_t *steps = (mpccl_dev_step_t *)(img + l.steps);
    mpccl_dev_dep_t *deps = (mpccl_dev_dep_t *)(img + l.deps);
    mpccl_status_t st = mpccl_gpu_plan_convert(s, io, in_off, steps, deps);
    if (st != MPCCL_OK) {
        free(img);
        return st;
    }
    uint32_t nl = 0;
    for (uint32_t k = 0; k < s->ndeps; k++) nl += deps[k].local;
    mpccl_dev_plan_t *h = (mpccl_dev_plan_t *)img;
    h->steps = (const mpccl_dev_step_t *)(base + l.steps);
    h->deps = (const mpccl_dev_dep_t *)(base + l.deps);
    h->nsteps = s->nsteps;
    h->window = window;
    h->launches = (uint32_t *)(base + l.counters);
    h->ctas_finished = (uint32_t *)(base + l.counters + sizeof(uint32_t));
    h->step_done = (uint32_t *)(base + l.step_done);
    *image = img;
    *bytes = l.bytes;
    if (nlocal) *nlocal = nl;
    return MPCCL_OK;
}

/* ---- Pieces between nodes ------------------------------------------------------ */

/* The pieces CTA g cuts its part of a message of count elements into, as
 * the engine's try_whole / try_message cut it (mpccl_dev_proxy_piece): slot
 * pieces add to cnt[0], whole messages to cnt[1]. */
static void pieces_of(uint64_t count, uint32_t es, const mpccl_gpu_cut_t *cut, uint32_t g, uint32_t cnt[2])
{
    uint64_t b, e;
    mpccl_dev_partition(count, es, cut->nctas, cut->min_bytes, g, &b, &e);
    if (cut->slot_bytes < es) return;
    for (uint64_t left = e - b; left > 0;) {
        int whole;
        uint64_t n = mpccl_dev_proxy_piece(left, es, cut->slot_bytes, cut->whole_bytes, cut->eager_bytes, &whole);
        /* full slots until at most four slots' worth (which holds the eager
         * tail, eager pieces being smaller than slots): counted at once */
        uint64_t k = 1, tail = (uint64_t)MPCCL_PROXY_EAGER_PIECES * (cut->slot_bytes / es);
        if (!whole && n == cut->slot_bytes / es && left > tail + n) k = (left - tail) / n;
        cnt[whole] += (uint32_t)k;
        left -= k * n;
    }
}

mpccl_status_t mpccl_gpu_plan_pieces(const mpccl_sched_t *s, uint32_t es, const mpccl_gpu_cut_t *cut,
                                     const mpccl_dev_link_t *links, int nranks, mpccl_proxy_due_t **out,
                                     uint32_t *n)
{
    const uint32_t nctas = cut->nctas;
    *out = NULL;
    *n = 0;
    uint32_t *dense = NULL; /* [rank][g][tx, rx, whole tx, whole rx] */
    for (uint32_t i = 0; i < s->nsteps; i++) {
        const mpccl_step_t *st = &s->steps[i];
        if (st->kind != MPCCL_STEP_SEND && st->kind != MPCCL_STEP_RECV) continue;
        if (st->peer < 0 || st->peer >= nranks || links[st->peer].kind != MPCCL_LINK_PROXY) continue;
        if (dense == NULL && (dense = calloc((size_t)nranks * nctas * 4, sizeof(*dense))) == NULL)
            return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a plan's piece counts (%d ranks x %u CTAs)",
                              nranks, nctas);
        int rx = st->kind == MPCCL_STEP_RECV;
        for (uint32_t g = 0; g < nctas; g++) {
            uint32_t cnt[2] = {0, 0};
            pieces_of(st->count, es, cut, g, cnt);
            uint32_t *d = &dense[((size_t)st->peer * nctas + g) * 4];
            d[rx] += cnt[0];
            d[2 + rx] += cnt[1];
        }
    }
    if (dense == NULL) return MPCCL_OK;
    size_t used = 0;
    for (size_t c = 0; c < (size_t)nranks * nctas; c++) {
        const uint32_t *d = &dense[4 * c];
        used += d[0] || d[1] || d[2] || d[3];
    }
    if (used && (*out = malloc(used * sizeof(**out))) == NULL) {
        free(dense);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a plan's piece counts (%zu channels)", used);
    }
    for (size_t c = 0; c < (size_t)nranks * nctas; c++) {
        const uint32_t *d = &dense[4 * c];
        if (d[0] || d[1] || d[2] || d[3])
            (*out)[(*n)++] = (mpccl_proxy_due_t){(int32_t)(c / nctas), (uint32_t)(c % nctas), d[0], d[1], d[2], d[3]};
    }
    free(dense);
    return MPCCL_OK;
}

/* ---- Upload (CUDA) ------------------------------------------------------------ */

#if defined(MPCCL_HAVE_CUDA) && !defined(MPCCL_GPU_PLAN_CONVERT_ONLY)

static mpccl_status_t cuda_fail(cudaError_t e, const char *what, size_t bytes)
{
    return mpccl_fail(MPCCL_ERR_CUDA, "gpu plan upload: %s (%zu bytes) failed: %s", what, bytes, cudaGetErrorString(e));
}

/* Copies bytes of img to device memory mem, synchronously, on a private
 * stream.  The caller switched the thread to relaxed capture mode (it may be
 * capturing a graph on the user's stream, where cudaMalloc and a
 * synchronous copy are not permitted otherwise). */
static mpccl_status_t copy_up(void *mem, const void *img, size_t bytes, const char *what)
{
    cudaStream_t stream = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cuda_fail(e, "cudaStreamCreateWithFlags", 0);
    mpccl_status_t st = MPCCL_OK;
    if ((e = cudaMemcpyAsync(mem, img, bytes, cudaMemcpyHostToDevice, stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(stream)) != cudaSuccess)
        st = cuda_fail(e, what, bytes);
    cudaStreamDestroy(stream);
    return st;
}

mpccl_status_t mpccl_gpu_upload_bytes(const void *img, size_t bytes, void **dev)
{
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaError_t e = cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) return cuda_fail(e, "cudaThreadExchangeStreamCaptureMode", 0);
    void *mem = NULL;
    mpccl_status_t st = MPCCL_OK;
    if ((e = cudaMalloc(&mem, bytes)) != cudaSuccess) st = cuda_fail(e, "cudaMalloc", bytes);
    else if ((st = copy_up(mem, img, bytes, "copying a plan to the device")) != MPCCL_OK) cudaFree(mem);
    else *dev = mem;
    cudaThreadExchangeStreamCaptureMode(&mode);
    return st;
}

mpccl_status_t mpccl_gpu_plan_upload_io(const mpccl_sched_t *s, uint32_t nctas, uint32_t window, mpccl_inout_t io,
                                        int64_t in_off, mpccl_gpu_plan_t *out)
{
    memset(out, 0, sizeof(*out));
    if (nctas < 1) return mpccl_fail(MPCCL_ERR_ARG, "gpu plan: %u CTAs, expected at least 1", nctas);
    size_t bytes = plan_layout(s).bytes;
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaError_t e = cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) return cuda_fail(e, "cudaThreadExchangeStreamCaptureMode", 0);
    void *mem = NULL, *img = NULL;
    mpccl_status_t st = MPCCL_OK;
    uint32_t nlocal = 0;
    if ((e = cudaMalloc(&mem, bytes)) != cudaSuccess) {
        st = cuda_fail(e, "cudaMalloc", bytes);
        mem = NULL;
        goto out;
    }
    MPCCL_CHECK_GOTO(mpccl_gpu_plan_image(s, io, in_off, window, (uintptr_t)mem, &img, &bytes, &nlocal), st, out);
    MPCCL_CHECK_GOTO(copy_up(mem, img, bytes, "copying the plan to the device"), st, out);
    out->dev = (mpccl_dev_plan_t *)mem;
    out->dev_mem = mem;
    out->bytes = bytes;
    out->nsteps = s->nsteps;
    out->ndeps = s->ndeps;
    out->nctas = nctas;
    out->window = window;
    out->nlocal = nlocal;
    MPCCL_TRACE(MPCCL_SUB_COLL, "gpu plan: %u steps, %u deps (%u local), %zu bytes, %u CTAs, window %u", s->nsteps,
                s->ndeps, nlocal, bytes, nctas, window);
out:
    free(img);
    if (st != MPCCL_OK && mem) cudaFree(mem);
    cudaThreadExchangeStreamCaptureMode(&mode);
    return st;
}

mpccl_status_t mpccl_gpu_plan_upload(const mpccl_sched_t *s, uint32_t nctas, uint32_t window, mpccl_gpu_plan_t *out)
{
    return mpccl_gpu_plan_upload_io(s, nctas, window, MPCCL_INOUT_UNKNOWN, 0, out);
}

void mpccl_gpu_plan_free(mpccl_gpu_plan_t *p)
{
    if (!p) return;
    if (p->dev_mem) cudaFree(p->dev_mem);
    if (p->small) cudaFree(p->small);
    free(p->due);
    memset(p, 0, sizeof(*p));
}
#endif
