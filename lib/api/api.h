/* Shared by the lib/api_*.c files: how a public function is declared and how
 * internal status becomes ncclResult_t. */
#ifndef MPCCL_API_H
#define MPCCL_API_H

#include "nccl.h"
#include "util/status.h"

/* Defines pncclX (the implementation) and ncclX as a weak alias of it, both
 * exported, like NCCL: profilers and interposers may override ncclX and call
 * pncclX.  Usage:  MPCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count) { ... } */
#define MPCCL_EXPORT __attribute__((visibility("default")))
#define MPCCL_API(ret, name, ...)                                                        \
    MPCCL_EXPORT ret p##name(__VA_ARGS__);                                               \
    MPCCL_EXPORT ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name)));          \
    ret p##name(__VA_ARGS__)

/* Internal status -> ncclResult_t (NCCL's meanings). */
ncclResult_t mpccl_result(mpccl_status_t st);

/* For a function whose capability belongs to a later release: records "NAME is not
 * supported yet by mpccl (WHAT)" as the last error; returns ncclInvalidUsage. */
ncclResult_t mpccl_api_unsupported(const char *name, const char *what);

#endif
