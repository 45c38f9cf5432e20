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

#include "kernels/abort.h"
#include "kernels/flat_layout.h"
#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    /* alltoall or allgather out of place, not LL: the grid's last self_ctas
     * CTAs copy the own block, input to output, while the others move the
     * peers' blocks (on the move kernel, which fits two CTAs per SM) */
    int32_t self_ctas;
    mpccl_abort_arg_t ab; /* the communicator's abort word (kernels/abort.cuh) */
} mpccl_flat_args_t;

/* One send or receive of a p2p launch.  Both ends cut a message the same way
 * (from its size alone): ctas CTAs, sub bytes each per chunk.
 * LL messages (ll = 1, at most MPCCL_FLAT_P2P_LL_BYTES, both ends decide it
 * from the size alone): the sender stores 16-byte units {4 data bytes, chunk,
 * 4 data bytes, chunk} straight into the receiver's region and the receiver
 * polls the units themselves: no fence, no ready flag, and the receiver's
 * acknowledgement travels off the critical path (sub <= MPCCL_FLAT_P2P_LL_LANE).
 * Direct messages (sync = 1, both ends decide it from the size alone): before
 * the first chunk each end tells the other where its buffer is -- peer_buf,
 * the buffer as the other end's process sees it when it is ncclCommRegister'd
 * and mapped there, else NULL.  A registered receive buffer wins: the sender
 * stores straight into it (push).  Else a registered send buffer: the
 * receiver copies straight out of it (pull), and the sender waits for its
 * acknowledgements before the send completes.  Else the message is staged as
 * any other. */
#define MPCCL_FLAT_P2P_MAX_OPS 64
#define MPCCL_FLAT_P2P_FEW_OPS 4 /* launches of at most this many calls pass small arguments */
typedef struct mpccl_flat_p2p_op {
    char *buf;
    char *peer_buf; /* sync calls: buf as the peer's process sees it, or NULL (sends: NULL unless pull is on) */
    uint64_t bytes;
    int32_t peer;
    uint8_t send; /* 1: send, 0: receive */
    uint8_t sync; /* 1: both ends announce peer_buf before the first chunk */
    uint8_t ll;   /* 1: LL units (data and flag in one store) through the region's LL part; never sync */
    uint8_t pad;
    uint32_t ctas, sub;
} mpccl_flat_p2p_op_t;

typedef struct mpccl_flat_p2p_head {
    char *region[MPCCL_FLAT_MAX_RANKS];
    uint64_t p2p_off, p2p_slice;
    uint32_t stride; /* bytes between CTAs' areas in a p2p slice */
    int32_t rank, nranks, nops;
    uint32_t send_ctas; /* CTAs [0, send_ctas) send, the rest receive */
    mpccl_abort_arg_t ab; /* the communicator's abort word (kernels/abort.cuh) */
} mpccl_flat_p2p_head_t;

typedef struct mpccl_flat_p2p_args {
    mpccl_flat_p2p_head_t h;
    mpccl_flat_p2p_op_t ops[MPCCL_FLAT_P2P_MAX_OPS];
} mpccl_flat_p2p_args_t;

/* A collective whose buffers lie in windows registered with
 * NCCL_WIN_COLL_SYMMETRIC (at the same offset on every rank) or in
 * ncclCommRegister'd buffers: the kernel reads and writes the peers' buffers
 * themselves, nothing is staged in the region.
 * exchange 0 (windows): in[r] / out[r] are rank r's buffers as this device
 *   sees them where the mode touches them remotely, else only [rank] is set.
 * exchange 1 (registrations, each rank's at its own address): in[r] / out[r]
 *   for r != rank are THIS rank's buffers as rank r sees them; the kernel
 *   hands them to rank r through the barrier area and receives the peers'. */
typedef struct mpccl_flat_win_args {
    char *in[MPCCL_FLAT_MAX_RANKS];
    char *out[MPCCL_FLAT_MAX_RANKS];
    uint32_t *bar[MPCCL_FLAT_MAX_RANKS]; /* every rank's barrier area (flat_layout.h) */
    uint64_t count;   /* elements per block (allreduce: the whole vector) */
    uint64_t sub;     /* elements per CTA part of a block (a multiple of 16 bytes) */
    uint64_t divisor; /* > 0: integer average */
    int32_t rank, nranks, root;
    int32_t mode, dtype, op;
    int32_t exchange;
    int32_t moved;        /* WIN_ENTER / WIN_EXIT: the mode whose copies they surround */
    mpccl_abort_arg_t ab; /* the communicator's abort word (kernels/abort.cuh) */
} mpccl_flat_win_args_t;

/* The window kernel's two barrier-only modes, one CTA each, around copies
 * made by the copy engines (gpu/gpu_flat_ce.h): ENTER raises CTA 0's flags to
 * 2k+1 and waits for the peers'; EXIT fences, raises them to 2k+2, waits, and
 * advances CTA 0's epoch, as one window kernel's CTA 0 would. */
#define MPCCL_FLAT_WIN_ENTER (MPCCL_FLAT_NUM_MODES + 0)
#define MPCCL_FLAT_WIN_EXIT (MPCCL_FLAT_NUM_MODES + 1)

/* Modes: ALLREDUCE_2, REDUCESCATTER, ALLGATHER, ALLTOALL (not in place),
 * BROADCAST, REDUCE, WIN_ENTER, WIN_EXIT.  nctas <= MPCCL_FLAT_MAX_CTAS.
 * Only enqueues. */
mpccl_status_t mpccl_flat_win_launch(const mpccl_flat_win_args_t *a, uint32_t nctas, cudaStream_t stream);

/* Launches a p2p group (ops in program order) with nctas = send_ctas + the
 * largest ctas of its receives (at most 2 * MPCCL_FLAT_MAX_CTAS): sending and
 * receiving CTAs are separate, so a rank's outgoing stores over NVLink and its
 * copies out of incoming chunks run at the same time.  Only enqueues. */
mpccl_status_t mpccl_flat_p2p_launch(const mpccl_flat_p2p_args_t *a, uint32_t nctas, cudaStream_t stream);
/* Loads both flat p2p kernels into the current device's context now. */
mpccl_status_t mpccl_flat_p2p_load(void);

/* Launches the flat kernel with nctas CTAs on stream: the geometry's CTAs
 * (<= MPCCL_FLAT_MAX_CTAS, equal on every rank) plus a->self_ctas copy CTAs
 * (this rank's own choice), of nthreads threads each: MPCCL_FLAT_THREADS, or
 * for an LL launch a multiple of 32 down to 32 (every loop strides by
 * blockDim).  Only enqueues. */
mpccl_status_t mpccl_flat_launch(const mpccl_flat_args_t *a, uint32_t nctas, uint32_t nthreads, cudaStream_t stream);
/* Copies bytes from src to dst (on this device) with nctas CTAs.  Only enqueues. */
mpccl_status_t mpccl_flat_copy_launch(void *dst, const void *src, uint64_t bytes, uint32_t nctas,
                                      cudaStream_t stream);
/* Loads every flat kernel (collectives and windows, all datatypes) into the
 * current device's context now (lib/gpu/gpu_kernels_load.c says why). */
mpccl_status_t mpccl_flat_load(void);

#ifdef __cplusplus
}
#endif
#endif
