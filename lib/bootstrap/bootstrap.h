/* Bootstrap: the small out-of-band channel a communicator is built over.  Nothing
 * above this layer knows which implementation is in use.  It carries only setup
 * traffic (addresses, host ids, split colors), never payload. */
#ifndef MPCCL_BOOTSTRAP_H
#define MPCCL_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>
#include "util/status.h"

typedef struct mpccl_bootstrap mpccl_bootstrap_t;

struct mpccl_bootstrap_ops {
    /* Collective: buf holds nranks slots of `bytes` each; this rank's slot
     * (buf + rank*bytes) is filled in, the others are filled on return. */
    mpccl_status_t (*allgather)(mpccl_bootstrap_t *bs, void *buf, size_t bytes);
    mpccl_status_t (*barrier)(mpccl_bootstrap_t *bs);
    /* Local: releases everything; never blocks on peers. */
    void (*close)(mpccl_bootstrap_t *bs);
};

struct mpccl_bootstrap {
    int rank;
    int nranks;
    const struct mpccl_bootstrap_ops *ops;
    void *impl;
};

static inline mpccl_status_t mpccl_bootstrap_allgather(mpccl_bootstrap_t *bs, void *buf,
                                                       size_t bytes)
{
    return bs->ops->allgather(bs, buf, bytes);
}
static inline mpccl_status_t mpccl_bootstrap_barrier(mpccl_bootstrap_t *bs)
{
    return bs->ops->barrier(bs);
}
/* Collective: every rank learns whether every rank's step succeeded.  Returns
 * mine when it is an error; else the first failed rank's error named with
 * what (its own status when peer_code is nonzero, MPCCL_ERR_REMOTE
 * otherwise); else MPCCL_OK (bootstrap_agree.c). */
mpccl_status_t mpccl_bootstrap_agree(mpccl_bootstrap_t *bs, mpccl_status_t mine, int peer_code, const char *what);
static inline void mpccl_bootstrap_close(mpccl_bootstrap_t *bs)
{
    if (bs && bs->ops) bs->ops->close(bs);
}

/* The socket bootstrap's waits in the calling thread give up with
 * MPCCL_ERR_USAGE ("aborted") once *flag or *flag2 becomes nonzero (either may
 * be NULL; both NULL: never).  A nonblocking communicator's worker sets its
 * communicator's aborting word, so that ncclCommAbort ends a pending init. */
void mpccl_bootstrap_set_cancel(const int *flag, const int *flag2);
/* And once lost(arg) names a rank (>= 0) of the communicator being formed
 * that died: the waits then give up with MPCCL_ERR_REMOTE naming it.  lost is
 * called between poll slices of this thread; NULL clears it. */
void mpccl_bootstrap_set_watch(int (*lost)(void *arg), void *arg);
/* Whether this thread's waits must give up (an abort flag, or a lost rank). */
int mpccl_bootstrap_cancelled(void);
/* The failure for a wait that gave up: MPCCL_ERR_REMOTE naming the lost rank,
 * else MPCCL_ERR_USAGE (aborted); `what` names the wait. */
mpccl_status_t mpccl_bootstrap_fail_cancelled(const char *what);

/* ---- sockets (ncclGetUniqueId / NCCL_COMM_ID) -- bootstrap_socket.c ---- */

/* The unique id's layout inside the 128 bytes of ncclUniqueId. */
typedef struct mpccl_socket_id {
    uint64_t magic;    /* random; rejects reused or foreign ids */
    uint32_t version;  /* MPCCL_SOCKET_ID_VERSION */
    uint32_t addrlen;
    unsigned char addr[112 - 16]; /* struct sockaddr_in / sockaddr_in6 of the root */
    unsigned char secret[16]; /* random: listeners admit only who proves it (bootstrap_gate.h) */
} mpccl_socket_id_t;

/* Fills id (128 bytes) and starts the root listener in a background thread,
 * unless NCCL_COMM_ID / MPCCL_COMM_ID names the root address (then rank 0 of the
 * init starts it). */
mpccl_status_t mpccl_socket_get_unique_id(void *id128);
/* The process that made id128 gives up on it: its root fails the ranks that
 * arrived with MPCCL_ERR_REMOTE (the id was withdrawn), and refuses later
 * ones.  Best effort, bounded to a few seconds. */
mpccl_status_t mpccl_socket_withdraw_unique_id(const void *id128);
/* Collective over the nranks ranks that call it with the same id. */
mpccl_status_t mpccl_socket_bootstrap_create(const void *id128, int rank, int nranks,
                                             mpccl_bootstrap_t *out);

/* ---- in process (ncclCommInitAll) -- bootstrap_inproc.c ---- */

typedef struct mpccl_inproc_group mpccl_inproc_group_t;
/* One shared object for nranks ranks living in this process; each rank's
 * bootstrap holds a reference, the last close frees it. */
mpccl_status_t mpccl_inproc_group_create(int nranks, mpccl_inproc_group_t **out);
mpccl_status_t mpccl_inproc_bootstrap_create(mpccl_inproc_group_t *g, int rank,
                                             mpccl_bootstrap_t *out);
void mpccl_inproc_group_release(mpccl_inproc_group_t *g);

/* ---- out of band callbacks (mpcclCommInitOob, used by mpccl_mpi.h) ---- */
struct mpcclOobOps; /* public, mpccl.h */
mpccl_status_t mpccl_oob_bootstrap_create(const struct mpcclOobOps *ops, void *ctx, int rank,
                                          int nranks, mpccl_bootstrap_t *out);

#endif
