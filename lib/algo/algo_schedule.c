/* Schedule builder: appends steps with their dependencies and numbers messages
 * per peer, so that generators only describe the data flow. */
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"

static void set_error(mpccl_build_t *b, mpccl_status_t st)
{
    if (b->st == MPCCL_OK) b->st = st;
}

static int grow(mpccl_build_t *b, void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap) return 1;
    uint64_t ncap = *cap ? (uint64_t)*cap * 2 : 64;
    while (ncap < need) ncap *= 2;
    if (ncap > UINT32_MAX - 1) {
        set_error(b, mpccl_fail(MPCCL_ERR_INTERNAL, "schedule too large (%u entries)", need));
        return 0;
    }
    void *p = realloc(*arr, ncap * elem);
    if (!p) {
        set_error(b, mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory growing a schedule to %llu entries",
                                (unsigned long long)ncap));
        return 0;
    }
    *arr = p;
    *cap = (uint32_t)ncap;
    return 1;
}

mpccl_status_t mpccl_build_init(mpccl_build_t *b, mpccl_sched_t *s, int rank, int nranks)
{
    memset(b, 0, sizeof(*b));
    memset(s, 0, sizeof(*s));
    b->s = s;
    b->rank = rank;
    b->nranks = nranks;
    b->entry = MPCCL_NONE;
    b->nsend = calloc((size_t)nranks, sizeof(uint32_t));
    b->nrecv = calloc((size_t)nranks, sizeof(uint32_t));
    if (!b->nsend || !b->nrecv) {
        free(b->nsend);
        free(b->nrecv);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for message counters of %d ranks", nranks);
    }
    return MPCCL_OK;
}

mpccl_status_t mpccl_build_finish(mpccl_build_t *b)
{
    free(b->nsend);
    free(b->nrecv);
    b->nsend = b->nrecv = NULL;
    if (b->st != MPCCL_OK) {
        mpccl_sched_free(b->s);
        return b->st;
    }
    b->s->tmp_elems = b->tmp_top;
    return MPCCL_OK;
}

void mpccl_sched_free(mpccl_sched_t *s)
{
    if (!s) return;
    free(s->steps);
    free(s->deps);
    memset(s, 0, sizeof(*s));
}

/* Copies deps (dropping NONE and duplicates, adding the entry) to the schedule's
 * dependency array; returns how many. */
static uint32_t push_deps(mpccl_build_t *b, const uint32_t *deps, uint32_t nd, uint32_t *first)
{
    mpccl_sched_t *s = b->s;
    if (!grow(b, (void **)&s->deps, &s->deps_cap, s->ndeps + nd + 1, sizeof(uint32_t))) return 0;
    *first = s->ndeps;
    uint32_t n = 0;
    for (uint32_t i = 0; i <= nd; i++) {
        uint32_t d = i < nd ? deps[i] : b->entry;
        if (d == MPCCL_NONE) continue;
        int dup = 0;
        for (uint32_t j = 0; j < n && !dup; j++) dup = s->deps[*first + j] == d;
        if (!dup) s->deps[*first + n++] = d;
    }
    s->ndeps += n;
    return n;
}

static uint32_t append(mpccl_build_t *b, int kind, int peer, uint64_t count, mpccl_ref_t dst,
                       mpccl_ref_t src0, mpccl_ref_t src1, const uint32_t *deps, uint32_t nd)
{
    mpccl_sched_t *s = b->s;
    if (b->st != MPCCL_OK) return MPCCL_NONE;
    if (!grow(b, (void **)&s->steps, &s->steps_cap, s->nsteps + 1, sizeof(mpccl_step_t))) return MPCCL_NONE;
    uint32_t first = 0, n = push_deps(b, deps, nd, &first);
    if (b->st != MPCCL_OK) return MPCCL_NONE;
    mpccl_step_t *st = &s->steps[s->nsteps];
    memset(st, 0, sizeof(*st));
    st->kind = (uint8_t)kind;
    st->peer = peer;
    st->count = count;
    st->dst = dst;
    st->src0 = src0;
    st->src1 = src1;
    st->dep_first = first;
    st->ndeps = n;
    if (kind == MPCCL_STEP_SEND || kind == MPCCL_STEP_RECV) {
        if (peer < 0 || peer >= b->nranks) {
            set_error(b, mpccl_fail(MPCCL_ERR_INTERNAL, "schedule names peer %d of %d ranks", peer, b->nranks));
            return MPCCL_NONE;
        }
        st->msg = kind == MPCCL_STEP_SEND ? b->nsend[peer]++ : b->nrecv[peer]++;
    }
    return s->nsteps++;
}

