/* Turns one checked API call into a planned operation and hands it to the group
 * layer. */
#ifndef MPCCL_ENQUEUE_H
#define MPCCL_ENQUEUE_H

#include "core/comm.h"

/* Checks every argument (api_check.c), maps the reduction op, plans and launches.
 * root is the peer for send/recv. */
mpccl_status_t mpccl_launch(const char *fn, mpccl_coll_t coll, const void *sendbuf, void *recvbuf, size_t count,
                            ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

#endif
