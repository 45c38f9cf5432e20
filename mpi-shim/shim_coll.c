/* The intercepted collectives: eligibility, buffers, and the three routes.
 * Entry points (C and Fortran) are generated from shim.def and call these.
 *
 * Reductions need a predefined type and op mpccl has; data movement takes any
 * contiguous type as raw elements of 8, 4 or 1 bytes (chosen from the byte
 * count, which MPI makes equal on every rank).  Nonblocking calls return
 * once their work is started and complete in MPI_Wait/MPI_Test
 * (shim_async.c). */
#include "shim_coll_util.h"

/* Moves this rank's block to the front of the buffer after an in-place
 * reduce-scatter (MPI keeps it at offset 0, NCCL at offset rank). */
static ncclResult_t move_front(route_t *r, char *buf, size_t off, size_t bytes)
{
    return off == 0 ? ncclSuccess : stream_copy(r, buf, buf + off, bytes);
}

/* ---- reductions ---- */

static int allreduce(shim_coll_t coll, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
                     MPI_Comm comm, MPI_Request *req)
{
    shim_call_t c;
    route_t r;
    ncclDataType_t nt;
    ncclRedOp_t no;
    if (!mpccl_shim_begin(&c, coll, comm)) {
        mpccl_shim_count(coll, SHIM_ROUTE_MPI);
        return req ? PMPI_Iallreduce(sendbuf, recvbuf, count, dt, op, comm, req)
                   : PMPI_Allreduce(sendbuf, recvbuf, count, dt, op, comm);
    }
    c.tunable = req == NULL;
    int inplace = sendbuf == MPI_IN_PLACE, n = check_count(&c, count);
    size_t esz = check_reduce(&c, dt, op, &nt, &no);
    mpccl_shim_buf(&c, sendbuf, (size_t)n, dt, SHIM_IN);
    mpccl_shim_buf(&c, recvbuf, (size_t)n, dt, inplace ? SHIM_INOUT : SHIM_OUT);
    check_align(&c, esz);
    switch (mpccl_shim_decide(&c, (size_t)n * esz)) {
    case SHIM_ROUTE_MPCCL:
        if (route_begin(&r, &c) != MPI_SUCCESS) return MPI_ERR_OTHER;
        return finish_route(&r, ncclAllReduce(inplace ? recvbuf : sendbuf, recvbuf, (size_t)n, nt, no, r.sc->nccl,
                                              r.sc->stream), "MPI_Allreduce", req);
    case SHIM_ROUTE_STAGED:
        STAGED(&c, SREQ ? PMPI_Iallreduce(IP(sendbuf, &c), H(&c, recvbuf), count, dt, op, comm, SREQ)
                        : PMPI_Allreduce(IP(sendbuf, &c), H(&c, recvbuf), count, dt, op, comm));
    default:
        return req ? PMPI_Iallreduce(sendbuf, recvbuf, count, dt, op, comm, req)
                   : PMPI_Allreduce(sendbuf, recvbuf, count, dt, op, comm);
    }
}

int mpccl_shim_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                         MPI_Comm comm)
{
    return allreduce(SHIM_ALLREDUCE, sendbuf, recvbuf, count, datatype, op, comm, NULL);
}

int mpccl_shim_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                          MPI_Comm comm, MPI_Request *request)
{
    return allreduce(SHIM_IALLREDUCE, sendbuf, recvbuf, count, datatype, op, comm, request);
}

static int reduce_pass(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, int root,
                       MPI_Comm comm, MPI_Request *req)
{
    return req ? PMPI_Ireduce(sendbuf, recvbuf, count, dt, op, root, comm, req)
               : PMPI_Reduce(sendbuf, recvbuf, count, dt, op, root, comm);
}

static int reduce(shim_coll_t coll, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
                  int root, MPI_Comm comm, MPI_Request *req)
{
    shim_call_t c;
    route_t r;
    ncclDataType_t nt;
    ncclRedOp_t no;
    if (!mpccl_shim_begin(&c, coll, comm)) {
        mpccl_shim_count(coll, SHIM_ROUTE_MPI);
        return reduce_pass(sendbuf, recvbuf, count, dt, op, root, comm, req);
    }
    c.tunable = req == NULL;
    int n = check_count(&c, count), am_root = check_root(&c, root);
    int inplace = am_root && sendbuf == MPI_IN_PLACE;
    size_t esz = check_reduce(&c, dt, op, &nt, &no);
    mpccl_shim_buf(&c, sendbuf, (size_t)n, dt, SHIM_IN);
    if (am_root) mpccl_shim_buf(&c, recvbuf, (size_t)n, dt, inplace ? SHIM_INOUT : SHIM_OUT);
    check_align(&c, esz);
    switch (mpccl_shim_decide(&c, (size_t)n * esz)) {
    case SHIM_ROUTE_MPCCL:
        if (route_begin(&r, &c) != MPI_SUCCESS) return MPI_ERR_OTHER;
        return finish_route(&r, ncclReduce(inplace ? recvbuf : sendbuf, am_root ? recvbuf : NULL, (size_t)n, nt, no,
                                           root, r.sc->nccl, r.sc->stream), "MPI_Reduce", req);
    case SHIM_ROUTE_STAGED:
        STAGED(&c, reduce_pass(IP(sendbuf, &c), am_root ? H(&c, recvbuf) : recvbuf, count, dt, op, root, comm, SREQ));
    default:
        return reduce_pass(sendbuf, recvbuf, count, dt, op, root, comm, req);
    }
}

