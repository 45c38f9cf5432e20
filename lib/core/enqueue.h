/* Turns one checked API call into a planned operation and hands it to the group
 * layer. */
#ifndef MPCCL_ENQUEUE_H
#define MPCCL_ENQUEUE_H

#include "core/comm.h"

/* After the API's argument checks: checks the buffers against the
 * communicator's executor, maps the reduction op, plans (host calls) and hands
 * the call to the executor, or to the group.  root is the peer for send/recv. */
mpccl_status_t mpccl_launch(const char *fn, mpccl_coll_t coll, const void *sendbuf, void *recvbuf, size_t count,
                            ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

#endif
