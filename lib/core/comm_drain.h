/* Leaving a host call with nothing owed to the peers (comm_drain.c). */
#ifndef MPCCL_COMM_DRAIN_H
#define MPCCL_COMM_DRAIN_H

#include "core/comm.h"
#include "util/status.h"

/* Progresses comm's transport until every protocol message this rank still
 * owes its peers has left and every operation it issued completed at its
 * target (the transport's flush of every peer).  A host communicator has no
 * progress thread: a rank that returned from a call with, say, the
 * acknowledgement of a rendezvous receive still queued would leave its peer
 * waiting for it until its next call.  Fails like the other waits when a
 * peer dies or revokes, or after MPCCL_OP_TIMEOUT; fn names the call. */
mpccl_status_t mpccl_comm_drain(ncclComm_t comm, const char *fn);
/* The same for n communicators together (a group's), progressing all of them
 * in one loop so that ranks draining them in different orders cannot wait for
 * each other.  Duplicates in comms are drained once. */
mpccl_status_t mpccl_comm_drain_all(ncclComm_t *comms, int n, const char *fn);

#endif
