/* The abort word of a GPU communicator and its hang record: one small struct
 * in pinned, host-mapped memory per communicator (lib/gpu/gpu_abort.c), read
 * by every wait loop of every kernel (lib/kernels/abort.cuh) off the fast
 * path.  Plain C, included by C and CUDA.  See doc/RELIABILITY.md,
 * "GPU communicators". */
#ifndef MPCCL_KERNELS_ABORT_H
#define MPCCL_KERNELS_ABORT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a kernel was doing when it gave up (kind of the hang record). */
enum {
    MPCCL_ABORT_OP_NONE = 0,
    MPCCL_ABORT_OP_FLAT,     /* flat collective (LL, one-shot, two-shot): mode in sub */
    MPCCL_ABORT_OP_FLAT_WIN, /* flat collective on windows / registered buffers: mode in sub */
    MPCCL_ABORT_OP_FLAT_P2P, /* flat send/recv group */
    MPCCL_ABORT_OP_ENGINE,   /* device engine (multi-step schedule, proxy-driven steps) */
    MPCCL_ABORT_OP_OS_WAIT,  /* one-sided wait for signals */
    MPCCL_ABORT_OP_OS_PUT    /* one-sided put to another node (staging slot) */
};

typedef struct mpccl_gpu_abort {
    /* written by the host */
    volatile uint32_t stop;  /* nonzero: every kernel of the communicator leaves its loops */
    uint32_t pad0;
    uint64_t timeout_ns;     /* MPCCL_OP_TIMEOUT in ns; 0: wait forever */
    /* written once by the first kernel that timed out (claimed through hung) */
    volatile uint32_t hung;  /* 0, then 1 while being written, then 2 once complete */
    int32_t op;              /* MPCCL_ABORT_OP_* */
    int32_t sub;             /* flat mode, or 0 */
    int32_t peer;            /* the rank it waited for, -1 if unknown */
    uint32_t seq;            /* the communicator's launch number (host side count) */
    int32_t dtype;           /* ncclDataType_t, -1 if none */
    uint64_t count;          /* elements (flat: per block), bytes for p2p / puts */
    uint32_t want;           /* the flag value it waited for, 0 if none */
    uint32_t seen;           /* the peer's flag value it last saw (what the peer completed) */
    /* Where a kernel waits now, for hang reports (lib/core/hang_report.c):
     * written at every slow check of a wait that lasts (every
     * MPCCL_ABORT_SPINS spins, beside the read of stop), by any CTA, the last
     * writer winning; wait_stamp last. */
    uint32_t wait_seq;       /* launch number */
    int32_t wait_op, wait_sub, wait_peer;
    uint32_t wait_want, wait_seen; /* the flag value awaited, and the peer's value seen */
    uint64_t wait_stamp;     /* %globaltimer of the write; 0: no kernel waited long yet */
} mpccl_gpu_abort_t;

/* Passed by value in every kernel's arguments (16 bytes). */
typedef struct mpccl_abort_arg {
    mpccl_gpu_abort_t *word; /* device pointer of the mapped struct; NULL: not abortable */
    uint32_t seq;            /* launch number for the hang record */
    uint32_t pad;
} mpccl_abort_arg_t;

#ifdef __cplusplus
}
#endif
#endif