uint32_t mpccl_b_join(mpccl_build_t *b, const uint32_t *deps, uint32_t ndeps)
{
    uint32_t only = MPCCL_NONE, n = 0;
    for (uint32_t i = 0; i < ndeps && n < 2; i++) {
        if (deps[i] == MPCCL_NONE || deps[i] == only) continue;
        only = deps[i];
        n++;
    }
    if (n == 0) return b->entry;
    if (n == 1 && (b->entry == MPCCL_NONE || b->entry == only)) return only;
    mpccl_ref_t z = {0, 0};
    return append(b, MPCCL_STEP_NOP, -1, 0, z, z, z, deps, ndeps);
}

uint32_t mpccl_b_step(mpccl_build_t *b, int kind, int peer, uint64_t count, mpccl_ref_t dst,
                      mpccl_ref_t src0, mpccl_ref_t src1, const uint32_t *deps, uint32_t ndeps)
{
    if (count == 0 && kind != MPCCL_STEP_NOP) return mpccl_b_join(b, deps, ndeps);
    return append(b, kind, peer, count, dst, src0, src1, deps, ndeps);
}

uint32_t mpccl_b_copy(mpccl_build_t *b, mpccl_ref_t dst, mpccl_ref_t src, uint64_t n,
                      const uint32_t *deps, uint32_t nd)
{
    if (dst.buf == src.buf && dst.off == src.off) return mpccl_b_join(b, deps, nd);
    return mpccl_b_step(b, MPCCL_STEP_COPY, -1, n, dst, src, src, deps, nd);
}

