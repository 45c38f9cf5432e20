/* Every algorithm of every collective, forced, through the simulated executor:
 * 1..17 ranks, one node and several (equal, interleaved, unequal), awkward counts,
 * counts spanning many pipeline chunks, roots, in place and out of place, a few
 * datatypes and ops (integer avg through DIVIDE, PreMulSum through prescale).
 * Results are compared with a reference computed directly from the inputs, and
 * every schedule is checked for structure and data races.  Seed: MPCCL_TEST_SEED. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "sim_exec.h"

#define MAXN 17
#define CHUNK_BYTES 64 /* tiny, so that pipelining and slot reuse are exercised */

static uint64_t seed, rng;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

typedef struct tcase {
    mpccl_coll_t coll;
    mpccl_algo_t algo;
    int n, layout, nnodes; /* layout: 0 one node, 1 equal blocks, 2 equal interleaved, 3 unequal */
    uint64_t count;
    int root, in_place;
    ncclDataType_t dt;
    mpccl_op_t op;
    int mode; /* 0 plain, 1 integer avg (divide), 2 prescale */
    double scalar;
} tcase_t;

static void describe(const tcase_t *c, char *buf, size_t len)
{
    static const char *layouts[] = {"one node", "equal blocks", "equal interleaved", "unequal"};
    snprintf(buf, len, "seed %llu: %s/%s n=%d %s(%d nodes) count=%llu root=%d %s %s op=%s mode=%d",
             (unsigned long long)seed, mpccl_coll_name(c->coll), mpccl_algo_name(c->algo), c->n, layouts[c->layout],
             c->nnodes, (unsigned long long)c->count, c->root, c->in_place ? "in-place" : "out-of-place",
             mpccl_dtype_name(c->dt), mpccl_op_name(c->op), c->mode);
}

static void node_layout(const tcase_t *c, int *node)
{
    int n = c->n, nn = c->nnodes;
    for (int r = 0; r < n; r++) {
        switch (c->layout) {
        case 0: node[r] = 0; break;
        case 1: node[r] = r / (n / nn); break;
        case 2: node[r] = r % nn; break;
        default: node[r] = r == 0 ? 0 : (nn == 3 && r > n / 2 ? 2 : 1); break; /* 1, then the rest split */
        }
    }
}

/* Topology as topo.c builds it: nodes numbered by first appearance. */
static void make_topo(const tcase_t *c, int rank, mpccl_topo_t *t, int *node_of, int *local, int *size)
{
    int raw[MAXN], map[MAXN], nn = 0;
    node_layout(c, raw);
    for (int i = 0; i < MAXN; i++) map[i] = -1;
    for (int r = 0; r < c->n; r++) {
        if (map[raw[r]] < 0) size[nn] = 0, map[raw[r]] = nn++;
        node_of[r] = map[raw[r]];
        local[r] = size[node_of[r]]++;
    }
    *t = (mpccl_topo_t){rank, c->n, nn, node_of, local, size};
}

static int reduction(mpccl_coll_t c)
{
    return c == MPCCL_COLL_ALLREDUCE || c == MPCCL_COLL_REDUCE || c == MPCCL_COLL_REDUCESCATTER;
}

/* User-visible sizes (elements) of one rank's send and receive buffers. */
static uint64_t user_in(const tcase_t *c, int r)
{
    uint64_t n = (uint64_t)c->n, k = c->count;
    switch (c->coll) {
    case MPCCL_COLL_REDUCESCATTER:
    case MPCCL_COLL_ALLTOALL: return n * k;
    case MPCCL_COLL_SCATTER: return r == c->root ? n * k : 0;
    case MPCCL_COLL_BROADCAST: return r == c->root ? k : 0;
    case MPCCL_COLL_RECV: return 0;
    default: return k;
    }
}

