/* What the collective files (shim_coll.c, shim_collv.c) share: argument
 * checks, the raw element of data movement, the mpccl route's begin and end,
 * a copy on the communicator's stream, and the staged route.  Static inline,
 * so each file compiles its own copy from this one source. */
#ifndef MPCCL_SHIM_COLL_UTIL_H
#define MPCCL_SHIM_COLL_UTIL_H

#include <stdint.h>
#include <string.h>

#include "shim.h"

#ifdef MPCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- eligibility ---- */

static inline int check_count(shim_call_t *c, int count)
{
    if (count < 0) mpccl_shim_reject(c, SHIM_WHY_ARG, "negative count (MPI reports it)");
    return count > 0 ? count : 0;
}

static inline int check_root(shim_call_t *c, int root)
{
    if (root < 0 || root >= c->size) {
        mpccl_shim_reject(c, SHIM_WHY_ARG, "root out of range (MPI reports it)");
        return 0;
    }
    return root == c->rank;
}

/* Element type and size of a reduction; 0 size when not eligible. */
static inline size_t check_reduce(shim_call_t *c, MPI_Datatype dt, MPI_Op op, ncclDataType_t *nt, ncclRedOp_t *no)
{
    size_t sz = 0;
    if (!mpccl_shim_reduce_type(dt, nt) || !mpccl_shim_contiguous(dt, &sz)) {
        mpccl_shim_reject(c, SHIM_WHY_TYPE, "datatype is not one mpccl reduces");
        return 0;
    }
    if (!mpccl_shim_reduce_op(op, no)) mpccl_shim_reject(c, SHIM_WHY_OP, "op is not MPI_SUM/PROD/MAX/MIN");
    return sz;
}

/* Bytes of count elements of a contiguous type; 0 (and rejected) otherwise. */
static inline size_t check_bytes(shim_call_t *c, int count, MPI_Datatype dt)
{
    size_t sz = 0;
    if (!mpccl_shim_contiguous(dt, &sz)) {
        mpccl_shim_reject(c, SHIM_WHY_NONCONTIG, "datatype is not contiguous");
        return 0;
    }
    return (size_t)(count > 0 ? count : 0) * sz;
}

/* Raw element for a block of b bytes: equal wherever b is. */
static inline size_t move_esize(size_t b, ncclDataType_t *t)
{
    if (b % 8 == 0) return *t = ncclUint64, 8;
    if (b % 4 == 0) return *t = ncclUint32, 4;
    return *t = ncclUint8, 1;
}

/* GPU kernels load whole elements: every buffer must be aligned to them. */
static inline void check_align(shim_call_t *c, size_t esize)
{
    for (int i = 0; i < c->nbuf && esize > 1; i++)
        if ((uintptr_t)c->buf[i].user % esize)
            mpccl_shim_reject(c, SHIM_WHY_ALIGN, "buffer not aligned to its elements");
}

/* ---- the mpccl route ---- */

typedef struct {
    shim_call_t *c;
    shim_comm_t *sc;
} route_t;

static inline int route_begin(route_t *r, shim_call_t *c)
{
    r->c = c;
    int rc = mpccl_shim_comm_get(c->comm, &r->sc);
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(c->comm, rc);
    else mpccl_shim_depth++;
    return rc;
}

static inline int route_end(route_t *r, ncclResult_t res, const char *what)
{
    mpccl_shim_depth--;
    int rc = mpccl_shim_comm_finish(r->sc, res, r->c->comm, what);
    mpccl_shim_tune_done(r->c, rc, r->c->bytes);
    return rc;
}

/* Blocking calls wait for the stream; nonblocking ones (req) return at once
 * and complete in MPI_Wait/MPI_Test. */
static inline int finish_route(route_t *r, ncclResult_t res, const char *what, MPI_Request *req)
{
    if (req == NULL || res != ncclSuccess) return route_end(r, res, what);
    mpccl_shim_depth--;
    int rc = mpccl_shim_async_stream(r->sc->stream, r->c->comm, what, req);
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(r->c->comm, rc);
    return rc;
}

/* A copy ordered with the communicator's work: on its stream (GPU), or at once
 * (host communicators finish each call before it returns). */
static inline ncclResult_t stream_copy(route_t *r, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src) return ncclSuccess;
#ifdef MPCCL_HAVE_CUDA
    if (r->sc->stream) {
        cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)r->sc->stream);
        if (e == cudaSuccess) return ncclSuccess;
        (void)cudaGetLastError();
        return ncclUnhandledCudaError;
    }
#endif
    memmove(dst, src, bytes);
    return ncclSuccess;
}

/* ---- the staged route: MPI on host copies of the device buffers ---- */

/* Returns from the calling function.  `call` is MPI's call on the host
 * copies, written with SREQ: NULL for the blocking form, else where the
 * nonblocking form puts its request (the calling function's `req` says
 * which); a nonblocking call copies back when that request completes. */
#define STAGED(c, call)                                                      \
    do {                                                                     \
        MPI_Request sreq_ = MPI_REQUEST_NULL;                                \
        MPI_Request *SREQ = req ? &sreq_ : NULL;                             \
        int rc_ = mpccl_shim_stage_in(c);                                    \
        if (rc_ == MPI_SUCCESS) rc_ = (call);                                \
        if (rc_ != MPI_SUCCESS || SREQ == NULL) return mpccl_shim_stage_out(c, rc_); \
        (c)->tune = NULL; /* completes in MPI_Wait: not a timed trial */     \
        return mpccl_shim_async_staged(c, sreq_, req);                       \
    } while (0)

/* The pointer MPI gets for a user buffer (its bounce when staged). */
#define H(c, p) mpccl_shim_host(c, p)
#define IP(p, c) ((p) == MPI_IN_PLACE ? MPI_IN_PLACE : H(c, p))

#endif
