/* The planner: a latency + bandwidth cost model picks the algorithm of each call
 * (unless MPCCL_ALGO / NCCL_ALGO forces one) and the generator builds its schedule. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "algo/algo.h"
#include "util/config.h"
#include "util/log.h"

/* Cost model constants: time = steps * alpha + bytes on the critical path * beta.
 * Starting values until they are fitted from mpccl-perf runs:
 *  - intra-node (host executor over UCX shared memory): ~1 us per message including
 *    our engine, ~20 GB/s for a single-copy (CMA / xpmem) transfer;
 *  - inter-node (UCX over a 100 Gb/s-class NIC, one NIC per GPU as on HGX nodes,
 *    so each rank has its own link): ~4 us per message, ~12 GB/s.
 * DIRECT_OVERHEAD is the host cost of posting one more message of an all-pairs
 * exchange; DIRECT_CONGESTION the bandwidth lost by many-to-many traffic through
 * a switch compared with neighbour traffic. */
const mpccl_link_t mpccl_link_intra = {1.0e-6, 1.0 / 20.0e9};
const mpccl_link_t mpccl_link_inter = {4.0e-6, 1.0 / 12.0e9};
#define DIRECT_OVERHEAD 0.3e-6
#define DIRECT_CONGESTION 1.25
#define COST_NEVER 1e30
#define MAX_PIPELINE_CHUNKS 1024 /* bounds schedule length: steps ~ chunks x ranks */
#define MIN_PIPELINE_CHUNK (64u << 10) /* bytes: smaller chunks cost more per step than they overlap */

static const char *const algo_names[MPCCL_NUM_ALGOS] = {"auto", "ring", "rd", "tree", "direct", "hier"};
static const char *const coll_names[MPCCL_NUM_COLLS] = {"allreduce", "broadcast", "reduce", "allgather",
                                                        "reducescatter", "alltoall", "gather", "scatter",
                                                        "send", "recv"};

const char *mpccl_algo_name(mpccl_algo_t a)
{
    return (unsigned)a < MPCCL_NUM_ALGOS ? algo_names[a] : "invalid";
}

const char *mpccl_coll_name(mpccl_coll_t c)
{
    return (unsigned)c < MPCCL_NUM_COLLS ? coll_names[c] : "invalid";
}

#define BIT(a) (1u << (a))

uint32_t mpccl_algo_valid(mpccl_coll_t c)
{
    switch (c) {
    case MPCCL_COLL_ALLREDUCE: return BIT(MPCCL_ALGO_RING) | BIT(MPCCL_ALGO_RD) | BIT(MPCCL_ALGO_HIER);
    case MPCCL_COLL_BROADCAST:
    case MPCCL_COLL_REDUCE: return BIT(MPCCL_ALGO_RING) | BIT(MPCCL_ALGO_TREE);
    case MPCCL_COLL_ALLGATHER:
    case MPCCL_COLL_REDUCESCATTER: return BIT(MPCCL_ALGO_RING) | BIT(MPCCL_ALGO_DIRECT);
    case MPCCL_COLL_ALLTOALL:
    case MPCCL_COLL_GATHER:
    case MPCCL_COLL_SCATTER:
    case MPCCL_COLL_SEND:
    case MPCCL_COLL_RECV: return BIT(MPCCL_ALGO_DIRECT);
    default: return 0;
    }
}

/* ---- Cost model ---------------------------------------------------------------- */

double mpccl_cost_ar_ring(int n, double bytes, double chunk_bytes, mpccl_link_t l)
{
    if (n <= 1) return 0;
    double rounds = fmax(1.0, ceil(bytes / ((double)n * chunk_bytes)));
    return (2.0 * (n - 1) + rounds - 1) * l.alpha + 2.0 * (n - 1) / n * bytes * l.beta;
}

