/* Check mode (MPCCL_CHECK_MODE=1, alias NCCL_CHECK_MODE): before a call moves
 * data, every rank's calls are compared with its peers' -- operation, count,
 * datatype, op, root, sequence, and within a group the pairing of sends and
 * receives.  The descriptions travel over the side channel
 * (core/side_channel.h), so nothing is sent on the communicator's transport
 * and GPU communicators are checked the same way, at the call (in a CUDA
 * graph: at capture).  A group with a collective is compared with every rank
 * of the communicator; a group of sends and receives only with its partners.
 * A mismatch is ncclInvalidUsage on every rank involved, naming the rank(s),
 * the argument and the values; the communicator stays usable. */
#ifndef MPCCL_CORE_CHECK_MODE_H
#define MPCCL_CORE_CHECK_MODE_H

#include "core/comm.h"
#include "core/group.h"
#include "util/status.h"

/* At setup: comm->check when the mode is on (NULL otherwise). */
mpccl_status_t mpccl_check_setup(ncclComm_t comm);
void mpccl_check_release(ncclComm_t comm);
/* The calls of the list (linked by next; any communicators) against their
 * peers'; calls of communicators without check mode pass at once. */
mpccl_status_t mpccl_check_calls(mpccl_call_t *calls);

#endif
