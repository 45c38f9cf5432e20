/* Simulated executor: see sim_exec.h.  Messages are matched only when both the
 * send and the receive are posted (rendezvous), data moves at match time, and
 * matches happen in a seeded random order, so a schedule that relies on
 * buffering, on timing or on a missing dependency shows up as a deadlock or as
 * wrong data. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "sim_exec.h"

typedef struct sim_msg {
    int src, dst;
    uint64_t tag;
    void *buf;
    size_t bytes;
    mpccl_req_t *req;
} sim_msg_t;

typedef struct sim_list {
    sim_msg_t *v;
    size_t n, cap;
} sim_list_t;

typedef struct sim_tp {
    mpccl_transport_t base;
    sim_world_t *w;
} sim_tp_t;

struct sim_world {
    int nranks;
    uint64_t rng;
    sim_tp_t *tps;
    sim_list_t sends, recvs;
    long events;   /* posts and matches: progress detection */
    long nsends;   /* sends posted so far */
    long fail_at;  /* -1, or the send that fails */
    int force;     /* match everything possible (after an idle sweep) */
    uint64_t *seq; /* per rank: nranks send then nranks receive counters */
    mpccl_scratch_pool_t *pool; /* scratch kept between runs, as a host communicator keeps it */
};

static uint64_t rnd(sim_world_t *w)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return w->rng;
}

static int push(sim_list_t *l, sim_msg_t m)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        sim_msg_t *v = realloc(l->v, cap * sizeof(*v));
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = m;
    return 0;
}

static void drop(sim_list_t *l, size_t i) { l->v[i] = l->v[--l->n]; }

static int find(const sim_list_t *l, int src, int dst, uint64_t tag)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].src == src && l->v[i].dst == dst && l->v[i].tag == tag) return (int)i;
    return -1;
}

static void finish(mpccl_req_t *r, mpccl_status_t st)
{
    r->status = st;
    r->impl = NULL;
    r->done = 1;
}

static mpccl_status_t post(mpccl_transport_t *t, sim_list_t *l, int src, int dst, uint64_t tag, void *buf,
                           size_t bytes, mpccl_req_t *req)
{
    sim_world_t *w = ((sim_tp_t *)t)->w;
    if (dst < 0 || dst >= w->nranks || src < 0 || src >= w->nranks)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "sim: peer out of range (%d -> %d)", src, dst);
    /* Two messages of one pair in flight with one tag would match ambiguously. */
    if (find(l, src, dst, tag) >= 0)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "sim: duplicate tag %llx on %d -> %d", (unsigned long long)tag, src, dst);
    req->done = 0;
    req->status = MPCCL_OK;
    req->impl = w;
    if (push(l, (sim_msg_t){src, dst, tag, buf, bytes, req}) != 0) return mpccl_fail(MPCCL_ERR_SYSTEM, "sim: oom");
    w->events++;
    return MPCCL_OK;
}

static mpccl_status_t sim_isend(mpccl_transport_t *t, int peer, uint64_t tag, const void *buf, size_t bytes,
                                mpccl_req_t *req)
{
    sim_world_t *w = ((sim_tp_t *)t)->w;
    if (w->nsends++ == w->fail_at) {
        finish(req, MPCCL_ERR_REMOTE);
        return MPCCL_OK; /* the failure shows on the request, as a network error would */
    }
    return post(t, &w->sends, t->rank, peer, tag, (void *)buf, bytes, req);
}

static mpccl_status_t sim_irecv(mpccl_transport_t *t, int peer, uint64_t tag, void *buf, size_t bytes,
                                mpccl_req_t *req)
{
    return post(t, &((sim_tp_t *)t)->w->recvs, peer, t->rank, tag, buf, bytes, req);
}

/* Matches a random subset of the ready pairs that involve this rank (all of
 * them when forced). */
static int sim_progress(mpccl_transport_t *t)
{
    sim_world_t *w = ((sim_tp_t *)t)->w;
    int n = 0;
    for (size_t i = 0; i < w->recvs.n;) {
        sim_msg_t *r = &w->recvs.v[i];
        int s = (r->dst == t->rank || r->src == t->rank) ? find(&w->sends, r->src, r->dst, r->tag) : -1;
        if (s < 0 || (!w->force && (rnd(w) & 3) == 0)) {
            i++;
            continue;
        }
        sim_msg_t *m = &w->sends.v[s];
        if (m->bytes > r->bytes) {
            finish(r->req, MPCCL_ERR_INTERNAL);
            finish(m->req, MPCCL_ERR_INTERNAL);
        } else {
            if (m->bytes) memcpy(r->buf, m->buf, m->bytes);
            finish(r->req, MPCCL_OK);
            finish(m->req, MPCCL_OK);
        }
        drop(&w->sends, (size_t)s);
        drop(&w->recvs, i);
        n++;
        w->events++;
    }
    return n;
}

static void sim_idle(mpccl_transport_t *t) { (void)t; }

