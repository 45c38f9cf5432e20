/* Internal interfaces of libmpccl_shim.so, the PMPI interposer that sends MPI
 * collectives on GPU buffers through mpccl (doc/SHIM.md).  Inside the shim only
 * PMPI_* is called, so the shim never re-enters itself. */
#ifndef MPCCL_SHIM_H
#define MPCCL_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <mpi.h>

#include "nccl.h"

#if __has_include("build_config.h")
#include "build_config.h" /* MPCCL_HAVE_CUDA */
#endif

#define SHIM_EXPORT __attribute__((visibility("default")))

/* ---- the intercepted collectives (order of shim.def) ---- */
typedef enum {
    SHIM_ALLREDUCE, SHIM_REDUCE, SHIM_BCAST, SHIM_ALLGATHER, SHIM_REDUCE_SCATTER_BLOCK,
    SHIM_REDUCE_SCATTER, SHIM_ALLTOALL, SHIM_GATHER, SHIM_SCATTER, SHIM_IALLREDUCE,
    SHIM_IBCAST, SHIM_IALLGATHER, SHIM_ALLGATHERV, SHIM_ALLTOALLV, SHIM_GATHERV, SHIM_SCATTERV, SHIM_SCAN,
    SHIM_EXSCAN, SHIM_IREDUCE, SHIM_IREDUCE_SCATTER_BLOCK, SHIM_IREDUCE_SCATTER, SHIM_IALLTOALL, SHIM_IGATHER,
    SHIM_ISCATTER, SHIM_IALLGATHERV, SHIM_IALLTOALLV, SHIM_IGATHERV, SHIM_ISCATTERV, SHIM_ISCAN, SHIM_IEXSCAN,
    SHIM_NCOLLS
} shim_coll_t;
_Static_assert(SHIM_NCOLLS <= 64, "MPCCL_SHIM_COLLS keeps one bit per collective in a uint64_t");
const char *mpccl_shim_coll_name(shim_coll_t c);

/* The routes a call can take (counted per collective). */
/* SHIM_ROUTE_UCX: point-to-point between hosts through the shim's own UCX
 * worker (shim_ucx.c); collectives never take it. */
typedef enum { SHIM_ROUTE_MPI = 0, SHIM_ROUTE_MPCCL, SHIM_ROUTE_STAGED, SHIM_ROUTE_UCX, SHIM_NROUTES } shim_route_t;

/* ---- settings (shim_env.c), read once ---- */
typedef struct {
    int enabled;           /* MPCCL_SHIM (default 1) */
    int host_mode;         /* MPCCL_SHIM_HOST: host buffers count as GPU buffers (tests) */
    int agree;             /* MPCCL_SHIM_AGREE: agreement step (1) or uniformity rule (0) */
    size_t min_bytes;      /* MPCCL_SHIM_MIN_BYTES */
    int min_bytes_auto;    /* MPCCL_SHIM_MIN_BYTES=auto (default): measured per size class (shim_tune.c) */
    int p2p;               /* MPCCL_SHIM_P2P: point-to-point on device buffers through the shim (-1: auto, undecided) */
    size_t eager_bytes;    /* MPCCL_SHIM_EAGER_BYTES: device messages up to this size go as staged copies */
    int net;               /* MPCCL_SHIM_NET: messages between hosts, SHIM_NET_AUTO / _UCX / _MPI */
    int net_direct;        /* MPCCL_SHIM_NET_DIRECT: 1 auto (UCX reads GPU memory where a NIC registers it),
                              2 wherever UCX handles CUDA memory, 0 never */
    size_t net_chunk;      /* MPCCL_SHIM_NET_CHUNK: pipeline chunk through pinned host memory */
    size_t net_key_inline; /* MPCCL_SHIM_NET_KEY_INLINE: largest UCX remote key carried in the envelope */
    uint64_t colls;        /* MPCCL_SHIM_COLLS as a bit per shim_coll_t */
    int log_level;         /* MPCCL_DEBUG / NCCL_DEBUG: 0 none, 1 warn, 2 info, 3 trace */
    int log_shim;          /* SHIM selected by MPCCL_DEBUG_SUBSYS */
} shim_settings_t;
enum { SHIM_NET_AUTO = 0, SHIM_NET_UCX, SHIM_NET_MPI };
const shim_settings_t *mpccl_shim_settings(void);
/* MPCCL_SHIM_P2P=auto (the default), decided once MPI is up: on unless the
 * MPI underneath is CUDA-aware. */
void mpccl_shim_p2p_resolve(int mpi_cuda_aware);

