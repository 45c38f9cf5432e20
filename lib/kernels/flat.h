/* Flat kernels: collectives of a communicator whose ranks all sit on one node
 * with P2P (NVLink) between every pair -- the common case, and the one where
 * latency and bandwidth are decided.  Instead of the device engine's general
 * schedules and mailbox handshakes, every rank stores its data straight into a
 * symmetric region of each peer, raises one flag per peer, waits for its peers'
 * flags and finishes locally.  One launch per call, one flag round per chunk.
 * See doc/GPU_DESIGN.md, "Flat kernels".  Plain C, included by C and CUDA. */
#ifndef MPCCL_FLAT_H
#define MPCCL_FLAT_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MPCCL_FLAT_MAX_RANKS 16 /* larger single-node communicators use the engine */
#define MPCCL_FLAT_MAX_CTAS 128 /* flags per (parity, source) */
#define MPCCL_FLAT_THREADS 512

#ifdef __CUDACC__
#define MPCCL_FLAT_HD __host__ __device__
#else
#define MPCCL_FLAT_HD
#endif

/* What one flat launch does.  "Block" is what one rank stores into one peer per
 * chunk; every mode exchanges flags with every peer per chunk, so a rank never
 * runs more than one chunk ahead of any peer (the region's two parities). */
typedef enum {
    MPCCL_FLAT_ALLREDUCE_1 = 0, /* one-shot: the whole input to everyone; everyone reduces all */
    MPCCL_FLAT_ALLREDUCE_2,     /* two-shot: slice j to rank j, j reduces it and stores it to everyone */
    MPCCL_FLAT_REDUCESCATTER,   /* block j of the input to rank j; j reduces */
    MPCCL_FLAT_ALLGATHER,       /* the input to everyone */
    MPCCL_FLAT_ALLTOALL,        /* block j of the input to rank j */
    MPCCL_FLAT_BROADCAST,       /* root's input to everyone */
    MPCCL_FLAT_REDUCE,          /* everyone's input to root; root reduces */
    MPCCL_FLAT_GATHER,          /* everyone's input to root */
    MPCCL_FLAT_SCATTER,         /* root's block j to rank j */
    MPCCL_FLAT_NUM_MODES
} mpccl_flat_mode_t;

/* The region every rank allocates (same geometry everywhere, agreed at setup):
 *   data  [parity 2][source nranks][slice_bytes]
 *   flags [phase 2][parity 2][source nranks][MPCCL_FLAT_MAX_CTAS] uint32
 *   ctr   [2] uint32: chunks completed ever, CTAs finished in this launch
 *   ll    [parity 2][source nranks][ll_area] LL units (ll_area: twice the largest
 *         LL block, plus rounding room for every CTA)
 * A source's slice of one parity is cut into per-CTA areas of `stride` bytes
 * (two-shot: the first half of the slice for phase 1, the second for phase 2).
 *
 * LL ("low latency", small calls of one chunk): data travels in 16-byte units
 * {4 data bytes, seq, 4 data bytes, seq}, so the receiver polls the data itself
 * and no fence or separate flag is needed; a pair with no data for this call
 * exchanges a token in the flags instead, so nobody runs ahead. */
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_flags_off(int nranks, uint64_t slice_bytes)
{
    return 2ull * (uint64_t)nranks * slice_bytes;
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_ctr_off(int nranks, uint64_t slice_bytes)
{
    return mpccl_flat_flags_off(nranks, slice_bytes) + 4ull * nranks * MPCCL_FLAT_MAX_CTAS * sizeof(uint32_t);
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_ll_off(int nranks, uint64_t slice_bytes)
{
    return mpccl_flat_ctr_off(nranks, slice_bytes) + 256;
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_ll_area(uint64_t ll_max)
{
    return ll_max ? 2ull * ll_max + 32ull * MPCCL_FLAT_MAX_CTAS : 0;
}
/* Point-to-point (a group's send/recv calls of one communicator) has its own
 * part after the LL area: pairs talk without the other ranks, so they count
 * their own chunks and the receiver acknowledges each one.
 *   data   [source N][parity 2][p2p_slice]
 *   ready  [source N][parity 2][CTA] uint32   raised by the source (chunk number)
 *   ack    [destination N][CTA] uint32        raised by the destination in my region
 *   tx, rx [peer N][CTA] uint32               chunks sent to / received from each peer (mine) */
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_p2p_off(int nranks, uint64_t slice_bytes, uint64_t ll_max)
{
    return mpccl_flat_ll_off(nranks, slice_bytes) + 2ull * (uint64_t)nranks * mpccl_flat_ll_area(ll_max);
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_p2p_bytes(int nranks, uint64_t p2p_slice)
{
    return 2ull * (uint64_t)nranks * p2p_slice + 5ull * (uint64_t)nranks * MPCCL_FLAT_MAX_CTAS * sizeof(uint32_t);
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_region_bytes(int nranks, uint64_t slice_bytes, uint64_t ll_max,
                                                            uint64_t p2p_slice)
{
    return mpccl_flat_p2p_off(nranks, slice_bytes, ll_max) + mpccl_flat_p2p_bytes(nranks, p2p_slice);
}

/* Passed by value to the kernel. */
typedef struct mpccl_flat_args {
    char *region[MPCCL_FLAT_MAX_RANKS]; /* every rank's region as this device sees it */
    const void *in;
    void *out;
    uint64_t count;       /* elements per block (allreduce: the whole vector) */
    uint64_t slice_bytes; /* per (parity, source) */
    uint64_t ll_bytes;    /* LL area per (parity, source); 0: this launch does not use LL */
    uint64_t divisor;     /* > 0: integer average, divide the reduced values */
    uint32_t sub_elems;   /* elements per CTA per block and chunk */
    uint32_t stride;      /* bytes between the CTAs' areas in a slice (phase), or in the LL area */
    int32_t rank, nranks, root;
    int32_t mode, dtype, op;
} mpccl_flat_args_t;

/* One send or receive of a p2p launch.  Both ends cut a message the same way
 * (from its size alone): ctas CTAs, sub bytes each per chunk. */
#define MPCCL_FLAT_P2P_MAX_OPS 64
typedef struct mpccl_flat_p2p_op {
    char *buf;
    uint64_t bytes;
    int32_t peer;
    uint32_t send; /* 1: send, 0: receive */
    uint32_t ctas, sub;
} mpccl_flat_p2p_op_t;

typedef struct mpccl_flat_p2p_args {
    char *region[MPCCL_FLAT_MAX_RANKS];
    uint64_t p2p_off, p2p_slice;
    uint32_t stride; /* bytes between CTAs' areas in a p2p slice */
    int32_t rank, nranks, nops;
    mpccl_flat_p2p_op_t ops[MPCCL_FLAT_P2P_MAX_OPS];
} mpccl_flat_p2p_args_t;

/* Launches a p2p group (ops in program order) with nctas = the largest ctas of
 * its ops.  Only enqueues. */
mpccl_status_t mpccl_flat_p2p_launch(const mpccl_flat_p2p_args_t *a, uint32_t nctas, cudaStream_t stream);

/* Launches the flat kernel with nctas CTAs (<= MPCCL_FLAT_MAX_CTAS, equal on
 * every rank) on stream.  Only enqueues. */
mpccl_status_t mpccl_flat_launch(const mpccl_flat_args_t *a, uint32_t nctas, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