int mpccl_shim_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, int root,
                      MPI_Comm comm)
{
    return reduce(SHIM_REDUCE, sendbuf, recvbuf, count, dt, op, root, comm, NULL);
}

int mpccl_shim_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, int root,
                       MPI_Comm comm, MPI_Request *request)
{
    return reduce(SHIM_IREDUCE, sendbuf, recvbuf, count, dt, op, root, comm, request);
}

/* counts == NULL: every rank gets `count` (Reduce_scatter_block). */
static int rs_pass(const void *sendbuf, void *recvbuf, int count, const int *counts, MPI_Datatype dt, MPI_Op op,
                   MPI_Comm comm, MPI_Request *req)
{
    if (counts)
        return req ? PMPI_Ireduce_scatter(sendbuf, recvbuf, counts, dt, op, comm, req)
                   : PMPI_Reduce_scatter(sendbuf, recvbuf, counts, dt, op, comm);
    return req ? PMPI_Ireduce_scatter_block(sendbuf, recvbuf, count, dt, op, comm, req)
               : PMPI_Reduce_scatter_block(sendbuf, recvbuf, count, dt, op, comm);
}

static int reduce_scatter(shim_coll_t coll, const void *sendbuf, void *recvbuf, int count, const int *counts,
                          MPI_Datatype dt, MPI_Op op, MPI_Comm comm, MPI_Request *req)
{
    shim_call_t c;
    route_t r;
    ncclDataType_t nt;
    ncclRedOp_t no;
#define PASS() rs_pass(sendbuf, recvbuf, count, counts, dt, op, comm, req)
    if (!mpccl_shim_begin(&c, coll, comm)) {
        mpccl_shim_count(coll, SHIM_ROUTE_MPI);
        return PASS();
    }
    c.tunable = req == NULL;
    size_t total = 0, mine = 0, before = 0, same = 1;
    for (int i = 0; i < c.size; i++) {
        int ci = counts ? counts[i] : count;
        if (ci < 0) mpccl_shim_reject(&c, SHIM_WHY_ARG, "negative count (MPI reports it)");
        ci = ci > 0 ? ci : 0;
        if (i < c.rank) before += (size_t)ci;
        if (i == c.rank) mine = (size_t)ci;
        same &= counts == NULL || counts[i] == counts[0];
        total += (size_t)ci;
    }
    int inplace = sendbuf == MPI_IN_PLACE;
    size_t esz = check_reduce(&c, dt, op, &nt, &no);
    mpccl_shim_buf(&c, sendbuf, total, dt, SHIM_IN);
    mpccl_shim_buf(&c, recvbuf, inplace ? total : mine, dt, inplace ? SHIM_INOUT : SHIM_OUT);
    check_align(&c, esz);
    switch (mpccl_shim_decide(&c, total * esz)) {
    case SHIM_ROUTE_MPCCL: {
        const char *src = inplace ? recvbuf : sendbuf;
        /* In place, NCCL leaves our block where it was: at our offset. */
        char *dst = inplace ? (char *)recvbuf + before * esz : recvbuf;
        ncclResult_t res;
        if (route_begin(&r, &c) != MPI_SUCCESS) return MPI_ERR_OTHER;
        if (same) {
            res = ncclReduceScatter(src, dst, mine, nt, no, r.sc->nccl, r.sc->stream);
        } else {
            /* Unequal blocks: one reduce per root, launched together. */
            size_t off = 0;
            res = ncclGroupStart();
            for (int i = 0; i < c.size && res == ncclSuccess; i++) {
                size_t ci = counts[i] > 0 ? (size_t)counts[i] : 0;
                if (ci) res = ncclReduce(src + off * esz, i == c.rank ? dst : NULL, ci, nt, no, i, r.sc->nccl,
                                         r.sc->stream);
                off += ci;
            }
            ncclResult_t end = ncclGroupEnd();
            if (res == ncclSuccess) res = end;
        }
        if (res == ncclSuccess && inplace) res = move_front(&r, recvbuf, before * esz, mine * esz);
        return finish_route(&r, res, counts ? "MPI_Reduce_scatter" : "MPI_Reduce_scatter_block", req);
    }
    case SHIM_ROUTE_STAGED:
        STAGED(&c, rs_pass(IP(sendbuf, &c), H(&c, recvbuf), count, counts, dt, op, comm, SREQ));
    default:
        return PASS();
    }
#undef PASS
}