void mpccl_shim_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define SHIM_WARN(...) mpccl_shim_log(1, __VA_ARGS__)
#define SHIM_INFO(...)                                                      \
    do { if (mpccl_shim_settings()->log_level >= 2) mpccl_shim_log(2, __VA_ARGS__); } while (0)
/* Logs "why" at INFO the first time this (collective, reason) pair is seen. */
void mpccl_shim_log_once(shim_coll_t c, int reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void mpccl_shim_count(shim_coll_t c, shim_route_t r);
/* Point-to-point: send (1) or receive (0) side. */
void mpccl_shim_count_p2p(int send, shim_route_t r);
/* Logs the per-collective route counts at INFO (MPI_Finalize). */
void mpccl_shim_summary(void);

/* Thread-local nesting depth: calls made while > 0 pass straight to PMPI. */
extern __thread int mpccl_shim_depth;

/* ---- memory (shim_mem.c) ---- */
/* Is p memory MPI cannot take (device or managed)?  In MPCCL_SHIM_HOST mode
 * every non-NULL pointer answers yes. */
int mpccl_shim_is_device(const void *p);
/* Can this process hold device buffers at all (CUDA loaded, or host mode)? */
int mpccl_shim_gpu_process(void);
/* cuPointerGetAttributes through the runtime's entry point (attrs is a
 * CUpointer_attribute array); 0 when CUDA cannot answer. */
int mpccl_shim_cu_attrs(const void *p, unsigned n, void *attrs, void **data);
/* Host bounce buffers for the staged path (pinned when CUDA is there). */
void *mpccl_shim_bounce_get(size_t bytes);
void mpccl_shim_bounce_put(void *p);
/* Copies between a buffer and its bounce; 0 or an MPI error code.  A
 * cudaMemcpy: done on return between device and pinned memory, which is
 * what bounces are.  Device to device, and from pageable memory to the
 * device, it returns before the copy is done: mpccl_shim_copy_done waits. */
int mpccl_shim_copy(void *dst, const void *src, size_t bytes);
int mpccl_shim_copy_done(void *dst, const void *src, size_t bytes);

/* ---- datatypes and ops (shim_types.c) ---- */
/* Maps a predefined MPI datatype mpccl can reduce; 0 when it cannot. */
int mpccl_shim_reduce_type(MPI_Datatype dt, ncclDataType_t *out);
int mpccl_shim_reduce_op(MPI_Op op, ncclRedOp_t *out);
/* Is dt contiguous (size == extent == true extent, lb 0)?  *size gets its size. */
int mpccl_shim_contiguous(MPI_Datatype dt, size_t *size);
/* Bytes spanned by count elements of dt, and the offset of the first byte
 * touched (true lb); 0 on a bad type. */
int mpccl_shim_span(MPI_Datatype dt, size_t count, ptrdiff_t *lb, size_t *bytes);

/* ---- communicators (shim_comm.c) ---- */
typedef struct shim_comm {
    ncclComm_t nccl;
    void *stream;          /* cudaStream_t of a GPU communicator, NULL on host ones */
    int rank, size;
    int linked; /* on the list MPI_Finalize walks */
    void *ident;           /* identity-element buffers of the scans (shim_collv.c) */
    struct shim_comm *next, *prev;
} shim_comm_t;
/* The mpccl communicator cached on comm, created on first use (collective:
 * every rank reaches this together, after the route agreement). */
int mpccl_shim_comm_get(MPI_Comm comm, shim_comm_t **out);
/* Waits for the communicator's stream (GPU) and converts failures to MPI codes. */
int mpccl_shim_comm_finish(shim_comm_t *sc, ncclResult_t r, MPI_Comm comm, const char *what);
/* Tears down every cached communicator (before PMPI_Finalize). */
void mpccl_shim_comm_fini(void);

/* ---- one call (shim_route.c) ---- */
enum { SHIM_IN = 1, SHIM_OUT = 2, SHIM_INOUT = 3 };
#define SHIM_MAXBUF 2
typedef struct {
    void *user;            /* the caller's pointer */
    void *host;            /* what MPI gets: user, or the bounce at the same offset */
    void *bounce;
    ptrdiff_t lb;
    size_t bytes;
    int dir, device;
} shim_buf_t;

typedef struct {
    shim_coll_t coll;
    MPI_Comm comm;
    int rank, size;
    int ok;                /* eligible for mpccl on this rank (types, op, size, alignment) */
    /* In: this rank could take the call's collective form (v-collectives whose
     * blocks are equal and packed).  Out of mpccl_shim_decide: every rank can
     * (only the agreement step can tell; 0 without it). */
    int fast;
    int nbuf;
    shim_buf_t buf[SHIM_MAXBUF];
    /* MPCCL_SHIM_MIN_BYTES=auto (shim_tune.c) */
    int tunable;           /* the ranks pass equal sizes and the call blocks: it may be a timed trial */
    void *tune;            /* the size class this call is a trial of, or NULL */
    int tune_route;
    double tune_t0;
    size_t bytes;          /* what mpccl_shim_decide was given */
} shim_call_t;

/* Starts a call: 0 when the shim must stay out of it (off, nested, MPI_COMM_NULL,
 * intercommunicator); the caller then passes straight to PMPI. */
int mpccl_shim_begin(shim_call_t *c, shim_coll_t coll, MPI_Comm comm);
/* Records a significant buffer (count elements of dt); NULL/0 ones are skipped. */
void mpccl_shim_buf(shim_call_t *c, const void *p, size_t count, MPI_Datatype dt, int dir);
/* The same for bytes bytes starting lb bytes from p (lb may be negative: MPI
 * displacements may point before the buffer's address). */
void mpccl_shim_buf_span(shim_call_t *c, const void *p, ptrdiff_t lb, size_t bytes, int dir);
/* Marks the call ineligible for mpccl, logging why once. */
void mpccl_shim_reject(shim_call_t *c, int reason, const char *why);
/* Applies MIN_BYTES / COLLS and (in agreement mode) agrees across the
 * communicator; every rank gets the same route. */
shim_route_t mpccl_shim_decide(shim_call_t *c, size_t bytes);
/* MPCCL_SHIM_MIN_BYTES=auto (shim_tune.c): whether the call should be staged
 * (a trial of staging, or the class's measured choice); the route the
 * agreement gave; the blocking call's completion (timed when a trial). */
int mpccl_shim_tune_staged(shim_call_t *c, size_t bytes);
void mpccl_shim_tune_route(shim_call_t *c, shim_route_t r);
void mpccl_shim_tune_done(shim_call_t *c, int rc, size_t bytes);
/* Staged path: copies device buffers to bounces (before) and back (after). */
int mpccl_shim_stage_in(shim_call_t *c);
int mpccl_shim_stage_out(shim_call_t *c, int rc);
/* Host pointer MPI should use for buffer i (or the caller's, when not staged). */
static inline void *mpccl_shim_host(const shim_call_t *c, const void *user)
{
    for (int i = 0; i < c->nbuf; i++)
        if (c->buf[i].user == user) return c->buf[i].host;
    return (void *)user;
}
/* Nonblocking collectives (shim_async.c): the user's request completes when
 * the work enqueued on stream is done (a host communicator: at once), or
 * when MPI's request ireq on the staged copies is (then they go back). */
int mpccl_shim_async_stream(void *stream, MPI_Comm comm, const char *what, MPI_Request *req);
int mpccl_shim_async_staged(shim_call_t *c, MPI_Request ireq, MPI_Request *req);
/* An already completed request, for nonblocking calls finished in place. */
int mpccl_shim_done_request(MPI_Request *req);

/* Reasons logged once per collective. */
enum { SHIM_WHY_TYPE, SHIM_WHY_OP, SHIM_WHY_NONCONTIG, SHIM_WHY_ALIGN, SHIM_WHY_ARG, SHIM_WHY_SMALL,
       SHIM_WHY_COLLS, SHIM_WHY_PEER, SHIM_NWHY };

/* ---- the collectives (shim_coll.c); entry points are generated (shim.def) ---- */
int mpccl_shim_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                         MPI_Comm comm);
int mpccl_shim_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                      int root, MPI_Comm comm);
int mpccl_shim_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int mpccl_shim_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                         int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int mpccl_shim_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                                    MPI_Op op, MPI_Comm comm);
int mpccl_shim_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int mpccl_shim_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                        int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int mpccl_shim_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                      int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int mpccl_shim_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                       int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int mpccl_shim_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                          MPI_Comm comm, MPI_Request *request);
int mpccl_shim_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                      MPI_Request *request);
int mpccl_shim_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                          int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);

