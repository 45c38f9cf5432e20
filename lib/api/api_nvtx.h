/* The NVTX ranges of the API functions (util/nvtx.h): one per call on a GPU
 * communicator, its message NCCL's range name with the call's arguments, e.g.
 * "ncclAllReduce(): commHash 0x1f.., count 1024, datatype float32, op sum". */
#ifndef MPCCL_API_NVTX_H
#define MPCCL_API_NVTX_H

#include "core/comm.h"
#include "util/datatype.h"
#include "util/nvtx.h"

static inline int mpccl_nvtx_gpu_comm(ncclComm_t comm)
{
    return comm != NULL && comm->magic == MPCCL_COMM_MAGIC && comm->cuda_dev >= 0;
}

static inline const char *mpccl_nvtx_op_name(ncclRedOp_t op)
{
    switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "custom";
    }
}

#define MPCCL_NVTX_HASH(comm) ((unsigned long long)(comm)->id)

#define MPCCL_NVTX_COLL_FMT "%s(): commHash 0x%llx, count %zu, datatype %s"
#define MPCCL_NVTX_COLL_ARGS(fn, count, dt) fn, MPCCL_NVTX_HASH(comm), (size_t)(count), mpccl_dtype_name(dt)

/* Collectives (comm is the function's argument): the plain ones, those with a
 * reduction op, those with a root or peer (label "root" or "peer"), and ncclReduce. */
#define MPCCL_NVTX_COLL(fn, count, dt) \
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), MPCCL_NVTX_COLL_FMT, MPCCL_NVTX_COLL_ARGS(fn, count, dt))
#define MPCCL_NVTX_COLL_OP(fn, count, dt, op)                                                    \
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), MPCCL_NVTX_COLL_FMT ", op %s",                \
                        MPCCL_NVTX_COLL_ARGS(fn, count, dt), mpccl_nvtx_op_name(op))
#define MPCCL_NVTX_COLL_ROOT(fn, count, dt, label, root)                                         \
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), MPCCL_NVTX_COLL_FMT ", " label " %d",          \
                        MPCCL_NVTX_COLL_ARGS(fn, count, dt), (root))
#define MPCCL_NVTX_COLL_OP_ROOT(fn, count, dt, op, root)                                         \
    MPCCL_NVTX_RANGE_IF(mpccl_nvtx_gpu_comm(comm), MPCCL_NVTX_COLL_FMT ", op %s, root %d",       \
                        MPCCL_NVTX_COLL_ARGS(fn, count, dt), mpccl_nvtx_op_name(op), (root))

#endif