static double random_value(const tcase_t *c)
{
    if (mpccl_dtype_is_float(c->dt)) {
        double u = (double)(rnd() % 2001) / 1000.0 - 1.0; /* [-1, 1] */
        return c->op == MPCCL_OP_PROD ? 1.0 + u / 2 : u;
    }
    if (c->op == MPCCL_OP_PROD) { /* -2, -1, 1 or 2: products of 17 fit */
        int v = (int)(rnd() % 4);
        return v < 2 ? v - 2 : v - 1;
    }
    return (double)((int)(rnd() % 2001) - 1000);
}

static double fold(const tcase_t *c, double a, double b)
{
    switch (c->op) {
    case MPCCL_OP_SUM: return a + b;
    case MPCCL_OP_PROD: return a * b;
    case MPCCL_OP_MAX: return a > b ? a : b;
    default: return a < b ? a : b;
    }
}

typedef struct rankbuf {
    unsigned char *mem, *in, *out; /* mem: one allocation holding in and out when in place */
    unsigned char *in_alloc, *out_alloc;
    double *orig;   /* input as given, per element */
    double *expect; /* expected output */
    uint64_t nin, nout;
    mpccl_sched_t sched, sched2; /* sched2: the receive of a send/recv pair */
} rankbuf_t;

static double input_value(const tcase_t *c, rankbuf_t *rb, int r, uint64_t i)
{
    double v = rb[r].orig[i];
    if (c->mode == 2) {
        unsigned char tmp[8];
        mpccl_dtype_from_double(c->dt, v * c->scalar, tmp); /* scaled in dt, as the executor does */
        v = mpccl_dtype_to_double(c->dt, tmp);
    }
    return v;
}

static double reduce_all(const tcase_t *c, rankbuf_t *rb, uint64_t i)
{
    double acc = input_value(c, rb, 0, i);
    for (int r = 1; r < c->n; r++) acc = fold(c, acc, input_value(c, rb, r, i));
    if (c->mode == 1) acc = trunc(acc / c->n);
    return acc;
}

static void reference(const tcase_t *c, rankbuf_t *rb)
{
    int n = c->n;
    uint64_t k = c->count;
    for (int r = 0; r < n; r++) {
        double *e = rb[r].expect;
        for (uint64_t i = 0; i < rb[r].nout; i++) {
            uint64_t blk = k ? i / k : 0, off = k ? i % k : 0;
            switch (c->coll) {
            case MPCCL_COLL_ALLREDUCE:
            case MPCCL_COLL_REDUCE: e[i] = reduce_all(c, rb, i); break;
            case MPCCL_COLL_BROADCAST: e[i] = rb[c->root].orig[i]; break;
            case MPCCL_COLL_ALLGATHER:
            case MPCCL_COLL_GATHER: e[i] = rb[blk].orig[off]; break;
            case MPCCL_COLL_REDUCESCATTER: e[i] = reduce_all(c, rb, (uint64_t)r * k + i); break;
            case MPCCL_COLL_ALLTOALL: e[i] = rb[blk].orig[(uint64_t)r * k + off]; break;
            case MPCCL_COLL_SCATTER: e[i] = rb[c->root].orig[(uint64_t)r * k + i]; break;
            default: e[i] = rb[(r + n - 1) % n].orig[i]; break; /* recv from the left */
            }
        }
    }
}

static int close_enough(const tcase_t *c, double got, double want)
{
    if (!mpccl_dtype_is_float(c->dt)) return got == want;
    double eps = c->dt == ncclFloat64 ? 1e-13 : 1e-5;
    return fabs(got - want) <= eps * c->n * (1.0 + fabs(want));
}