/* ---- point-to-point and completion (shim_p2p.c, shim_wait.c) ---- */
int mpccl_shim_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm);
int mpccl_shim_Ssend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm);
int mpccl_shim_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                     MPI_Request *request);
int mpccl_shim_Issend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                      MPI_Request *request);
int mpccl_shim_Recv(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm, MPI_Status *status);
int mpccl_shim_Irecv(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
                     MPI_Request *request);
int mpccl_shim_recv_mpi(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
                        MPI_Status *status);
int mpccl_shim_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                        MPI_Status *status);
int mpccl_shim_Sendrecv_replace(void *buf, int count, MPI_Datatype dt, int dest, int sendtag, int source,
                                int recvtag, MPI_Comm comm, MPI_Status *status);
int mpccl_shim_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status);
int mpccl_shim_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status);
int mpccl_shim_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status);
int mpccl_shim_Improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status);
int mpccl_shim_Mrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *message, MPI_Status *status);
int mpccl_shim_Imrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *message, MPI_Request *request);
int mpccl_shim_Send_init(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                         MPI_Request *request);
int mpccl_shim_Ssend_init(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                          MPI_Request *request);
int mpccl_shim_Recv_init(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
                         MPI_Request *request);
int mpccl_shim_Start(MPI_Request *request);
int mpccl_shim_Startall(int count, MPI_Request requests[]);
int mpccl_shim_Request_free(MPI_Request *request);
int mpccl_shim_Wait(MPI_Request *request, MPI_Status *status);
int mpccl_shim_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]);
int mpccl_shim_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status);
int mpccl_shim_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]);
int mpccl_shim_Test(MPI_Request *request, int *flag, MPI_Status *status);
int mpccl_shim_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]);
int mpccl_shim_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status);
int mpccl_shim_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]);
int mpccl_shim_Request_get_status(MPI_Request request, int *flag, MPI_Status *status);
int mpccl_shim_Cancel(MPI_Request *request);
int mpccl_shim_Barrier(MPI_Comm comm);
/* Persistent requests of the shim (shim_p2p.c), for the completion calls. */
int mpccl_shim_persist_any(void);
void mpccl_shim_persist_restore(MPI_Request *slot, MPI_Request before);