double mpccl_cost_ar_rd(int n, double bytes, mpccl_link_t l)
{
    if (n <= 1) return 0;
    int p = 1, steps = 0;
    while (p * 2 <= n) p *= 2, steps++;
    if (p != n) steps += 2;
    return steps * (l.alpha + bytes * l.beta);
}

static int log2_up(int n)
{
    int s = 0;
    while ((1 << s) < n) s++;
    return s;
}

/* A chain of n ranks moving bytes in pipelined chunks. */
static double cost_chain(int n, double bytes, double chunk_bytes, mpccl_link_t l)
{
    if (n <= 1) return 0;
    double nc = fmax(1.0, ceil(bytes / chunk_bytes));
    return (n - 2 + nc) * (l.alpha + bytes / nc * l.beta);
}

/* Every rank exchanges `bytes` with each of the others at once. */
static double cost_direct(const mpccl_topo_t *t, double bytes)
{
    int n = t->nranks;
    if (n <= 1) return 0;
    /* Every rank must pick the same algorithm: cost the slowest rank, the one on
     * the smallest node (most peers across the network), never this rank. */
    int local = n;
    if (t->node_size)
        for (int i = 0; i < t->nnodes; i++)
            if (t->node_size[i] < local) local = t->node_size[i];
    double intra = (local - 1) * bytes * mpccl_link_intra.beta;
    double inter = (n - local) * bytes * mpccl_link_inter.beta * DIRECT_CONGESTION;
    double alpha = local < n ? mpccl_link_inter.alpha : mpccl_link_intra.alpha;
    return alpha + (n - 1) * DIRECT_OVERHEAD + fmax(intra, inter);
}

static double cost_hier(const mpccl_topo_t *t, double bytes, double chunk_bytes)
{
    int nl = t->node_size[0], nn = t->nnodes;
    double part = bytes / nl;
    double intra = nl > 1 ? (nl - 1) * mpccl_link_intra.alpha + (nl - 1.0) / nl * bytes * mpccl_link_intra.beta : 0;
    double inter = fmin(mpccl_cost_ar_ring(nn, part, chunk_bytes, mpccl_link_inter),
                        mpccl_cost_ar_rd(nn, part, mpccl_link_inter));
    return 2 * intra + inter;
}

double mpccl_cost(const mpccl_topo_t *topo, const mpccl_coll_desc_t *d, mpccl_algo_t a, uint64_t chunk_bytes)
{
    if (!(mpccl_algo_valid(d->coll) & BIT(a))) return COST_NEVER;
    if (a == MPCCL_ALGO_HIER && !mpccl_hier_possible(topo)) return COST_NEVER;
    int n = topo->nranks;
    double bytes = (double)d->count * (double)mpccl_dtype_size(d->dt), cb = (double)chunk_bytes;
    mpccl_link_t l = topo->nnodes > 1 ? mpccl_link_inter : mpccl_link_intra;
    switch (d->coll) {
    case MPCCL_COLL_ALLREDUCE:
        if (a == MPCCL_ALGO_RING) return mpccl_cost_ar_ring(n, bytes, cb, l);
        if (a == MPCCL_ALGO_RD) return mpccl_cost_ar_rd(n, bytes, l);
        return cost_hier(topo, bytes, cb);
    case MPCCL_COLL_BROADCAST:
    case MPCCL_COLL_REDUCE:
        if (a == MPCCL_ALGO_RING) return cost_chain(n, bytes, cb, l);
        return log2_up(n) * (l.alpha + bytes * l.beta);
    case MPCCL_COLL_ALLGATHER:
    case MPCCL_COLL_REDUCESCATTER:
        if (a == MPCCL_ALGO_RING) {
            double rounds = fmax(1.0, ceil(bytes / cb));
            return n > 1 ? (n - 2 + rounds) * l.alpha + (n - 1) * bytes * l.beta : 0;
        }
        return cost_direct(topo, bytes);
    default:
        return cost_direct(topo, bytes);
    }
}

