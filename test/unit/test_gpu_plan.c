/* Device plans without a GPU: the schedule -> device step conversion, the
 * `local` dependency rule (hand-built cases, and every dependency of real plans
 * of every collective and algorithm checked against an exact, unbounded
 * re-derivation of the rule), the image layout the upload copies, and which
 * CTAs of a launch carry messages (the proxy lanes it wakes).
 * Seed: MPCCL_TEST_SEED. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "kernels/plan.h"
#include "kernels/plan_small.h"

static uint64_t seed, rng;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Converts s; returns the deps (caller frees) and fills steps if given. */
static mpccl_dev_dep_t *convert(const mpccl_sched_t *s, mpccl_inout_t io, int64_t in_off, mpccl_dev_step_t **steps_out)
{
    mpccl_dev_step_t *steps = malloc((s->nsteps + 1) * sizeof(*steps));
    mpccl_dev_dep_t *deps = malloc((s->ndeps + 1) * sizeof(*deps));
    ck_assert(steps && deps);
    ck_assert_int_eq(mpccl_gpu_plan_convert(s, io, in_off, steps, deps), MPCCL_OK);
    if (steps_out) *steps_out = steps;
    else free(steps);
    return deps;
}

static mpccl_ref_t R(uint32_t buf, uint64_t off) { return mpccl_ref(buf, off); }

/* The local flag of step i's j-th dependency. */
static int local_of(const mpccl_sched_t *s, const mpccl_dev_dep_t *deps, uint32_t i, uint32_t j)
{
    ck_assert_uint_lt(j, s->steps[i].ndeps);
    return (int)deps[s->steps[i].dep_first + j].local;
}

START_TEST(fields_copied)
{
    mpccl_sched_t s;
    mpccl_build_t b;
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 3), MPCCL_OK);
    uint32_t a = mpccl_b_recv(&b, 2, R(MPCCL_BUF_TMP, 64), 100, NULL, 0);
    uint32_t c = mpccl_b_reduce(&b, R(MPCCL_BUF_OUT, 7), R(MPCCL_BUF_IN, 9), R(MPCCL_BUF_TMP, 64), 100, MPCCL_DEPS(a));
    mpccl_b_send(&b, 1, R(MPCCL_BUF_OUT, 7), 100, MPCCL_DEPS(c, a));
    mpccl_b_join(&b, MPCCL_DEPS(a, c));
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    mpccl_dev_step_t *st;
    mpccl_dev_dep_t *deps = convert(&s, MPCCL_INOUT_DISTINCT, 0, &st);
    ck_assert_uint_eq(s.nsteps, 4);
    for (uint32_t i = 0; i < s.nsteps; i++) {
        const mpccl_step_t *t = &s.steps[i];
        ck_assert_uint_eq(st[i].kind, t->kind);
        ck_assert_int_eq(st[i].peer, t->peer);
        ck_assert_uint_eq(st[i].dep_first, t->dep_first);
        ck_assert_uint_eq(st[i].ndeps, t->ndeps);
        ck_assert_uint_eq(st[i].count, t->kind == MPCCL_STEP_NOP ? 0 : t->count);
        ck_assert_uint_eq(st[i].dst_buf, t->dst.buf);
        ck_assert_uint_eq(st[i].src0_buf, t->src0.buf);
        ck_assert_uint_eq(st[i].src1_buf, t->src1.buf);
        ck_assert_uint_eq(st[i].dst_off, t->dst.off);
        ck_assert_uint_eq(st[i].src0_off, t->src0.off);
        ck_assert_uint_eq(st[i].src1_off, t->src1.off);
        for (uint32_t j = 0; j < t->ndeps; j++) ck_assert_uint_eq(deps[t->dep_first + j].step, s.deps[t->dep_first + j]);
    }
    /* recv -> reduce (same slot, same count) and reduce -> send are local;
     * the NOP joins with count 0, so waits for every CTA. */
    ck_assert_int_eq(local_of(&s, deps, 1, 0), 1);
    ck_assert_int_eq(local_of(&s, deps, 2, 0), 1);
    ck_assert_int_eq(local_of(&s, deps, 2, 1), 1);
    ck_assert_int_eq(local_of(&s, deps, 3, 0), 0);
    ck_assert_int_eq(local_of(&s, deps, 3, 1), 0);
    /* Only the steps the join waits for through their counters are counted. */
    ck_assert_uint_eq(st[0].flags, MPCCL_DEV_STEP_COUNTED);
    ck_assert_uint_eq(st[1].flags, MPCCL_DEV_STEP_COUNTED);
    ck_assert_uint_eq(st[2].flags, 0);
    ck_assert_uint_eq(st[3].flags, 0);
    free(st);
    free(deps);
    mpccl_sched_free(&s);
}
END_TEST

START_TEST(count_and_alignment)
{
    mpccl_sched_t s;
    mpccl_build_t b;
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    uint32_t w = mpccl_b_copy(&b, R(MPCCL_BUF_OUT, 0), R(MPCCL_BUF_IN, 0), 100, NULL, 0);            /* 0 */
    mpccl_b_send(&b, 1, R(MPCCL_BUF_OUT, 0), 99, MPCCL_DEPS(w));                                     /* 1: count differs */
    mpccl_b_send(&b, 1, R(MPCCL_BUF_OUT, 5), 100, MPCCL_DEPS(w));                                    /* 2: shifted */
    mpccl_b_send(&b, 1, R(MPCCL_BUF_OUT, 100), 100, MPCCL_DEPS(w));                                  /* 3: disjoint */
    mpccl_b_send(&b, 1, R(MPCCL_BUF_IN, 3), 100, MPCCL_DEPS(w));                                     /* 4: read/read */
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    mpccl_dev_dep_t *deps = convert(&s, MPCCL_INOUT_DISTINCT, 0, NULL);
    ck_assert_int_eq(local_of(&s, deps, 1, 0), 0);
    ck_assert_int_eq(local_of(&s, deps, 2, 0), 0);
    ck_assert_int_eq(local_of(&s, deps, 3, 0), 1);
    ck_assert_int_eq(local_of(&s, deps, 4, 0), 1);
    free(deps);
    mpccl_sched_free(&s);
}
END_TEST