/* Lays out the buffers as an application would, in place or not. */
static int setup_buffers(const tcase_t *c, rankbuf_t *rb, int r, mpccl_coll_desc_t *d)
{
    size_t es = mpccl_dtype_size(c->dt);
    uint64_t n = (uint64_t)c->n, k = c->count;
    rankbuf_t *b = &rb[r];
    b->nin = user_in(c, r);
    b->nout = c->coll == MPCCL_COLL_SEND ? k : mpccl_coll_out_elems(d, r, c->n);
    int inp = c->in_place && d->in_place;
    uint64_t memn = inp ? (c->coll == MPCCL_COLL_ALLGATHER || c->coll == MPCCL_COLL_REDUCESCATTER ||
                                   c->coll == MPCCL_COLL_GATHER || c->coll == MPCCL_COLL_SCATTER ? n * k
                                   : b->nout > b->nin ? b->nout : b->nin)
                        : 0;
    if (inp) {
        b->mem = malloc(memn * es + 8);
        switch (c->coll) {
        case MPCCL_COLL_ALLGATHER: b->out = b->mem, b->in = b->mem + (uint64_t)r * k * es; break;
        case MPCCL_COLL_REDUCESCATTER: b->in = b->mem, b->out = b->mem + (uint64_t)r * k * es; break;
        case MPCCL_COLL_GATHER: b->out = b->mem, b->in = b->mem + (uint64_t)c->root * k * es; break;
        case MPCCL_COLL_SCATTER: b->in = b->mem, b->out = b->mem + (uint64_t)c->root * k * es; break;
        default: b->in = b->out = b->mem; break;
        }
        for (uint64_t i = 0; i < memn * es; i++) b->mem[i] = (unsigned char)rnd(); /* garbage */
    } else {
        b->in = b->in_alloc = b->nin ? malloc(b->nin * es) : NULL;
        b->out = b->out_alloc = b->nout ? malloc(b->nout * es) : NULL;
        for (uint64_t i = 0; b->out && i < b->nout * es; i++) b->out[i] = (unsigned char)rnd();
    }
    b->orig = malloc((b->nin + 1) * sizeof(double));
    b->expect = malloc((b->nout + 1) * sizeof(double));
    if ((b->nin && !b->in) || (b->nout && !b->out) || !b->orig || !b->expect) return -1;
    for (uint64_t i = 0; i < b->nin; i++) {
        mpccl_dtype_from_double(c->dt, random_value(c), b->in + i * es);
        b->orig[i] = mpccl_dtype_to_double(c->dt, b->in + i * es);
    }
    return 0;
}

static void free_buffers(rankbuf_t *rb, int n)
{
    for (int r = 0; r < n; r++) {
        free(rb[r].mem);
        free(rb[r].in_alloc);
        free(rb[r].out_alloc);
        free(rb[r].orig);
        free(rb[r].expect);
        mpccl_sched_free(&rb[r].sched);
        mpccl_sched_free(&rb[r].sched2);
    }
}

static int64_t in_offset(const tcase_t *c, int r)
{
    int64_t k = (int64_t)c->count;
    switch (c->coll) {
    case MPCCL_COLL_ALLGATHER: return r * k;
    case MPCCL_COLL_REDUCESCATTER: return -r * k;
    case MPCCL_COLL_GATHER: return c->root * k;
    case MPCCL_COLL_SCATTER: return -c->root * k;
    default: return 0;
    }
}

