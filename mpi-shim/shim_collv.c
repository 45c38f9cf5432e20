/* The v-collectives and the scans: MPI_Allgatherv, MPI_Alltoallv, MPI_Gatherv,
 * MPI_Scatterv, MPI_Scan, MPI_Exscan.  Each implementation takes a trailing
 * request (NULL: blocking), so a nonblocking form is one more entry point.
 *
 * Through mpccl a v-collective is one group of ncclSend/ncclRecv, one pair per
 * peer with a non-empty block (mpccl matches a message to oneself inside a
 * group, test/mpi/test_group.c).  Elements: each message moves as raw elements
 * of move_esize(its byte count).  Both ends know that count, since MPI makes the
 * type signatures match, so both pick the same element.  Displacements must
 * stay out of that choice: every rank lays out its own buffers, so a gcd over
 * them could differ between the two ends; mpccl's send/recv moves bytes, so
 * they need no alignment either.  When every rank finds its blocks equal and
 * packed (agreed with the route, mpccl_shim_decide) the call becomes the
 * collective (ncclAllGather, ncclAlltoAll, ncclGather, ncclScatter) on the
 * common block's element, aligned like the plain collectives'.
 *
 * A scan is a group of ncclReduce, one per root r, to which rank i brings its
 * input when i <= r (Scan) or i < r (Exscan) and otherwise a buffer of the op's
 * identity, built once per (type, op, size) and cached on the communicator. */
#include <math.h>
#include <stdlib.h>

#include "shim_coll_util.h"

/* ---- scratch memory of one call, ordered on the communicator's stream ---- */

static void *scratch_get(route_t *r, size_t bytes)
{
#ifdef MPCCL_HAVE_CUDA
    if (r->sc->stream) {
        void *p = NULL;
        if (cudaMallocAsync(&p, bytes, (cudaStream_t)r->sc->stream) == cudaSuccess) return p;
        (void)cudaGetLastError();
        return NULL;
    }
#endif
    return malloc(bytes);
}

/* After the group: freed in stream order (GPU); a host call is complete. */
static void scratch_put(route_t *r, void *p)
{
    if (p == NULL) return;
#ifdef MPCCL_HAVE_CUDA
    if (r->sc->stream) {
        if (cudaFreeAsync(p, (cudaStream_t)r->sc->stream) != cudaSuccess) (void)cudaGetLastError();
        return;
    }
#endif
    free(p);
}

/* ---- the messages of a v-collective ---- */

typedef struct {
    char *p;
    size_t bytes; /* 0: no message */
} blk_t;

/* What this rank sends to and receives from each peer. */
typedef struct {
    int n;
    blk_t *send, *recv;
} plan_t;

static int plan_init(plan_t *pl, int n)
{
    pl->n = n;
    pl->send = calloc((size_t)n * 2, sizeof(blk_t));
    pl->recv = pl->send ? pl->send + n : NULL;
    return pl->send != NULL;
}

/* The blocks of a significant v-side: counts[j] elements of dt at displs[j]
 * extents from base (extent == size: only contiguous types go to mpccl). */
static size_t vblocks(shim_call_t *c, blk_t *b, const void *base, const int *counts, const int *displs,
                      MPI_Datatype dt)
{
    size_t sz = 0, total = 0;
    if (!mpccl_shim_contiguous(dt, &sz)) {
        mpccl_shim_reject(c, SHIM_WHY_NONCONTIG, "datatype is not contiguous");
        sz = 0;
    }
    for (int j = 0; j < c->size; j++) {
        b[j].bytes = (size_t)check_count(c, counts[j]) * sz;
        b[j].p = b[j].bytes ? (char *)base + (ptrdiff_t)displs[j] * (ptrdiff_t)sz : NULL;
        total += b[j].bytes;
    }
    return total;
}

/* Records a v-side's buffer: the staged route copies the span its non-empty
 * blocks cover, which may start before base (negative displacements). */
