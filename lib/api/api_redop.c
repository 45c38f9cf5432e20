/* Custom reduction ops: ncclRedOpCreatePreMulSum / ncclRedOpDestroy hand out
 * and release the communicator's slots (comm->redops); the executors read the
 * scalar from the slot when a call uses the op. */
#include <pthread.h>
#include <string.h>

#include "build_config.h"
#include "api/api.h"
#include "api/api_check.h"
#include "core/comm.h"
#include "util/datatype.h"
#include "util/log.h"

MPCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
          ncclScalarResidence_t residence, ncclComm_t comm)
{
    const char *fn = "ncclRedOpCreatePreMulSum";
    mpccl_status_t st;
    if ((st = mpccl_check_comm(fn, comm)) != MPCCL_OK || (st = mpccl_check_ptr(fn, "op", op)) != MPCCL_OK ||
        (st = mpccl_check_ptr(fn, "scalar", scalar)) != MPCCL_OK || (st = mpccl_check_dtype(fn, datatype)) != MPCCL_OK)
        return mpccl_result(st);
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG,
                                       "%s: argument residence = %d, expected ncclScalarDevice (0) or "
                                       "ncclScalarHostImmediate (1)",
                                       fn, (int)residence));
    pthread_mutex_lock(&comm->redop_lock);
    int slot = -1;
    for (int i = 0; i < MPCCL_MAX_CUSTOM_OPS && slot < 0; i++)
        if (!comm->redops[i].in_use) slot = i;
    if (slot >= 0) {
        mpccl_redop_slot_t *s = &comm->redops[slot];
        memset(s, 0, sizeof(*s));
        s->in_use = 1;
        s->dt = datatype;
        s->residence = residence;
        if (residence == ncclScalarHostImmediate) memcpy(s->scalar, scalar, mpccl_dtype_size(datatype));
        else s->scalar_ptr = scalar;
    }
    pthread_mutex_unlock(&comm->redop_lock);
    if (slot < 0)
        return mpccl_result(mpccl_fail(MPCCL_ERR_USAGE, "%s: comm %p already has %d live custom ops; destroy some first",
                                       fn, (void *)comm, MPCCL_MAX_CUSTOM_OPS));
    *op = (ncclRedOp_t)(ncclNumOps + slot);
    return ncclSuccess;
}

MPCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm)
{
    const char *fn = "ncclRedOpDestroy";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st != MPCCL_OK) return mpccl_result(st);
    int slot = (int)op - ncclNumOps;
    if ((int)op >= 0 && (int)op < ncclNumOps)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG, "%s: argument op = %d is a built-in op; only ops from "
                                       "ncclRedOpCreatePreMulSum can be destroyed", fn, (int)op));
    pthread_mutex_lock(&comm->redop_lock);
    int live = slot >= 0 && slot < MPCCL_MAX_CUSTOM_OPS && comm->redops[slot].in_use;
    if (live) comm->redops[slot].in_use = 0;
    pthread_mutex_unlock(&comm->redop_lock);
    if (!live)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG, "%s: argument op = %d is not a live custom op of comm %p", fn,
                                       (int)op, (void *)comm));
    return ncclSuccess;
}