mpccl_algo_t mpccl_model_choice(const mpccl_topo_t *topo, const mpccl_coll_desc_t *d, uint32_t mask,
                                uint64_t chunk_bytes)
{
    mpccl_algo_t best = MPCCL_ALGO_AUTO;
    double best_t = COST_NEVER;
    for (int a = 1; a < MPCCL_NUM_ALGOS; a++) {
        if (!(mask & BIT(a))) continue;
        double t = mpccl_cost(topo, d, (mpccl_algo_t)a, chunk_bytes);
        if (t < best_t) best_t = t, best = (mpccl_algo_t)a;
    }
    return best;
}

/* ---- MPCCL_ALGO / NCCL_ALGO ---------------------------------------------------- */

/* The algorithm a name means for collective c; AUTO when it means none there,
 * -1 for a name we ignore, -2 for an unknown name. */
static int algo_for(const char *name, mpccl_coll_t c)
{
    static const char *const ignored[] = {"collnet", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"};
    for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
        if (!strcasecmp(name, ignored[i])) return -1;
    int a = -2;
    for (int i = 1; i < MPCCL_NUM_ALGOS; i++)
        if (!strcasecmp(name, algo_names[i])) a = i;
    /* NCCL's Tree is its latency algorithm: recursive doubling for allreduce. */
    if (a == MPCCL_ALGO_TREE && c == MPCCL_COLL_ALLREDUCE) a = MPCCL_ALGO_RD;
    if (a > 0 && !(mpccl_algo_valid(c) & BIT(a))) a = MPCCL_ALGO_AUTO;
    return a;
}

static int coll_by_name(const char *s, size_t len)
{
    for (int c = 0; c < MPCCL_NUM_COLLS; c++)
        if (strlen(coll_names[c]) == len && !strncasecmp(s, coll_names[c], len)) return c;
    return -1;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
    return s;
}

/* One item: [coll:][^]name.  *scope is the collective of the clause (-1: all). */
static void parse_item(char *item, int *scope, int *negate_clause, int first, uint32_t pos[], uint32_t neg[])
{
    char *colon = strchr(item, ':');
    if (colon) {
        int c = coll_by_name(item, (size_t)(colon - item));
        if (c < 0) {
            MPCCL_WARN(MPCCL_SUB_TUNE, "MPCCL_ALGO: unknown collective '%.*s' (allreduce, broadcast, reduce, allgather, "
                       "reducescatter, alltoall, gather, scatter, send, recv); ignored", (int)(colon - item), item);
            *scope = -2;
            return;
        }
        *scope = c;
        item = trim(colon + 1);
        first = 1;
    }
    if (*scope == -2) return;
    int negate = 0;
    if (*item == '^') {
        negate = 1;
        item = trim(item + 1);
        if (first) *negate_clause = 1;
    }
    negate |= *negate_clause;
    if (!*item) return;
    for (int c = 0; c < MPCCL_NUM_COLLS; c++) {
        if (*scope >= 0 && c != *scope) continue;
        int a = algo_for(item, (mpccl_coll_t)c);
        if (a == -2) {
            MPCCL_WARN(MPCCL_SUB_TUNE, "MPCCL_ALGO: unknown algorithm '%s' (valid: ring, rd, tree, direct, hier); ignored",
                       item);
            return;
        }
        if (a == -1) {
            MPCCL_WARN(MPCCL_SUB_TUNE, "MPCCL_ALGO: algorithm '%s' needs hardware mpccl does not use; ignored", item);
            return;
        }
        if (a == MPCCL_ALGO_AUTO) continue;
        if (negate) neg[c] |= BIT(a);
        else pos[c] |= BIT(a);
    }
}

void mpccl_algo_parse(const char *str, mpccl_algo_t forced[MPCCL_NUM_COLLS], uint32_t allowed[MPCCL_NUM_COLLS])
{
    uint32_t pos[MPCCL_NUM_COLLS] = {0}, neg[MPCCL_NUM_COLLS] = {0};
    char *copy = str ? strdup(str) : NULL;
    if (str && !copy) MPCCL_WARN(MPCCL_SUB_TUNE, "MPCCL_ALGO: out of memory; ignored");
    char *save1 = NULL;
    for (char *clause = copy ? strtok_r(copy, ";", &save1) : NULL; clause; clause = strtok_r(NULL, ";", &save1)) {
        int scope = -1, negate_clause = 0, first = 1;
        char *save2 = NULL;
        for (char *item = strtok_r(clause, ",", &save2); item; item = strtok_r(NULL, ",", &save2), first = 0)
            parse_item(trim(item), &scope, &negate_clause, first, pos, neg);
    }
    free(copy);
    for (int c = 0; c < MPCCL_NUM_COLLS; c++) {
        uint32_t valid = mpccl_algo_valid((mpccl_coll_t)c);
        uint32_t m = (pos[c] ? pos[c] : valid) & ~neg[c] & valid;
        if (!m) {
            MPCCL_WARN(MPCCL_SUB_TUNE, "MPCCL_ALGO excludes every algorithm of %s; ignored for it", coll_names[c]);
            m = valid;
        }
        allowed[c] = m;
        forced[c] = MPCCL_ALGO_AUTO;
        if (m != valid && !(m & (m - 1)))
            for (int a = 1; a < MPCCL_NUM_ALGOS; a++)
                if (m == BIT(a)) forced[c] = (mpccl_algo_t)a;
    }
}

/* The env restricts the choice process-wide (the setting is read once); params
 * carry the one forced algorithm per collective. */
static uint32_t env_allowed[MPCCL_NUM_COLLS];
static mpccl_algo_t env_forced[MPCCL_NUM_COLLS];
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void read_env_algo(void) { mpccl_algo_parse(mpccl_config_str("ALGO"), env_forced, env_allowed); }

mpccl_status_t mpccl_plan_params_init(mpccl_plan_params_t *p)
{
    int64_t chunk = mpccl_config_int("CHUNK_BYTES");
    if (chunk <= 0)
        return mpccl_fail(MPCCL_ERR_ARG, "MPCCL_CHUNK_BYTES = %lld, expected a positive number of bytes",
                          (long long)chunk);
    p->chunk_bytes = (uint64_t)chunk;
    p->split_shares = 1;
    pthread_once(&env_once, read_env_algo);
    memcpy(p->forced, env_forced, sizeof(p->forced));
    return MPCCL_OK;
}

/* ---- Planning ------------------------------------------------------------------- */

uint64_t mpccl_coll_in_elems(const mpccl_coll_desc_t *d, int rank, int nranks)
{
    uint64_t c = d->count, n = (uint64_t)nranks;
    switch (d->coll) {
    case MPCCL_COLL_BROADCAST: return rank == d->root ? c : 0;
    case MPCCL_COLL_REDUCESCATTER:
    case MPCCL_COLL_ALLTOALL: return n * c;
    case MPCCL_COLL_SCATTER: return rank == d->root ? n * c : 0;
    case MPCCL_COLL_RECV: return 0;
    default: return c;
    }
}

uint64_t mpccl_coll_out_elems(const mpccl_coll_desc_t *d, int rank, int nranks)
{
    uint64_t c = d->count, n = (uint64_t)nranks;
    switch (d->coll) {
    case MPCCL_COLL_REDUCE: return rank == d->root ? c : 0;
    case MPCCL_COLL_ALLGATHER:
    case MPCCL_COLL_ALLTOALL: return n * c;
    case MPCCL_COLL_GATHER: return rank == d->root ? n * c : 0;
    case MPCCL_COLL_SEND: return 0;
    default: return c;
    }
}

static mpccl_status_t check_args(const mpccl_topo_t *topo, const mpccl_coll_desc_t *d, const mpccl_plan_params_t *p)
{
    if (topo->nranks < 1 || topo->rank < 0 || topo->rank >= topo->nranks)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "plan: rank %d of %d ranks", topo->rank, topo->nranks);
    if ((unsigned)d->coll >= MPCCL_NUM_COLLS)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "plan: collective %d, expected 0..%d", (int)d->coll, MPCCL_NUM_COLLS - 1);
    size_t es = mpccl_dtype_size(d->dt);
    if (es == 0) return mpccl_fail(MPCCL_ERR_ARG, "plan: datatype %d is not a valid ncclDataType_t", (int)d->dt);
    if ((unsigned)d->op >= MPCCL_NUM_OPS) return mpccl_fail(MPCCL_ERR_INTERNAL, "plan: op %d", (int)d->op);
    int rooted = d->coll == MPCCL_COLL_BROADCAST || d->coll == MPCCL_COLL_REDUCE || d->coll == MPCCL_COLL_GATHER ||
                 d->coll == MPCCL_COLL_SCATTER || d->coll == MPCCL_COLL_SEND || d->coll == MPCCL_COLL_RECV;
    if (rooted && (d->root < 0 || d->root >= topo->nranks))
        return mpccl_fail(MPCCL_ERR_ARG, "%s: root/peer %d, expected 0..%d", coll_names[d->coll], d->root,
                          topo->nranks - 1);
    if (d->count > UINT64_MAX / 2 / es / (uint64_t)topo->nranks)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: count %llu too large for %d ranks", coll_names[d->coll],
                          (unsigned long long)d->count, topo->nranks);
    if (p->chunk_bytes == 0) return mpccl_fail(MPCCL_ERR_INTERNAL, "plan: chunk_bytes is 0");
    return MPCCL_OK;
}