static void vbuf(shim_call_t *c, const void *base, const int *counts, const int *displs, MPI_Datatype dt, int dir)
{
    MPI_Aint lb0, ext;
    ptrdiff_t lo = PTRDIFF_MAX, hi = PTRDIFF_MIN, lb;
    size_t bytes;
    if (base == NULL || base == MPI_IN_PLACE || PMPI_Type_get_extent(dt, &lb0, &ext) != MPI_SUCCESS) return;
    for (int j = 0; j < c->size; j++) {
        if (counts[j] <= 0 || !mpccl_shim_span(dt, (size_t)counts[j], &lb, &bytes) || bytes == 0) continue;
        ptrdiff_t at = (ptrdiff_t)displs[j] * (ptrdiff_t)ext + lb;
        if (at < lo) lo = at;
        if (at + (ptrdiff_t)bytes > hi) hi = at + (ptrdiff_t)bytes;
    }
    if (lo < hi) mpccl_shim_buf_span(c, base, lo, (size_t)(hi - lo), dir);
}

/* Equal blocks back to back from displacement 0: the collective's layout. */
static int packed(const int *counts, const int *displs, int n)
{
    for (int j = 0; j < n; j++)
        if (counts[j] != counts[0] || (long long)displs[j] != (long long)j * counts[0]) return 0;
    return 1;
}

/* One group: a send and a receive per peer, empty ones left out (both ends
 * know a message's size, so both leave it out). */
static ncclResult_t run_group(route_t *r, const plan_t *pl)
{
    ncclResult_t res = ncclGroupStart(), end;
    if (res != ncclSuccess) return res;
    for (int j = 0; j < pl->n && res == ncclSuccess; j++) {
        ncclDataType_t t;
        size_t e;
        if (pl->send[j].bytes) {
            e = move_esize(pl->send[j].bytes, &t);
            res = ncclSend(pl->send[j].p, pl->send[j].bytes / e, t, j, r->sc->nccl, r->sc->stream);
        }
        if (res == ncclSuccess && pl->recv[j].bytes) {
            e = move_esize(pl->recv[j].bytes, &t);
            res = ncclRecv(pl->recv[j].p, pl->recv[j].bytes / e, t, j, r->sc->nccl, r->sc->stream);
        }
    }
    end = ncclGroupEnd();
    return res == ncclSuccess ? end : res;
}

/* In-place Alltoallv: the blocks we send are the ones we receive into, so they
 * go out of a copy taken first. */
static ncclResult_t run_group_copied(route_t *r, plan_t *pl)
{
    char *lo = NULL, *hi = NULL;
    for (int j = 0; j < pl->n; j++) {
        if (!pl->send[j].bytes) continue;
        if (!lo || pl->send[j].p < lo) lo = pl->send[j].p;
        if (!hi || pl->send[j].p + pl->send[j].bytes > hi) hi = pl->send[j].p + pl->send[j].bytes;
    }
    if (lo == NULL) return run_group(r, pl);
    char *tmp = scratch_get(r, (size_t)(hi - lo));
    if (tmp == NULL) return ncclSystemError;
    ncclResult_t res = stream_copy(r, tmp, lo, (size_t)(hi - lo));
    for (int j = 0; j < pl->n; j++)
        if (pl->send[j].bytes) pl->send[j].p = tmp + (pl->send[j].p - lo);
    if (res == ncclSuccess) res = run_group(r, pl);
    scratch_put(r, tmp);
    return res;
}

typedef enum { V_ALLGATHER, V_ALLTOALL, V_GATHER, V_SCATTER } v_kind_t;

/* The MPI arguments of one v-collective (s/r: send/receive side; a single
 * count or counts and displacements, as the call has them). */
typedef struct {
    v_kind_t k;
    const void *sb;
    int sc;
    const int *scs, *sds;
    MPI_Datatype st;
    void *rb;
    int rc;
    const int *rcs, *rds;
    MPI_Datatype rt;
    int root;
    MPI_Comm comm;
} vargs_t;

