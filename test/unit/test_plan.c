/* The planner: cost model choices, MPCCL_ALGO / NCCL_ALGO parsing (aliases,
 * per-collective clauses, exclusions, bad names), fallback of a forced algorithm
 * that cannot serve a call, argument errors, and the schedule builder. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"

#define BIT(a) (1u << (a))

/* nnodes nodes of `per` ranks each (blocks), or one rank fewer on the last node
 * when unequal. */
typedef struct topo_buf {
    int node_of[256], local[256], size[64];
    mpccl_topo_t t;
} topo_buf_t;

static mpccl_topo_t *make_topo(topo_buf_t *b, int nnodes, int per, int unequal, int rank)
{
    int n = 0;
    for (int node = 0; node < nnodes; node++) {
        int sz = per - (unequal && node == nnodes - 1);
        b->size[node] = sz;
        for (int l = 0; l < sz; l++) b->node_of[n] = node, b->local[n++] = l;
    }
    b->t = (mpccl_topo_t){rank, n, nnodes, b->node_of, b->local, b->size};
    return &b->t;
}

static mpccl_coll_desc_t desc(mpccl_coll_t c, uint64_t count)
{
    return (mpccl_coll_desc_t){c, count, ncclFloat32, MPCCL_OP_SUM, 0, 0, 0, 0};
}

static mpccl_algo_t model(const mpccl_topo_t *t, mpccl_coll_t c, uint64_t count)
{
    mpccl_coll_desc_t d = desc(c, count);
    return mpccl_model_choice(t, &d, mpccl_algo_valid(c), 512 * 1024);
}

START_TEST(model_latency_small_bandwidth_large)
{
    topo_buf_t b;
    mpccl_topo_t *one = make_topo(&b, 1, 8, 0, 0);
    uint64_t small = 1, large = 64u << 20; /* elements: 4 B and 256 MiB */
    ck_assert_int_eq(model(one, MPCCL_COLL_ALLREDUCE, small), MPCCL_ALGO_RD);
    ck_assert_int_eq(model(one, MPCCL_COLL_ALLREDUCE, large), MPCCL_ALGO_RING);
    ck_assert_int_eq(model(one, MPCCL_COLL_BROADCAST, small), MPCCL_ALGO_TREE);
    ck_assert_int_eq(model(one, MPCCL_COLL_BROADCAST, large), MPCCL_ALGO_RING);
    ck_assert_int_eq(model(one, MPCCL_COLL_REDUCE, small), MPCCL_ALGO_TREE);
    ck_assert_int_eq(model(one, MPCCL_COLL_REDUCE, large), MPCCL_ALGO_RING);
    ck_assert_int_eq(model(one, MPCCL_COLL_ALLTOALL, large), MPCCL_ALGO_DIRECT);
    /* Several equal nodes: hierarchical at large sizes, still RD at small ones. */
    mpccl_topo_t *two = make_topo(&b, 2, 8, 0, 5);
    ck_assert_int_eq(model(two, MPCCL_COLL_ALLREDUCE, small), MPCCL_ALGO_RD);
    ck_assert_int_eq(model(two, MPCCL_COLL_ALLREDUCE, large), MPCCL_ALGO_HIER);
    mpccl_topo_t *four = make_topo(&b, 4, 4, 0, 5);
    ck_assert_int_ne(model(four, MPCCL_COLL_ALLREDUCE, small), MPCCL_ALGO_RING); /* RD or RD between nodes */
    ck_assert_int_eq(model(four, MPCCL_COLL_ALLREDUCE, large), MPCCL_ALGO_HIER);
    ck_assert_int_eq(model(four, MPCCL_COLL_ALLGATHER, small), MPCCL_ALGO_DIRECT);
    /* Unequal nodes cannot use HIER. */
    mpccl_topo_t *uneq = make_topo(&b, 3, 4, 1, 0);
    ck_assert_int_eq(model(uneq, MPCCL_COLL_ALLREDUCE, large), MPCCL_ALGO_RING);
    /* The model only picks among the allowed ones. */
    mpccl_coll_desc_t d = desc(MPCCL_COLL_ALLREDUCE, large);
    four = make_topo(&b, 4, 4, 0, 5);
    ck_assert_int_eq(mpccl_model_choice(four, &d, BIT(MPCCL_ALGO_RD) | BIT(MPCCL_ALGO_RING), 512 * 1024),
                     MPCCL_ALGO_RING);
    ck_assert_int_eq(mpccl_model_choice(four, &d, BIT(MPCCL_ALGO_TREE), 512 * 1024), MPCCL_ALGO_AUTO);
    /* Costs grow with size. */
    for (int a = MPCCL_ALGO_RING; a <= MPCCL_ALGO_HIER; a++) {
        mpccl_coll_desc_t d1 = desc(MPCCL_COLL_ALLREDUCE, 1000), d2 = desc(MPCCL_COLL_ALLREDUCE, 1000000);
        if (!(mpccl_algo_valid(MPCCL_COLL_ALLREDUCE) & BIT(a))) continue;
        ck_assert(mpccl_cost(four, &d1, (mpccl_algo_t)a, 1 << 19) < mpccl_cost(four, &d2, (mpccl_algo_t)a, 1 << 19));
    }
}
END_TEST