static int can_serve(const mpccl_topo_t *topo, mpccl_coll_t c, mpccl_algo_t a)
{
    if (!(mpccl_algo_valid(c) & BIT(a))) return 0;
    return a != MPCCL_ALGO_HIER || mpccl_hier_possible(topo);
}

static mpccl_algo_t choose(const mpccl_topo_t *topo, const mpccl_coll_desc_t *d, const mpccl_plan_params_t *p)
{
    static int warned[MPCCL_NUM_COLLS][MPCCL_NUM_ALGOS];
    mpccl_algo_t f = p->forced[d->coll];
    if (f != MPCCL_ALGO_AUTO) {
        if ((unsigned)f < MPCCL_NUM_ALGOS && can_serve(topo, d->coll, f)) return f;
        if ((unsigned)f < MPCCL_NUM_ALGOS && !__atomic_exchange_n(&warned[d->coll][f], 1, __ATOMIC_RELAXED))
            MPCCL_INFO(MPCCL_SUB_TUNE, "algorithm %s cannot serve %s here (%d ranks, %d nodes); the model chooses",
                       mpccl_algo_name(f), coll_names[d->coll], topo->nranks, topo->nnodes);
    }
    pthread_once(&env_once, read_env_algo);
    uint32_t mask = f == MPCCL_ALGO_AUTO ? env_allowed[d->coll] : mpccl_algo_valid(d->coll);
    mpccl_algo_t a = mpccl_model_choice(topo, d, mask, p->chunk_bytes);
    if (a == MPCCL_ALGO_AUTO) a = mpccl_model_choice(topo, d, mpccl_algo_valid(d->coll), p->chunk_bytes);
    return a;
}

