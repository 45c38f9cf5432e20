/* A communicator's failure state, in one place: the first failure (the error
 * ncclCommGetAsyncError returns and the message ncclGetLastError gives), the
 * peers known dead, and the revoke messages that tell every other live rank.
 * Thread-safe: the peer watcher thread, the transport's callbacks and the
 * calling thread may all report a failure; the first one wins. */
#ifndef MPCCL_COMM_FAIL_H
#define MPCCL_COMM_FAIL_H

#include <stdint.h>
#include "bootstrap/bootstrap_net.h"
#include "core/comm.h"
#include "util/status.h"

/* Whether a revoke message from peer (the rank in its tag) carrying word
 * revokes communicator comm_id of nranks ranks (any values). */
static inline int mpccl_revoke_names(int peer, uint64_t word, int nranks, uint64_t comm_id)
{
    return peer >= 0 && peer < nranks && word == comm_id;
}

/* What every rank tells the others at init (comm_fail.c exchanges it over the
 * bootstrap): who to watch, and how to name it when it dies. */
typedef struct mpccl_peer_info {
    int32_t pid;
    uint32_t reserved;
    uint64_t machine; /* the real machine (hostname, boot id, pid namespace): never MPCCL_HOSTID */
    char host[48];
    mpccl_sockaddr_t door;  /* where ncclCommShrink hands it an id (core/shrink_door.h); zero: nowhere */
    mpccl_sockaddr_t side;  /* its process's side channel (core/side_channel.h); zero: none */
} mpccl_peer_info_t;

typedef struct mpccl_fail_state mpccl_fail_state_t;

/* Collective over comm->bs (before the transport exists): exchanges peer
 * information and allocates comm->fail. */
mpccl_status_t mpccl_comm_fail_setup(ncclComm_t comm);
/* ncclCommShrink's doors (core/shrink_door.h): this rank's listening socket
 * (-1: none), and peer's address (NULL: it has none). */
int mpccl_comm_door_fd(ncclComm_t comm);
const mpccl_sockaddr_t *mpccl_comm_door_addr(ncclComm_t comm, int peer);
/* peer's door where this rank has one too, so that the two can talk
 * without the parent's transport (NULL: they cannot). */
const mpccl_sockaddr_t *mpccl_comm_door_to(ncclComm_t comm, int peer);
/* Whether this rank and every peer have a door, so that a shrink of comm
 * shares its id without the parent's transport (comm_shrink.c). */
int mpccl_comm_doors_complete(ncclComm_t comm);
/* What rank told at init (host, pid, addresses); NULL before setup. */
const mpccl_peer_info_t *mpccl_comm_peer_info(ncclComm_t comm, int rank);
/* Per peer: 1 when it runs on this machine (the peer watcher sees it die), so
 * the transport may use shared memory to it.  NULL before setup. */
const unsigned char *mpccl_comm_same_machine(ncclComm_t comm);
/* Once the transport exists: revoke messages from peers fail comm, and the
 * peer watcher watches the same-machine peers. */
void mpccl_comm_fail_attach(ncclComm_t comm);
/* First thing of a release: stops watching, detaches pending revoke sends,
 * frees the state.  No failure is reported on comm after it returns. */
void mpccl_comm_fail_release(ncclComm_t comm);

/* Records the first failure of comm: err becomes its async error, the
 * formatted message its description (ncclGetLastError); the communicator is
 * marked failed and whatever waits on it is woken.  Later calls only log.
 * Safe from any thread, idempotent.  Returns MPCCL_ERR_REMOTE (or the status
 * matching err) so that a caller can `return mpccl_comm_fail(...)`. */
mpccl_status_t mpccl_comm_fail(ncclComm_t comm, ncclResult_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends to the recorded failure's message (a hang report's summary
 * fetched after a revoke): ncclGetLastError of later calls shows it. */
void mpccl_comm_fail_amend(ncclComm_t comm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The rank whose revoke failed comm, -1 if its failure had another cause. */
int mpccl_comm_failed_by_revoke(ncclComm_t comm);
/* Maps an internal status to the async error recorded by mpccl_comm_fail. */
ncclResult_t mpccl_comm_fail_result(mpccl_status_t st);

/* Whether comm failed (a cheap atomic load: wait loops call it every pass). */
int mpccl_comm_failed(ncclComm_t comm);
/* The same, for a host wait loop whose transport had nothing to progress for
 * a while: a peer the watcher saw end becomes the failure now (its last
 * messages, if any, were received by then). */
int mpccl_comm_failed_idle(ncclComm_t comm);
/* The same for a wait that knows which peers it still needs: a dead rank
 * fails the communicator only where needs(arg, rank) is nonzero.  A rank that
 * finished its part, finalized and exited is no failure of a call that waits
 * only for others (a revoke reaches this rank if one of them needed it). */
int mpccl_comm_failed_idle_for(ncclComm_t comm, int (*needs)(void *arg, int rank), void *arg);
/* The same for a host wait whose transport has reported nothing since
 * last_event_s (mpccl_now_seconds): once a peer the watcher saw die has been
 * dead for MPCCL_DEAD_PEER_STALL_S of such silence, the communicator fails
 * even where no unfinished step names it.  A process killed in the middle of
 * a message can leave a shared-memory queue that a survivor reads in order
 * blocked at the slot it reserved (UCX's mm FIFOs), so the survivor's wait on
 * another, live peer would otherwise last until UCX's keepalive (20 s). */
#define MPCCL_DEAD_PEER_STALL_S 1.0
int mpccl_comm_failed_stalled(ncclComm_t comm, double last_event_s);
/* Whether the peer watcher saw peer die. */
int mpccl_comm_peer_dead(ncclComm_t comm, int peer);
/* Re-records the communicator's failure as the calling thread's last error,
 * prefixed by fn, and returns MPCCL_ERR_REMOTE. */
mpccl_status_t mpccl_comm_fail_report(ncclComm_t comm, const char *fn);

/* Sends the revoke message to every live peer, once (later calls progress
 * nothing and return).  Only the thread that drives comm's transport may call
 * it: host communicators, from their calls. */
void mpccl_comm_send_revoke(ncclComm_t comm);


#endif
