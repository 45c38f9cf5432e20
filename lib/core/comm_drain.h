/* Leaving a host call with nothing owed to the peers (comm_drain.c). */
#ifndef MPCCL_COMM_DRAIN_H
#define MPCCL_COMM_DRAIN_H

#include "core/comm.h"
#include "util/status.h"

/* Progresses comm's transport until every protocol message this rank still
 * owes the peers p with from[p] set has left (the transport's flush of each
 * of them).  A host communicator has no progress thread: a rank that
 * returned from a call with, say, the acknowledgement of a rendezvous
 * receive still queued would leave its peer waiting for it until its next
 * call.  Only the peers the call received from are flushed: they owe us
 * nothing back, but a flush of an endpoint never used may wait for its
 * peer's next progress (UCX's connection handshake).  And only the peers
 * the transport drains (transport.h: shared memory, not tcp): a network endpoint's
 * flush waits for the peer's acknowledgement, which a peer already back in
 * the application (an MPI barrier, say) never sends.  Fails like the other
 * waits when a peer dies or revokes, or after MPCCL_OP_TIMEOUT; fn names the
 * call. */
mpccl_status_t mpccl_comm_drain(ncclComm_t comm, const unsigned char *from, const char *fn);
/* The same for n communicators together (a group's; from[i] for comms[i]),
 * progressing all of them in one loop so that ranks draining them in
 * different orders cannot wait for each other.  A communicator may appear
 * several times (its masks are merged). */
mpccl_status_t mpccl_comm_drain_all(ncclComm_t *comms, const unsigned char *const *from, int n, const char *fn);

#endif