/* Ends point-to-point: transfers still in flight get a few seconds, then
 * the private communicator, IPC mappings and stashed messages go. */
void mpccl_shim_p2p_fini(void);
/* ---- the other nonblocking collectives (shim_coll.c, shim_collv.c) ---- */
int mpccl_shim_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, int root,
                       MPI_Comm comm, MPI_Request *request);
int mpccl_shim_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                                     MPI_Op op, MPI_Comm comm, MPI_Request *request);
int mpccl_shim_Ireduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype,
                               MPI_Op op, MPI_Comm comm, MPI_Request *request);
int mpccl_shim_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                         MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int mpccl_shim_Igather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                       MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request);
int mpccl_shim_Iscatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                        MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request);
int mpccl_shim_Iallgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                           const int *recvcounts, const int *displs, MPI_Datatype recvtype, MPI_Comm comm,
                           MPI_Request *request);
int mpccl_shim_Ialltoallv(const void *sendbuf, const int *sendcounts, const int *sdispls, MPI_Datatype sendtype,
                          void *recvbuf, const int *recvcounts, const int *rdispls, MPI_Datatype recvtype,
                          MPI_Comm comm, MPI_Request *request);
int mpccl_shim_Igatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                        const int *recvcounts, const int *displs, MPI_Datatype recvtype, int root, MPI_Comm comm,
                        MPI_Request *request);
int mpccl_shim_Iscatterv(const void *sendbuf, const int *sendcounts, const int *displs, MPI_Datatype sendtype,
                         void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                         MPI_Request *request);
int mpccl_shim_Iscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                     MPI_Request *request);
int mpccl_shim_Iexscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                       MPI_Comm comm, MPI_Request *request);

/* ---- v-collectives and scans (shim_collv.c) ---- */
int mpccl_shim_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                          const int *recvcounts, const int *displs, MPI_Datatype recvtype, MPI_Comm comm);
int mpccl_shim_Alltoallv(const void *sendbuf, const int *sendcounts, const int *sdispls, MPI_Datatype sendtype,
                         void *recvbuf, const int *recvcounts, const int *rdispls, MPI_Datatype recvtype,
                         MPI_Comm comm);
int mpccl_shim_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                       const int *recvcounts, const int *displs, MPI_Datatype recvtype, int root, MPI_Comm comm);
int mpccl_shim_Scatterv(const void *sendbuf, const int *sendcounts, const int *displs, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int mpccl_shim_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int mpccl_shim_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                      MPI_Comm comm);
/* Frees a communicator's identity buffers (its teardown). */
void mpccl_shim_ident_free(shim_comm_t *sc);

/* Tears down the cached communicators, logs the summary, then PMPI_Finalize. */
int mpccl_shim_Finalize(void);

/* Fortran: MPI_IN_PLACE / MPI_BOTTOM of the Fortran bindings -> C's. */
void *mpccl_shim_f2c_buf(void *p);

#endif
