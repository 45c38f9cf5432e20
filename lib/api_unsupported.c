/* The NCCL 2.29 entry points whose capability arrives in a later release of
 * mpccl.  They exist (with their pnccl twins) so that applications built
 * against NVIDIA's 2.29 header load and link against libmpccl; each call fails
 * with ncclInvalidUsage and a last-error message that names what is missing.
 * They neither read their arguments nor write outputs: a caller that checks the
 * result sees no half-done state.  doc/UNSUPPORTED.md lists them; move a
 * function out of this file when its capability lands. */
#include "api.h"

/* Ignoring every argument is the point of these functions. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define MPCCL_NEEDS_SUSPEND "releasing and restoring a communicator's GPU memory follows the GPU data path (issue 3)"
/* ---- Suspend/resume and memory statistics ----------------------------------- */

MPCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags)
{
    return mpccl_api_unsupported("ncclCommSuspend", MPCCL_NEEDS_SUSPEND);
}

MPCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm)
{
    return mpccl_api_unsupported("ncclCommResume", MPCCL_NEEDS_SUSPEND);
}

MPCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value)
{
    return mpccl_api_unsupported("ncclCommMemStats", MPCCL_NEEDS_SUSPEND);
}