/* i -> d -> e all local would give CTA g only e's partition g, but i touches
 * what e wrote at another position: i -> d must not be local. */
START_TEST(transitive_chain)
{
    mpccl_sched_t s;
    mpccl_build_t b;
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    uint32_t e = mpccl_b_recv(&b, 1, R(MPCCL_BUF_TMP, 0), 64, NULL, 0);
    uint32_t d = mpccl_b_recv(&b, 1, R(MPCCL_BUF_TMP, 1000), 64, MPCCL_DEPS(e)); /* disjoint: local */
    mpccl_b_send(&b, 1, R(MPCCL_BUF_TMP, 16), 64, MPCCL_DEPS(d));                 /* overlaps e shifted */
    mpccl_b_send(&b, 1, R(MPCCL_BUF_TMP, 0), 64, MPCCL_DEPS(d));                  /* overlaps e aligned */
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    mpccl_dev_dep_t *deps = convert(&s, MPCCL_INOUT_DISTINCT, 0, NULL);
    ck_assert_int_eq(local_of(&s, deps, 1, 0), 1);
    ck_assert_int_eq(local_of(&s, deps, 2, 0), 0);
    ck_assert_int_eq(local_of(&s, deps, 3, 0), 1);
    free(deps);
    mpccl_sched_free(&s);
}
END_TEST

/* A long local chain over ever new regions turns opaque (bounded work); its
 * dependents then wait for all CTAs, and a new chain starts. */
START_TEST(long_chain_bounded)
{
    mpccl_sched_t s;
    mpccl_build_t b;
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    uint32_t prev = MPCCL_NONE;
    for (int k = 0; k < 100; k++) prev = mpccl_b_recv(&b, 1, R(MPCCL_BUF_TMP, (uint64_t)k * 64), 64, MPCCL_DEPS(prev));
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    mpccl_dev_dep_t *deps = convert(&s, MPCCL_INOUT_DISTINCT, 0, NULL);
    int nonlocal = 0;
    for (uint32_t i = 1; i < s.nsteps; i++) nonlocal += !local_of(&s, deps, i, 0);
    ck_assert_int_ge(nonlocal, 1);
    ck_assert_int_le(nonlocal, 20);
    ck_assert_int_eq(local_of(&s, deps, 1, 0), 1);
    free(deps);
    mpccl_sched_free(&s);
}
END_TEST

/* Regions past 1024, 2048 and 4096 (the region set grows by reallocation): a
 * long local chain copies each dependency's regions into the new step's, so
 * the growth must not move the region being copied.  A prefix of p unrelated
 * steps shifts where each growth lands; the chain's verdicts must not depend on
 * it. */
static mpccl_dev_dep_t *chain_after_prefix(int p, int len, mpccl_sched_t *s)
{
    mpccl_build_t b;
    ck_assert_int_eq(mpccl_build_init(&b, s, 0, 2), MPCCL_OK);
    for (int k = 0; k < p; k++) mpccl_b_recv(&b, 1, R(MPCCL_BUF_OUT, (uint64_t)k * 64), 64, NULL, 0);
    uint32_t prev = MPCCL_NONE;
    for (int k = 0; k < len; k++) prev = mpccl_b_recv(&b, 1, R(MPCCL_BUF_TMP, (uint64_t)k * 64), 64, MPCCL_DEPS(prev));
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    return convert(s, MPCCL_INOUT_DISTINCT, 0, NULL);
}

START_TEST(many_regions)
{
    enum { LEN = 1200 };
    mpccl_sched_t ref;
    mpccl_dev_dep_t *want = chain_after_prefix(0, LEN, &ref);
    int nonlocal = 0;
    for (uint32_t i = 1; i < ref.nsteps; i++) nonlocal += !local_of(&ref, want, i, 0);
    /* bounded chains: some dependencies wait for all CTAs, most do not */
    ck_assert_int_ge(nonlocal, LEN / 20);
    ck_assert_int_le(nonlocal, LEN / 5);
    for (int p = 1; p <= 13; p++) {
        mpccl_sched_t s;
        mpccl_dev_dep_t *got = chain_after_prefix(p, LEN, &s);
        for (uint32_t i = 1; i < ref.nsteps; i++)
            ck_assert_msg(local_of(&s, got, (uint32_t)p + i, 0) == local_of(&ref, want, i, 0),
                          "prefix %d: chain step %u local %d, %d without the prefix", p, i,
                          local_of(&s, got, (uint32_t)p + i, 0), local_of(&ref, want, i, 0));
        free(got);
        mpccl_sched_free(&s);
    }
    free(want);
    mpccl_sched_free(&ref);
}
END_TEST

START_TEST(in_out_relation)
{
    mpccl_sched_t s;
    mpccl_build_t b;
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    uint32_t r = mpccl_b_reduce(&b, R(MPCCL_BUF_TMP, 0), R(MPCCL_BUF_TMP, 0), R(MPCCL_BUF_IN, 40), 50, NULL, 0);
    mpccl_b_recv(&b, 1, R(MPCCL_BUF_OUT, 10), 50, MPCCL_DEPS(r)); /* WAR on IN if IN aliases OUT */
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    mpccl_dev_dep_t *deps = convert(&s, MPCCL_INOUT_UNKNOWN, 0, NULL);
    ck_assert_int_eq(local_of(&s, deps, 1, 0), 0);
    free(deps);
    deps = convert(&s, MPCCL_INOUT_DISTINCT, 0, NULL);
    ck_assert_int_eq(local_of(&s, deps, 1, 0), 1);
    free(deps);
    deps = convert(&s, MPCCL_INOUT_OFFSET, -30, NULL); /* IN 40 is OUT 10: aligned */
    ck_assert_int_eq(local_of(&s, deps, 1, 0), 1);
    free(deps);
    deps = convert(&s, MPCCL_INOUT_OFFSET, -20, NULL); /* IN 40 is OUT 20: shifted */
    ck_assert_int_eq(local_of(&s, deps, 1, 0), 0);
    free(deps);
    s.needs_prescale = 1; /* IN is the scaled copy: never OUT */
    deps = convert(&s, MPCCL_INOUT_UNKNOWN, 0, NULL);
    ck_assert_int_eq(local_of(&s, deps, 1, 0), 1);
    free(deps);
    mpccl_sched_free(&s);
}
END_TEST