typedef mpccl_status_t (*gen_fn)(mpccl_gen_t *);

static gen_fn generator(mpccl_coll_t c, mpccl_algo_t a)
{
    switch (c) {
    case MPCCL_COLL_ALLREDUCE:
        return a == MPCCL_ALGO_RING ? mpccl_algo_allreduce_ring
             : a == MPCCL_ALGO_RD   ? mpccl_algo_allreduce_rd : mpccl_algo_allreduce_hier;
    case MPCCL_COLL_BROADCAST: return a == MPCCL_ALGO_RING ? mpccl_algo_bcast_ring : mpccl_algo_bcast_tree;
    case MPCCL_COLL_REDUCE: return a == MPCCL_ALGO_RING ? mpccl_algo_reduce_ring : mpccl_algo_reduce_tree;
    case MPCCL_COLL_ALLGATHER: return a == MPCCL_ALGO_RING ? mpccl_algo_allgather_ring : mpccl_algo_allgather_direct;
    case MPCCL_COLL_REDUCESCATTER:
        return a == MPCCL_ALGO_RING ? mpccl_algo_reducescatter_ring : mpccl_algo_reducescatter_direct;
    case MPCCL_COLL_ALLTOALL: return mpccl_algo_alltoall_direct;
    case MPCCL_COLL_GATHER: return mpccl_algo_gather_direct;
    case MPCCL_COLL_SCATTER: return mpccl_algo_scatter_direct;
    case MPCCL_COLL_SEND: return mpccl_algo_send;
    default: return mpccl_algo_recv;
    }
}

