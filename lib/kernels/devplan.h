/* The device form of a schedule and of the links between ranks: the contract
 * between the host side of the GPU executor (lib/gpu_*.c, lib/proxy/proxy.c) and the
 * device engine (lib/kernels/engine.cu).  Plain C, included by C and CUDA.
 * See doc/GPU_DESIGN.md. */
#ifndef MPCCL_DEVPLAN_H
#define MPCCL_DEVPLAN_H

#include <stdint.h>

#include "kernels/abort.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Step kinds and buffer ids are those of lib/algo/algo_schedule.h (MPCCL_STEP_*, MPCCL_BUF_*). */

/* One step as the device reads it (32-bit fields where the host form has wider
 * ones that cannot exceed 32 bits). */
typedef struct mpccl_dev_step {
    uint8_t kind;       /* MPCCL_STEP_* */
    uint8_t dst_buf, src0_buf, src1_buf; /* MPCCL_BUF_* */
    int32_t peer;       /* SEND/RECV: communicator rank */
    uint32_t dep_first; /* into mpccl_dev_plan_t.deps */
    uint32_t ndeps;
    uint32_t flags;     /* MPCCL_DEV_STEP_* */
    uint32_t pad;
    uint64_t count;     /* elements */
    uint64_t dst_off, src0_off, src1_off; /* elements */
} mpccl_dev_step_t;

/* A later step waits for this one through its completion counter (a
 * dependency with local = 0 names it).  Only such steps pay for the counter:
 * a GPU-scope fence and an atomic per CTA, the fence waiting for the CTA's
 * writes over PCIe or NVLink to land. */
#define MPCCL_DEV_STEP_COUNTED 1u

/* A dependency.  local = 1: the dependent step accesses exactly the element
 * ranges the earlier step accessed where they overlap (same buffer, offset and
 * count), so CTA g only needs its own part of the earlier step done.  local = 0:
 * wait until every CTA finished the earlier step (its completion counter). */
typedef struct mpccl_dev_dep {
    uint32_t step;
    uint32_t local;
} mpccl_dev_dep_t;

/* A plan in device memory: immutable after upload, except the counters, which
 * only grow (so replaying a captured graph needs no reset). */
typedef struct mpccl_dev_plan {
    const mpccl_dev_step_t *steps;
    const mpccl_dev_dep_t *deps;
    uint32_t nsteps;
    uint32_t window;          /* steps a CTA keeps in progress at once */
    uint32_t *step_done;      /* [nsteps] CTAs that finished the step, ever */
    uint32_t *launches;       /* [1] launches begun: epoch = value at kernel start */
    uint32_t *ctas_finished;  /* [1] CTAs finished, ever: the last CTA of a launch
                               * (ctas_finished % nctas == 0 after its add)
                               * advances *launches */
} mpccl_dev_plan_t;

/* Link kinds (per peer). */
enum {
    MPCCL_LINK_NONE = 0, /* this rank itself, or a peer never messaged */
    MPCCL_LINK_NVLINK,   /* same node, peer device memory mapped (CUDA IPC / P2P) */
    MPCCL_LINK_HOST,     /* same node without P2P: mailbox in shared pinned host memory */
    MPCCL_LINK_PROXY     /* other node: staging driven by the proxy thread (pinned host memory;
                          * the slots in device memory with MPCCL_GPU_DIRECT=1) */
};

/* LL pieces to another node (PROXY links, staged): a piece of at most the
 * communicator's proxy_ll_bytes (itself at most MPCCL_PROXY_LL_MAX) travels as
 * 16-byte lines {data 4 B, flag, data 4 B, flag}, each line one store, the flag
 * MPCCL_PROXY_LL_FLAG(piece).  The sender raises the piece without a system
 * fence (1.6 us a piece): the proxy sends it once every line's flags show up
 * in host memory, and zeroes the slot's lines after the send so that no stale
 * word can pass for a flag.  tx_word's high half carries MPCCL_PROXY_LL_BIT. */
