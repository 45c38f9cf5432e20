/* The host schedule engine: runs one rank's schedule over a transport, without
 * blocking: the caller drives mpccl_exec_progress (a group progresses all its
 * tasks of all communicators in one loop, so ranks in one thread cannot
 * deadlock). */
#ifndef MPCCL_HOST_EXEC_H
#define MPCCL_HOST_EXEC_H

#include "core/exec.h"
#include "core/transport.h"
#include "host/host_scratch.h"

typedef struct mpccl_exec mpccl_exec_t;

/* Tags (core/tags.h): a message to peer p carries mpccl_tag_seq(rank,
 * send_seq[p] + step.msg); the counters (nranks entries each, owned by the
 * communicator) advance by the number of messages the schedule exchanges with
 * each peer, so consecutive tasks and p2p calls match in program order.
 * Scratch comes from pool (the communicator's, kept between calls; NULL:
 * allocated per task) and goes back to it at mpccl_exec_free. */
mpccl_status_t mpccl_exec_start(const mpccl_task_t *task, mpccl_transport_t *t, mpccl_scratch_pool_t *pool, int rank,
                                uint64_t *send_seq, uint64_t *recv_seq, mpccl_exec_t **out);
/* Posts whatever became ready and checks completions; never blocks.  *done = 1 once
 * every step finished.  An error stops the task (in-flight requests cancelled). */
mpccl_status_t mpccl_exec_progress(mpccl_exec_t *ex, int *done);
void mpccl_exec_free(mpccl_exec_t *ex);
/* Sets from[peer] = 1 for every peer ex received a message from that may
 * have come by rendezvous, larger than the transport's eager_max: this rank
 * may owe it an acknowledgement (core/comm_drain.h). */
void mpccl_exec_recv_peers(const mpccl_exec_t *ex, unsigned char *from);
/* Whether ex still has a send to or a receive from peer that has not
 * completed (posted or not yet). */
int mpccl_exec_needs_peer(const mpccl_exec_t *ex, int peer);

#endif
