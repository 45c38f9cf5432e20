/* Collectives, point-to-point and groups: each fills one launch. */
#include "api/api.h"
#include "api/api_check.h"
#include "api/api_nvtx.h"
#include "core/enqueue.h"
#include "core/group.h"

#define LAUNCH(fn, coll, s, r, n, dt, op, root) \
    mpccl_result(check_and_launch(fn, coll, s, r, n, dt, op, root, comm, stream))

/* Every argument is checked here (api_check.c); a call rejected inside a
 * group fails the group.  Then the core takes it (core/enqueue.c). */
static mpccl_status_t check_and_launch(const char *fn, mpccl_coll_t coll, const void *sendbuf, void *recvbuf,
                                       size_t count, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm,
                                       cudaStream_t stream)
{
    mpccl_status_t st = mpccl_check_coll(fn, coll, sendbuf, recvbuf, count, dt, op, root, comm);
    if (st != MPCCL_OK) {
        mpccl_group_discard_comm(comm);
        return st;
    }
    return mpccl_launch(fn, coll, sendbuf, recvbuf, count, dt, op, root, comm, stream);
}

MPCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_NVTX_COLL_OP("ncclAllReduce", count, datatype, op);
    return LAUNCH("ncclAllReduce", MPCCL_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0);
}

MPCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
          int root, ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_NVTX_COLL_ROOT("ncclBroadcast", count, datatype, "root", root);
    return LAUNCH("ncclBroadcast", MPCCL_COLL_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root);
}

MPCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream)
{
    MPCCL_NVTX_COLL_ROOT("ncclBcast", count, datatype, "root", root);
    return LAUNCH("ncclBcast", MPCCL_COLL_BROADCAST, buff, buff, count, datatype, ncclSum, root);
}

MPCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_NVTX_COLL_OP_ROOT("ncclReduce", count, datatype, op, root);
    return LAUNCH("ncclReduce", MPCCL_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root);
}

MPCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_NVTX_COLL("ncclAllGather", sendcount, datatype);
    return LAUNCH("ncclAllGather", MPCCL_COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0);
}

MPCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_NVTX_COLL_OP("ncclReduceScatter", recvcount, datatype, op);
    return LAUNCH("ncclReduceScatter", MPCCL_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0);
}

MPCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
          ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_NVTX_COLL("ncclAlltoAll", count, datatype);
    return LAUNCH("ncclAlltoAll", MPCCL_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, ncclSum, 0);
}

MPCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
          int root, ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_NVTX_COLL_ROOT("ncclGather", count, datatype, "root", root);
    return LAUNCH("ncclGather", MPCCL_COLL_GATHER, sendbuff, recvbuff, count, datatype, ncclSum, root);
}

MPCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
          int root, ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_NVTX_COLL_ROOT("ncclScatter", count, datatype, "root", root);
    return LAUNCH("ncclScatter", MPCCL_COLL_SCATTER, sendbuff, recvbuff, count, datatype, ncclSum, root);
}

MPCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
          ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_NVTX_COLL_ROOT("ncclSend", count, datatype, "peer", peer);
    return LAUNCH("ncclSend", MPCCL_COLL_SEND, sendbuff, NULL, count, datatype, ncclSum, peer);
}

MPCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
          cudaStream_t stream)
{
    MPCCL_NVTX_COLL_ROOT("ncclRecv", count, datatype, "peer", peer);
    return LAUNCH("ncclRecv", MPCCL_COLL_RECV, NULL, recvbuff, count, datatype, ncclSum, peer);
}

MPCCL_API(ncclResult_t, ncclGroupStart, void)
{
    MPCCL_NVTX_RANGE("ncclGroupStart()");
    return mpccl_result(mpccl_group_start());
}

MPCCL_API(ncclResult_t, ncclGroupEnd, void)
{
    MPCCL_NVTX_RANGE("ncclGroupEnd()");
    return mpccl_result(mpccl_group_end());
}

/* Ends the group without running its calls; estimatedTime is the model's
 * time for them in microseconds (lib/core/estimate.c). */
MPCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo)
{
    static const char fn[] = "ncclGroupSimulateEnd";
    mpccl_status_t st = mpccl_check_ptr(fn, "simInfo", simInfo);
    if (st == MPCCL_OK && (simInfo->magic != 0x74685283u || simInfo->size < sizeof(ncclSimInfo_t)))
        st = mpccl_fail(MPCCL_ERR_ARG,
                        "%s: simInfo (size %zu, magic %#x) was not set up with NCCL_SIM_INFO_INITIALIZER", fn,
                        simInfo->size, simInfo->magic);
    if (st != MPCCL_OK) {
        /* The group still ends, as with any failing ncclGroupEnd; its calls
         * are dropped, not run. */
        double ignored;
        if (mpccl_group_depth() > 0) (void)mpccl_group_simulate_end(&ignored);
        return mpccl_result(st);
    }
    double seconds = -1.0;
    st = mpccl_group_simulate_end(&seconds);
    if (st == MPCCL_OK && seconds >= 0.0) simInfo->estimatedTime = (float)(seconds * 1e6);
    return mpccl_result(st);
}
