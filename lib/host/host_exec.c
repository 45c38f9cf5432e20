/* The schedule engine: runs one rank's DAG of steps without blocking.  Steps
 * whose dependencies are met run in program order: SEND/RECV are posted on the
 * transport and complete later, compute steps run at once through an ops table
 * (the host's here; a device executor supplies its own and reuses the rest). */
#include <stdlib.h>
#include <string.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif
#include "core/tags.h"
#include "host/host_exec.h"
#include "util/clock.h"
#include "util/log.h"
#include "host/host_reduce.h"

typedef struct mpccl_compute_ops {
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*reduce)(ncclDataType_t dt, mpccl_op_t op, void *dst, const void *a, const void *b, size_t n);
    void (*scale)(ncclDataType_t dt, void *dst, const void *src, const void *scalar, size_t n);
    void (*divide)(ncclDataType_t dt, void *dst, const void *src, uint64_t divisor, size_t n);
} mpccl_compute_ops_t;

static void host_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }

static const mpccl_compute_ops_t host_ops = {host_copy, mpccl_host_reduce, mpccl_host_scale, mpccl_host_divide};

struct mpccl_exec {
    mpccl_task_t task;
    const mpccl_compute_ops_t *ops;
    mpccl_transport_t *t;
    int rank;
    size_t esize;
    char *buf[MPCCL_NUM_BUFS];
    void *tmp, *scaled;
    size_t tmp_got, scaled_got;  /* their sizes, for the pool */
    mpccl_scratch_pool_t *pool; /* scratch kept between calls (host_executor.c; NULL: none) */
    uint32_t n, ndone;
    uint32_t *pending;    /* unmet dependencies per step */
    uint32_t *succ_first; /* successors of i: succ[succ_first[i] .. succ_first[i+1]) */
    uint32_t *succ;
    uint32_t *ready, ready_head, ready_tail; /* FIFO; each step enters once */
    uint32_t *inflight, ninflight;           /* posted SEND/RECV steps */
    mpccl_req_t *reqs;                       /* per step */
    uint64_t *tags;                          /* per step */
    mpccl_status_t err;
    int send_detached; /* a send was cancelled in flight: a peer may still read its buffer */
};

static char *addr(const mpccl_exec_t *ex, mpccl_ref_t r) { return ex->buf[r.buf] + r.off * ex->esize; }

/* Successor lists (CSR) and initial dependency counts. */
static mpccl_status_t build_dag(mpccl_exec_t *ex)
{
    const mpccl_sched_t *s = ex->task.sched;
    for (uint32_t i = 0; i < ex->n; i++) {
        const mpccl_step_t *st = &s->steps[i];
        ex->pending[i] = st->ndeps;
        for (uint32_t j = 0; j < st->ndeps; j++) {
            uint32_t d = s->deps[st->dep_first + j];
            if (d >= i) return mpccl_fail(MPCCL_ERR_INTERNAL, "schedule step %u depends on step %u (not earlier)", i, d);
            ex->succ_first[d + 1]++;
        }
        if (st->ndeps == 0) ex->ready[ex->ready_tail++] = i;
    }
    for (uint32_t i = 0; i < ex->n; i++) ex->succ_first[i + 1] += ex->succ_first[i];
    uint32_t *fill = ex->inflight; /* unused until the task runs: a cursor per step */
    memcpy(fill, ex->succ_first, ex->n * sizeof(uint32_t));
    for (uint32_t i = 0; i < ex->n; i++) {
        const mpccl_step_t *st = &s->steps[i];
        for (uint32_t j = 0; j < st->ndeps; j++) ex->succ[fill[s->deps[st->dep_first + j]]++] = i;
    }
    return MPCCL_OK;
}

