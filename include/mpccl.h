/* mpccl extensions to the NCCL API. */
#ifndef MPCCL_H_
#define MPCCL_H_

#include <stddef.h>
#include <stdio.h>
#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Out-of-band bootstrap callbacks: lets any launcher (MPI, PMIx, a job system)
 * build a communicator without libmpccl linking it.  Each callback is collective
 * over the nranks ranks and returns 0 on success, nonzero on failure. */
typedef struct mpcclOobOps {
    /* recvbuf holds nranks slots of `bytes`; slot `rank` is this rank's input
     * (sendbuf), the others are filled on return. */
    int (*allgather)(void *ctx, const void *sendbuf, void *recvbuf, size_t bytes);
    /* Optional (NULL: an allgather of one byte stands in). */
    int (*barrier)(void *ctx);
    /* Called once when the communicator is destroyed or aborted (may be NULL). */
    void (*release)(void *ctx);
} mpcclOobOps_t;

/* Collective over the callbacks' ranks: ops/ctx must stay valid until release. */
ncclResult_t mpcclCommInitOob(ncclComm_t *comm, int nranks, int rank, const mpcclOobOps_t *ops,
                              void *ctx, ncclConfig_t *config);

/* Writes a job-wide "who is where" report of comm to out (NULL: the log, at
 * WARN): every rank's call in progress and last completed collective, with
 * sequence numbers and arguments, asked of the ranks over a side channel that
 * answers while they are busy or stuck (doc/DEBUGGING.md).  Not collective:
 * any rank may call it, from any thread, at any time (SIGUSR2 does the same
 * for every communicator of the process). */
ncclResult_t mpcclCommDumpState(ncclComm_t comm, FILE *out);

/* Prints mpccl's environment settings with their current values. */
void mpcclPrintConfig(void);

#ifdef __cplusplus
}
#endif
#endif