mpccl_status_t mpccl_plan(const mpccl_topo_t *topo, const mpccl_coll_desc_t *d, const mpccl_plan_params_t *p,
                          mpccl_sched_t *out)
{
    memset(out, 0, sizeof(*out));
    MPCCL_CHECK(check_args(topo, d, p));
    int n = topo->nranks;
    mpccl_algo_t a = choose(topo, d, p);
    int *world = malloc((size_t)n * sizeof(int));
    if (!world) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory planning for %d ranks", n);
    for (int r = 0; r < n; r++) world[r] = r;
    mpccl_build_t b;
    mpccl_status_t st = mpccl_build_init(&b, out, topo->rank, n);
    if (st != MPCCL_OK) {
        free(world);
        return st;
    }
    /* Mid sizes still pipeline: at least two chunks per rank's share, down
     * to MIN_PIPELINE_CHUNK (a 1 MB host allreduce on 4 ranks took 1.3-1.6x
     * Open MPI's time with one 512 KB chunk per share, 0.9-1.2x with two).
     * Huge buffers get larger chunks rather than ever longer schedules. */
    uint64_t es = mpccl_dtype_size(d->dt), chunk_bytes = p->chunk_bytes;
    uint64_t two_per_share = d->count * es / (2 * (uint64_t)n);
    if (two_per_share < MIN_PIPELINE_CHUNK) two_per_share = MIN_PIPELINE_CHUNK;
    if (p->split_shares && chunk_bytes > two_per_share) chunk_bytes = two_per_share;
    uint64_t chunk = chunk_bytes / es, least = mpccl_div_up(d->count, MAX_PIPELINE_CHUNKS);
    if (chunk < least) chunk = least;
    mpccl_gen_t g = {&b, d, topo, chunk ? chunk : 1, d->in_place && !d->prescale, {n, topo->rank, world}};
    st = generator(d->coll, a)(&g);
    if (st != MPCCL_OK && b.st == MPCCL_OK) b.st = st;
    st = mpccl_build_finish(&b);
    free(world);
    if (st != MPCCL_OK) return st;
    out->algo = a;
    out->needs_prescale = d->prescale;
    out->in_elems = mpccl_coll_in_elems(d, topo->rank, n);
    MPCCL_INFO(MPCCL_SUB_TUNE | MPCCL_SUB_COLL, "plan %s count %llu type %s on %d ranks / %d nodes: %s%s, %u steps",
               coll_names[d->coll], (unsigned long long)d->count, mpccl_dtype_name(d->dt), n, topo->nnodes,
               mpccl_algo_name(a), p->forced[d->coll] == a ? " (forced)" : "", out->nsteps);
    return MPCCL_OK;
}