static int vpass(const vargs_t *a, const void *sb, void *rb, MPI_Request *req)
{
    switch (a->k) {
    case V_ALLGATHER:
        return req ? PMPI_Iallgatherv(sb, a->sc, a->st, rb, a->rcs, a->rds, a->rt, a->comm, req)
                   : PMPI_Allgatherv(sb, a->sc, a->st, rb, a->rcs, a->rds, a->rt, a->comm);
    case V_ALLTOALL:
        return req ? PMPI_Ialltoallv(sb, a->scs, a->sds, a->st, rb, a->rcs, a->rds, a->rt, a->comm, req)
                   : PMPI_Alltoallv(sb, a->scs, a->sds, a->st, rb, a->rcs, a->rds, a->rt, a->comm);
    case V_GATHER:
        return req ? PMPI_Igatherv(sb, a->sc, a->st, rb, a->rcs, a->rds, a->rt, a->root, a->comm, req)
                   : PMPI_Gatherv(sb, a->sc, a->st, rb, a->rcs, a->rds, a->rt, a->root, a->comm);
    default:
        return req ? PMPI_Iscatterv(sb, a->scs, a->sds, a->st, rb, a->rc, a->rt, a->root, a->comm, req)
                   : PMPI_Scatterv(sb, a->scs, a->sds, a->st, rb, a->rc, a->rt, a->root, a->comm);
    }
}

/* The collective form, taken when every rank found its blocks equal and
 * packed: block bytes per rank. */
static ncclResult_t run_collective(route_t *r, const vargs_t *a, int inplace, size_t block)
{
    ncclDataType_t t;
    size_t e = move_esize(block, &t), cnt = block / e;
    const char *sb = a->sb;
    char *rb = a->rb;
    int am_root = r->c->rank == a->root;
    switch (a->k) {
    case V_ALLGATHER:
        if (inplace) sb = rb + (size_t)r->c->rank * block;
        return ncclAllGather(sb, rb, cnt, t, r->sc->nccl, r->sc->stream);
    case V_ALLTOALL:
        return ncclAlltoAll(inplace ? rb : sb, rb, cnt, t, r->sc->nccl, r->sc->stream);
    case V_GATHER:
        if (inplace) sb = rb + (size_t)a->root * block;
        return ncclGather(sb, am_root ? rb : NULL, cnt, t, a->root, r->sc->nccl, r->sc->stream);
    default:
        if (inplace) rb = (char *)sb + (size_t)a->root * block;
        return ncclScatter(am_root ? sb : NULL, rb, cnt, t, a->root, r->sc->nccl, r->sc->stream);
    }
}

/* This rank's messages, buffers and eligibility.  *block: the common block
 * if every rank turns out packed; returns this rank's bytes (the larger side). */