int mpccl_shim_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                                    MPI_Op op, MPI_Comm comm)
{
    return reduce_scatter(SHIM_REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, recvcount, NULL, datatype, op, comm, NULL);
}

int mpccl_shim_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                                     MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    return reduce_scatter(SHIM_IREDUCE_SCATTER_BLOCK, sendbuf, recvbuf, recvcount, NULL, datatype, op, comm,
                          request);
}

int mpccl_shim_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype,
                              MPI_Op op, MPI_Comm comm)
{
    return reduce_scatter(SHIM_REDUCE_SCATTER, sendbuf, recvbuf, 0, recvcounts, datatype, op, comm, NULL);
}

int mpccl_shim_Ireduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype,
                               MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    return reduce_scatter(SHIM_IREDUCE_SCATTER, sendbuf, recvbuf, 0, recvcounts, datatype, op, comm, request);
}

/* ---- data movement ---- */

static int bcast(shim_coll_t coll, void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm, MPI_Request *req)
{
    shim_call_t c;
    route_t r;
    ncclDataType_t mt;
    if (!mpccl_shim_begin(&c, coll, comm)) {
        mpccl_shim_count(coll, SHIM_ROUTE_MPI);
        return req ? PMPI_Ibcast(buf, count, dt, root, comm, req) : PMPI_Bcast(buf, count, dt, root, comm);
    }
    c.tunable = req == NULL;
    int n = check_count(&c, count);
    check_root(&c, root);
    size_t bytes = check_bytes(&c, n, dt), esz = move_esize(bytes, &mt);
    mpccl_shim_buf(&c, buf, (size_t)n, dt, SHIM_INOUT);
    check_align(&c, esz);
    switch (mpccl_shim_decide(&c, bytes)) {
    case SHIM_ROUTE_MPCCL:
        if (route_begin(&r, &c) != MPI_SUCCESS) return MPI_ERR_OTHER;
        return finish_route(&r, ncclBroadcast(buf, buf, bytes / esz, mt, root, r.sc->nccl, r.sc->stream), "MPI_Bcast",
                            req);
    case SHIM_ROUTE_STAGED:
        STAGED(&c, SREQ ? PMPI_Ibcast(H(&c, buf), count, dt, root, comm, SREQ) : PMPI_Bcast(H(&c, buf), count, dt, root, comm));
    default:
        return req ? PMPI_Ibcast(buf, count, dt, root, comm, req) : PMPI_Bcast(buf, count, dt, root, comm);
    }
}

int mpccl_shim_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    return bcast(SHIM_BCAST, buffer, count, datatype, root, comm, NULL);
}

int mpccl_shim_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request)
{
    return bcast(SHIM_IBCAST, buffer, count, datatype, root, comm, request);
}

/* Allgather, Alltoall, Gather, Scatter: one block of b bytes per rank. */
typedef enum { MV_ALLGATHER, MV_ALLTOALL, MV_GATHER, MV_SCATTER } mv_kind_t;

static int mv_pass(mv_kind_t k, const void *sb, int sc, MPI_Datatype st, void *rb, int rcn, MPI_Datatype rt,
                   int root, MPI_Comm comm, MPI_Request *req)
{
    switch (k) {
    case MV_ALLGATHER:
        return req ? PMPI_Iallgather(sb, sc, st, rb, rcn, rt, comm, req) : PMPI_Allgather(sb, sc, st, rb, rcn, rt, comm);
    case MV_ALLTOALL:
        return req ? PMPI_Ialltoall(sb, sc, st, rb, rcn, rt, comm, req) : PMPI_Alltoall(sb, sc, st, rb, rcn, rt, comm);
    case MV_GATHER:
        return req ? PMPI_Igather(sb, sc, st, rb, rcn, rt, root, comm, req)
                   : PMPI_Gather(sb, sc, st, rb, rcn, rt, root, comm);
    default:
        return req ? PMPI_Iscatter(sb, sc, st, rb, rcn, rt, root, comm, req)
                   : PMPI_Scatter(sb, sc, st, rb, rcn, rt, root, comm);
    }
}