/* ---- The rule re-derived exactly, for real plans ------------------------------- */

typedef struct xref {
    int buf;
    int64_t off;
    int w;
} xref_t;

static int refs_of(const mpccl_step_t *t, int alias, int64_t in_off, xref_t *o)
{
    int n = 0;
    const mpccl_ref_t *dst = &t->dst, *s0 = &t->src0, *s1 = &t->src1;
    switch (t->kind) {
    case MPCCL_STEP_SEND: o[n++] = (xref_t){(int)s0->buf, (int64_t)s0->off, 0}; break;
    case MPCCL_STEP_RECV: o[n++] = (xref_t){(int)dst->buf, (int64_t)dst->off, 1}; break;
    case MPCCL_STEP_REDUCE: o[n++] = (xref_t){(int)s1->buf, (int64_t)s1->off, 0}; /* fall through */
    case MPCCL_STEP_COPY:
    case MPCCL_STEP_SCALE:
    case MPCCL_STEP_DIVIDE:
        o[n++] = (xref_t){(int)dst->buf, (int64_t)dst->off, 1};
        o[n++] = (xref_t){(int)s0->buf, (int64_t)s0->off, 0};
        break;
    default: break;
    }
    for (int k = 0; k < n; k++)
        if (alias && o[k].buf == MPCCL_BUF_IN) o[k].buf = MPCCL_BUF_OUT, o[k].off += in_off;
    return n;
}

/* Every step e reachable from d over local edges (d included) must meet step i
 * only at equal positions where one of them writes, with equal counts. */
static void check_local_dep(const mpccl_sched_t *s, const mpccl_dev_dep_t *deps, uint32_t i, uint32_t d, int alias,
                            int64_t in_off, unsigned char *seen, uint32_t *stack, const char *what)
{
    xref_t ri[3], re[3];
    int ni = refs_of(&s->steps[i], alias, in_off, ri);
    uint64_t cnt = s->steps[i].kind == MPCCL_STEP_NOP ? 0 : s->steps[i].count;
    memset(seen, 0, s->nsteps);
    uint32_t sp = 0;
    stack[sp++] = d;
    seen[d] = 1;
    while (sp) {
        uint32_t e = stack[--sp];
        const mpccl_step_t *t = &s->steps[e];
        uint64_t ce = t->kind == MPCCL_STEP_NOP ? 0 : t->count;
        ck_assert_msg(ce == cnt, "%s: step %u local on %u whose local ancestor %u has count %llu vs %llu", what, i, d,
                      e, (unsigned long long)ce, (unsigned long long)cnt);
        int ne = refs_of(t, alias, in_off, re);
        for (int a = 0; a < ni; a++)
            for (int c = 0; c < ne; c++) {
                if (!ri[a].w && !re[c].w) continue;
                if (ri[a].buf != re[c].buf) continue;
                int64_t n = (int64_t)cnt;
                int overlap = ri[a].off < re[c].off + n && re[c].off < ri[a].off + n;
                ck_assert_msg(!overlap || ri[a].off == re[c].off,
                              "%s: step %u local on %u but meets local ancestor %u shifted (%lld vs %lld)", what, i, d,
                              e, (long long)ri[a].off, (long long)re[c].off);
            }
        for (uint32_t j = 0; j < t->ndeps; j++) {
            const mpccl_dev_dep_t *x = &deps[t->dep_first + j];
            if (x->local && !seen[x->step]) seen[x->step] = 1, stack[sp++] = x->step;
        }
    }
}

static const struct {
    mpccl_coll_t coll;
    mpccl_algo_t algo;
} combos[] = {
    {MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_RING},      {MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_RD},
    {MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_HIER},      {MPCCL_COLL_BROADCAST, MPCCL_ALGO_RING},
    {MPCCL_COLL_BROADCAST, MPCCL_ALGO_TREE},      {MPCCL_COLL_REDUCE, MPCCL_ALGO_RING},
    {MPCCL_COLL_REDUCE, MPCCL_ALGO_TREE},         {MPCCL_COLL_ALLGATHER, MPCCL_ALGO_RING},
    {MPCCL_COLL_ALLGATHER, MPCCL_ALGO_DIRECT},    {MPCCL_COLL_REDUCESCATTER, MPCCL_ALGO_RING},
    {MPCCL_COLL_REDUCESCATTER, MPCCL_ALGO_DIRECT}, {MPCCL_COLL_ALLTOALL, MPCCL_ALGO_DIRECT},
    {MPCCL_COLL_GATHER, MPCCL_ALGO_DIRECT},       {MPCCL_COLL_SCATTER, MPCCL_ALGO_DIRECT},
};

static int64_t in_offset(mpccl_coll_t c, int r, int root, int64_t k)
{
    switch (c) {
    case MPCCL_COLL_ALLGATHER: return r * k;
    case MPCCL_COLL_REDUCESCATTER: return -r * k;
    case MPCCL_COLL_GATHER: return root * k;
    case MPCCL_COLL_SCATTER: return -root * k;
    default: return 0;
    }
}

/* n ranks (at most 8) as one node (n odd) or two equal nodes; this rank r. */
typedef struct test_topo {
    int node_of[8], local[8], size[2];
    mpccl_topo_t t;
} test_topo_t;

static void make_topo(test_topo_t *x, int n, int r)
{
    int nn = n % 2 == 0 ? 2 : 1;
    for (int i = 0; i < n; i++) x->node_of[i] = i / (n / nn), x->local[i] = i % (n / nn);
    x->size[0] = x->size[1] = n / nn;
    x->t = (mpccl_topo_t){r, n, nn, x->node_of, x->local, x->size};
}