static size_t vplan(shim_call_t *c, const vargs_t *a, plan_t *pl, int inplace, int am_root, size_t *block)
{
    int me = c->rank, n = c->size;
    size_t sbytes = 0, rbytes = 0;
    blk_t own = {NULL, 0};
    c->fast = 1;
    switch (a->k) {
    case V_ALLGATHER:
        rbytes = vblocks(c, pl->recv, a->rb, a->rcs, a->rds, a->rt);
        own = pl->recv[me];
        if (!inplace) {
            own = (blk_t){(char *)a->sb, check_bytes(c, check_count(c, a->sc), a->st)};
            if (own.bytes != pl->recv[me].bytes)
                mpccl_shim_reject(c, SHIM_WHY_ARG, "send and receive sizes differ (MPI reports it)");
            if (own.bytes == 0) own.p = NULL;
        }
        for (int j = 0; j < n; j++) pl->send[j] = own;
        sbytes = own.bytes;
        c->fast = packed(a->rcs, a->rds, n);
        *block = pl->recv[0].bytes;
        /* in place our block is already where it belongs */
        if (inplace) pl->send[me].bytes = pl->recv[me].bytes = 0;
        if (!inplace) mpccl_shim_buf(c, a->sb, (size_t)check_count(c, a->sc), a->st, SHIM_IN);
        vbuf(c, a->rb, a->rcs, a->rds, a->rt, inplace ? SHIM_INOUT : SHIM_OUT);
        break;
    case V_ALLTOALL:
        rbytes = vblocks(c, pl->recv, a->rb, a->rcs, a->rds, a->rt);
        if (inplace) memcpy(pl->send, pl->recv, (size_t)n * sizeof(blk_t));
        else sbytes = vblocks(c, pl->send, a->sb, a->scs, a->sds, a->st);
        if (pl->send[me].bytes != pl->recv[me].bytes)
            mpccl_shim_reject(c, SHIM_WHY_ARG, "send and receive sizes differ (MPI reports it)");
        /* my row and my column equal and packed on every rank: all blocks equal */
        c->fast = packed(a->rcs, a->rds, n) && (inplace || packed(a->scs, a->sds, n)) &&
                  pl->send[0].bytes == pl->recv[0].bytes;
        *block = pl->recv[0].bytes;
        if (!inplace) vbuf(c, a->sb, a->scs, a->sds, a->st, SHIM_IN);
        vbuf(c, a->rb, a->rcs, a->rds, a->rt, inplace ? SHIM_INOUT : SHIM_OUT);
        break;
    case V_GATHER:
        if (am_root) {
            rbytes = vblocks(c, pl->recv, a->rb, a->rcs, a->rds, a->rt);
            c->fast = packed(a->rcs, a->rds, n);
            *block = pl->recv[0].bytes;
        }
        if (inplace) {
            pl->recv[me].bytes = 0;
        } else {
            own = (blk_t){(char *)a->sb, check_bytes(c, check_count(c, a->sc), a->st)};
            if (am_root && own.bytes != pl->recv[me].bytes)
                mpccl_shim_reject(c, SHIM_WHY_ARG, "send and receive sizes differ (MPI reports it)");
            pl->send[a->root] = own;
            sbytes = own.bytes;
            if (!am_root) *block = own.bytes; /* the root alone knows whether it is common */
            mpccl_shim_buf(c, a->sb, (size_t)check_count(c, a->sc), a->st, SHIM_IN);
        }
        if (am_root) vbuf(c, a->rb, a->rcs, a->rds, a->rt, inplace ? SHIM_INOUT : SHIM_OUT);
        break;
    default:
        if (am_root) {
            sbytes = vblocks(c, pl->send, a->sb, a->scs, a->sds, a->st);
            c->fast = packed(a->scs, a->sds, n);
            *block = pl->send[0].bytes;
            vbuf(c, a->sb, a->scs, a->sds, a->st, SHIM_IN);
        }
        if (inplace) {
            pl->send[me].bytes = 0;
        } else {
            own = (blk_t){a->rb, check_bytes(c, check_count(c, a->rc), a->rt)};
            if (am_root && own.bytes != pl->send[me].bytes)
                mpccl_shim_reject(c, SHIM_WHY_ARG, "send and receive sizes differ (MPI reports it)");
            pl->recv[a->root] = own;
            rbytes = own.bytes;
            if (!am_root) *block = own.bytes;
            mpccl_shim_buf(c, a->rb, (size_t)check_count(c, a->rc), a->rt, SHIM_OUT);
        }
        break;
    }
    /* the collective form loads whole elements, like the plain collectives */
    ncclDataType_t t;
    size_t e = move_esize(*block, &t);
    for (int i = 0; i < c->nbuf && e > 1; i++)
        if ((uintptr_t)c->buf[i].user % e) c->fast = 0;
    return sbytes > rbytes ? sbytes : rbytes;
}

