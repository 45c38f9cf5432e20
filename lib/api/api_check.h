/* All argument checking of the API in one place.  Each failure names the
 * function, the argument, its value and what was expected (ncclGetLastError). */
#ifndef MPCCL_ARGCHECK_H
#define MPCCL_ARGCHECK_H

#include "core/comm.h"

/* comm non-NULL, a live mpccl communicator, initialised. */
mpccl_status_t mpccl_check_comm(const char *fn, ncclComm_t comm);
/* mpccl_check_comm for calls that move data or make resources: refused on a
 * revoked (ncclCommRevoke) or suspended (ncclCommSuspend) communicator, and
 * with ncclRemoteError on a failed one (comm_fail.h). */
mpccl_status_t mpccl_check_comm_live(const char *fn, ncclComm_t comm);
mpccl_status_t mpccl_check_ptr(const char *fn, const char *arg, const void *p);
mpccl_status_t mpccl_check_dtype(const char *fn, ncclDataType_t dt);
/* A built-in op, or a live PreMulSum op of this comm created for dt. */
mpccl_status_t mpccl_check_op(const char *fn, ncclComm_t comm, ncclRedOp_t op, ncclDataType_t dt);
/* Every argument of a collective or p2p call (root is the peer for send/recv). */
mpccl_status_t mpccl_check_coll(const char *fn, mpccl_coll_t coll, const void *sendbuf, const void *recvbuf,
                                size_t count, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm);

#endif
