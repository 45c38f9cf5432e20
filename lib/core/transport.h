/* Point-to-point transport between the ranks of one communicator (UCX today).
 * Non-blocking: a request is caller-owned storage that the transport marks done. */
#ifndef MPCCL_TRANSPORT_H
#define MPCCL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include "bootstrap/bootstrap.h"
#include "util/status.h"

typedef struct mpccl_req {
    volatile int done;     /* set to 1 when complete (successfully or not) */
    mpccl_status_t status; /* valid once done */
    size_t bytes;          /* receives: the length of the message that arrived */
#define MPCCL_REQ_HAS_BYTES 1
    void *impl;            /* the transport's handle while in flight */
    int ahead;             /* a receive posted ahead of need (the GPU proxy's slots): its
                            * connection failing is logged at INFO, the owner reports it */
} mpccl_req_t;

typedef struct mpccl_transport mpccl_transport_t;

struct mpccl_transport_ops {
    /* Messages match by (peer, tag) exactly; a receive must be at least as large
     * as the message (a larger message is an error on the request). */
    mpccl_status_t (*isend)(mpccl_transport_t *t, int peer, uint64_t tag, const void *buf,
                            size_t bytes, mpccl_req_t *req);
    mpccl_status_t (*irecv)(mpccl_transport_t *t, int peer, uint64_t tag, void *buf,
                            size_t bytes, mpccl_req_t *req);
    /* Drives communication; returns the number of events handled (0: nothing). */
    int (*progress)(mpccl_transport_t *t);
    /* Called by a waiting loop after progress returned 0 repeatedly: give the CPU
     * away (ranks oversubscribe cores in tests) without sleeping long. */
    void (*idle)(mpccl_transport_t *t);
    /* Cancels an in-flight request (abort, errors); it completes with an error. */
    void (*cancel)(mpccl_transport_t *t, mpccl_req_t *req);
    /* force=0: flush outstanding traffic first (destroy); 1: drop it (abort). */
    void (*close)(mpccl_transport_t *t, int force);
    /* One-sided (windows): NULL where the transport has none. */
    mpccl_status_t (*put)(mpccl_transport_t *t, int peer, const void *src, size_t bytes,
                          uint64_t remote_addr, void *rkey, mpccl_req_t *req);
    mpccl_status_t (*atomic_add)(mpccl_transport_t *t, int peer, uint64_t value,
                                 uint64_t remote_addr, void *rkey, mpccl_req_t *req);
    /* put from a region (region_open below): no memory detection on this
     * thread.  fence: operations issued before it complete at their targets
     * before any issued after it begins.  NULL where the transport has none. */
    mpccl_status_t (*put_region)(mpccl_transport_t *t, int peer, const void *src, size_t bytes, void *region,
                                 uint64_t remote_addr, void *rkey, mpccl_req_t *req);
    mpccl_status_t (*fence)(mpccl_transport_t *t);
    /* Remote completion: req ends once every operation issued to peer so far
     * has completed there, including the protocol
     * messages this rank still owes its peers (rendezvous acknowledgements,
     * completions of emulated one-sided operations), which leave only while
     * the transport is progressed.  NULL: nothing is ever left owed. */
    mpccl_status_t (*flush)(mpccl_transport_t *t, int peer, mpccl_req_t *req);
    /* Whether a host call drains peer before returning (core/comm_drain.h):
     * 1 where what this rank owes peer can wait in its own queues and a flush
     * completes without peer's help (shared memory); 0 where a flush waits
     * for peer's acknowledgement (network endpoints: another machine, or
     * this one reached over tcp), which a peer busy
     * outside the library -- in an MPI barrier, computing -- never sends:
     * the drain would deadlock with it.  NULL: drain no peer. */
    int (*drains)(mpccl_transport_t *t, int peer);
    /* The largest message peer sends eagerly: receiving it owes peer nothing
     * back (no rendezvous acknowledgement), so a call that received nothing
     * larger from peer skips its drain.  0: not known (drain after any
     * receive).  NULL: the same as 0. */
    size_t (*eager_max)(mpccl_transport_t *t, int peer);
    /* Sleeping until traffic arrives (optional; NULL: the transport cannot tell).
     * Asks to be told of the next arrival and returns a file descriptor that turns
     * readable then; MPCCL_ARM_BUSY when something already waits to be progressed
     * (progress, do not sleep); MPCCL_ARM_NONE when this transport cannot notify
     * (the caller must poll).  Only the thread that drives the transport calls it. */
    int (*arm)(mpccl_transport_t *t);
    /* Regions sent from and received into over and over (the GPU proxy's slots;
     * optional, NULL: use isend/irecv).  region_open tells the transport once
     * what memory [buf, buf + bytes) is -- MPCCL_REGION_HOST, or MPCCL_REGION_DEVICE
     * (CUDA memory, which it registers then) -- so that the *_region calls on
     * it skip the per-call memory detection, which for device memory runs CUDA
     * calls on the calling thread.  Call region_open on a thread that may make
     * CUDA calls (no kernel waiting for this transport); region_close after
     * the last request on the region completed or was cancelled.  buf NULL
     * and bytes 0: any memory of that kind (buffers the caller does not own:
     * requests carry the memory type only, nothing is registered here). */
    mpccl_status_t (*region_open)(mpccl_transport_t *t, void *buf, size_t bytes, int kind, void **region);
    void (*region_close)(mpccl_transport_t *t, void *region);
    mpccl_status_t (*isend_region)(mpccl_transport_t *t, int peer, uint64_t tag, const void *buf,
                                   size_t bytes, void *region, mpccl_req_t *req);
    mpccl_status_t (*irecv_region)(mpccl_transport_t *t, int peer, uint64_t tag, void *buf,
                                   size_t bytes, void *region, mpccl_req_t *req);
};

enum { MPCCL_REGION_HOST = 0, MPCCL_REGION_DEVICE = 1 };

enum { MPCCL_ARM_BUSY = -1, MPCCL_ARM_NONE = -2 };

struct mpccl_transport {
    const struct mpccl_transport_ops *ops;
    int rank;
    int nranks;
    void *impl;
    /* Failure notices to the owner (comm_fail.c), run from progress in the
     * driving thread: peer sent the revoke message, whose 8 bytes are word
     * (the owner checks that it names its communicator).  NULL: nobody
     * listens. */
    void (*on_revoke)(void *owner, int peer, uint64_t word);
    void *owner;
};

/* The revoke message (comm_fail.c): 8 bytes from sender (the communicator's
 * id, so that no other communicator takes it for its own), on a tag no schedule,
 * p2p sequence, shrink or proxy message reaches (low 40 bits all ones but the
 * last).  A transport keeps one receive for it posted from any sender. */
#define MPCCL_REVOKE_TAG(sender) (((uint64_t)(sender) << 40) | 0xfffffffffeULL)
#define MPCCL_REVOKE_TAG_MASK 0xffffffffffULL
/* The zero-byte note a transport sends each network peer at creation once its
 * connections are complete (lib/ucx/ucx_wireup.c): the piece below the
 * revoke's, equally out of every other message's reach. */
#define MPCCL_WIREUP_NOTE_TAG(sender) (((uint64_t)(sender) << 40) | 0xfffffffffdULL)

#endif