static int vmove(shim_coll_t coll, const vargs_t *a, MPI_Request *req)
{
    shim_call_t c;
    route_t r;
    plan_t pl = {0, NULL, NULL};
    if (!mpccl_shim_begin(&c, coll, a->comm)) {
        mpccl_shim_count(coll, SHIM_ROUTE_MPI);
        return vpass(a, a->sb, a->rb, req);
    }
    int rooted = a->k == V_GATHER || a->k == V_SCATTER;
    int am_root = rooted ? check_root(&c, a->root) : 1;
    /* MPI_IN_PLACE: recvbuf at Scatterv's root, sendbuf at Gatherv's root and
     * on every rank of Allgatherv/Alltoallv */
    int inplace = a->k == V_SCATTER ? am_root && a->rb == MPI_IN_PLACE : a->sb == MPI_IN_PLACE;
    if (inplace && a->k == V_GATHER && !am_root) {
        mpccl_shim_reject(&c, SHIM_WHY_ARG, "MPI_IN_PLACE off the root (MPI reports it)");
        inplace = 0;
    }
    size_t bytes = 0, block = 0;
    if (rooted && (a->root < 0 || a->root >= c.size)) {
        /* rejected by check_root: MPI reports it */
    } else if (!plan_init(&pl, c.size)) {
        mpccl_shim_reject(&c, SHIM_WHY_ARG, "no memory for the message list");
    } else {
        bytes = vplan(&c, a, &pl, inplace, am_root, &block);
    }
    /* Only Allgatherv's total is known alike everywhere; for the others the
     * size test needs the agreement step, or every rank could decide alone. */
    if (a->k != V_ALLGATHER && !mpccl_shim_settings()->agree) bytes = SIZE_MAX;
    switch (mpccl_shim_decide(&c, bytes)) {
    case SHIM_ROUTE_MPCCL: {
        ncclResult_t res;
        if (route_begin(&r, &c) != MPI_SUCCESS) {
            free(pl.send);
            return MPI_ERR_OTHER;
        }
        if (c.fast) res = run_collective(&r, a, inplace, block);
        else if (inplace && a->k == V_ALLTOALL) res = run_group_copied(&r, &pl);
        else res = run_group(&r, &pl);
        free(pl.send);
        return finish_route(&r, res, mpccl_shim_coll_name(coll), req);
    }
    case SHIM_ROUTE_STAGED:
        free(pl.send);
        STAGED(&c, vpass(a, (a->k == V_SCATTER && !am_root) ? a->sb : IP(a->sb, &c),
                         (a->k == V_GATHER && !am_root) ? a->rb : IP(a->rb, &c), SREQ));
    default:
        free(pl.send);
        return vpass(a, a->sb, a->rb, req);
    }
}

int mpccl_shim_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                          const int *recvcounts, const int *displs, MPI_Datatype recvtype, MPI_Comm comm)
{
    vargs_t a = {V_ALLGATHER, sendbuf, sendcount, NULL, NULL, sendtype, recvbuf, 0, recvcounts, displs, recvtype,
                 0, comm};
    return vmove(SHIM_ALLGATHERV, &a, NULL);
}

int mpccl_shim_Alltoallv(const void *sendbuf, const int *sendcounts, const int *sdispls, MPI_Datatype sendtype,
                         void *recvbuf, const int *recvcounts, const int *rdispls, MPI_Datatype recvtype,
                         MPI_Comm comm)
{
    vargs_t a = {V_ALLTOALL, sendbuf, 0, sendcounts, sdispls, sendtype, recvbuf, 0, recvcounts, rdispls, recvtype,
                 0, comm};
    return vmove(SHIM_ALLTOALLV, &a, NULL);
}

int mpccl_shim_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                       const int *recvcounts, const int *displs, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    vargs_t a = {V_GATHER, sendbuf, sendcount, NULL, NULL, sendtype, recvbuf, 0, recvcounts, displs, recvtype,
                 root, comm};
    return vmove(SHIM_GATHERV, &a, NULL);
}

int mpccl_shim_Scatterv(const void *sendbuf, const int *sendcounts, const int *displs, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    vargs_t a = {V_SCATTER, sendbuf, 0, sendcounts, displs, sendtype, recvbuf, recvcount, NULL, NULL, recvtype,
                 root, comm};
    return vmove(SHIM_SCATTERV, &a, NULL);
}