/* Plans, checks and runs one case; 0 when every rank's output is right. */
static int run_case(const tcase_t *c, char *err, size_t len)
{
    int n = c->n, node_of[MAXN], local[MAXN], size[MAXN];
    rankbuf_t rb[MAXN];
    mpccl_task_t tasks[2 * MAXN];
    int ranks[2 * MAXN], ntasks = 0, bad = 1;
    char what[256], sim[4096];
    describe(c, what, sizeof(what));
    memset(rb, 0, sizeof(rb));
    mpccl_plan_params_t p = {CHUNK_BYTES, {MPCCL_ALGO_AUTO}, 1};
    int p2p = c->coll == MPCCL_COLL_SEND;
    p.forced[c->coll] = c->algo;
    sim_world_t *w = sim_create(n, seed + (uint64_t)c->count * 31 + (uint64_t)n);
    if (!w) return snprintf(err, len, "%s: sim_create failed", what), 1;
    mpccl_coll_desc_t ds[MAXN][2];
    for (int r = 0; r < n; r++) {
        mpccl_topo_t topo;
        make_topo(c, r, &topo, node_of, local, size);
        for (int j = 0; j < (p2p ? 2 : 1); j++) {
            mpccl_coll_desc_t *d = &ds[r][j];
            *d = (mpccl_coll_desc_t){c->coll, c->count, c->dt, c->op, c->mode == 2, c->mode == 1, c->root, c->in_place};
            if (p2p) d->coll = j ? MPCCL_COLL_RECV : MPCCL_COLL_SEND, d->root = j ? (r + n - 1) % n : (r + 1) % n;
            int root_only = (c->coll == MPCCL_COLL_GATHER || c->coll == MPCCL_COLL_SCATTER) && r != c->root;
            if (root_only || p2p) d->in_place = 0;
            mpccl_sched_t s;
            if (mpccl_plan(&topo, d, &p, &s) != MPCCL_OK) {
                snprintf(err, len, "%s: plan failed on rank %d: %s", what, r, mpccl_last_error());
                goto out;
            }
            int want = c->algo == MPCCL_ALGO_HIER && !mpccl_hier_possible(&topo) ? -1 : (int)c->algo;
            if ((want >= 0 && s.algo != want) || (want < 0 && s.algo == MPCCL_ALGO_HIER)) {
                snprintf(err, len, "%s: rank %d planned %s", what, r, mpccl_algo_name((mpccl_algo_t)s.algo));
                mpccl_sched_free(&s);
                goto out;
            }
            int alias = d->in_place && !d->prescale;
            if (mpccl_sched_validate(&s, r, n, mpccl_coll_out_elems(d, r, n), p2p) != MPCCL_OK ||
                (s.nsteps <= 4000 && sim_check_races(&s, alias, in_offset(c, r), sim, sizeof(sim)))) {
                snprintf(err, len, "%s: rank %d schedule: %s %s", what, r, mpccl_last_error(), sim);
                mpccl_sched_free(&s);
                goto out;
            }
            if (j == 0) {
                rb[r].sched = s;
                if (setup_buffers(c, rb, r, d)) {
                    snprintf(err, len, "%s: out of memory", what);
                    goto out;
                }
                tasks[ntasks] = (mpccl_task_t){&rb[r].sched, rb[r].in, p2p ? NULL : rb[r].out, c->dt, c->op, {0},
                                               (uint64_t)n, NULL};
            } else {
                rb[r].sched2 = s;
                tasks[ntasks] = (mpccl_task_t){&rb[r].sched2, NULL, rb[r].out, c->dt, c->op, {0}, (uint64_t)n, NULL};
            }
            mpccl_dtype_from_double(c->dt, c->scalar, tasks[ntasks].scalar);
            ranks[ntasks++] = r;
        }
    }
    mpccl_status_t st = sim_run(w, tasks, ranks, ntasks, sim, sizeof(sim));
    if (st != MPCCL_OK) {
        snprintf(err, len, "%s: run failed (%s):\n%s", what, mpccl_status_name(st), sim);
        goto out;
    }
    reference(c, rb);
    size_t es = mpccl_dtype_size(c->dt);
    for (int r = 0; r < n; r++)
        for (uint64_t i = 0; i < rb[r].nout; i++) {
            double got = mpccl_dtype_to_double(c->dt, rb[r].out + i * es);
            if (!close_enough(c, got, rb[r].expect[i])) {
                snprintf(err, len, "%s: rank %d element %llu = %.9g, expected %.9g", what, r, (unsigned long long)i,
                         got, rb[r].expect[i]);
                goto out;
            }
        }
    /* Out of place, the input is read only (prescale works on a copy). */
    for (int r = 0; r < n; r++)
        for (uint64_t i = 0; !(c->in_place && ds[r][0].in_place) && i < rb[r].nin; i++)
            if (mpccl_dtype_to_double(c->dt, rb[r].in + i * es) != rb[r].orig[i]) {
                snprintf(err, len, "%s: rank %d input element %llu was modified", what, r, (unsigned long long)i);
                goto out;
            }
    /* Allreduce results are the same bits on every rank. */
    for (int r = 1; c->coll == MPCCL_COLL_ALLREDUCE && r < n; r++)
        if (c->count && memcmp(rb[r].out, rb[0].out, c->count * es)) {
            snprintf(err, len, "%s: rank %d result differs from rank 0's", what, r);
            goto out;
        }
    bad = 0;
out:
    free_buffers(rb, n);
    sim_destroy(w);
    return bad;
}