#define MPCCL_PROXY_LL_MAX 8192u
#define MPCCL_PROXY_LL_BIT 0x80000000u
#define MPCCL_PROXY_LL_FLAG(p) ((uint32_t)(p) | 0x80000000u)
#define MPCCL_PROXY_LL_LINES(bytes) (((bytes) + 7u) / 8u) /* 16-byte lines of a payload */

/* Whole messages to another node (PROXY links, GPU-direct): where what is left
 * of a CTA's part of a message is at least the communicator's proxy_whole_bytes
 * (0: never), the proxy moves it in one transfer of at most
 * MPCCL_PROXY_WHOLE_MAX bytes straight from the source buffer into the
 * destination buffer, with no copy into or out of slots.  The CTA writes the
 * buffer's address and length into its channel's descriptor and raises its seq
 * (the channel's whole transfers so far + 1, release) -- a send once the data
 * is there, a receive once the buffer may be written -- and waits until the
 * proxy's done word shows that seq: the send finished with the buffer, or the
 * receive landed (acquire).  One transfer per channel and direction at a time.
 * They have a sequence of their own; slot pieces keep theirs. */
#define MPCCL_PROXY_WHOLE_MAX (1u << 30)

/* Eager pieces to another node (PROXY links, staged): over a network whose
 * transport sends a message of up to some size at once and a larger one by a
 * rendezvous that costs round trips (UCX over TCP: eager to 65528 bytes), a
 * piece just over that size is the slowest there is.  So where the
 * communicator's proxy_eager_bytes is set (0: never), what is left of a
 * CTA's part goes in pieces of at most that many bytes once it is at most
 * MPCCL_PROXY_EAGER_PIECES of them -- or always, where a slot holds fewer
 * than that -- and in whole slots before. */
#define MPCCL_PROXY_EAGER_PIECES 4u

typedef struct mpccl_dev_whole {
    uint64_t addr;  /* device address of the data (send) or the destination (receive) */
    uint32_t bytes;
    uint32_t seq;   /* raised last */
} mpccl_dev_whole_t;

/* Where this rank writes to and reads from one peer.  Arrays are indexed
 * [cta][slot] (slot < nslots) and each slot holds slot_bytes.  Piece p of a
 * (pair, cta) channel uses slot p % nslots; ready/len hold p + 1 / the byte count
 * of the piece once it is there; ack holds the number of pieces consumed. */
typedef struct mpccl_dev_link {
    uint32_t kind;
    uint32_t pad;
    /* sending to the peer */
    char *tx_slots;                  /* in the peer's mailbox (NVLINK/HOST) or local staging (PROXY) */
    volatile uint32_t *tx_ready;     /* [cta][slot], next to tx_slots */
    volatile uint32_t *tx_len;       /* [cta][slot] */
    volatile uint32_t *tx_ack;       /* [cta], in this rank's memory; the peer (or proxy) writes it */
    volatile uint64_t *tx_word;      /* [cta][slot] (PROXY, instead of tx_ready / tx_len): ready in the
                                      * low half, length (| MPCCL_PROXY_LL_BIT) in the high half, one
                                      * store, so the proxy never pairs a ready with a stale length */
    /* receiving from the peer */
    const char *rx_slots;            /* in this rank's mailbox / staging */
    volatile uint32_t *rx_ready;     /* [cta][slot] (NVLINK/HOST) */
    volatile uint32_t *rx_len;       /* [cta][slot] (NVLINK/HOST) */
    volatile uint64_t *rx_word;      /* [cta][slot] (PROXY, instead of the two above): ready in the
                                      * low half, length in the high half, one store by the proxy,
                                      * so one load over PCIe tells the kernel both */
    volatile uint32_t *rx_ack;       /* [cta], in the peer's memory (or staging for the proxy) */
    /* whole messages (PROXY links with GPU-direct, else NULL): [cta] descriptors
     * the kernel writes and done words the proxy writes, per direction */
    volatile mpccl_dev_whole_t *tx_whole, *rx_whole;
    volatile uint32_t *tx_whole_done, *rx_whole_done;
} mpccl_dev_link_t;