static void sim_cancel(mpccl_transport_t *t, mpccl_req_t *req)
{
    sim_world_t *w = ((sim_tp_t *)t)->w;
    sim_list_t *lists[2] = {&w->sends, &w->recvs};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < lists[k]->n; i++)
            if (lists[k]->v[i].req == req) {
                drop(lists[k], i);
                finish(req, MPCCL_ERR_REMOTE);
                return;
            }
}

static void sim_close(mpccl_transport_t *t, int force) { (void)t, (void)force; }

static const struct mpccl_transport_ops sim_ops = {.isend = sim_isend,
                                                   .irecv = sim_irecv,
                                                   .progress = sim_progress,
                                                   .idle = sim_idle,
                                                   .cancel = sim_cancel,
                                                   .close = sim_close};

sim_world_t *sim_create(int nranks, uint64_t seed)
{
    sim_world_t *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->nranks = nranks;
    w->rng = seed * 2654435761u + 0x9e3779b97f4a7c15ull;
    w->fail_at = -1;
    w->tps = calloc((size_t)nranks, sizeof(sim_tp_t));
    w->seq = calloc((size_t)nranks * (size_t)nranks * 2, sizeof(uint64_t));
    w->pool = mpccl_scratch_pool_new(64u << 20);
    if (!w->tps || !w->seq || !w->pool) {
        free(w->tps);
        free(w->seq);
        mpccl_scratch_pool_free(w->pool);
        free(w);
        return NULL;
    }
    for (int r = 0; r < nranks; r++) {
        w->tps[r].base.ops = &sim_ops;
        w->tps[r].base.rank = r;
        w->tps[r].base.nranks = nranks;
        w->tps[r].w = w;
    }
    return w;
}

void sim_destroy(sim_world_t *w)
{
    if (!w) return;
    free(w->sends.v);
    free(w->recvs.v);
    free(w->tps);
    free(w->seq);
    mpccl_scratch_pool_free(w->pool);
    free(w);
}

mpccl_transport_t *sim_transport(sim_world_t *w, int rank) { return &w->tps[rank].base; }

void sim_fail_send(sim_world_t *w, long nth) { w->fail_at = w->nsends + nth; }