START_TEST(real_plans_sound)
{
    test_topo_t tt;
    long nlocal = 0, ndeps = 0;
    for (size_t ci = 0; ci < sizeof(combos) / sizeof(combos[0]); ci++)
        for (int n = 2; n <= 8; n += 3) /* 2, 5, 8 */
            for (int inp = 0; inp < 2; inp++) {
                uint64_t counts[] = {1, 7, 1021, 4096 + rnd() % 5000};
                for (size_t k = 0; k < 4; k++) {
                    int r = (int)(rnd() % (uint64_t)n), root = (int)(rnd() % (uint64_t)n);
                    make_topo(&tt, n, r);
                    mpccl_plan_params_t p = {256, {MPCCL_ALGO_AUTO}, 0};
                    p.forced[combos[ci].coll] = combos[ci].algo;
                    int prescale = rnd() % 4 == 0;
                    mpccl_coll_desc_t d = {combos[ci].coll, counts[k], ncclFloat32, MPCCL_OP_SUM, prescale, 0,
                                           root, inp};
                    if ((d.coll == MPCCL_COLL_GATHER || d.coll == MPCCL_COLL_SCATTER) && r != root) d.in_place = 0;
                    mpccl_sched_t s;
                    ck_assert_int_eq(mpccl_plan(&tt.t, &d, &p, &s), MPCCL_OK);
                    int alias = d.in_place && !prescale;
                    int64_t off = in_offset(d.coll, r, root, (int64_t)d.count);
                    mpccl_inout_t io = alias ? MPCCL_INOUT_OFFSET : MPCCL_INOUT_DISTINCT;
                    /* Alternate with the always-safe relation. */
                    if (rnd() % 2) io = MPCCL_INOUT_UNKNOWN;
                    mpccl_dev_dep_t *deps = convert(&s, io, off, NULL);
                    unsigned char *seen = malloc(s.nsteps + 1);
                    uint32_t *stack = malloc((s.nsteps + 1) * sizeof(uint32_t));
                    char what[160];
                    snprintf(what, sizeof(what), "seed %llu %s/%s n=%d rank %d count %llu %s io %d",
                             (unsigned long long)seed, mpccl_coll_name(d.coll), mpccl_algo_name((mpccl_algo_t)s.algo),
                             n, r, (unsigned long long)d.count, inp ? "in-place" : "out-of-place", (int)io);
                    for (uint32_t i = 0; i < s.nsteps; i++)
                        for (uint32_t j = 0; j < s.steps[i].ndeps; j++) {
                            const mpccl_dev_dep_t *x = &deps[s.steps[i].dep_first + j];
                            ndeps++;
                            if (!x->local) continue;
                            nlocal++;
                            /* Unknown placement: IN and OUT may be anything, so
                             * the check folds IN into OUT with every offset the
                             * plan could meet; the in-place one suffices here. */
                            check_local_dep(&s, deps, i, x->step, alias, off, seen, stack, what);
                            if (io == MPCCL_INOUT_UNKNOWN && !prescale) /* prescaled IN is never OUT */
                                check_local_dep(&s, deps, i, x->step, 1, off + 1, seen, stack, what);
                        }
                    free(seen);
                    free(stack);
                    free(deps);
                    mpccl_sched_free(&s);
                }
            }
    printf("real plans: %ld of %ld dependencies local\n", nlocal, ndeps);
    ck_assert_int_gt(nlocal, ndeps / 10); /* the rule is not vacuous */
}
END_TEST

START_TEST(image_layout)
{
    int node_of[4] = {0, 0, 0, 0}, local[4] = {0, 1, 2, 3}, size[1] = {4};
    mpccl_topo_t topo = {1, 4, 1, node_of, local, size};
    mpccl_plan_params_t p = {1024, {MPCCL_ALGO_AUTO}, 0};
    p.forced[MPCCL_COLL_ALLREDUCE] = MPCCL_ALGO_RING;
    mpccl_coll_desc_t d = {MPCCL_COLL_ALLREDUCE, 5000, ncclFloat32, MPCCL_OP_SUM, 0, 0, 0, 0};
    mpccl_sched_t s;
    ck_assert_int_eq(mpccl_plan(&topo, &d, &p, &s), MPCCL_OK);
    void *img = NULL;
    size_t bytes = 0;
    uint32_t nl = 0;
    ck_assert_int_eq(mpccl_gpu_plan_image(&s, MPCCL_INOUT_DISTINCT, 0, 0, 0x10000, &img, &bytes, &nl), MPCCL_ERR_ARG);
    ck_assert_ptr_null(img);
    ck_assert_int_eq(mpccl_gpu_plan_image(&s, MPCCL_INOUT_DISTINCT, 0, MPCCL_ENGINE_MAX_WINDOW + 1, 0x10000, &img,
                                          &bytes, &nl), MPCCL_ERR_ARG);
    uintptr_t base = 0x7f0000000000ull;
    ck_assert_int_eq(mpccl_gpu_plan_image(&s, MPCCL_INOUT_DISTINCT, 0, 8, base, &img, &bytes, &nl), MPCCL_OK);
    const mpccl_dev_plan_t *h = img;
    ck_assert_uint_eq(h->nsteps, s.nsteps);
    ck_assert_uint_eq(h->window, 8);
    ck_assert_uint_gt(nl, 0);
    uintptr_t ptrs[5] = {(uintptr_t)h->steps, (uintptr_t)h->deps, (uintptr_t)h->step_done, (uintptr_t)h->launches,
                         (uintptr_t)h->ctas_finished};
    for (int k = 0; k < 5; k++) {
        ck_assert_uint_ge(ptrs[k], base + sizeof(*h));
        ck_assert_uint_lt(ptrs[k], base + bytes);
        ck_assert_uint_eq(ptrs[k] % 4, 0);
    }
    ck_assert_uint_eq((uintptr_t)h->steps % 16, 0);
    ck_assert_uint_le((uintptr_t)h->step_done + s.nsteps * 4, base + bytes);
    ck_assert_uint_le((uintptr_t)h->deps + s.ndeps * sizeof(mpccl_dev_dep_t), (uintptr_t)h->launches);
    const char *c = img;
    const mpccl_dev_step_t *st = (const void *)(c + ((uintptr_t)h->steps - base));
    for (uint32_t i = 0; i < s.nsteps; i++) ck_assert_uint_eq(st[i].kind, s.steps[i].kind);
    const uint32_t *done = (const void *)(c + ((uintptr_t)h->step_done - base));
    for (uint32_t i = 0; i < s.nsteps; i++) ck_assert_uint_eq(done[i], 0);
    ck_assert_uint_eq(*(const uint32_t *)(c + ((uintptr_t)h->launches - base)), 0);
    ck_assert_uint_eq(*(const uint32_t *)(c + ((uintptr_t)h->ctas_finished - base)), 0);
    free(img);
    mpccl_sched_free(&s);
}
END_TEST