typedef struct parsed {
    mpccl_algo_t f[MPCCL_NUM_COLLS];
    uint32_t m[MPCCL_NUM_COLLS];
} parsed_t;

static parsed_t parse(const char *s)
{
    parsed_t p;
    mpccl_algo_parse(s, p.f, p.m);
    return p;
}

/* Regression: the model once costed "direct" with the calling rank's own node
 * size, so on unequal nodes ranks chose different algorithms and hung. Every rank
 * must choose the same algorithm for every call. */
START_TEST(model_choice_same_on_every_rank)
{
    const uint64_t counts[] = {0, 1, 7, 1021, 65537, 1u << 20, 64u << 20};
    const int layouts[][3] = {{2, 2, 1}, {2, 3, 1}, {3, 4, 1}, {2, 8, 1}, {4, 4, 0}, {1, 5, 0}};
    for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
        topo_buf_t b0, br;
        mpccl_topo_t *t0 = make_topo(&b0, layouts[l][0], layouts[l][1], layouts[l][2], 0);
        for (int c = 0; c < MPCCL_NUM_COLLS; c++) {
            if (c == MPCCL_COLL_SEND || c == MPCCL_COLL_RECV) continue;
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                mpccl_algo_t a0 = model(t0, (mpccl_coll_t)c, counts[k]);
                for (int r = 1; r < t0->nranks; r++) {
                    mpccl_topo_t *tr = make_topo(&br, layouts[l][0], layouts[l][1], layouts[l][2], r);
                    ck_assert_msg(model(tr, (mpccl_coll_t)c, counts[k]) == a0,
                                  "layout %zu coll %d count %llu: rank %d chose %d, rank 0 chose %d", l, c,
                                  (unsigned long long)counts[k], r, model(tr, (mpccl_coll_t)c, counts[k]), a0);
                }
            }
        }
    }
}
END_TEST

/* The GPU engine keeps only a window of steps in progress per CTA.  Direct
 * exchanges must complete under that restriction for any rank count: each rank
 * may work only on its first W unfinished messages, and a message moves only
 * when the sender and the receiver both have it in their windows. */
#define WIN_RANKS 70
#define WIN 4
typedef struct { int peer, is_send; } msg_t;

static int windowed_run_completes(int n, mpccl_coll_t c)
{
    static msg_t msgs[WIN_RANKS][2 * WIN_RANKS];
    int nmsg[WIN_RANKS] = {0}, head[WIN_RANKS] = {0};
    static char done[WIN_RANKS][2 * WIN_RANKS];
    topo_buf_t tb;
    mpccl_plan_params_t p = {1 << 20, {MPCCL_ALGO_AUTO}, 0};
    p.forced[c] = MPCCL_ALGO_DIRECT;
    for (int r = 0; r < n; r++) {
        mpccl_sched_t s;
        mpccl_coll_desc_t d = desc(c, 1000);
        ck_assert_int_eq(mpccl_plan(make_topo(&tb, 1, n, 0, r), &d, &p, &s), MPCCL_OK);
        ck_assert_int_eq(s.algo, MPCCL_ALGO_DIRECT);
        for (uint32_t i = 0; i < s.nsteps; i++)
            if (s.steps[i].kind == MPCCL_STEP_SEND || s.steps[i].kind == MPCCL_STEP_RECV) {
                ck_assert_int_lt(nmsg[r], 2 * WIN_RANKS);
                msgs[r][nmsg[r]++] = (msg_t){s.steps[i].peer, s.steps[i].kind == MPCCL_STEP_SEND};
            }
        mpccl_sched_free(&s);
        memset(done[r], 0, sizeof(done[r]));
    }
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < n; r++)
            for (int k = head[r]; k < nmsg[r] && k < head[r] + WIN; k++) {
                if (done[r][k] || !msgs[r][k].is_send) continue;
                int q = msgs[r][k].peer; /* one message per pair here: find q's receive from r */
                for (int j = head[q]; j < nmsg[q] && j < head[q] + WIN; j++)
                    if (!done[q][j] && !msgs[q][j].is_send && msgs[q][j].peer == r) {
                        done[r][k] = done[q][j] = 1;
                        progress = 1;
                        break;
                    }
            }
        for (int r = 0; r < n; r++)
            while (head[r] < nmsg[r] && done[r][head[r]]) head[r]++;
    }
    for (int r = 0; r < n; r++)
        if (head[r] < nmsg[r]) return 0;
    return 1;
}