static const ncclDataType_t types[] = {ncclInt32, ncclFloat32, ncclFloat64, ncclInt64};

/* Picks datatype, op, mode, root and scalar at random for one case. */
static void randomize(tcase_t *c)
{
    c->dt = types[rnd() % 4];
    c->op = (mpccl_op_t)(rnd() % MPCCL_NUM_OPS);
    c->mode = 0;
    c->root = (int)(rnd() % (uint64_t)c->n);
    c->scalar = 1.0;
    if (reduction(c->coll) && rnd() % 3 == 0) {
        c->op = MPCCL_OP_SUM;
        if (mpccl_dtype_is_float(c->dt)) {
            c->mode = 2;
            c->scalar = rnd() % 2 ? 0.5 : 1.0 / c->n;
        } else {
            c->mode = 1;
        }
    }
}

static void run_all(mpccl_coll_t coll, mpccl_algo_t algo)
{
    char err[8192];
    int ncases = 0;
    for (int n = 1; n <= MAXN; n++) {
        int layouts[4][2] = {{0, 1}}, nl = 1; /* (layout, nnodes) */
        if (n % 2 == 0) layouts[nl][0] = 1, layouts[nl++][1] = 2;
        if (n % 3 == 0) layouts[nl][0] = 2, layouts[nl++][1] = 3;
        if (n >= 3) layouts[nl][0] = 3, layouts[nl++][1] = n >= 5 ? 3 : 2;
        uint64_t chunk_elems = CHUNK_BYTES / 4;
        uint64_t counts[] = {0, 1, 2, 7, 13, 1021, (uint64_t)n * 5 + 3, chunk_elems * (uint64_t)n * 3 + 17};
        for (int l = 0; l < nl; l++)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                /* Large rank counts: a sample of the counts keeps the suite fast. */
                if (n > 8 && ci >= 3 && rnd() % 2) continue;
                for (int inp = 0; inp < 2; inp++) {
                    if (n > 4 && (rnd() % 2)) continue;
                    tcase_t c = {coll, algo, n, layouts[l][0], layouts[l][1], counts[ci], 0, inp, ncclInt32,
                                 MPCCL_OP_SUM, 0, 1.0};
                    randomize(&c);
                    if (coll == MPCCL_COLL_SEND) c.in_place = 0;
                    ncases++;
                    if (run_case(&c, err, sizeof(err))) ck_abort_msg("%s", err);
                }
            }
    }
    ck_assert_int_gt(ncases, 100);
}

#define ALGO_TEST(name, coll, algo) \
    START_TEST(name) { run_all(coll, algo); } END_TEST

ALGO_TEST(allreduce_ring, MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_RING)
ALGO_TEST(allreduce_rd, MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_RD)
ALGO_TEST(allreduce_hier, MPCCL_COLL_ALLREDUCE, MPCCL_ALGO_HIER)
ALGO_TEST(bcast_ring, MPCCL_COLL_BROADCAST, MPCCL_ALGO_RING)
ALGO_TEST(bcast_tree, MPCCL_COLL_BROADCAST, MPCCL_ALGO_TREE)
ALGO_TEST(reduce_ring, MPCCL_COLL_REDUCE, MPCCL_ALGO_RING)
ALGO_TEST(reduce_tree, MPCCL_COLL_REDUCE, MPCCL_ALGO_TREE)
ALGO_TEST(allgather_ring, MPCCL_COLL_ALLGATHER, MPCCL_ALGO_RING)
ALGO_TEST(allgather_direct, MPCCL_COLL_ALLGATHER, MPCCL_ALGO_DIRECT)
ALGO_TEST(reducescatter_ring, MPCCL_COLL_REDUCESCATTER, MPCCL_ALGO_RING)
ALGO_TEST(reducescatter_direct, MPCCL_COLL_REDUCESCATTER, MPCCL_ALGO_DIRECT)
ALGO_TEST(alltoall_direct, MPCCL_COLL_ALLTOALL, MPCCL_ALGO_DIRECT)
ALGO_TEST(gather_direct, MPCCL_COLL_GATHER, MPCCL_ALGO_DIRECT)
ALGO_TEST(scatter_direct, MPCCL_COLL_SCATTER, MPCCL_ALGO_DIRECT)
ALGO_TEST(sendrecv_shift, MPCCL_COLL_SEND, MPCCL_ALGO_DIRECT)

