/* Internal to the planner and the algorithm generators: the schedule builder,
 * scratch slot pools, groups of ranks and the generators themselves. */
#ifndef MPCCL_ALGO_H
#define MPCCL_ALGO_H

#include <stdint.h>
#include "algo/algo_plan.h"
#include "algo/algo_schedule.h"

#define MPCCL_NONE UINT32_MAX /* "no step": a dependency that is ignored */

/* ---- Builder (algo_schedule.c) ------------------------------------------------------
 * Steps are appended in program order; each names its dependencies explicitly.
 * Errors are sticky (the first one is kept and every later call does nothing),
 * so generators check once, at mpccl_build_finish. */
typedef struct mpccl_build {
    mpccl_sched_t *s;
    int rank, nranks;
    uint32_t *nsend, *nrecv; /* messages emitted so far per peer (msg numbering) */
    uint32_t entry;          /* while set, every new step also depends on it */
    uint64_t tmp_top;        /* TMP bump allocator */
    mpccl_status_t st;
} mpccl_build_t;

mpccl_status_t mpccl_build_init(mpccl_build_t *b, mpccl_sched_t *s, int rank, int nranks);
/* Releases the builder; on error also frees the schedule.  Returns b->st. */
mpccl_status_t mpccl_build_finish(mpccl_build_t *b);

/* Appends one step.  NONE entries in deps are skipped.  A data step with count 0
 * is not emitted: the call returns its dependencies joined instead (NONE, the one
 * dependency, or a NOP), so orderings through it are kept. */
uint32_t mpccl_b_step(mpccl_build_t *b, int kind, int peer, uint64_t count, mpccl_ref_t dst,
                      mpccl_ref_t src0, mpccl_ref_t src1, const uint32_t *deps, uint32_t ndeps);
uint32_t mpccl_b_join(mpccl_build_t *b, const uint32_t *deps, uint32_t ndeps);
/* A NOP after every step emitted since index first (its sinks); NONE if none. */
uint32_t mpccl_b_join_since(mpccl_build_t *b, uint32_t first);
/* Reserves n elements of TMP; returns the offset. */
uint64_t mpccl_b_tmp(mpccl_build_t *b, uint64_t n);