/* Per communicator, in device memory. */
typedef struct mpccl_dev_comm {
    int32_t rank, nranks;
    uint32_t nctas;      /* G: CTAs per launch, equal on every rank */
    uint32_t nslots;     /* K */
    uint32_t slot_bytes; /* bytes per slot (per CTA), a multiple of 16 */
    uint32_t cta_min_bytes; /* a step gives each CTA at least this much (its
                             * partition, mpccl_dev_partition), equal on every rank */
    uint32_t proxy_ll_bytes; /* pieces to other nodes of at most this many bytes go as LL
                              * lines (0: none), equal on every rank */
    uint32_t proxy_whole_bytes; /* what is left of a CTA's part of a message to another node
                                 * goes whole from this many bytes on (0: never), equal on
                                 * every rank */
    uint32_t proxy_eager_bytes; /* pieces to another node of at most this many bytes near the
                                 * end of a CTA's part (above; 0: slots only), equal on every
                                 * rank */
    const mpccl_dev_link_t *links; /* [nranks] */
    uint32_t *tx_seq;    /* [nranks][nctas] pieces sent to each peer, ever */
    uint32_t *rx_seq;    /* [nranks][nctas] pieces received from each peer, ever */
    uint32_t *tx_acked;  /* [nranks][nctas] the latest tx_ack a sender read: while it shows a
                          * slot free, the sender skips reading the link's ack (host memory
                          * for PROXY links, another GPU's for NVLINK ones) */
    uint32_t *rx_clean;  /* [nranks][nctas][nslots] (PROXY links): the slot's first this many
                          * 16-byte lines hold LL lines of earlier pieces, no other data, so
                          * an LL piece of at most that many lines is read as it lands,
                          * its flags telling which lines are there (NULL: never) */
} mpccl_dev_comm_t;

/* A step of a plan the small-call kernel runs (lib/kernels/engine_small.cu),
 * flattened on the host when the plan is made (lib/kernels/plan_small.h):
 * with what the engine looks up at run time already resolved -- its
 * dependencies and the earlier messages of its channel as bit masks over the
 * plan's at most 32 steps, its channel's pointers on CTA 0 -- so that a
 * thread loads its step and then only the channel's counters. */
typedef struct mpccl_dev_small_step {
    uint8_t kind;                        /* MPCCL_STEP_* */
    uint8_t dst_buf, src0_buf, src1_buf; /* MPCCL_BUF_* */
    int32_t peer;                        /* SEND/RECV */
    uint32_t deps;                       /* bit j: waits for step j */
    uint32_t before;                     /* bit j: step j is an earlier message with data of the same
                                          * direction and peer (message order; the piece number) */
    uint64_t count;                      /* elements */
    uint64_t dst_off, src0_off, src1_off; /* elements */
    char *slots;                         /* SEND: the link's tx_slots, RECV: rx_slots (CTA 0's first) */
    volatile uint64_t *word;             /* tx_word / rx_word of CTA 0's first slot */
    volatile uint32_t *ack;              /* tx_ack / rx_ack of CTA 0 */
    uint32_t *seq;                       /* the channel's tx_seq / rx_seq (mpccl_dev_comm_t) */
    uint32_t *known;                     /* the channel's tx_acked / first rx_clean (NULL: none) */
} mpccl_dev_small_step_t;

/* Buffers a launch can name: IN, OUT, TMP, then one per call of a grouped p2p
 * launch (ids 3.. in call order). */
#define MPCCL_ENGINE_MAX_BUFS 64