int mpccl_shim_Iallgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                           const int *recvcounts, const int *displs, MPI_Datatype recvtype, MPI_Comm comm,
                           MPI_Request *request)
{
    vargs_t a = {V_ALLGATHER, sendbuf, sendcount, NULL, NULL, sendtype, recvbuf, 0, recvcounts, displs, recvtype,
                 0, comm};
    return vmove(SHIM_IALLGATHERV, &a, request);
}

int mpccl_shim_Ialltoallv(const void *sendbuf, const int *sendcounts, const int *sdispls, MPI_Datatype sendtype,
                          void *recvbuf, const int *recvcounts, const int *rdispls, MPI_Datatype recvtype,
                          MPI_Comm comm, MPI_Request *request)
{
    vargs_t a = {V_ALLTOALL, sendbuf, 0, sendcounts, sdispls, sendtype, recvbuf, 0, recvcounts, rdispls, recvtype,
                 0, comm};
    return vmove(SHIM_IALLTOALLV, &a, request);
}

int mpccl_shim_Igatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                        const int *recvcounts, const int *displs, MPI_Datatype recvtype, int root, MPI_Comm comm,
                        MPI_Request *request)
{
    vargs_t a = {V_GATHER, sendbuf, sendcount, NULL, NULL, sendtype, recvbuf, 0, recvcounts, displs, recvtype,
                 root, comm};
    return vmove(SHIM_IGATHERV, &a, request);
}

int mpccl_shim_Iscatterv(const void *sendbuf, const int *sendcounts, const int *displs, MPI_Datatype sendtype,
                         void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                         MPI_Request *request)
{
    vargs_t a = {V_SCATTER, sendbuf, 0, sendcounts, displs, sendtype, recvbuf, recvcount, NULL, NULL, recvtype,
                 root, comm};
    return vmove(SHIM_ISCATTERV, &a, request);
}

/* ---- scans ---- */

/* One element of op's identity for t into one; its size, or 0 where none is
 * built here.  Floats: SUM's is -0.0 (-0 + x is x for every x, while +0 would
 * turn -0 into +0), MAX's and MIN's are -inf and +inf.  fp8 has no MPI type the
 * shim maps, and e4m3 no infinity: those scans are staged. */
static size_t identity(ncclDataType_t t, ncclRedOp_t op, unsigned char *one)
{
    int lowest = op == ncclMax, highest = op == ncclMin, unit = op == ncclProd;
    union { int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64; float f; double d;
            uint16_t h; } v;
    size_t sz;
    if (op != ncclSum && !lowest && !highest && !unit) return 0;
    switch (t) {
    case ncclInt8: v.i8 = unit ? 1 : lowest ? INT8_MIN : highest ? INT8_MAX : 0, sz = 1; break;
    case ncclUint8: v.u8 = unit ? 1 : highest ? UINT8_MAX : 0, sz = 1; break;
    case ncclInt32: v.i32 = unit ? 1 : lowest ? INT32_MIN : highest ? INT32_MAX : 0, sz = 4; break;
    case ncclUint32: v.u32 = unit ? 1 : highest ? UINT32_MAX : 0, sz = 4; break;
    case ncclInt64: v.i64 = unit ? 1 : lowest ? INT64_MIN : highest ? INT64_MAX : 0, sz = 8; break;
    case ncclUint64: v.u64 = unit ? 1 : highest ? UINT64_MAX : 0, sz = 8; break;
    case ncclFloat32: v.f = unit ? 1.0f : lowest ? -INFINITY : highest ? INFINITY : -0.0f, sz = 4; break;
    case ncclFloat64: v.d = unit ? 1.0 : lowest ? -(double)INFINITY : highest ? (double)INFINITY : -0.0, sz = 8;
        break;
    /* bit patterns: 1, -inf, +inf, -0 */
    case ncclFloat16: v.h = unit ? 0x3c00 : lowest ? 0xfc00 : highest ? 0x7c00 : 0x8000, sz = 2; break;
    case ncclBfloat16: v.h = unit ? 0x3f80 : lowest ? 0xff80 : highest ? 0x7f80 : 0x8000, sz = 2; break;
    default: return 0;
    }
    memcpy(one, &v, sz);
    return sz;
}