uint32_t mpccl_b_join_since(mpccl_build_t *b, uint32_t first)
{
    mpccl_sched_t *s = b->s;
    if (b->st != MPCCL_OK || first >= s->nsteps) return MPCCL_NONE;
    uint32_t n = s->nsteps - first;
    unsigned char *used = calloc(n, 1);
    uint32_t *sinks = malloc(n * sizeof(uint32_t));
    uint32_t ns = 0, r = MPCCL_NONE;
    if (!used || !sinks) {
        set_error(b, mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory joining %u steps", n));
        goto out;
    }
    for (uint32_t i = first; i < s->nsteps; i++)
        for (uint32_t j = 0; j < s->steps[i].ndeps; j++) {
            uint32_t d = s->deps[s->steps[i].dep_first + j];
            if (d >= first) used[d - first] = 1;
        }
    for (uint32_t i = 0; i < n; i++)
        if (!used[i]) sinks[ns++] = first + i;
    r = mpccl_b_join(b, sinks, ns);
out:
    free(used);
    free(sinks);
    return r;
}

uint64_t mpccl_b_tmp(mpccl_build_t *b, uint64_t n)
{
    /* Slots start on 64-element boundaries so that vectorised reductions on
     * them stay aligned. */
    uint64_t off = (b->tmp_top + 63) & ~(uint64_t)63;
    b->tmp_top = off + n;
    return off;
}

void mpccl_pool_init(mpccl_build_t *b, mpccl_pool_t *p, uint32_t k, uint64_t slot_elems)
{
    memset(p, 0, sizeof(*p));
    if (k > MPCCL_POOL_MAX) k = MPCCL_POOL_MAX;
    if (slot_elems == 0) k = 0;
    p->k = k;
    p->slot = (slot_elems + 63) & ~(uint64_t)63;
    p->off = k ? mpccl_b_tmp(b, p->slot * k) : 0;
    for (uint32_t i = 0; i < MPCCL_POOL_MAX; i++) p->last[i] = MPCCL_NONE;
}

uint32_t mpccl_pool_get(mpccl_pool_t *p, mpccl_ref_t *ref, uint32_t *war)
{
    /* A pool without slots only serves empty ranges (every step on them is
     * elided), so any reference will do. */
    if (p->k == 0) {
        *ref = mpccl_ref(MPCCL_BUF_TMP, p->off);
        *war = MPCCL_NONE;
        return 0;
    }
    uint32_t i = p->next;
    p->next = (p->next + 1) % p->k;
    *ref = mpccl_ref(MPCCL_BUF_TMP, p->off + (uint64_t)i * p->slot);
    *war = p->last[i];
    return i;
}

void mpccl_pool_put(mpccl_pool_t *p, uint32_t i, uint32_t step)
{
    if (p->k) p->last[i] = step;
}

static int ref_ok(const mpccl_sched_t *s, mpccl_ref_t r, uint64_t n, uint64_t out_elems)
{
    uint64_t lim = r.buf == MPCCL_BUF_IN ? s->in_elems : r.buf == MPCCL_BUF_OUT ? out_elems
                 : r.buf == MPCCL_BUF_TMP ? s->tmp_elems : 0;
    return r.buf < MPCCL_NUM_BUFS && r.off <= lim && n <= lim - r.off;
}

mpccl_status_t mpccl_sched_validate(const mpccl_sched_t *s, int rank, int nranks, uint64_t out_elems,
                                    int allow_self)
{
    uint32_t *nsend = calloc((size_t)nranks, sizeof(uint32_t)), *nrecv = calloc((size_t)nranks, sizeof(uint32_t));
    mpccl_status_t st = MPCCL_OK;
    if (!nsend || !nrecv) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory validating a schedule");
        goto out;
    }
    for (uint32_t i = 0; i < s->nsteps && st == MPCCL_OK; i++) {
        const mpccl_step_t *t = &s->steps[i];
        if (t->dep_first > s->ndeps || t->ndeps > s->ndeps - t->dep_first) {
            st = mpccl_fail(MPCCL_ERR_INTERNAL, "step %u: dependencies out of range", i);
            break;
        }
        for (uint32_t j = 0; j < t->ndeps; j++)
            if (s->deps[t->dep_first + j] >= i) {
                st = mpccl_fail(MPCCL_ERR_INTERNAL, "step %u depends on later step %u", i, s->deps[t->dep_first + j]);
                goto out;
            }
        int readsrc1 = t->kind == MPCCL_STEP_REDUCE;
        int readsrc0 = t->kind != MPCCL_STEP_RECV && t->kind != MPCCL_STEP_NOP;
        int writes = t->kind != MPCCL_STEP_SEND && t->kind != MPCCL_STEP_NOP;
        if (t->kind > MPCCL_STEP_NOP ||
            (writes && !ref_ok(s, t->dst, t->count, out_elems)) ||
            (readsrc0 && !ref_ok(s, t->src0, t->count, out_elems)) ||
            (readsrc1 && !ref_ok(s, t->src1, t->count, out_elems))) {
            st = mpccl_fail(MPCCL_ERR_INTERNAL, "step %u (kind %d, %llu elements): a buffer reference is out of range",
                            i, t->kind, (unsigned long long)t->count);
            break;
        }
        if (t->kind == MPCCL_STEP_SEND || t->kind == MPCCL_STEP_RECV) {
            if (t->peer < 0 || t->peer >= nranks || (t->peer == rank && !allow_self)) {
                st = mpccl_fail(MPCCL_ERR_INTERNAL, "step %u: peer %d (rank %d of %d)", i, t->peer, rank, nranks);
                break;
            }
            uint32_t *c = t->kind == MPCCL_STEP_SEND ? &nsend[t->peer] : &nrecv[t->peer];
            if (t->msg != (*c)++) {
                st = mpccl_fail(MPCCL_ERR_INTERNAL, "step %u: message %u to/from %d, expected %u", i, t->msg,
                                t->peer, *c - 1);
                break;
            }
        }
    }
out:
    free(nsend);
    free(nrecv);
    return st;
}