static mpccl_status_t check_buffers(const mpccl_exec_t *ex)
{
    static const char *const names[MPCCL_NUM_BUFS] = {"input", "output", "scratch"};
    const mpccl_sched_t *s = ex->task.sched;
    for (uint32_t i = 0; i < ex->n; i++) {
        const mpccl_step_t *st = &s->steps[i];
        if (st->kind == MPCCL_STEP_NOP || st->count == 0) continue;
        mpccl_ref_t refs[3] = {st->dst, st->src0, st->src1};
        int nref = st->kind == MPCCL_STEP_REDUCE ? 3 : 2;
        for (int k = 0; k < nref; k++) {
            if (refs[k].buf >= MPCCL_NUM_BUFS)
                return mpccl_fail(MPCCL_ERR_INTERNAL, "schedule step %u names buffer %u", i, refs[k].buf);
            if (!ex->buf[refs[k].buf])
                return mpccl_fail(MPCCL_ERR_ARG, "the %s buffer is NULL but this rank's part of the operation uses it",
                                  names[refs[k].buf]);
        }
    }
    return MPCCL_OK;
}

/* Tags: see host_exec.h.  Counters advance only once the task is sure to start. */
static void assign_tags(mpccl_exec_t *ex, uint64_t *send_seq, uint64_t *recv_seq)
{
    const mpccl_sched_t *s = ex->task.sched;
    for (uint32_t i = 0; i < ex->n; i++) {
        const mpccl_step_t *st = &s->steps[i];
        if (st->kind == MPCCL_STEP_SEND)
            ex->tags[i] = mpccl_tag_seq(ex->rank, send_seq[st->peer] + st->msg);
        else if (st->kind == MPCCL_STEP_RECV)
            ex->tags[i] = mpccl_tag_seq(st->peer, recv_seq[st->peer] + st->msg);
    }
    for (uint32_t i = 0; i < ex->n; i++) {
        const mpccl_step_t *st = &s->steps[i];
        if (st->kind == MPCCL_STEP_SEND) send_seq[st->peer]++;
        else if (st->kind == MPCCL_STEP_RECV) recv_seq[st->peer]++;
    }
}

mpccl_status_t mpccl_exec_start(const mpccl_task_t *task, mpccl_transport_t *t, mpccl_scratch_pool_t *pool, int rank,
                                uint64_t *send_seq, uint64_t *recv_seq, mpccl_exec_t **out)
{
    *out = NULL;
    const mpccl_sched_t *s = task->sched;
    size_t esize = mpccl_dtype_size(task->dt);
    if (!s || esize == 0) return mpccl_fail(MPCCL_ERR_INTERNAL, "exec: no schedule or invalid datatype %d", (int)task->dt);
    mpccl_exec_t *ex = calloc(1, sizeof(*ex));
    if (!ex) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory starting a task");
    mpccl_status_t st = MPCCL_OK;
    ex->task = *task;
    ex->ops = &host_ops;
    ex->t = t;
    ex->pool = pool;
    ex->rank = rank;
    ex->esize = esize;
    ex->n = s->nsteps;
    size_t n = ex->n ? ex->n : 1;
    ex->pending = malloc(n * sizeof(uint32_t));
    ex->succ_first = calloc(n + 1, sizeof(uint32_t));
    ex->succ = malloc((s->ndeps ? s->ndeps : 1) * sizeof(uint32_t));
    ex->ready = malloc(n * sizeof(uint32_t));
    ex->inflight = malloc(n * sizeof(uint32_t));
    ex->reqs = calloc(n, sizeof(mpccl_req_t));
    ex->tags = calloc(n, sizeof(uint64_t));
    if (!ex->pending || !ex->succ_first || !ex->succ || !ex->ready || !ex->inflight || !ex->reqs || !ex->tags) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a task of %u steps", ex->n);
        goto fail;
    }
    MPCCL_CHECK_GOTO(build_dag(ex), st, fail);
    ex->buf[MPCCL_BUF_IN] = (char *)task->in;
    ex->buf[MPCCL_BUF_OUT] = task->out;
    if (s->tmp_elems) {
        ex->tmp = mpccl_scratch_get(pool, s->tmp_elems * esize, &ex->tmp_got);
        if (!ex->tmp) {
            st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for %llu bytes of scratch",
                            (unsigned long long)(s->tmp_elems * esize));
            goto fail;
        }
        ex->buf[MPCCL_BUF_TMP] = ex->tmp;
    }
    if (s->needs_prescale && s->in_elems) {
        if (!task->in) {
            st = mpccl_fail(MPCCL_ERR_ARG, "the input buffer is NULL");
            goto fail;
        }
        ex->scaled = mpccl_scratch_get(pool, s->in_elems * esize, &ex->scaled_got);
        if (!ex->scaled) {
            st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the %llu-byte scaled input",
                            (unsigned long long)(s->in_elems * esize));
            goto fail;
        }
        ex->ops->scale(task->dt, ex->scaled, task->in, task->scalar, s->in_elems);
        ex->buf[MPCCL_BUF_IN] = ex->scaled;
    }
    MPCCL_CHECK_GOTO(check_buffers(ex), st, fail);
    assign_tags(ex, send_seq, recv_seq);
    *out = ex;
    return MPCCL_OK;