/* Identity buffers of a communicator: a few slots, one per (type, op), each
 * as large as the largest call so far needed; freed with the communicator. */
#define IDENT_SLOTS 4
typedef struct {
    void *p;
    size_t bytes;
    ncclDataType_t t;
    ncclRedOp_t op;
    int dev; /* cudaMalloc'd */
} ident_t;

typedef struct {
    ident_t slot[IDENT_SLOTS];
    unsigned next; /* the slot to reuse when all are taken */
} ident_cache_t;

static void ident_release(ident_t *s)
{
#ifdef MPCCL_HAVE_CUDA
    if (s->dev) {
        if (cudaFree(s->p) != cudaSuccess) (void)cudaGetLastError();
    } else
#endif
        free(s->p);
    memset(s, 0, sizeof(*s));
}

void mpccl_shim_ident_free(shim_comm_t *sc)
{
    ident_cache_t *ic = sc->ident;
    if (ic == NULL) return;
    for (int i = 0; i < IDENT_SLOTS; i++)
        if (ic->slot[i].p) ident_release(&ic->slot[i]);
    free(ic);
    sc->ident = NULL;
}

/* bytes of the identity (element one, esz bytes) in the communicator's memory.
 * A slot is only replaced between calls: every call ends with its stream
 * synchronized, and MPI forbids concurrent collectives on one communicator. */
static const void *ident_get(shim_comm_t *sc, ncclDataType_t t, ncclRedOp_t op, const unsigned char *one,
                             size_t esz, size_t bytes)
{
    ident_cache_t *ic = sc->ident;
    ident_t *s = NULL;
    if (ic == NULL && (ic = sc->ident = calloc(1, sizeof(*ic))) == NULL) return NULL;
    for (int i = 0; i < IDENT_SLOTS && s == NULL; i++)
        if (ic->slot[i].p && ic->slot[i].t == t && ic->slot[i].op == op) s = &ic->slot[i];
    if (s && s->bytes >= bytes) return s->p;
    for (int i = 0; i < IDENT_SLOTS && s == NULL; i++)
        if (ic->slot[i].p == NULL) s = &ic->slot[i];
    if (s == NULL) s = &ic->slot[ic->next++ % IDENT_SLOTS];
    if (s->p) ident_release(s);
    unsigned char *h = malloc(bytes);
    if (h == NULL) return NULL;
    for (size_t o = 0; o < bytes; o += esz) memcpy(h + o, one, esz);
    void *p = h;
    int dev = 0;
#ifdef MPCCL_HAVE_CUDA
    if (sc->stream) {
        p = NULL;
        if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
            (void)cudaGetLastError();
            if (p) cudaFree(p);
            p = NULL;
        }
        free(h);
        if (p == NULL) return NULL;
        dev = 1;
    }
#endif
    *s = (ident_t){p, bytes, t, op, dev};
    return p;
}

/* Root r gets the reduction over ranks 0..r (Scan) or 0..r-1 (Exscan; no
 * root 0, whose recvbuf MPI leaves undefined: it stays unchanged). */
static ncclResult_t run_scan(route_t *r, int ex, const void *in, void *out, size_t n, size_t esz,
                             ncclDataType_t t, ncclRedOp_t op, const unsigned char *one, int inplace)
{
    int me = r->c->rank, size = r->c->size;
    size_t bytes = n * esz;
    void *tmp = NULL;
    ncclResult_t res, end;
    const void *id = ident_get(r->sc, t, op, one, esz, bytes);
    if (id == NULL) return ncclSystemError;
    /* In place our reduce writes the input that later roots still read: they
     * read a copy.  The last rank's input has no later root. */
    if (inplace && me < size - 1) {
        if ((tmp = scratch_get(r, bytes)) == NULL) return ncclSystemError;
        if ((res = stream_copy(r, tmp, in, bytes)) != ncclSuccess) {
            scratch_put(r, tmp);
            return res;
        }
        in = tmp;
    }
    if ((res = ncclGroupStart()) == ncclSuccess) {
        for (int root = ex; root < size && res == ncclSuccess; root++) {
            int mine = ex ? me < root : me <= root;
            res = ncclReduce(mine ? in : id, root == me ? out : NULL, n, t, op, root, r->sc->nccl, r->sc->stream);
        }
        end = ncclGroupEnd();
        if (res == ncclSuccess) res = end;
    }
    scratch_put(r, tmp);
    return res;
}

