/* Creating mpccl communicators from MPI communicators.
 *
 * libmpccl does not link MPI: this header implements mpccl's out-of-band bootstrap
 * callbacks (mpcclOobOps_t, mpccl.h) with the program's own MPI, so the program
 * that includes it brings MPI.  MPI carries only setup traffic, never payload. */
#ifndef MPCCL_MPI_H_
#define MPCCL_MPI_H_

#include <mpi.h>
#include <stdlib.h>
#include "mpccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Private to this header: the bootstrap runs on a dup of the user's communicator
 * so its traffic never matches the application's messages. */
static inline int mpcclMpiOobAllgather_(void *ctx, const void *sendbuf, void *recvbuf, size_t bytes)
{
    MPI_Comm comm = *(MPI_Comm *)ctx;
    if (bytes > (size_t)0x7fffffff) return 1;
    return MPI_Allgather(sendbuf, (int)bytes, MPI_BYTE, recvbuf, (int)bytes, MPI_BYTE, comm) != MPI_SUCCESS;
}

static inline int mpcclMpiOobBarrier_(void *ctx)
{
    return MPI_Barrier(*(MPI_Comm *)ctx) != MPI_SUCCESS;
}

static inline void mpcclMpiOobRelease_(void *ctx)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* Destroying a communicator after MPI_Finalize is allowed; the dup is gone
     * with MPI then. */
    if (!finalized) MPI_Comm_free((MPI_Comm *)ctx);
    free(ctx);
}

/* Collective over mpicomm: every rank of it calls this; the mpccl rank is the MPI
 * rank.  config may be NULL.  Works on any intracommunicator (split, dup, world). */
static inline ncclResult_t mpcclCommInitMPI(ncclComm_t *comm, MPI_Comm mpicomm, ncclConfig_t *config)
{
    static const mpcclOobOps_t ops = {mpcclMpiOobAllgather_, mpcclMpiOobBarrier_, mpcclMpiOobRelease_};
    int rank, nranks;
    MPI_Comm *dup;
    if (comm == NULL) return ncclInvalidArgument;
    *comm = NULL;
    if (mpicomm == MPI_COMM_NULL) return ncclInvalidArgument;
    if (MPI_Comm_rank(mpicomm, &rank) != MPI_SUCCESS || MPI_Comm_size(mpicomm, &nranks) != MPI_SUCCESS)
        return ncclInvalidArgument;
    dup = (MPI_Comm *)malloc(sizeof(*dup));
    if (dup == NULL) return ncclSystemError;
    if (MPI_Comm_dup(mpicomm, dup) != MPI_SUCCESS) {
        free(dup);
        return ncclSystemError;
    }
    /* On failure mpcclCommInitOob has already called ops.release(dup). */
    return mpcclCommInitOob(comm, nranks, rank, &ops, dup, config);
}

#ifdef __cplusplus
}
#endif
#endif