START_TEST(direct_exchanges_complete_in_a_small_window)
{
    const mpccl_coll_t colls[] = {MPCCL_COLL_ALLTOALL, MPCCL_COLL_ALLGATHER, MPCCL_COLL_REDUCESCATTER};
    const int sizes[] = {2, 3, 8, 33, WIN_RANKS};
    for (size_t c = 0; c < sizeof(colls) / sizeof(colls[0]); c++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            ck_assert_msg(windowed_run_completes(sizes[k], colls[c]), "%s on %d ranks stalls in a window of %d",
                          mpccl_coll_name(colls[c]), sizes[k], WIN);
}
END_TEST

START_TEST(parse_names_and_aliases)
{
    parsed_t p = parse("ring");
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLREDUCE], MPCCL_ALGO_RING);
    ck_assert_int_eq(p.f[MPCCL_COLL_BROADCAST], MPCCL_ALGO_RING);
    ck_assert_int_eq(p.f[MPCCL_COLL_REDUCESCATTER], MPCCL_ALGO_RING);
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLTOALL], MPCCL_ALGO_AUTO); /* ring means nothing there */
    ck_assert_uint_eq(p.m[MPCCL_COLL_ALLTOALL], BIT(MPCCL_ALGO_DIRECT));
    /* NCCL spelling: Tree is RD for allreduce, the binomial tree for bcast/reduce. */
    p = parse("Tree");
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLREDUCE], MPCCL_ALGO_RD);
    ck_assert_int_eq(p.f[MPCCL_COLL_BROADCAST], MPCCL_ALGO_TREE);
    ck_assert_int_eq(p.f[MPCCL_COLL_REDUCE], MPCCL_ALGO_TREE);
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLGATHER], MPCCL_ALGO_AUTO);
    p = parse(" HIER ");
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLREDUCE], MPCCL_ALGO_HIER);
    /* NCCL's list: the model picks among ring and tree. */
    p = parse("Ring,Tree");
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLREDUCE], MPCCL_ALGO_AUTO);
    ck_assert_uint_eq(p.m[MPCCL_COLL_ALLREDUCE], BIT(MPCCL_ALGO_RING) | BIT(MPCCL_ALGO_RD));
    /* Hardware algorithms we do not have, unknown names: warnings, no effect. */
    const char *ignored[] = {"NVLS", "CollnetDirect", "bogus", "", NULL, "pat,nvlstree"};
    for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++) {
        p = parse(ignored[i]);
        for (int c = 0; c < MPCCL_NUM_COLLS; c++) {
            ck_assert_int_eq(p.f[c], MPCCL_ALGO_AUTO);
            ck_assert_uint_eq(p.m[c], mpccl_algo_valid((mpccl_coll_t)c));
        }
    }
    p = parse("nvls,ring"); /* the good name still counts */
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLREDUCE], MPCCL_ALGO_RING);
}
END_TEST