static int scan(shim_coll_t coll, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
                MPI_Comm comm, MPI_Request *req)
{
    shim_call_t c;
    route_t r;
    ncclDataType_t nt;
    ncclRedOp_t no;
    unsigned char one[8];
    int ex = coll == SHIM_EXSCAN || coll == SHIM_IEXSCAN;
#define SCAN_PASS()                                                                             \
    (ex ? (req ? PMPI_Iexscan(sendbuf, recvbuf, count, dt, op, comm, req)                       \
               : PMPI_Exscan(sendbuf, recvbuf, count, dt, op, comm))                            \
        : (req ? PMPI_Iscan(sendbuf, recvbuf, count, dt, op, comm, req)                         \
               : PMPI_Scan(sendbuf, recvbuf, count, dt, op, comm)))
    if (!mpccl_shim_begin(&c, coll, comm)) {
        mpccl_shim_count(coll, SHIM_ROUTE_MPI);
        return SCAN_PASS();
    }
    int inplace = sendbuf == MPI_IN_PLACE, n = check_count(&c, count);
    size_t esz = check_reduce(&c, dt, op, &nt, &no);
    if (c.ok && identity(nt, no, one) != esz)
        mpccl_shim_reject(&c, SHIM_WHY_TYPE, "no identity element built for this type");
    mpccl_shim_buf(&c, sendbuf, (size_t)n, dt, SHIM_IN);
    /* (also Exscan's on rank 0, where MPI may leave it as it likes) */
    mpccl_shim_buf(&c, recvbuf, (size_t)n, dt, inplace ? SHIM_INOUT : SHIM_OUT);
    check_align(&c, esz);
    switch (mpccl_shim_decide(&c, (size_t)n * esz)) {
    case SHIM_ROUTE_MPCCL: {
        if (route_begin(&r, &c) != MPI_SUCCESS) return MPI_ERR_OTHER;
        ncclResult_t res = n == 0 ? ncclSuccess
                                  : run_scan(&r, ex, inplace ? recvbuf : sendbuf, recvbuf, (size_t)n, esz, nt, no,
                                             one, inplace);
        return finish_route(&r, res, ex ? "MPI_Exscan" : "MPI_Scan", req);
    }
    case SHIM_ROUTE_STAGED:
        STAGED(&c, ex ? (SREQ ? PMPI_Iexscan(IP(sendbuf, &c), H(&c, recvbuf), count, dt, op, comm, SREQ)
                              : PMPI_Exscan(IP(sendbuf, &c), H(&c, recvbuf), count, dt, op, comm))
                      : (SREQ ? PMPI_Iscan(IP(sendbuf, &c), H(&c, recvbuf), count, dt, op, comm, SREQ)
                              : PMPI_Scan(IP(sendbuf, &c), H(&c, recvbuf), count, dt, op, comm)));
    default:
        return SCAN_PASS();
    }
#undef SCAN_PASS
}

int mpccl_shim_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    return scan(SHIM_SCAN, sendbuf, recvbuf, count, datatype, op, comm, NULL);
}

int mpccl_shim_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                      MPI_Comm comm)
{
    return scan(SHIM_EXSCAN, sendbuf, recvbuf, count, datatype, op, comm, NULL);
}

int mpccl_shim_Iscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                     MPI_Request *request)
{
    return scan(SHIM_ISCAN, sendbuf, recvbuf, count, datatype, op, comm, request);
}

int mpccl_shim_Iexscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                       MPI_Comm comm, MPI_Request *request)
{
    return scan(SHIM_IEXSCAN, sendbuf, recvbuf, count, datatype, op, comm, request);
}