fail:
    mpccl_exec_free(ex);
    return st;
}

static void complete(mpccl_exec_t *ex, uint32_t i)
{
    ex->ndone++;
    for (uint32_t k = ex->succ_first[i]; k < ex->succ_first[i + 1]; k++)
        if (--ex->pending[ex->succ[k]] == 0) ex->ready[ex->ready_tail++] = ex->succ[k];
}

/* Runs a compute step, or posts a communication step (then in flight). */
static mpccl_status_t run_step(mpccl_exec_t *ex, uint32_t i)
{
    const mpccl_step_t *st = &ex->task.sched->steps[i];
    size_t bytes = st->count * ex->esize;
    mpccl_status_t r;
    switch (st->kind) {
    case MPCCL_STEP_SEND:
    case MPCCL_STEP_RECV:
        r = st->kind == MPCCL_STEP_SEND
              ? ex->t->ops->isend(ex->t, st->peer, ex->tags[i], addr(ex, st->src0), bytes, &ex->reqs[i])
              : ex->t->ops->irecv(ex->t, st->peer, ex->tags[i], addr(ex, st->dst), bytes, &ex->reqs[i]);
        if (r != MPCCL_OK) return r;
        ex->inflight[ex->ninflight++] = i;
        return MPCCL_OK;
    case MPCCL_STEP_COPY: ex->ops->copy(addr(ex, st->dst), addr(ex, st->src0), bytes); break;
    case MPCCL_STEP_REDUCE:
        ex->ops->reduce(ex->task.dt, ex->task.op, addr(ex, st->dst), addr(ex, st->src0), addr(ex, st->src1), st->count);
        break;
    case MPCCL_STEP_SCALE:
        ex->ops->scale(ex->task.dt, addr(ex, st->dst), addr(ex, st->src0), ex->task.scalar, st->count);
        break;
    case MPCCL_STEP_DIVIDE:
        ex->ops->divide(ex->task.dt, addr(ex, st->dst), addr(ex, st->src0), ex->task.divisor, st->count);
        break;
    case MPCCL_STEP_NOP: break;
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "schedule step %u has kind %d", i, st->kind);
    }
    complete(ex, i);
    return MPCCL_OK;
}

static void cancel_inflight(mpccl_exec_t *ex)
{
    for (uint32_t k = 0; k < ex->ninflight; k++) {
        mpccl_req_t *r = &ex->reqs[ex->inflight[k]];
        if (r->done) continue;
        if (ex->task.sched->steps[ex->inflight[k]].kind == MPCCL_STEP_SEND) ex->send_detached = 1;
        ex->t->ops->cancel(ex->t, r);
    }
}

static mpccl_status_t stop(mpccl_exec_t *ex, mpccl_status_t st)
{
    ex->err = st;
    cancel_inflight(ex);
    return st;
}

mpccl_status_t mpccl_exec_progress(mpccl_exec_t *ex, int *done)
{
    *done = 0;
    if (ex->err != MPCCL_OK) return ex->err;
    if (ex->ninflight) ex->t->ops->progress(ex->t);
    for (;;) {
        int changed = 0;
        while (ex->ready_head < ex->ready_tail) {
            mpccl_status_t st = run_step(ex, ex->ready[ex->ready_head++]);
            if (st != MPCCL_OK) return stop(ex, st);
            changed = 1;
        }
        for (uint32_t k = 0; k < ex->ninflight;) {
            uint32_t i = ex->inflight[k];
            if (!ex->reqs[i].done) {
                k++;
                continue;
            }
            if (ex->reqs[i].status != MPCCL_OK) return stop(ex, ex->reqs[i].status);
            ex->inflight[k] = ex->inflight[--ex->ninflight];
            complete(ex, i);
            changed = 1;
        }
        if (!changed) break;
    }
    *done = ex->ndone == ex->n;
    return MPCCL_OK;
}

