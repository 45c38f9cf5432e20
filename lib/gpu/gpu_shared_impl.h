/* The shared-device path's internals, common to its collectives
 * (gpu_shared.c) and its point-to-point (gpu_shared_p2p.c): the segment every
 * rank maps, the caches of buffer descriptions.  Only built with CUDA. */
#ifndef MPCCL_GPU_SHARED_IMPL_H
#define MPCCL_GPU_SHARED_IMPL_H

#include "cuda/cuda_rt.h"

#ifdef MPCCL_HAVE_CUDA
#include <stdint.h>

#include "cuda/cuda_ipc.h"
#include "gpu/gpu_shared.h"
#include "gpu/gpu_state.h"
#include "kernels/shared_dev.h"

#define SHR_CACHE 16            /* buffers remembered per rank (exports, imports) */
#define SHR_UNIT_BYTES (64 << 10) /* a CTA's piece of a group per pass */

/* How the leader reaches one buffer of a rank: the allocation and the offset. */
typedef struct {
    int32_t present;       /* 0: the call passes no buffer here (NULL or unused) */
    int32_t pad;
    uint64_t offset;       /* from the allocation's base */
    uint64_t buffer_id;    /* CU_POINTER_ATTRIBUTE_BUFFER_ID: a freed, reused base differs */
    mpccl_ipc_desc_t desc;
} buf_ref_t;

/* One rank's call, as the leader reads it. */
typedef struct {
    volatile uint64_t arrive; /* the seq whose description below is complete (release store) */
    int32_t coll, dt, op, root;
    uint64_t count;
    int32_t scaled;           /* 1: the leader multiplies this rank's input by scalar */
    int32_t pad;
    uint64_t divisor;
    uint64_t scalar;          /* one element of dt */
    buf_ref_t in, out;
    char pad2[64];
} slot_t;

/* The segment all ranks map (POSIX shared memory, named once, unlinked as
 * soon as every rank mapped it). */
typedef struct {
    volatile uint64_t done;     /* written last by the leader's launch of call seq */
    char pad[56];
    volatile uint64_t fail_seq; /* the leader refused call fail_seq: fail_msg says why */
    char fail_msg[512];
    slot_t slot[];              /* [nranks] */
} seg_t;

typedef struct {
    uint64_t base, buffer_id, size;
    mpccl_ipc_desc_t desc;
    void *mapped; /* leader: the import */
    uint64_t used;
} cache_ent_t;

/* Point-to-point between two ranks of the path (gpu_shared_p2p.c): the
 * sender posts, the receiver copies and acknowledges, in order. */
#define SHR_RING 8
typedef struct {
    buf_ref_t ref;
    uint64_t bytes;
    volatile int32_t status; /* the receiver's verdict, written before tail moves past the entry */
    int32_t pad;
} ring_ent_t;
typedef struct {
    volatile uint64_t head; /* entries posted by the sender */
    char pad[56];
    volatile uint64_t tail; /* entries the receiver copied */
    char pad2[56];
    ring_ent_t e[SHR_RING];
} mpccl_shr_ring_t;

struct mpccl_gpu_shared {
    ncclComm_t comm;
    int rank, nranks, leader;
    int nctas;
    uint64_t seq;
    seg_t *seg;
    size_t seg_bytes;
    uint64_t *done_dev;        /* leader: the device view of seg->done */
    uint32_t *counter;         /* leader: the launches' CTA counter (device) */
    cache_ent_t exports[SHR_CACHE];   /* a follower's */
    cache_ent_t *imports;             /* leader: [nranks][SHR_CACHE] */
    uint64_t tick;
    scratch_block_t *stage_in, *stage_out; /* buffers IPC cannot share, staged */
    scratch_block_t *scratch;              /* leader: in-place alltoall, device-scalar prescale */
    scratch_block_t *stage_p2p;            /* sends IPC cannot share */
    size_t rings_off;                      /* [nranks sender][nranks receiver] rings in seg */
    uint64_t *sent, *recvd;                /* [nranks] messages posted to / taken from each peer */
    /* leader: its launches share the CTA counter and the scratch, so a
     * launch on another stream than the last waits for the last one */
    cudaEvent_t last_done;
    mpccl_shr_args_t args; /* leader: the launch arguments being built */
    cudaStream_t last_stream;
    int have_last;
};

/* The ring from sender s to receiver r. */
static inline mpccl_shr_ring_t *mpccl_shr_ring(const mpccl_gpu_shared_t *sh, int s, int r)
{
    return (mpccl_shr_ring_t *)((char *)sh->seg + sh->rings_off) + (size_t)s * sh->nranks + r;
}

/* gpu_shared.c */
int mpccl_shr_export_ref(mpccl_gpu_shared_t *sh, const void *p, buf_ref_t *ref);
mpccl_status_t mpccl_shr_import_ref(mpccl_gpu_shared_t *sh, int r, const buf_ref_t *ref, char **out);
typedef struct {
    unsigned n;     /* idle passes since the last progress */
    double start;   /* when the checks began */
    int64_t timeout;
} mpccl_shr_waiter_t;
/* One idle pass of a wait: spin, yield or sleep, and now and then check for
 * abort, a failed communicator and MPCCL_OP_TIMEOUT.  Reset w on progress. */
mpccl_status_t mpccl_shr_idle(mpccl_gpu_shared_t *sh, mpccl_shr_waiter_t *w, const char *fn, const char *what);
typedef int (*ready_fn_t)(const mpccl_gpu_shared_t *sh, uint64_t seq);
mpccl_status_t mpccl_shr_wait(mpccl_gpu_shared_t *sh, uint64_t seq, ready_fn_t ready, const char *fn,
                              const char *what);


#endif /* MPCCL_HAVE_CUDA */
#endif