static size_t appendf(char *msg, size_t len, size_t at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t appendf(char *msg, size_t len, size_t at, const char *fmt, ...)
{
    if (at >= len) return at;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(msg + at, len - at, fmt, ap);
    va_end(ap);
    return k > 0 ? at + (size_t)k : at;
}

/* Names the schedule steps behind the unmatched messages of one task; base holds
 * the rank's send and receive counters as they were when the task started. */
static size_t describe_stuck(sim_world_t *w, const mpccl_task_t *task, int rank, const uint64_t *base, char *msg,
                             size_t len, size_t at)
{
    const mpccl_sched_t *s = task->sched;
    int any = 0;
    for (int k = 0; k < 2; k++) {
        const sim_list_t *l = k ? &w->recvs : &w->sends;
        for (size_t i = 0; i < l->n; i++) {
            const sim_msg_t *m = &l->v[i];
            if ((k ? m->dst : m->src) != rank) continue;
            int peer = k ? m->src : m->dst;
            uint64_t msgno = (m->tag & ((1ull << 40) - 1)) - base[k * w->nranks + peer];
            for (uint32_t j = 0; j < s->nsteps; j++) {
                const mpccl_step_t *st = &s->steps[j];
                if (st->kind != (k ? MPCCL_STEP_RECV : MPCCL_STEP_SEND) || st->peer != peer || st->msg != msgno)
                    continue;
                any = 1;
                at = appendf(msg, len, at, "  rank %d: step %u/%u %s %s %d msg %u (%llu elements) posted, unmatched\n",
                             rank, j, s->nsteps, k ? "RECV" : "SEND", k ? "from" : "to", peer, st->msg,
                             (unsigned long long)st->count);
            }
        }
    }
    if (!any) at = appendf(msg, len, at, "  rank %d: no message of this task posted (waiting on dependencies)\n", rank);
    return at;
}

mpccl_status_t sim_run(sim_world_t *w, const mpccl_task_t *tasks, const int *ranks, int ntasks, char *msg,
                       size_t len)
{
    size_t per = (size_t)w->nranks * 2;
    mpccl_exec_t **ex = calloc((size_t)ntasks, sizeof(*ex));
    int *done = calloc((size_t)ntasks, sizeof(int));
    uint64_t *base = malloc((size_t)ntasks * per * sizeof(uint64_t) + 1);
    mpccl_status_t st = MPCCL_OK;
    size_t at = 0;
    msg[0] = '\0';
    if (!ex || !done || !base) {
        st = MPCCL_ERR_SYSTEM;
        goto out;
    }
    for (int i = 0; i < ntasks; i++) {
        uint64_t *mine = w->seq + (size_t)ranks[i] * per;
        memcpy(base + (size_t)i * per, mine, per * sizeof(uint64_t));
        st = mpccl_exec_start(&tasks[i], sim_transport(w, ranks[i]), w->pool, ranks[i], mine, mine + w->nranks, &ex[i]);
        if (st != MPCCL_OK) {
            at = appendf(msg, len, at, "exec_start of task %d (rank %d): %s\n", i, ranks[i], mpccl_last_error());
            goto out;
        }
    }
    for (int idle = 0;;) {
        long before = w->events;
        int left = 0;
        for (int i = 0; i < ntasks; i++) {
            if (done[i]) continue;
            st = mpccl_exec_progress(ex[i], &done[i]);
            if (st != MPCCL_OK) {
                at = appendf(msg, len, at, "task %d (rank %d) failed: %s\n", i, ranks[i], mpccl_status_name(st));
                goto out;
            }
            left += !done[i];
        }
        if (!left) break;
        /* A sweep without events may be bad luck in the random matching; a forced
         * sweep without events is a deadlock. */
        if (w->events != before) {
            idle = 0;
            w->force = 0;
        } else if (++idle == 1) {
            w->force = 1;
        } else {
            st = MPCCL_ERR_INTERNAL;
            at = appendf(msg, len, at, "deadlock: %d task(s) cannot progress\n", left);
            for (int i = 0; i < ntasks; i++)
                if (!done[i]) at = describe_stuck(w, &tasks[i], ranks[i], base + (size_t)i * per, msg, len, at);
            break;
        }
    }
out:
    w->force = 0;
    for (int i = 0; ex && i < ntasks; i++) mpccl_exec_free(ex[i]);
    free(ex);
    free(done);
    free(base);
    if (st != MPCCL_OK) {
        /* Leftovers of a failed run must not match the next one. */
        w->sends.n = w->recvs.n = 0;
        memset(w->seq, 0, (size_t)w->nranks * per * sizeof(uint64_t));
    }
    return st;
}

/* ---- Static race check ------------------------------------------------------------ */

typedef struct access {
    int64_t lo, hi; /* [lo, hi) in the buffer's space */
    uint32_t step;
    int space;      /* 0: user memory (IN/OUT when aliased), 1: IN, 2: OUT, 3: TMP */
    int write;
} access_t;

static int cmp_access(const void *a, const void *b)
{
    const access_t *x = a, *y = b;
    if (x->space != y->space) return x->space - y->space;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int sim_check_races(const mpccl_sched_t *s, int alias, int64_t in_off, char *msg, size_t len)
{
    uint32_t n = s->nsteps, words = (n + 63) / 64;
    access_t *acc = malloc((size_t)n * 3 * sizeof(*acc) + 1);
    uint64_t *anc = calloc((size_t)n * words + 1, sizeof(uint64_t));
    size_t na = 0;
    int bad = 0;
    msg[0] = '\0';
    if (!acc || !anc) {
        snprintf(msg, len, "race check: out of memory for %u steps", n);
        bad = 1;
        goto out;
    }
    /* anc[i]: every step i transitively depends on. */
    for (uint32_t i = 0; i < n; i++) {
        const mpccl_step_t *t = &s->steps[i];
        for (uint32_t j = 0; j < t->ndeps; j++) {
            uint32_t d = s->deps[t->dep_first + j];
            anc[(size_t)i * words + d / 64] |= 1ull << (d % 64);
            for (uint32_t w = 0; w < words; w++) anc[(size_t)i * words + w] |= anc[(size_t)d * words + w];
        }
        if (t->kind == MPCCL_STEP_NOP || t->count == 0) continue;
        mpccl_ref_t refs[3] = {t->dst, t->src0, t->src1};
        int writes[3] = {t->kind != MPCCL_STEP_SEND, 0, 0};
        int use[3] = {t->kind != MPCCL_STEP_SEND, t->kind != MPCCL_STEP_RECV, t->kind == MPCCL_STEP_REDUCE};
        for (int k = 0; k < 3; k++) {
            if (!use[k]) continue;
            access_t a = {(int64_t)refs[k].off, (int64_t)(refs[k].off + t->count), i, 0, writes[k]};
            if (refs[k].buf == MPCCL_BUF_TMP) a.space = 3;
            else if (!alias) a.space = refs[k].buf == MPCCL_BUF_IN ? 1 : 2;
            else if (refs[k].buf == MPCCL_BUF_IN) a.lo += in_off, a.hi += in_off;
            acc[na++] = a;
        }
    }
    qsort(acc, na, sizeof(*acc), cmp_access);
    for (size_t i = 0; i < na && !bad; i++)
        for (size_t j = i + 1; j < na && acc[j].space == acc[i].space && acc[j].lo < acc[i].hi; j++) {
            const access_t *a = &acc[i], *b = &acc[j];
            if (a->step == b->step || (!a->write && !b->write)) continue;
            uint32_t early = a->step < b->step ? a->step : b->step, late = a->step ^ b->step ^ early;
            if (anc[(size_t)late * words + early / 64] >> (early % 64) & 1) continue;
            snprintf(msg, len, "race: steps %u (kind %d) and %u (kind %d) touch [%lld, %lld) of space %d unordered",
                     early, s->steps[early].kind, late, s->steps[late].kind, (long long)b->lo,
                     (long long)(a->hi < b->hi ? a->hi : b->hi), a->space);
            bad = 1;
            break;
        }
out:
    free(acc);
    free(anc);
    return bad;
}