/* A transport keeps writing into a cancelled request until it reports it done.
 * Drain runs only for a call that failed, so its peers may be dead or gone
 * elsewhere (a shrink, a bootstrap) and never answer: a receive UCX has
 * already matched (a rendezvous under way) then never ends.  Give the
 * transport DRAIN_MS, then keep (leak) the requests and buffers it may still
 * write rather than wait: a failed call must return. */
#define DRAIN_MS 100

static int drain(mpccl_exec_t *ex)
{
    cancel_inflight(ex);
    double deadline = mpccl_now_seconds() + DRAIN_MS / 1e3;
    for (;;) {
        int left = 0;
        for (uint32_t k = 0; k < ex->ninflight; k++) left |= !ex->reqs[ex->inflight[k]].done;
        if (!left) return 1;
        if (mpccl_now_seconds() > deadline) break;
        if (ex->t->ops->progress(ex->t) == 0) ex->t->ops->idle(ex->t);
    }
    MPCCL_INFO(MPCCL_SUB_COLL, "a cancelled transfer did not end within %d ms (its peer failed or moved on): "
               "its requests and buffers are kept", DRAIN_MS);
    return 0;
}

void mpccl_exec_recv_peers(const mpccl_exec_t *ex, unsigned char *from)
{
    const mpccl_sched_t *s = ex->task.sched;
    for (uint32_t i = 0; i < ex->n; i++) {
        const mpccl_step_t *st = &s->steps[i];
        if (st->kind != MPCCL_STEP_RECV || st->peer < 0 || from[st->peer]) continue;
        size_t eager = ex->t->ops->eager_max ? ex->t->ops->eager_max(ex->t, st->peer) : 0;
        if (eager == 0 || st->count * ex->esize > eager) from[st->peer] = 1;
    }
}

int mpccl_exec_needs_peer(const mpccl_exec_t *ex, int peer)
{
    const mpccl_sched_t *s = ex->task.sched;
    for (uint32_t i = 0; i < ex->n; i++) {
        const mpccl_step_t *st = &s->steps[i];
        if ((st->kind == MPCCL_STEP_SEND || st->kind == MPCCL_STEP_RECV) && st->peer == peer &&
            !__atomic_load_n(&ex->reqs[i].done, __ATOMIC_ACQUIRE))
            return 1;
    }
    return 0;
}

void mpccl_exec_free(mpccl_exec_t *ex)
{
    if (!ex) return;
    /* A transfer that did not end: the transport may still write into its
     * request and its buffer. */
    int unfinished = ex->ninflight && ex->reqs && !drain(ex);
    free(ex->pending);
    free(ex->succ_first);
    free(ex->succ);
    free(ex->ready);
    free(ex->inflight);
    free(ex->tags);
    /* A peer that already took a cancelled send's rendezvous may still read
     * its buffer (shared memory, cma) after a failure: the scratch memory is
     * kept (leaked) rather than let it read freed pages.  Failed calls only. */
    if (ex->send_detached || unfinished) {
        MPCCL_INFO(MPCCL_SUB_COLL, "a failed call left transfers in flight: its scratch memory is kept");
#ifdef __SANITIZE_ADDRESS__
        /* kept on purpose: not a leak for LeakSanitizer */
        if (ex->tmp) __lsan_ignore_object(ex->tmp);
        if (ex->scaled) __lsan_ignore_object(ex->scaled);
        if (unfinished) __lsan_ignore_object(ex->reqs);
#endif
    } else {
        mpccl_scratch_put(ex->pool, ex->tmp, ex->tmp_got);
        mpccl_scratch_put(ex->pool, ex->scaled, ex->scaled_got);
    }
    if (!unfinished) free(ex->reqs);
    free(ex);
}