START_TEST(parse_per_collective_and_exclusion)
{
    parsed_t p = parse("allreduce:ring,broadcast:tree");
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLREDUCE], MPCCL_ALGO_RING);
    ck_assert_int_eq(p.f[MPCCL_COLL_BROADCAST], MPCCL_ALGO_TREE);
    ck_assert_int_eq(p.f[MPCCL_COLL_REDUCE], MPCCL_ALGO_AUTO);
    p = parse("AllReduce:tree,ring;allgather:direct");
    ck_assert_uint_eq(p.m[MPCCL_COLL_ALLREDUCE], BIT(MPCCL_ALGO_RING) | BIT(MPCCL_ALGO_RD));
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLGATHER], MPCCL_ALGO_DIRECT);
    p = parse("^ring");
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLREDUCE], MPCCL_ALGO_AUTO);
    ck_assert_uint_eq(p.m[MPCCL_COLL_ALLREDUCE], BIT(MPCCL_ALGO_RD) | BIT(MPCCL_ALGO_HIER));
    ck_assert_int_eq(p.f[MPCCL_COLL_BROADCAST], MPCCL_ALGO_TREE);
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLGATHER], MPCCL_ALGO_DIRECT);
    /* A leading ^ excludes the whole list, as in NCCL. */
    p = parse("^ring,tree");
    ck_assert_int_eq(p.f[MPCCL_COLL_ALLREDUCE], MPCCL_ALGO_HIER);
    ck_assert_uint_eq(p.m[MPCCL_COLL_BROADCAST], mpccl_algo_valid(MPCCL_COLL_BROADCAST)); /* all excluded: ignored */
    p = parse("allreduce:^hier;broadcast:ring");
    ck_assert_uint_eq(p.m[MPCCL_COLL_ALLREDUCE], BIT(MPCCL_ALGO_RING) | BIT(MPCCL_ALGO_RD));
    ck_assert_int_eq(p.f[MPCCL_COLL_BROADCAST], MPCCL_ALGO_RING);
    ck_assert_int_eq(p.f[MPCCL_COLL_REDUCE], MPCCL_ALGO_AUTO);
    /* Bad collective names and algorithms that do not apply. */
    p = parse("foo:ring;allgather:hier");
    for (int c = 0; c < MPCCL_NUM_COLLS; c++) ck_assert_int_eq(p.f[c], MPCCL_ALGO_AUTO);
}
END_TEST

/* main() sets NCCL_ALGO and MPCCL_CHUNK_BYTES before the settings are read. */
START_TEST(params_from_env)
{
    mpccl_plan_params_t p;
    ck_assert_int_eq(mpccl_plan_params_init(&p), MPCCL_OK);
    ck_assert_uint_eq(p.chunk_bytes, 1u << 20);
    ck_assert_int_eq(p.split_shares, 1); /* host plans split mid-size shares */
    ck_assert_int_eq(p.forced[MPCCL_COLL_ALLREDUCE], MPCCL_ALGO_RING);
    ck_assert_int_eq(p.forced[MPCCL_COLL_BROADCAST], MPCCL_ALGO_TREE);
    ck_assert_int_eq(p.forced[MPCCL_COLL_ALLGATHER], MPCCL_ALGO_AUTO);
    /* The env choice reaches the plan. */
    topo_buf_t b;
    mpccl_coll_desc_t d = desc(MPCCL_COLL_ALLREDUCE, 1);
    mpccl_sched_t s;
    ck_assert_int_eq(mpccl_plan(make_topo(&b, 1, 4, 0, 2), &d, &p, &s), MPCCL_OK);
    ck_assert_int_eq(s.algo, MPCCL_ALGO_RING);
    mpccl_sched_free(&s);
}
END_TEST

START_TEST(forced_fallback)
{
    topo_buf_t b;
    mpccl_plan_params_t p = {4096, {MPCCL_ALGO_AUTO}, 0};
    mpccl_sched_t s;
    mpccl_coll_desc_t d = desc(MPCCL_COLL_ALLREDUCE, 1000);
    p.forced[MPCCL_COLL_ALLREDUCE] = MPCCL_ALGO_HIER;
    /* One node, then unequal nodes: HIER cannot run, the model decides. */
    for (int k = 0; k < 2; k++) {
        mpccl_topo_t *t = k ? make_topo(&b, 3, 3, 1, 1) : make_topo(&b, 1, 6, 0, 1);
        ck_assert_int_eq(mpccl_plan(t, &d, &p, &s), MPCCL_OK);
        ck_assert_int_ne(s.algo, MPCCL_ALGO_HIER);
        ck_assert_int_eq(s.algo, mpccl_model_choice(t, &d, mpccl_algo_valid(d.coll), p.chunk_bytes));
        mpccl_sched_free(&s);
    }
    ck_assert_int_eq(mpccl_plan(make_topo(&b, 3, 3, 0, 1), &d, &p, &s), MPCCL_OK);
    ck_assert_int_eq(s.algo, MPCCL_ALGO_HIER);
    mpccl_sched_free(&s);
    /* An algorithm the collective does not have. */
    d = desc(MPCCL_COLL_ALLTOALL, 10);
    p.forced[MPCCL_COLL_ALLTOALL] = MPCCL_ALGO_TREE;
    ck_assert_int_eq(mpccl_plan(make_topo(&b, 1, 4, 0, 0), &d, &p, &s), MPCCL_OK);
    ck_assert_int_eq(s.algo, MPCCL_ALGO_DIRECT);
    mpccl_sched_free(&s);
}
END_TEST