START_TEST(bad_schedule_rejected)
{
    mpccl_sched_t s;
    mpccl_build_t b;
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    uint32_t a = mpccl_b_recv(&b, 1, R(MPCCL_BUF_OUT, 0), 10, NULL, 0);
    mpccl_b_send(&b, 1, R(MPCCL_BUF_OUT, 0), 10, MPCCL_DEPS(a));
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    mpccl_dev_step_t st[2];
    mpccl_dev_dep_t dp[1];
    s.deps[0] = 1; /* depends on itself */
    ck_assert_int_eq(mpccl_gpu_plan_convert(&s, MPCCL_INOUT_DISTINCT, 0, st, dp), MPCCL_ERR_INTERNAL);
    s.deps[0] = 0;
    s.steps[1].kind = 42;
    ck_assert_int_eq(mpccl_gpu_plan_convert(&s, MPCCL_INOUT_DISTINCT, 0, st, dp), MPCCL_ERR_INTERNAL);
    mpccl_sched_free(&s);
}
END_TEST

/* mpccl_dev_partition: the CTAs' ranges tile [0, count) in order, start on 16-byte
 * boundaries, and every CTA with data but the last holds at least min_bytes, so a
 * message smaller than min_bytes is one piece of CTA 0. */
START_TEST(partition_tiles_with_minimum)
{
    static const uint32_t sizes[] = {1, 2, 4, 8};
    static const uint32_t mins[] = {0, 16, 48, 4096, 65536};
    for (int it = 0; it < 4000; it++) {
        uint32_t es = sizes[rnd() % 4], nctas = 1 + (uint32_t)(rnd() % 64), min = mins[rnd() % 5];
        uint64_t count = it < 8 ? (uint64_t)it : rnd() % (it % 3 ? 5000 : 4000000);
        uint64_t next = 0;
        uint32_t with_data = 0;
        for (uint32_t g = 0; g < nctas; g++) {
            uint64_t b, e;
            mpccl_dev_partition(count, es, nctas, min, g, &b, &e);
            ck_assert_uint_le(b, e);
            if (b == e) {
                ck_assert_uint_eq(next, count); /* empty ones only after the data */
                continue;
            }
            ck_assert_uint_eq(b, next);
            ck_assert_uint_eq(b * es % 16, 0);
            if (e < count) ck_assert_uint_ge((e - b) * es, min);
            next = e;
            with_data++;
        }
        ck_assert_uint_eq(next, count);
        if (count * es <= min && count > 0) ck_assert_uint_eq(with_data, 1);
    }
}
END_TEST

/* mpccl_gpu_plan_pieces: the proxy polls a channel until the pieces posted
 * for it moved, so the count must be the engine's, piece for piece: here the
 * engine's cut (try_whole, then try_message: the CTA's partition in pieces of
 * at most slot / es elements, of eager / es in its last four eager pieces'
 * worth or throughout where a slot holds fewer) is replayed step by step and
 * compared, for hand cases and the real plans of every collective at awkward
 * counts, widths, slot and eager sizes, with some peers on the same node
 * (their steps are not the proxy's). */
static void check_pieces(const mpccl_sched_t *s, uint32_t es, const mpccl_gpu_cut_t *c,
                         const mpccl_dev_link_t *links, int nranks, const char *what)
{
    mpccl_proxy_due_t *due = NULL;
    uint32_t n = 0, nctas = c->nctas, min = c->min_bytes, slot = c->slot_bytes, whole = c->whole_bytes;
    uint64_t eager = c->eager_bytes >= es && c->eager_bytes < slot ? c->eager_bytes : 0;
    ck_assert_int_eq(mpccl_gpu_plan_pieces(s, es, c, links, nranks, &due, &n), MPCCL_OK);
    uint32_t *want = calloc((size_t)nranks * nctas * 4, sizeof(*want)); /* tx, rx, whole tx, whole rx */
    ck_assert_ptr_nonnull(want);
    for (uint32_t i = 0; i < s->nsteps; i++) {
        const mpccl_step_t *st = &s->steps[i];
        if ((st->kind != MPCCL_STEP_SEND && st->kind != MPCCL_STEP_RECV) || links[st->peer].kind != MPCCL_LINK_PROXY)
            continue;
        for (uint32_t g = 0; g < nctas; g++) {
            uint64_t b, e, prog = 0, per = slot / es;
            mpccl_dev_partition(st->count, es, nctas, min, g, &b, &e);
            while (prog < e - b) { /* the engine's loop, one piece at a time */
                uint64_t left = e - b - prog, most = per;
                int w = whole && left * es >= whole; /* try_whole takes it */
                if (w) most = MPCCL_PROXY_WHOLE_MAX / es;
                else if (eager && (left * es <= 4 * eager || slot < 4 * eager)) most = eager / es;
                prog += left < most ? left : most;
                want[((size_t)st->peer * nctas + g) * 4 + 2 * w + (st->kind == MPCCL_STEP_RECV)]++;
            }
        }
    }
    uint32_t k = 0;
    for (int r = 0; r < nranks; r++)
        for (uint32_t g = 0; g < nctas; g++) {
            const uint32_t *w = &want[((size_t)r * nctas + g) * 4];
            if (!w[0] && !w[1] && !w[2] && !w[3]) continue;
            ck_assert_msg(k < n, "%s: rank %d CTA %u: %u / %u pieces expected, not listed", what, r, g, w[0], w[1]);
            ck_assert_msg(due[k].rank == r && due[k].chan == g, "%s: entry %u is rank %d CTA %u, expected rank %d "
                          "CTA %u (sorted, no empty entries)", what, k, due[k].rank, due[k].chan, r, g);
            ck_assert_msg(due[k].tx == w[0] && due[k].rx == w[1] && due[k].whole_tx == w[2] && due[k].whole_rx == w[3],
                          "%s: rank %d CTA %u: %u / %u pieces and %u / %u whole, the engine moves %u / %u and "
                          "%u / %u", what, r, g, due[k].tx, due[k].rx, due[k].whole_tx, due[k].whole_rx, w[0], w[1],
                          w[2], w[3]);
            k++;
        }
    ck_assert_msg(k == n, "%s: %u entries, expected %u", what, n, k);
    free(want);
    free(due);
}

