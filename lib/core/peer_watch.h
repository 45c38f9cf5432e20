/* The process-wide peer watcher: one thread that sleeps in poll() on a pidfd
 * per watched peer process of this machine and fails the communicators of a
 * peer that dies (no CPU while nobody dies).  Without pidfd_open (Linux < 5.3)
 * it checks kill(pid, 0) once a second instead. */
#ifndef MPCCL_PEER_WATCH_H
#define MPCCL_PEER_WATCH_H

#include "core/comm.h"
#include "util/status.h"

/* Watches pid, rank `rank` of comm; when it dies, dead(comm, rank) runs in the
 * watcher thread (with the watcher's lock held: it must not call back here).
 * One registration per (comm, rank). */
typedef void (*mpccl_peer_dead_fn)(ncclComm_t comm, int rank);
mpccl_status_t mpccl_peer_watch_add(ncclComm_t comm, int rank, int pid, mpccl_peer_dead_fn dead);
/* Stops watching every peer of comm; after it returns, no dead() call for
 * comm runs or will run. */
void mpccl_peer_watch_remove(ncclComm_t comm);
/* Peers watched now, and whether pidfds serve them (tests, logs). */
int mpccl_peer_watch_count(int *uses_pidfd);

#endif
