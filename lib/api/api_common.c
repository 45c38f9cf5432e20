/* Status conversion, versions and error strings. */
#include <string.h>

#include <stdio.h>

#include "api/api.h"
#include "util/config.h"
#include "util/log.h"

ncclResult_t mpccl_result(mpccl_status_t st)
{
    switch (st) {
    case MPCCL_OK: return ncclSuccess;
    case MPCCL_ERR_ARG: return ncclInvalidArgument;
    case MPCCL_ERR_USAGE: return ncclInvalidUsage;
    case MPCCL_ERR_SYSTEM: return ncclSystemError;
    case MPCCL_ERR_CUDA: return ncclUnhandledCudaError;
    case MPCCL_ERR_REMOTE: return ncclRemoteError;
    case MPCCL_ERR_INTERNAL: return ncclInternalError;
    case MPCCL_INPROGRESS: return ncclInProgress;
    }
    return ncclInternalError;
}

ncclResult_t mpccl_api_unsupported(const char *name, const char *what)
{
    return mpccl_result(mpccl_fail(MPCCL_ERR_USAGE, "%s is not supported yet by mpccl (%s)", name, what));
}

MPCCL_API(ncclResult_t, ncclGetVersion, int *version)
{
    if (version == NULL)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG, "ncclGetVersion: argument version is NULL"));
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

MPCCL_API(const char *, ncclGetErrorString, ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with MPCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with MPCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the mpccl developers";
    case ncclInvalidArgument: return "invalid argument (run with MPCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with MPCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

MPCCL_API(const char *, ncclGetLastError, ncclComm_t comm)
{
    (void)comm; /* errors are recorded per thread, then per process */
    return mpccl_last_error();
}

MPCCL_EXPORT void mpcclPrintConfig(void)
{
    mpccl_config_print(stdout);
}

/* NCCL exports this (deprecated): re-reads the debug settings from the
 * environment, e.g. after a program changed NCCL_DEBUG. */
MPCCL_API(void, ncclResetDebugInit, void)
{
    mpccl_log_reset();
}