START_TEST(plan_arguments_and_trivial_cases)
{
    topo_buf_t b;
    mpccl_plan_params_t p = {4096, {MPCCL_ALGO_AUTO}, 0};
    mpccl_sched_t s;
    mpccl_coll_desc_t d = desc(MPCCL_COLL_BROADCAST, 10);
    d.root = 4;
    ck_assert_int_eq(mpccl_plan(make_topo(&b, 1, 4, 0, 0), &d, &p, &s), MPCCL_ERR_ARG);
    d.root = -1;
    ck_assert_int_eq(mpccl_plan(make_topo(&b, 1, 4, 0, 0), &d, &p, &s), MPCCL_ERR_ARG);
    d = desc(MPCCL_COLL_ALLREDUCE, 10);
    d.dt = (ncclDataType_t)99;
    ck_assert_int_eq(mpccl_plan(make_topo(&b, 1, 4, 0, 0), &d, &p, &s), MPCCL_ERR_ARG);
    /* count 0: a valid, empty schedule for every collective and algorithm. */
    for (int c = 0; c < MPCCL_NUM_COLLS; c++)
        for (int a = 1; a < MPCCL_NUM_ALGOS; a++) {
            if (!(mpccl_algo_valid((mpccl_coll_t)c) & BIT(a))) continue;
            d = desc((mpccl_coll_t)c, 0);
            d.root = 1;
            p.forced[c] = (mpccl_algo_t)a;
            ck_assert_int_eq(mpccl_plan(make_topo(&b, 2, 2, 0, 3), &d, &p, &s), MPCCL_OK);
            ck_assert_uint_eq(s.nsteps, 0);
            ck_assert_uint_eq(s.tmp_elems, 0);
            mpccl_sched_free(&s);
        }
    /* Huge counts: chunks grow so that schedules stay short. */
    for (int c = MPCCL_COLL_ALLREDUCE; c <= MPCCL_COLL_REDUCE; c++) {
        d = desc((mpccl_coll_t)c, 1ull << 36);
        p.forced[c] = MPCCL_ALGO_RING;
        ck_assert_int_eq(mpccl_plan(make_topo(&b, 1, 8, 0, 3), &d, &p, &s), MPCCL_OK);
        ck_assert_uint_lt(s.nsteps, 20000);
        ck_assert_uint_gt(s.nsteps, 1000); /* still pipelined */
        mpccl_sched_free(&s);
    }
    /* prescale: the executor must scale exactly the input the schedule reads. */
    d = desc(MPCCL_COLL_REDUCESCATTER, 10);
    d.prescale = 1;
    ck_assert_int_eq(mpccl_plan(make_topo(&b, 1, 3, 0, 0), &d, &p, &s), MPCCL_OK);
    ck_assert_int_eq(s.needs_prescale, 1);
    ck_assert_uint_eq(s.in_elems, 30);
    mpccl_sched_free(&s);
}
END_TEST