#define MPCCL_DEPS(...) (const uint32_t[]){__VA_ARGS__}, \
    (uint32_t)(sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

static inline mpccl_ref_t mpccl_ref(uint32_t buf, uint64_t off)
{
    mpccl_ref_t r = {buf, off};
    return r;
}
static inline mpccl_ref_t mpccl_ref_add(mpccl_ref_t r, uint64_t n)
{
    r.off += n;
    return r;
}
static inline uint32_t mpccl_b_send(mpccl_build_t *b, int peer, mpccl_ref_t src, uint64_t n,
                                    const uint32_t *deps, uint32_t nd)
{
    return mpccl_b_step(b, MPCCL_STEP_SEND, peer, n, src, src, src, deps, nd);
}
static inline uint32_t mpccl_b_recv(mpccl_build_t *b, int peer, mpccl_ref_t dst, uint64_t n,
                                    const uint32_t *deps, uint32_t nd)
{
    return mpccl_b_step(b, MPCCL_STEP_RECV, peer, n, dst, dst, dst, deps, nd);
}
/* dst = src; nothing when dst and src are the same reference. */
uint32_t mpccl_b_copy(mpccl_build_t *b, mpccl_ref_t dst, mpccl_ref_t src, uint64_t n,
                      const uint32_t *deps, uint32_t nd);
static inline uint32_t mpccl_b_reduce(mpccl_build_t *b, mpccl_ref_t dst, mpccl_ref_t a, mpccl_ref_t c,
                                      uint64_t n, const uint32_t *deps, uint32_t nd)
{
    return mpccl_b_step(b, MPCCL_STEP_REDUCE, -1, n, dst, a, c, deps, nd);
}

/* Structural checks (tests, debugging): dependencies point backwards, peers are
 * in range and not this rank (except for p2p), message numbers count up per peer,
 * references lie inside IN (in_elems), TMP (tmp_elems) and OUT (out_elems). */
mpccl_status_t mpccl_sched_validate(const mpccl_sched_t *s, int rank, int nranks, uint64_t out_elems,
                                    int allow_self);

/* ---- Scratch slot pools (algo_schedule.c) -------------------------------------------
 * k slots of TMP used round-robin; taking a slot returns the step that last used
 * it, which the new user must depend on (write-after-read). */
#define MPCCL_POOL_MAX 8
typedef struct mpccl_pool {
    uint64_t off, slot;
    uint32_t k, next;
    uint32_t last[MPCCL_POOL_MAX];
} mpccl_pool_t;

void mpccl_pool_init(mpccl_build_t *b, mpccl_pool_t *p, uint32_t k, uint64_t slot_elems);
/* Returns the slot index; *ref its TMP reference, *war the dependency to honour. */
uint32_t mpccl_pool_get(mpccl_pool_t *p, mpccl_ref_t *ref, uint32_t *war);
/* The last step using slot i (it must depend on every earlier user). */
void mpccl_pool_put(mpccl_pool_t *p, uint32_t i, uint32_t step);

/* ---- Groups and segment layouts ----------------------------------------------- */
typedef struct mpccl_group {
    int n, me;         /* size, my index */
    const int *ranks;  /* global ranks, by index */
} mpccl_group_t;

/* n segments of a vector: stride 0 splits len as evenly as possible starting at
 * base (the first len % n segments one longer); otherwise segment k starts at
 * base + k * stride and is len long. */
typedef struct mpccl_segs {
    uint64_t base, stride, len;
} mpccl_segs_t;

static inline uint64_t mpccl_split_off(uint64_t len, uint64_t n, uint64_t k)
{
    return (len / n) * k + (k < len % n ? k : len % n);
}
static inline uint64_t mpccl_split_len(uint64_t len, uint64_t n, uint64_t k)
{
    return len / n + (k < len % n ? 1 : 0);
}
static inline uint64_t mpccl_seg_off(const mpccl_segs_t *l, int n, int k)
{
    return l->stride ? l->base + (uint64_t)k * l->stride : l->base + mpccl_split_off(l->len, (uint64_t)n, (uint64_t)k);
}
static inline uint64_t mpccl_seg_len(const mpccl_segs_t *l, int n, int k)
{
    return l->stride ? l->len : mpccl_split_len(l->len, (uint64_t)n, (uint64_t)k);
}
static inline uint64_t mpccl_div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* ---- Generators ------------------------------------------------------------------ */
typedef struct mpccl_gen {
    mpccl_build_t *b;
    const mpccl_coll_desc_t *d;
    const mpccl_topo_t *topo;
    uint64_t chunk;  /* elements per pipeline chunk (>= 1) */
    int alias;       /* IN and OUT overlap as d->in_place says (no prescale copy) */
    mpccl_group_t world; /* all ranks, index = rank */
} mpccl_gen_t;

/* Ring building blocks over a group, for one pipeline round (algo_allgather_rs.c).
 * Reduce-scatter: segments of inbuf per segs; my reduced segment goes to out; rd[k]
 * (n entries) receives the last step reading segment k of inbuf.  Returns the step
 * that wrote out. */
uint32_t mpccl_ring_rs(mpccl_build_t *b, const mpccl_group_t *g, uint32_t inbuf, const mpccl_segs_t *segs,
                       mpccl_ref_t out, mpccl_pool_t *pool, uint32_t *rd);
/* Allgather: my segment is at src once src_dep is done; everyone's land in outbuf
 * per segs (mine copied unless src is that place); war[k] (or NULL) must finish
 * before segment k of outbuf is written. */
void mpccl_ring_ag(mpccl_build_t *b, const mpccl_group_t *g, mpccl_ref_t src, uint32_t src_dep,
                   uint32_t outbuf, const mpccl_segs_t *segs, const uint32_t *war);
/* Allreduce of count elements at in into out (same offsets base) over a group. */
void mpccl_ring_allreduce(mpccl_build_t *b, const mpccl_group_t *g, uint32_t inbuf, uint32_t outbuf,
                          uint64_t base, uint64_t count, uint64_t chunk, mpccl_pool_t *pool, uint32_t *rd);
void mpccl_rd_allreduce(mpccl_build_t *b, const mpccl_group_t *g, mpccl_ref_t in, mpccl_ref_t out,
                        uint64_t count, mpccl_pool_t *pool);
/* Slots a ring allreduce with this chunk needs (pool sizing). */
uint64_t mpccl_ring_allreduce_slot(int n, uint64_t count, uint64_t chunk);

mpccl_status_t mpccl_algo_allreduce_ring(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_allreduce_rd(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_allreduce_hier(mpccl_gen_t *g);
int mpccl_hier_possible(const mpccl_topo_t *topo); /* equal nodes, more than one */
mpccl_status_t mpccl_algo_bcast_ring(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_bcast_tree(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_reduce_ring(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_reduce_tree(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_allgather_ring(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_allgather_direct(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_reducescatter_ring(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_reducescatter_direct(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_alltoall_direct(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_gather_direct(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_scatter_direct(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_send(mpccl_gen_t *g);
mpccl_status_t mpccl_algo_recv(mpccl_gen_t *g);

/* Appends DIVIDE on OUT[0..n) after everything so far (integer avg). */
void mpccl_gen_divide(mpccl_gen_t *g, uint64_t n);

/* ---- Planner internals (algo_plan.c), visible to tests -------------------------------- */
/* Parses an MPCCL_ALGO / NCCL_ALGO string: forced[c] gets the one algorithm left
 * for collective c (AUTO if several or all), allowed[c] the bit mask (1 << algo)
 * of those left.  Bad names get a warning and are ignored. */
void mpccl_algo_parse(const char *str, mpccl_algo_t forced[MPCCL_NUM_COLLS],
                      uint32_t allowed[MPCCL_NUM_COLLS]);
/* Elements of IN a rank reads and of OUT it writes for d (NCCL's count rules). */
uint64_t mpccl_coll_in_elems(const mpccl_coll_desc_t *d, int rank, int nranks);
uint64_t mpccl_coll_out_elems(const mpccl_coll_desc_t *d, int rank, int nranks);
/* Algorithms that can build collective c at all (bit mask). */
uint32_t mpccl_algo_valid(mpccl_coll_t c);
/* Modelled time in seconds of algorithm a for d on topo; a huge value when a
 * cannot serve the call. */
double mpccl_cost(const mpccl_topo_t *topo, const mpccl_coll_desc_t *d, mpccl_algo_t a, uint64_t chunk_bytes);
/* The model's choice among the bits of mask (AUTO if none can serve). */
mpccl_algo_t mpccl_model_choice(const mpccl_topo_t *topo, const mpccl_coll_desc_t *d, uint32_t mask,
                                uint64_t chunk_bytes);
/* Link cost parameters of the model (seconds, seconds per byte). */
typedef struct mpccl_link {
    double alpha, beta;
} mpccl_link_t;
extern const mpccl_link_t mpccl_link_intra, mpccl_link_inter;
/* Flat allreduce cost on n ranks over one link kind: ring or recursive doubling. */
double mpccl_cost_ar_ring(int n, double bytes, double chunk_bytes, mpccl_link_t l);
double mpccl_cost_ar_rd(int n, double bytes, mpccl_link_t l);

#endif