/* A real plan of combos[ci] (float sum, count elements) for a random rank
 * of n ranks (returned) and a random root; *d: the call planned. */
static int plan_combo(test_topo_t *tt, size_t ci, int n, uint64_t count, mpccl_coll_desc_t *d, mpccl_sched_t *s)
{
    int r = (int)(rnd() % (uint64_t)n), root = (int)(rnd() % (uint64_t)n);
    make_topo(tt, n, r);
    mpccl_plan_params_t p = {256 << 10, {MPCCL_ALGO_AUTO}, 0};
    p.forced[combos[ci].coll] = combos[ci].algo;
    *d = (mpccl_coll_desc_t){combos[ci].coll, count, ncclFloat32, MPCCL_OP_SUM, 0, 0, root, 0};
    ck_assert_int_eq(mpccl_plan(&tt->t, d, &p, s), MPCCL_OK);
    return r;
}

START_TEST(pieces_as_the_engine_cuts)
{
    mpccl_dev_link_t links[8];
    memset(links, 0, sizeof(links));
    for (int r = 1; r < 8; r++) links[r].kind = MPCCL_LINK_PROXY;
    mpccl_sched_t s;
    mpccl_build_t b;
    mpccl_proxy_due_t *due;
    uint32_t n;
    const mpccl_gpu_cut_t plain = {4, 32768, 65536, 0, 0}, wholes64k = {4, 32768, 65536, 65536, 0};
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    mpccl_b_copy(&b, R(MPCCL_BUF_OUT, 0), R(MPCCL_BUF_IN, 0), 1 << 20, NULL, 0);
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    ck_assert_int_eq(mpccl_gpu_plan_pieces(&s, 4, &plain, links, 2, &due, &n), MPCCL_OK);
    ck_assert_uint_eq(n, 0); /* no message */
    ck_assert_ptr_null(due);
    mpccl_sched_free(&s);
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    mpccl_b_send(&b, 1, R(MPCCL_BUF_IN, 0), 2, NULL, 0);       /* 8 bytes: one piece on CTA 0 */
    mpccl_b_recv(&b, 1, R(MPCCL_BUF_OUT, 0), 100000, NULL, 0); /* 400 KB: 100 KB per CTA, two 64 KB pieces */
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    ck_assert_int_eq(mpccl_gpu_plan_pieces(&s, 4, &plain, links, 2, &due, &n), MPCCL_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert(due[0].rank == 1 && due[0].chan == 0 && due[0].tx == 1 && due[0].rx == 2);
    ck_assert(due[3].rank == 1 && due[3].chan == 3 && due[3].tx == 0 && due[3].rx == 2);
    ck_assert(due[0].whole_tx == 0 && due[0].whole_rx == 0);
    free(due);
    /* whole from 64 KB: each CTA's 100 KB in one transfer, the 8 bytes in a slot */
    ck_assert_int_eq(mpccl_gpu_plan_pieces(&s, 4, &wholes64k, links, 2, &due, &n), MPCCL_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert(due[0].tx == 1 && due[0].rx == 0 && due[0].whole_tx == 0 && due[0].whole_rx == 1);
    ck_assert(due[3].tx == 0 && due[3].rx == 0 && due[3].whole_rx == 1);
    free(due);
    links[1].kind = MPCCL_LINK_NVLINK; /* the same node: nothing for the proxy */
    ck_assert_int_eq(mpccl_gpu_plan_pieces(&s, 4, &wholes64k, links, 2, &due, &n), MPCCL_OK);
    ck_assert_uint_eq(n, 0);
    links[1].kind = MPCCL_LINK_PROXY;
    /* eager: 100000 bytes per CTA in four 32 KB pieces (a 64 KB slot holds fewer
     * than four; or at most four are left), else in one 1 MB slot; whole first */
    static const struct { mpccl_gpu_cut_t c; uint32_t rx, whole_rx; } eager[] = {
        {{4, 32768, 65536, 0, 32768}, 4, 0}, {{4, 32768, 1 << 20, 0, 32768}, 4, 0},
        {{4, 32768, 1 << 20, 0, 16384}, 1, 0}, {{4, 32768, 65536, 65536, 32768}, 0, 1}};
    for (size_t i = 0; i < sizeof(eager) / sizeof(eager[0]); i++) {
        ck_assert_int_eq(mpccl_gpu_plan_pieces(&s, 4, &eager[i].c, links, 2, &due, &n), MPCCL_OK);
        ck_assert_uint_eq(n, 4);
        ck_assert(due[0].tx == 1 && due[3].rx == eager[i].rx && due[3].whole_rx == eager[i].whole_rx);
        free(due);
        check_pieces(&s, 4, &eager[i].c, links, 2, "hand, eager");
    }
    static const mpccl_gpu_cut_t hand[] = {{4, 32768, 65536, 0, 0}, {16, 0, 1024, 0, 0}, {4, 32768, 65536, 65536, 0},
                                           {16, 0, 1024, 4096, 0}, {16, 0, 1024, 0, 16}, {16, 0, 1024, 4096, 256}};
    for (size_t i = 0; i < sizeof(hand) / sizeof(hand[0]); i++) check_pieces(&s, i % 2 ? 1 : 4, &hand[i], links, 2, "hand");
    mpccl_sched_free(&s);
    test_topo_t tt;
    static const uint32_t widths[] = {1, 3, 4, 16};
    static const uint32_t mins[] = {0, 4096, 32768};
    static const uint32_t slots[] = {1024, 65536, 1 << 20};
    static const uint32_t wholes[] = {0, 4096, 100000, 1 << 20}; /* whole messages from (0: none) */
    static const uint32_t eagers[] = {0, 16, 4096, 65520};        /* eager pieces (0: none) */
    for (size_t ci = 0; ci < sizeof(combos) / sizeof(combos[0]); ci++)
        for (int n = 2; n <= 8; n += 3) {
            uint64_t counts[] = {1, 7, 8193, 300000 + rnd() % 5000};
            for (size_t k = 0; k < 4; k++) {
                mpccl_coll_desc_t d;
                int r = plan_combo(&tt, ci, n, counts[k], &d, &s);
                for (int q = 0; q < n; q++) /* some peers on this rank's node */
                    links[q].kind = q == r ? MPCCL_LINK_NONE : rnd() % 3 ? MPCCL_LINK_PROXY : MPCCL_LINK_NVLINK;
                char what[128];
                for (int w = 0; w < 4; w++) {
                    uint32_t G = widths[w], min = mins[rnd() % 3], slot = slots[rnd() % 3];
                    const mpccl_gpu_cut_t c = {G, min, slot, wholes[rnd() % 4], eagers[rnd() % 4]};
                    snprintf(what, sizeof(what), "%s/%s n=%d count %llu, %u CTAs, min %u, slot %u, whole %u, "
                             "eager %u", mpccl_coll_name(d.coll), mpccl_algo_name((mpccl_algo_t)s.algo), n,
                             (unsigned long long)d.count, G, min, slot, c.whole_bytes, c.eager_bytes);
                    check_pieces(&s, 4, &c, links, n, what);
                }
                mpccl_sched_free(&s);
            }
        }
}
END_TEST

/* mpccl_gpu_plan_small: which plans the small-call kernel runs.  It runs a
 * plan on CTA 0 alone and sends each message as one LL piece, so a plan it
 * takes must have all its pieces on CTA 0's channels, one per message (the
 * count the proxy is told, mpccl_gpu_plan_pieces). */
static void check_small_pieces(const mpccl_sched_t *s, uint32_t es, uint32_t G, uint32_t min, uint32_t slot,
                               const mpccl_dev_link_t *links, int nranks, const char *what)
{
    mpccl_proxy_due_t *due = NULL;
    uint32_t n = 0, msgs = 0, pieces = 0;
    const mpccl_gpu_cut_t c = {G, min, slot, 0, 0};
    ck_assert_int_eq(mpccl_gpu_plan_pieces(s, es, &c, links, nranks, &due, &n), MPCCL_OK);
    for (uint32_t i = 0; i < s->nsteps; i++)
        msgs += (s->steps[i].kind == MPCCL_STEP_SEND || s->steps[i].kind == MPCCL_STEP_RECV) && s->steps[i].count;
    for (uint32_t k = 0; k < n; k++) {
        ck_assert_msg(due[k].chan == 0, "%s: pieces on CTA %u", what, due[k].chan);
        ck_assert_msg(due[k].whole_tx == 0 && due[k].whole_rx == 0, "%s: whole messages", what);
        pieces += due[k].tx + due[k].rx;
    }
    ck_assert_msg(pieces == msgs, "%s: %u pieces for %u messages", what, pieces, msgs);
    free(due);
}

START_TEST(small_kernel_plans)
{
    mpccl_dev_link_t links[8];
    static uint64_t word; /* stands for the proxy's words (never read here) */
    memset(links, 0, sizeof(links));
    for (int r = 0; r < 8; r++) {
        links[r].kind = r ? MPCCL_LINK_PROXY : MPCCL_LINK_NONE;
        links[r].tx_word = links[r].rx_word = &word;
    }
    mpccl_sched_t s;
    mpccl_build_t b;
    const char *why = NULL;
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    mpccl_b_send(&b, 1, R(MPCCL_BUF_IN, 0), 2, NULL, 0);
    mpccl_b_recv(&b, 1, R(MPCCL_BUF_OUT, 0), 1024, NULL, 0); /* 4 KB */
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    ck_assert(mpccl_gpu_plan_small(&s, 4, 4, 32768, 4096, 64, links, 2, &why));
    ck_assert_ptr_null(why);
    check_small_pieces(&s, 4, 4, 32768, 65536, links, 2, "hand");
    ck_assert(!mpccl_gpu_plan_small(&s, 4, 4, 32768, 4095, 64, links, 2, &why)); /* 4 KB is not one LL piece */
    ck_assert_str_eq(why, "a message larger than an LL piece");
    ck_assert(!mpccl_gpu_plan_small(&s, 4, 4, 32768, 0, 64, links, 2, &why)); /* GPU-direct: no LL pieces */
    ck_assert_str_eq(why, "no LL pieces");
    ck_assert(!mpccl_gpu_plan_small(&s, 4, 4, 1024, 4096, 64, links, 2, &why)); /* 4 KB over 4 CTAs */
    ck_assert_str_eq(why, "a step spans several CTAs");
    ck_assert(mpccl_gpu_plan_small(&s, 4, 1, 0, 4096, 64, links, 2, &why)); /* one CTA holds any step */
    ck_assert(!mpccl_gpu_plan_small(&s, 4, 4, 32768, 4096, 1, links, 2, &why));
    ck_assert_str_eq(why, "window smaller than the plan");
    links[1].kind = MPCCL_LINK_NVLINK;
    ck_assert(!mpccl_gpu_plan_small(&s, 4, 4, 32768, 4096, 64, links, 2, &why));
    ck_assert_str_eq(why, "a message inside the node");
    links[1].kind = MPCCL_LINK_PROXY;
    links[1].rx_word = NULL;
    ck_assert(!mpccl_gpu_plan_small(&s, 4, 4, 32768, 4096, 64, links, 2, &why));
    ck_assert_str_eq(why, "a link without the proxy's words");
    links[1].rx_word = &word;
    mpccl_sched_free(&s);
    /* no message at all: the engine runs it (nothing between nodes to speed up) */
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    mpccl_b_copy(&b, R(MPCCL_BUF_OUT, 0), R(MPCCL_BUF_IN, 0), 16, NULL, 0);
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    ck_assert(!mpccl_gpu_plan_small(&s, 4, 4, 32768, 4096, 64, links, 2, &why));
    mpccl_sched_free(&s);
    /* Real plans between nodes at small counts: every plan it takes has its
     * pieces on CTA 0, one per message; plans of a few ranks are taken. */
    test_topo_t tt;
    for (size_t ci = 0; ci < sizeof(combos) / sizeof(combos[0]); ci++)
        for (int n = 2; n <= 8; n += 2) {
            static const uint64_t counts[] = {1, 3, 16, 257, 1024};
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                mpccl_coll_desc_t d;
                int r = plan_combo(&tt, ci, n, counts[k], &d, &s);
                for (int q = 0; q < n; q++) links[q].kind = q == r ? MPCCL_LINK_NONE : MPCCL_LINK_PROXY;
                char what[128];
                snprintf(what, sizeof(what), "%s/%s n=%d count %llu", mpccl_coll_name(d.coll),
                         mpccl_algo_name((mpccl_algo_t)s.algo), n, (unsigned long long)d.count);
                int small = mpccl_gpu_plan_small(&s, 4, 16, 32768, 4096, 64, links, n, &why);
                if (small) check_small_pieces(&s, 4, 16, 32768, 65536, links, n, what);
                if (n == 2 && d.count <= 16 && s.nsteps > 0)
                    ck_assert_msg(small || s.nsteps > MPCCL_ENGINE_SMALL_MAX_STEPS || !strcmp(why, "no message to another node"),
                                  "%s: not taken (%s)", what, why);
                mpccl_sched_free(&s);
            }
        }
}
END_TEST

/* mpccl_gpu_small_image: what the small-call kernel reads instead of looking
 * it up -- dependency masks, the earlier messages of each channel, and the
 * channel's pointers on CTA 0. */
START_TEST(small_image_fields)
{
    static char tx_slots[64], rx_slots[64];
    static uint64_t tx_word[8], rx_word[8];
    static uint32_t tx_ack[4], rx_ack[4], seq[2][3 * 4], acked[3 * 4], clean[3 * 4 * 8];
    mpccl_dev_link_t links[3];
    memset(links, 0, sizeof(links));
    links[2].kind = MPCCL_LINK_PROXY;
    links[2].tx_slots = tx_slots;
    links[2].rx_slots = rx_slots;
    links[2].tx_word = tx_word;
    links[2].rx_word = rx_word;
    links[2].tx_ack = tx_ack;
    links[2].rx_ack = rx_ack;
    mpccl_dev_comm_t hdr;
    memset(&hdr, 0, sizeof(hdr));
    hdr.nctas = 4;
    hdr.nslots = 8;
    hdr.tx_seq = seq[0];
    hdr.rx_seq = seq[1];
    hdr.tx_acked = acked;
    hdr.rx_clean = clean;
    mpccl_sched_t s;
    mpccl_build_t b;
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 3), MPCCL_OK);
    uint32_t s0 = mpccl_b_send(&b, 2, R(MPCCL_BUF_IN, 0), 2, NULL, 0);
    uint32_t r1 = mpccl_b_recv(&b, 2, R(MPCCL_BUF_TMP, 8), 16, NULL, 0);
    uint32_t s3 = mpccl_b_send(&b, 2, R(MPCCL_BUF_IN, 2), 3, &s0, 1);
    uint32_t deps[2] = {r1, s3};
    mpccl_b_reduce(&b, R(MPCCL_BUF_OUT, 1), R(MPCCL_BUF_IN, 0), R(MPCCL_BUF_TMP, 8), 16, deps, 2);
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    ck_assert_uint_eq(s.nsteps, 4); /* (the builder drops steps without data) */
    mpccl_dev_small_step_t d[4];
    mpccl_gpu_small_image(&s, links, &hdr, d);
    ck_assert_uint_eq(d[0].kind, MPCCL_STEP_SEND);
    ck_assert(d[0].slots == tx_slots && d[0].word == tx_word && d[0].ack == tx_ack);
    ck_assert(d[0].seq == seq[0] + 2 * 4 && d[0].known == acked + 2 * 4); /* peer 2's channel of CTA 0 */
    ck_assert(d[1].slots == rx_slots && d[1].word == rx_word && d[1].ack == rx_ack);
    ck_assert(d[1].seq == seq[1] + 2 * 4 && d[1].known == clean + 2 * 4 * 8);
    ck_assert_uint_eq(d[1].dst_buf, MPCCL_BUF_TMP);
    ck_assert_uint_eq(d[1].dst_off, 8);
    ck_assert_uint_eq(d[0].before, 0);
    ck_assert_uint_eq(d[1].before, 0);    /* the other direction */
    ck_assert_uint_eq(d[2].before, 1u); /* step 0 */
    ck_assert_uint_eq(d[2].deps, 1u);
    ck_assert_uint_eq(d[3].deps, (1u << 1) | (1u << 2));
    ck_assert_uint_eq(d[3].kind, MPCCL_STEP_REDUCE);
    ck_assert(d[3].slots == NULL && d[3].seq == NULL);
    ck_assert_uint_eq(d[3].src1_buf, MPCCL_BUF_TMP);
    ck_assert_uint_eq(d[3].count, 16);
    mpccl_sched_free(&s);
}
END_TEST

int main(void)
{
    const char *e = getenv("MPCCL_TEST_SEED");
    seed = e ? strtoull(e, NULL, 0) : 20261122;
    rng = seed * 0x9e3779b97f4a7c15ull + 1;
    printf("test_gpu_plan: seed %llu (set MPCCL_TEST_SEED to repeat another)\n", (unsigned long long)seed);
    Suite *suite = suite_create("gpu_plan");
    TCase *tc = tcase_create("convert");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fields_copied);
    tcase_add_test(tc, count_and_alignment);
    tcase_add_test(tc, transitive_chain);
    tcase_add_test(tc, long_chain_bounded);
    tcase_add_test(tc, many_regions);
    tcase_add_test(tc, in_out_relation);
    tcase_add_test(tc, real_plans_sound);
    tcase_add_test(tc, image_layout);
    tcase_add_test(tc, bad_schedule_rejected);
    tcase_add_test(tc, partition_tiles_with_minimum);
    tcase_add_test(tc, pieces_as_the_engine_cuts);
    tcase_add_test(tc, small_kernel_plans);
    tcase_add_test(tc, small_image_fields);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