static int move(shim_coll_t coll, mv_kind_t k, const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf,
                int rcount, MPI_Datatype rtype, int root, MPI_Comm comm, MPI_Request *req)
{
    shim_call_t c;
    route_t r;
    ncclDataType_t mt;
    if (!mpccl_shim_begin(&c, coll, comm)) {
        mpccl_shim_count(coll, SHIM_ROUTE_MPI);
        return mv_pass(k, sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm, req);
    }
    c.tunable = req == NULL;
    int rooted = k == MV_GATHER || k == MV_SCATTER;
    int am_root = rooted ? check_root(&c, root) : 1;
    /* Which sides are significant here, and which one is in place. */
    int send_on = !(k == MV_SCATTER && !am_root), recv_on = !(k == MV_GATHER && !am_root);
    int inplace = (k == MV_SCATTER) ? am_root && recvbuf == MPI_IN_PLACE : sendbuf == MPI_IN_PLACE;
    size_t nsend = (k == MV_ALLGATHER || k == MV_GATHER) ? 1 : (size_t)c.size;
    size_t nrecv = (k == MV_ALLGATHER || k == MV_ALLTOALL || k == MV_GATHER) ? (size_t)c.size : 1;
    int sn = check_count(&c, scount), rn = check_count(&c, rcount);
    size_t sblock = 0, rblock = 0;
    if (send_on && !(inplace && k != MV_SCATTER)) sblock = check_bytes(&c, sn, stype);
    if (recv_on && !(inplace && k == MV_SCATTER)) rblock = check_bytes(&c, rn, rtype);
    size_t block = send_on && !(inplace && k != MV_SCATTER) ? sblock : rblock;
    if (send_on && recv_on && !inplace && sblock != rblock)
        mpccl_shim_reject(&c, SHIM_WHY_ARG, "send and receive sizes differ (MPI reports it)");
    size_t esz = move_esize(block, &mt);
    if (send_on && sendbuf != MPI_IN_PLACE)
        mpccl_shim_buf(&c, sendbuf, (size_t)sn * nsend, stype, (k == MV_ALLTOALL && inplace) ? SHIM_INOUT : SHIM_IN);
    if (recv_on && recvbuf != MPI_IN_PLACE)
        mpccl_shim_buf(&c, recvbuf, (size_t)rn * nrecv, rtype, inplace ? SHIM_INOUT : SHIM_OUT);
    check_align(&c, esz);
    switch (mpccl_shim_decide(&c, block * (rooted ? 1 : (size_t)c.size))) {
    case SHIM_ROUTE_MPCCL: {
        size_t cnt = block / esz;
        ncclResult_t res;
        const char *sb = sendbuf;
        char *rb = recvbuf;
        if (route_begin(&r, &c) != MPI_SUCCESS) return MPI_ERR_OTHER;
        switch (k) {
        case MV_ALLGATHER:
            if (inplace) sb = rb + (size_t)c.rank * block;
            res = ncclAllGather(sb, rb, cnt, mt, r.sc->nccl, r.sc->stream);
            break;
        case MV_ALLTOALL:
            res = ncclAlltoAll(inplace ? rb : sb, rb, cnt, mt, r.sc->nccl, r.sc->stream);
            break;
        case MV_GATHER:
            if (inplace) sb = rb + (size_t)root * block;
            res = ncclGather(sb, am_root ? rb : NULL, cnt, mt, root, r.sc->nccl, r.sc->stream);
            break;
        default:
            if (inplace) rb = (char *)sb + (size_t)root * block;
            res = ncclScatter(am_root ? sb : NULL, rb, cnt, mt, root, r.sc->nccl, r.sc->stream);
            break;
        }
        return finish_route(&r, res, mpccl_shim_coll_name(coll), req);
    }
    case SHIM_ROUTE_STAGED:
        STAGED(&c, mv_pass(k, send_on ? IP(sendbuf, &c) : sendbuf, scount, stype,
                           recv_on ? IP(recvbuf, &c) : recvbuf, rcount, rtype, root, comm, SREQ));
    default:
        return mv_pass(k, sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm, req);
    }
}

int mpccl_shim_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                         MPI_Datatype recvtype, MPI_Comm comm)
{
    return move(SHIM_ALLGATHER, MV_ALLGATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm,
                NULL);
}

int mpccl_shim_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                          MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
    return move(SHIM_IALLGATHER, MV_ALLGATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm,
                request);
}

int mpccl_shim_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                        MPI_Datatype recvtype, MPI_Comm comm)
{
    return move(SHIM_ALLTOALL, MV_ALLTOALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm,
                NULL);
}

int mpccl_shim_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                      MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return move(SHIM_GATHER, MV_GATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, NULL);
}

int mpccl_shim_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                       MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return move(SHIM_SCATTER, MV_SCATTER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
                NULL);
}

int mpccl_shim_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                         MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
    return move(SHIM_IALLTOALL, MV_ALLTOALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm,
                request);
}

int mpccl_shim_Igather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                       MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request)
{
    return move(SHIM_IGATHER, MV_GATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
                request);
}

int mpccl_shim_Iscatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                        MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request)
{
    return move(SHIM_ISCATTER, MV_SCATTER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
                request);
}