START_TEST(builder_elision_joins_and_validation)
{
    mpccl_sched_t s;
    mpccl_build_t b;
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 3), MPCCL_OK);
    mpccl_ref_t in = mpccl_ref(MPCCL_BUF_IN, 0), out = mpccl_ref(MPCCL_BUF_OUT, 0);
    uint32_t a = mpccl_b_send(&b, 1, in, 4, NULL, 0);
    uint32_t c = mpccl_b_recv(&b, 2, out, 4, NULL, 0);
    ck_assert_uint_eq(a, 0);
    ck_assert_uint_eq(c, 1);
    /* Empty steps vanish but keep their orderings. */
    ck_assert_uint_eq(mpccl_b_send(&b, 1, in, 0, MPCCL_DEPS(a)), a);
    ck_assert_uint_eq(mpccl_b_send(&b, 1, in, 0, NULL, 0), MPCCL_NONE);
    uint32_t j = mpccl_b_copy(&b, out, out, 4, MPCCL_DEPS(a, c));
    ck_assert_uint_eq(s.steps[j].kind, MPCCL_STEP_NOP);
    ck_assert_uint_eq(s.steps[j].ndeps, 2);
    uint32_t second = mpccl_b_send(&b, 1, in, 4, MPCCL_DEPS(j, MPCCL_NONE, j));
    ck_assert_uint_eq(s.steps[second].msg, 1); /* second message to rank 1 */
    ck_assert_uint_eq(s.steps[second].ndeps, 1);
    ck_assert_uint_eq(s.steps[c].msg, 0);
    ck_assert_uint_eq(mpccl_b_join_since(&b, 0), second); /* the one sink */
    uint32_t other = mpccl_b_recv(&b, 1, out, 4, NULL, 0);
    uint32_t sink = mpccl_b_join_since(&b, 0);
    ck_assert_uint_eq(s.steps[sink].kind, MPCCL_STEP_NOP);
    ck_assert_uint_eq(s.steps[sink].ndeps, 2);
    ck_assert_uint_eq(s.deps[s.steps[sink].dep_first + 1], other);
    s.in_elems = 4;
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    ck_assert_int_eq(mpccl_sched_validate(&s, 0, 3, 4, 0), MPCCL_OK);
    ck_assert_int_eq(mpccl_sched_validate(&s, 0, 3, 3, 0), MPCCL_ERR_INTERNAL); /* OUT too small */
    s.deps[s.steps[second].dep_first] = second;                                  /* depends on itself */
    ck_assert_int_eq(mpccl_sched_validate(&s, 0, 3, 4, 0), MPCCL_ERR_INTERNAL);
    s.deps[s.steps[second].dep_first] = j;
    s.steps[second].msg = 0; /* two messages numbered 0 */
    ck_assert_int_eq(mpccl_sched_validate(&s, 0, 3, 4, 0), MPCCL_ERR_INTERNAL);
    mpccl_sched_free(&s);
    /* Self-messages are only for p2p. */
    ck_assert_int_eq(mpccl_build_init(&b, &s, 1, 3), MPCCL_OK);
    mpccl_b_send(&b, 1, in, 4, NULL, 0);
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    s.in_elems = 4;
    ck_assert_int_eq(mpccl_sched_validate(&s, 1, 3, 0, 0), MPCCL_ERR_INTERNAL);
    ck_assert_int_eq(mpccl_sched_validate(&s, 1, 3, 0, 1), MPCCL_OK);
    mpccl_sched_free(&s);
    /* Pools hand out slots round robin with the last user as dependency. */
    ck_assert_int_eq(mpccl_build_init(&b, &s, 0, 2), MPCCL_OK);
    mpccl_pool_t pool;
    mpccl_pool_init(&b, &pool, 2, 10);
    mpccl_ref_t r0, r1, r2;
    uint32_t w0, w1, w2;
    uint32_t i0 = mpccl_pool_get(&pool, &r0, &w0), i1 = mpccl_pool_get(&pool, &r1, &w1);
    ck_assert_uint_ne(r0.off, r1.off);
    mpccl_pool_put(&pool, i0, 7);
    mpccl_pool_put(&pool, i1, 8);
    mpccl_pool_get(&pool, &r2, &w2);
    ck_assert_uint_eq(r2.off, r0.off);
    ck_assert_uint_eq(w0, MPCCL_NONE);
    ck_assert_uint_eq(w2, 7);
    ck_assert_int_eq(mpccl_build_finish(&b), MPCCL_OK);
    ck_assert_uint_ge(s.tmp_elems, 20);
    mpccl_sched_free(&s);
}
END_TEST

START_TEST(names)
{
    ck_assert_str_eq(mpccl_algo_name(MPCCL_ALGO_RD), "rd");
    ck_assert_str_eq(mpccl_algo_name((mpccl_algo_t)42), "invalid");
    ck_assert_str_eq(mpccl_coll_name(MPCCL_COLL_REDUCESCATTER), "reducescatter");
    ck_assert_str_eq(mpccl_coll_name((mpccl_coll_t)-1), "invalid");
}
END_TEST

int main(void)
{
    /* Read once by the settings table: set before anything reads it. */
    setenv("NCCL_ALGO", "allreduce:ring;broadcast:tree", 1);
    setenv("MPCCL_CHUNK_BYTES", "1m", 1);
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, model_latency_small_bandwidth_large);
    tcase_add_test(tc, model_choice_same_on_every_rank);
    tcase_add_test(tc, direct_exchanges_complete_in_a_small_window);
    tcase_add_test(tc, parse_names_and_aliases);
    tcase_add_test(tc, parse_per_collective_and_exclusion);
    tcase_add_test(tc, params_from_env);
    tcase_add_test(tc, forced_fallback);
    tcase_add_test(tc, plan_arguments_and_trivial_cases);
    tcase_add_test(tc, builder_elision_joins_and_validation);
    tcase_add_test(tc, names);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