/* What one launch needs (passed by value as the kernel argument). */
typedef struct mpccl_engine_args {
    const mpccl_dev_comm_t *comm; /* device pointer */
    const mpccl_dev_plan_t *plan; /* device pointer */
    void *buf[MPCCL_ENGINE_MAX_BUFS]; /* IN, OUT, TMP, p2p buffers: device-accessible */
    int32_t dtype;                /* ncclDataType_t */
    int32_t op;                   /* mpccl_op_t */
    uint64_t divisor;             /* STEP_DIVIDE */
    unsigned char scalar[8];      /* STEP_SCALE: one element of dtype */
    mpccl_abort_arg_t ab;         /* the communicator's abort word (kernels/abort.cuh) */
    /* the small-call kernel's plan (device pointer, NULL for the engine) and
     * what it needs of the communicator without a load */
    const mpccl_dev_small_step_t *small;
    uint32_t small_nsteps, nslots, slot_bytes, pad;
} mpccl_engine_args_t;

/* Partition of a step's count among the CTAs: CTA g owns elements
 * [begin, end).  Both ends of a message compute it the same way.  Every CTA
 * with data gets at least min_bytes (rounded to elements), so a small message
 * is a few full pieces instead of one sliver per CTA: between nodes each piece
 * is a proxy round of its own, and slivers cost more than they parallelize. */
#ifdef __CUDACC__
#define MPCCL_HOST_DEVICE __host__ __device__
#else
#define MPCCL_HOST_DEVICE
#endif

static inline MPCCL_HOST_DEVICE void mpccl_dev_partition(uint64_t count, uint32_t elem_size, uint32_t nctas,
                                                         uint32_t min_bytes, uint32_t g, uint64_t *begin,
                                                         uint64_t *end)
{
    uint64_t align = elem_size >= 16 ? 1 : 16 / elem_size; /* 16-byte multiples */
    uint64_t per = (count + nctas - 1) / nctas;
    uint64_t least = ((uint64_t)min_bytes + elem_size - 1) / elem_size;
    if (per < least) per = least;
    per = (per + align - 1) / align * align;
    uint64_t b = per * g, e = b + per;
    if (b > count) b = count;
    if (e > count) e = count;
    *begin = b;
    *end = e;
}

/* The next piece through a slot when left elements of the CTA's part remain
 * (eager_bytes: the communicator's proxy_eager_bytes on PROXY links, else 0). */
static inline MPCCL_HOST_DEVICE uint64_t mpccl_dev_slot_piece(uint64_t left, uint32_t elem_size, uint32_t slot_bytes,
                                                             uint32_t eager_bytes)
{
    uint64_t most = slot_bytes / elem_size;
    if (eager_bytes >= elem_size && eager_bytes < slot_bytes &&
        (left * elem_size <= (uint64_t)MPCCL_PROXY_EAGER_PIECES * eager_bytes ||
         slot_bytes < MPCCL_PROXY_EAGER_PIECES * eager_bytes))
        most = eager_bytes / elem_size;
    return left < most ? left : most;
}

/* The next piece of a message to or from another node when left elements of
 * the CTA's part remain: its elements, and whether it goes whole (above) or
 * through a slot.  The engine cuts messages with it, the host counts the
 * pieces the proxy will move with it (plan.c). */
static inline MPCCL_HOST_DEVICE uint64_t mpccl_dev_proxy_piece(uint64_t left, uint32_t elem_size,
                                                              uint32_t slot_bytes, uint32_t whole_bytes,
                                                              uint32_t eager_bytes, int *whole)
{
    *whole = whole_bytes && left * elem_size >= whole_bytes;
    if (!*whole) return mpccl_dev_slot_piece(left, elem_size, slot_bytes, eager_bytes);
    uint64_t most = MPCCL_PROXY_WHOLE_MAX / elem_size;
    return left < most ? left : most;
}

#ifdef __cplusplus
}
#endif
#endif