/* ---- Engine: consecutive tasks, errors, missing buffers ---------------------------- */

static mpccl_topo_t flat_topo(int n, int rank, int *node_of, int *local, int *size)
{
    for (int r = 0; r < n; r++) node_of[r] = 0, local[r] = r;
    size[0] = n;
    return (mpccl_topo_t){rank, n, 1, node_of, local, size};
}

/* Three collectives per rank started back to back and progressed together: the
 * per-peer sequence numbers must keep their messages apart. */
START_TEST(engine_consecutive_tasks)
{
    enum { N = 5, K = 3, COUNT = 300 };
    int node_of[N], local[N], size[1], ranks[N * K];
    int32_t in[N][K][COUNT], out[N][K][COUNT];
    mpccl_sched_t sched[N][K];
    mpccl_task_t tasks[N * K];
    mpccl_coll_t colls[K] = {MPCCL_COLL_ALLREDUCE, MPCCL_COLL_BROADCAST, MPCCL_COLL_ALLREDUCE};
    mpccl_algo_t algos[K] = {MPCCL_ALGO_RING, MPCCL_ALGO_TREE, MPCCL_ALGO_RD};
    char msg[4096];
    sim_world_t *w = sim_create(N, seed);
    for (int r = 0; r < N; r++)
        for (int k = 0; k < K; k++) {
            mpccl_topo_t t = flat_topo(N, r, node_of, local, size);
            mpccl_plan_params_t p = {CHUNK_BYTES, {MPCCL_ALGO_AUTO}, 1};
            p.forced[colls[k]] = algos[k];
            mpccl_coll_desc_t d = {colls[k], COUNT, ncclInt32, MPCCL_OP_SUM, 0, 0, 2, 0};
            ck_assert_int_eq(mpccl_plan(&t, &d, &p, &sched[r][k]), MPCCL_OK);
            for (int i = 0; i < COUNT; i++) in[r][k][i] = (int32_t)(rnd() % 1000), out[r][k][i] = -1;
            /* Interleaved by rank so that starts of different ranks mix. */
            tasks[k * N + r] = (mpccl_task_t){&sched[r][k], in[r][k], out[r][k], ncclInt32, MPCCL_OP_SUM, {0}, N, NULL};
            ranks[k * N + r] = r;
        }
    ck_assert_msg(sim_run(w, tasks, ranks, N * K, msg, sizeof(msg)) == MPCCL_OK, "%s", msg);
    for (int k = 0; k < K; k++)
        for (int i = 0; i < COUNT; i++) {
            int32_t want = 0;
            for (int r = 0; r < N; r++) want += colls[k] == MPCCL_COLL_BROADCAST ? (r == 2) * in[2][k][i] : in[r][k][i];
            for (int r = 0; r < N; r++) ck_assert_int_eq(out[r][k][i], want);
        }
    for (int r = 0; r < N; r++)
        for (int k = 0; k < K; k++) mpccl_sched_free(&sched[r][k]);
    sim_destroy(w);
}
END_TEST

/* A failed transfer stops the task with its status; in-flight requests are
 * cancelled and everything is freed (run under valgrind/ASan to see leaks). */
