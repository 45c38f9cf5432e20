/* Where ncclCommShrink's survivors learn their child's bootstrap id
 * (comm_shrink.c).  Every rank listens on a TCP socket of its own from setup
 * (its "door"), whose address travels with the peer information every rank
 * has (comm_fail.c); the lowest survivor connects to each other survivor's
 * door and writes the id there.  Not over the parent's transport: a rank that
 * died while sending to a survivor through UCX's shared memory can leave that
 * survivor's receive queue stuck behind a slot it reserved and never filled,
 * with the id behind it.  The door admits only a connection that proves the
 * communicator's secret (its gate, bootstrap_gate.h); it listens for the
 * communicator's life, so that a dead process's door refuses a knock, but
 * serves connections only while its rank waits in a shrink. */
#ifndef MPCCL_SHRINK_DOOR_H
#define MPCCL_SHRINK_DOOR_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap/bootstrap_net.h"
#include "core/comm.h"

/* Opens this rank's door: *fd listens at *addr.  Where no socket can be had,
 * *fd = -1 and *addr is zero (the shrink then falls back to the transport);
 * that is not an error. */
void mpccl_shrink_door_open(int *fd, mpccl_sockaddr_t *addr);
void mpccl_shrink_door_close(int *fd);
/* Whether a is a door (not zero). */
int mpccl_shrink_door_valid(const mpccl_sockaddr_t *a);
/* The lowest survivor: writes id (len <= 128 bytes) to peer's door at to.
 * Fails when peer is gone or the communicator is being aborted. */
mpccl_status_t mpccl_shrink_door_send(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, const void *id,
                                      size_t len);
/* The lowest survivor, when the shrink failed because rank lost could not be
 * reached: tells peer (still waiting at its door), so that it fails too
 * instead of waiting for an id.  Best effort. */
void mpccl_shrink_door_send_failure(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, int lost);
/* Whether the door at `door` refuses a connection: its process is gone.  A
 * door that does not answer within 200 ms counts as not refusing. */
int mpccl_shrink_door_refuses(const mpccl_sockaddr_t *door);
/* Another survivor: waits at its door (fd) for root's id, until root dies or
 * the communicator is aborted; connections that are not root's for comm are
 * dropped; a failure notice from root fails the wait.  root_door (may be NULL): root's door, knocked on every second
 * while waiting, so that a root whose death nothing else reports (on another
 * machine, or with the watcher off) fails the wait instead of hanging it. */
mpccl_status_t mpccl_shrink_door_recv(ncclComm_t comm, int fd, int root, const mpccl_sockaddr_t *root_door,
                                      void *id, size_t len);

/* Whether a door message (n bytes, after its sender proved the secret) is
 * root's: 0 when it carries an id of id_len bytes or a failure notice, 1
 * otherwise.  Any bytes may come in. */
int mpccl_shrink_door_msg_problem(const void *msg, size_t n, int root, size_t id_len);

#endif
