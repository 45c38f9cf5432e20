/* The planner: picks an algorithm for a call from size, datatype and topology with
 * a latency + bandwidth cost model, and builds its schedule. */
#ifndef MPCCL_PLAN_H
#define MPCCL_PLAN_H

#include "algo/algo_schedule.h"

typedef enum {
    MPCCL_COLL_ALLREDUCE = 0,
    MPCCL_COLL_BROADCAST,
    MPCCL_COLL_REDUCE,
    MPCCL_COLL_ALLGATHER,
    MPCCL_COLL_REDUCESCATTER,
    MPCCL_COLL_ALLTOALL,
    MPCCL_COLL_GATHER,
    MPCCL_COLL_SCATTER,
    MPCCL_COLL_SEND,
    MPCCL_COLL_RECV,
    MPCCL_NUM_COLLS
} mpccl_coll_t;

typedef enum {
    MPCCL_ALGO_AUTO = 0,
    MPCCL_ALGO_RING,   /* pipelined ring / chain: bandwidth */
    MPCCL_ALGO_RD,     /* recursive doubling / halving: latency */
    MPCCL_ALGO_TREE,   /* binomial tree (broadcast, reduce, gather, scatter) */
    MPCCL_ALGO_DIRECT, /* every pair at once (alltoall, gather, scatter, p2p, small n) */
    MPCCL_ALGO_HIER,   /* intra-node step, inter-node step between equal local ranks,
                        * intra-node step */
    MPCCL_NUM_ALGOS
} mpccl_algo_t;

/* Who is where.  node_of[r] is the node index of rank r (0..nnodes-1, numbered in
 * order of first appearance); local_rank[r] the rank's index among its node's
 * ranks; node_size[n] the ranks on node n. */
typedef struct mpccl_topo {
    int rank, nranks;
    int nnodes;
    int *node_of;
    int *local_rank;
    int *node_size;
} mpccl_topo_t;

typedef struct mpccl_coll_desc {
    mpccl_coll_t coll;
    uint64_t count;     /* NCCL's count argument for that collective */
    ncclDataType_t dt;
    mpccl_op_t op;      /* the element-wise op after mapping */
    int prescale;       /* PreMulSum or float avg: IN is the scaled input */
    int divide;         /* integer avg: divide the result by nranks at the end */
    int root;           /* broadcast/reduce/gather/scatter; peer for send/recv */
    int in_place;       /* the user's send and receive buffers overlap as NCCL's
                         * in-place rules allow */
} mpccl_coll_desc_t;

/* Tunables the planner reads (from the env table, once per communicator). */
typedef struct mpccl_plan_params {
    uint64_t chunk_bytes;                 /* pipelining granularity of ring/chain */
    mpccl_algo_t forced[MPCCL_NUM_COLLS]; /* MPCCL_ALGO / NCCL_ALGO; AUTO if none */
    int split_shares; /* mid sizes: at least two chunks per rank's share (params_init: 1) */
} mpccl_plan_params_t;

/* Fills params from the environment (MPCCL_ALGO, NCCL_ALGO, MPCCL_CHUNK_BYTES);
 * a value naming no algorithm gets a warning listing the valid names. */
mpccl_status_t mpccl_plan_params_init(mpccl_plan_params_t *p);

/* Builds the schedule for this rank; out is initialised by this call and must be
 * released with mpccl_sched_free.  A forced algorithm that cannot run this call
 * (e.g. HIER with unequal nodes) falls back to the model's choice, logged at INFO. */
mpccl_status_t mpccl_plan(const mpccl_topo_t *topo, const mpccl_coll_desc_t *d,
                          const mpccl_plan_params_t *p, mpccl_sched_t *out);
void mpccl_sched_free(mpccl_sched_t *s);

const char *mpccl_algo_name(mpccl_algo_t a);
const char *mpccl_coll_name(mpccl_coll_t c);

#endif