START_TEST(engine_error_stops_task)
{
    enum { N = 4, COUNT = 1000 };
    int node_of[N], local[N], size[1], ranks[N];
    float in[N][COUNT], out[N][COUNT];
    mpccl_sched_t sched[N];
    mpccl_task_t tasks[N];
    char msg[4096];
    for (int fail_at = 0; fail_at < 40; fail_at += 13) {
        sim_world_t *w = sim_create(N, seed);
        for (int r = 0; r < N; r++) {
            mpccl_topo_t t = flat_topo(N, r, node_of, local, size);
            mpccl_plan_params_t p = {CHUNK_BYTES, {MPCCL_ALGO_RING}, 1};
            mpccl_coll_desc_t d = {MPCCL_COLL_ALLREDUCE, COUNT, ncclFloat32, MPCCL_OP_SUM, 0, 0, 0, 0};
            ck_assert_int_eq(mpccl_plan(&t, &d, &p, &sched[r]), MPCCL_OK);
            for (int i = 0; i < COUNT; i++) in[r][i] = 1.0f;
            tasks[r] = (mpccl_task_t){&sched[r], in[r], out[r], ncclFloat32, MPCCL_OP_SUM, {0}, N, NULL};
            ranks[r] = r;
        }
        sim_fail_send(w, fail_at);
        ck_assert_int_eq(sim_run(w, tasks, ranks, N, msg, sizeof(msg)), MPCCL_ERR_REMOTE);
        for (int r = 0; r < N; r++) mpccl_sched_free(&sched[r]);
        sim_destroy(w);
    }
}
END_TEST

START_TEST(engine_rejects_missing_buffers)
{
    int node_of[3], local[3], size[1];
    mpccl_topo_t t = flat_topo(3, 0, node_of, local, size);
    mpccl_plan_params_t p = {CHUNK_BYTES, {MPCCL_ALGO_AUTO}, 1};
    mpccl_coll_desc_t d = {MPCCL_COLL_REDUCE, 10, ncclFloat32, MPCCL_OP_SUM, 0, 0, 0, 0};
    mpccl_sched_t s;
    float in[10];
    uint64_t seqs[6] = {0};
    ck_assert_int_eq(mpccl_plan(&t, &d, &p, &s), MPCCL_OK);
    mpccl_task_t task = {&s, in, NULL, ncclFloat32, MPCCL_OP_SUM, {0}, 3, NULL}; /* root without output */
    mpccl_exec_t *ex = NULL;
    sim_world_t *w = sim_create(3, seed);
    ck_assert_int_eq(mpccl_exec_start(&task, sim_transport(w, 0), NULL, 0, seqs, seqs + 3, &ex), MPCCL_ERR_ARG);
    ck_assert_ptr_null(ex);
    for (int i = 0; i < 6; i++) ck_assert_uint_eq(seqs[i], 0); /* counters untouched */
    mpccl_sched_free(&s);
    sim_destroy(w);
}
END_TEST


int main(void)
{
    const char *s = getenv("MPCCL_TEST_SEED");
    seed = s ? strtoull(s, NULL, 0) : 20261121;
    rng = seed * 0x9e3779b97f4a7c15ull + 1;
    printf("test_algos: seed %llu (set MPCCL_TEST_SEED to repeat another)\n", (unsigned long long)seed);
    Suite *suite = suite_create("algos");
    TCase *tc = tcase_create("algorithms");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, allreduce_ring);
    tcase_add_test(tc, allreduce_rd);
    tcase_add_test(tc, allreduce_hier);
    tcase_add_test(tc, bcast_ring);
    tcase_add_test(tc, bcast_tree);
    tcase_add_test(tc, reduce_ring);
    tcase_add_test(tc, reduce_tree);
    tcase_add_test(tc, allgather_ring);
    tcase_add_test(tc, allgather_direct);
    tcase_add_test(tc, reducescatter_ring);
    tcase_add_test(tc, reducescatter_direct);
    tcase_add_test(tc, alltoall_direct);
    tcase_add_test(tc, gather_direct);
    tcase_add_test(tc, scatter_direct);
    tcase_add_test(tc, sendrecv_shift);
    suite_add_tcase(suite, tc);
    TCase *te = tcase_create("engine");
    tcase_add_test(te, engine_consecutive_tasks);
    tcase_add_test(te, engine_error_stops_task);
    tcase_add_test(te, engine_rejects_missing_buffers);
    suite_add_tcase(suite, te);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
