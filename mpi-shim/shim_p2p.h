/* Point-to-point on GPU buffers: the protocol, the operations that carry it,
 * and the job-wide facts it needs (doc/SHIM.md, "Point-to-point").
 *
 * MPI does all the matching.  A device-buffer message travels either as a
 * plain MPI message from a host copy ("eager": small, non-contiguous, or no
 * way to reach the sender's memory), or as an envelope: a fixed-size MPI
 * message on the user's source, tag and communicator that says where the
 * data is (a CUDA IPC handle; to another host, a UCX remote key).  The
 * receiver copies the data GPU to GPU (or pulls it over UCX) and answers on
 * the shim's private communicator; only then does the send complete.  Every
 * receive in the process lands first where it can tell an envelope from data
 * (an envelope is exactly SHIM_ENV_BYTES long and carries a magic word and a
 * checksum). */
#ifndef MPCCL_SHIM_P2P_H
#define MPCCL_SHIM_P2P_H

#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

#include "shim.h"

/* ---- the envelope (shim_envelope.c) ---- */
#define SHIM_ENV_BYTES 192
#define SHIM_ENV_MAGIC 0x6d7063636c656e76ULL /* "mpcclenv" */
/* SHIM_ENV_UCX: another host, through UCX (shim_ucx.c).  Its fields:
 * base the remote address, rkey_bytes the packed remote key's size (in
 * rkey[] when it fits, else a message of its own on the private
 * communicator, tag + 1, sent before the envelope: flag SHIM_UCX_KEY_AHEAD),
 * flags' mode (& SHIM_UCX_MODE) SHIM_UCX_GET (the
 * receiver reads base with ucp_get_nbx) or SHIM_UCX_STREAM (the sender's UCX
 * cannot read its buffer: on the answer SHIM_ANS_GO it sends it as UCX tag
 * messages of offset bytes each, staged through pinned host memory). */
enum { SHIM_ENV_IPC = 1, SHIM_ENV_PUSH = 2, SHIM_ENV_UCX = 3 };
enum { SHIM_UCX_GET = 1, SHIM_UCX_STREAM = 2, SHIM_UCX_MODE = 0xff, SHIM_UCX_KEY_AHEAD = 0x100 };
#define SHIM_ENV_RKEY_INLINE 112
typedef struct {
    uint64_t magic;
    uint32_t kind;        /* SHIM_ENV_IPC: pull through ipc[]; SHIM_ENV_PUSH: ask for the data */
    uint32_t sender;      /* the sender's rank in MPI_COMM_WORLD */
    uint64_t bytes;       /* the message */
    uint32_t tag;         /* tag of this transfer's answer on the private communicator */
    int32_t pid;
    uint64_t hostid;
    uint64_t base;        /* sender's allocation base (also the pointer, within one process) */
    uint64_t offset;      /* of the data within that allocation (SHIM_ENV_UCX: the chunk size) */
    uint64_t buffer_id;   /* CUDA's id of the allocation: a reused address is a new buffer */
    int32_t device;       /* (SHIM_ENV_UCX: rkey_bytes) */
    uint32_t reserved0;   /* (SHIM_ENV_UCX: flags) */
    union {
        struct {
            unsigned char ipc[64]; /* cudaIpcMemHandle_t */
            unsigned char reserved[48];
        };
        unsigned char rkey[SHIM_ENV_RKEY_INLINE]; /* SHIM_ENV_UCX: the packed remote key, when it fits */
    };
    uint64_t check;       /* of everything above */
} shim_env_t;
_Static_assert(sizeof(shim_env_t) == SHIM_ENV_BYTES, "the envelope has a fixed size");

/* Seals an envelope (magic, checksum). */
void mpccl_shim_env_seal(shim_env_t *e);
/* Is this message an envelope?  bytes: its size; p: its first bytes (may be
 * unaligned). Fills *out when it is. */
int mpccl_shim_env_parse(const void *p, size_t bytes, shim_env_t *out);

/* Answers from the receiver, on the private communicator, tag env.tag;
 * pushed data from the sender, tag env.tag + 1. */
enum { SHIM_ANS_DONE = 1, SHIM_ANS_PUSH = 2, SHIM_ANS_FAIL = 3, SHIM_ANS_GO = 4 };


/* ---- the job (shim_world.c) ---- */
/* Called from the intercepted MPI_Init / MPI_Init_thread: a private dup of
 * MPI_COMM_WORLD and every rank's pid and host. */
void mpccl_shim_world_init(void);
void mpccl_shim_world_fini(void);
/* Is the protocol available (MPCCL_SHIM_P2P, and the job known)? */
int mpccl_shim_p2p_on(void);
MPI_Comm mpccl_shim_private_comm(void);
int mpccl_shim_my_world_rank(void);
uint64_t mpccl_shim_hostid(void);
/* World rank of comm's rank r, -1 when it has none (another job's process). */
int mpccl_shim_world_rank(MPI_Comm comm, int r);
/* pid and host of a world rank; 0 when unknown. */
int mpccl_shim_peer_pid(int world_rank);
uint64_t mpccl_shim_peer_host(int world_rank);
/* A fresh tag for a transfer's answer on the private communicator (even;
 * its pushed data uses the tag + 1). */
int mpccl_shim_next_tag(void);

/* ---- GPU memory (shim_ipc.c) ---- */
typedef struct {
    uint64_t base, size, buffer_id;
    int device;
} shim_alloc_t;
/* The allocation p lies in; 0 when p is not device memory CUDA can share. */
int mpccl_shim_alloc_of(const void *p, shim_alloc_t *a);
/* Fills e's kind, base, offset, ipc handle for p (SHIM_ENV_PUSH when the
 * memory cannot be shared). */
void mpccl_shim_ipc_export(const void *p, shim_env_t *e);
/* Copies bytes from the sender's memory described by e into dst (host or
 * device); MPI_SUCCESS, or an error when the memory cannot be reached
 * (then the data is asked for instead). */
int mpccl_shim_ipc_pull(const shim_env_t *e, void *dst, size_t bytes);
/* Waits for the caller's work on the legacy default stream, so data a kernel
 * wrote before the MPI call is what travels. */
void mpccl_shim_sync_legacy(void);
void mpccl_shim_ipc_fini(void);

/* ---- operations (shim_op.c) ---- */
typedef struct shim_op shim_op_t;
/* A step runs when the operation's internal request completes (st is its
 * status); it may post a new internal request or finish the operation. */
typedef void (*shim_step_fn)(shim_op_t *op, MPI_Status *st);

struct shim_op {
    MPI_Request ireq;        /* internal request being waited on, or MPI_REQUEST_NULL */
    shim_step_fn step;
    /* Or, with no internal request: polled until it says done (GPU work of
     * a nonblocking collective); then finish runs, and ctx is its state. */
    int (*poll)(shim_op_t *op);
    void (*finish)(shim_op_t *op);
    void *ctx;
    MPI_Request greq;        /* the user's handle (generalized request); NULL for blocking calls */
    const char *what;        /* "MPI_Send", ... for messages */
    MPI_Comm comm;
    int peer_world;          /* the peer's world rank (liveness); -1 unknown */
    /* what the operation moves */
    void *buf;               /* the user's buffer */
    int count;
    MPI_Datatype dt;
    int device;              /* buf is device memory */
    int contiguous;
    size_t capacity;         /* receive: count * size(dt) */
    void *land;              /* receive: where MPI put the message */
    size_t land_bytes;
    int land_owned;          /* land is a bounce of ours */
    void *bounce;            /* send: host copy; receive: pushed data */
    int bounce_owned;        /* how bounce is freed: 1 pool, 2 malloc (0: pool) */
    void *from_stash;        /* receive: served by a message a probe took out of MPI */
    shim_env_t env;
    uint32_t answer;
    int cancellable;         /* ireq is the user's receive itself */
    /* the result, for the status */
    int source, tag, error, cancelled, dead_peer;
    size_t bytes;
    _Atomic int done, released, cancel_asked;
    int linked;
    shim_op_t *next, *prev;  /* the active list */
};

shim_op_t *mpccl_shim_op_new(void);
/* Makes op active (progressed from now on). */
void mpccl_shim_op_start(shim_op_t *op);
/* Gives op a user handle (generalized request) and returns it. */
int mpccl_shim_op_handle(shim_op_t *op, MPI_Request *req);
/* Ends op: completes its user handle or lets a blocking waiter go. */
void mpccl_shim_op_finish(shim_op_t *op);
/* Frees a finished blocking op (no handle). */
void mpccl_shim_op_free(shim_op_t *op);
/* Progresses every active operation once; returns how many moved. */
int mpccl_shim_progress(void);
/* Are there operations in flight (then waits must progress them)? */
int mpccl_shim_ops_active(void);
/* Waits until op is done (blocking calls). */
int mpccl_shim_op_wait(shim_op_t *op);
/* Fills an MPI status from a finished op. */
void mpccl_shim_op_status(const shim_op_t *op, MPI_Status *st);

/* A polite wait: call in a loop with the iteration count; it spins briefly,
 * then yields, then sleeps (ranks are often oversubscribed), and checks
 * every second that the peers waited for are alive. */
typedef struct {
    unsigned long spins;
    double start, last_check;
} shim_backoff_t;
void mpccl_shim_backoff_init(shim_backoff_t *b);
/* Is this world rank a process of this host that has died?  Says so once
 * at WARN, naming it and `what`. */
int mpccl_shim_peer_dead(int world_rank, const char *what);
/* Waits a little; every second it fails the operations whose peer died. */
int mpccl_shim_backoff(shim_backoff_t *b);
/* The same wait for a caller that checks its own peer: 1 when it is time. */
int mpccl_shim_backoff_due(shim_backoff_t *b);

/* ---- between hosts through UCX (shim_ucx.c) ---- */
/* Collective over MPI_COMM_WORLD's ranks (from mpccl_shim_world_init, on
 * private): a UCP context and worker when MPCCL_SHIM_NET allows and some
 * peer is on another host, and every rank's worker address. */
void mpccl_shim_ucx_init(MPI_Comm private, int world_size, int any_remote);
void mpccl_shim_ucx_fini(void);
/* Can a message to this world rank go through UCX? */
int mpccl_shim_ucx_reaches(int world_rank);
/* Sender: fills the UCX part of op->env for op->buf (may send the remote key
 * ahead on the private communicator); MPI_SUCCESS or an error (then the
 * message goes as before). */
int mpccl_shim_ucx_send_prepare(shim_op_t *op);
/* Sender: the receiver's answer came (op->answer); runs the rest. */
void mpccl_shim_ucx_send_answered(shim_op_t *op, MPI_Status *st);
/* Sender: gives back what prepare took (the envelope never went out). */
void mpccl_shim_ucx_send_abort(shim_op_t *op);
/* Receiver: an envelope of kind SHIM_ENV_UCX matched op (op->env, capacity
 * checked): the bytes go to dst (contiguous), through pinned host memory when
 * staged (dst is device memory) and UCX cannot write there itself.  The op
 * is polled from now on; op->finish runs when the bytes are in. */
void mpccl_shim_ucx_recv(shim_op_t *op, void *dst, int staged);
/* Receiver: an envelope of kind SHIM_ENV_UCX refused (truncation): takes
 * what came with it. */
void mpccl_shim_ucx_refuse(const shim_env_t *e);
/* Has UCX reported this world rank's endpoint failed (the peer died)?
 * Asked while a transfer waits for a peer on another host: it makes the
 * endpoint first, so that UCX watches the peer. */
int mpccl_shim_ucx_peer_failed(int world_rank);
/* Progresses the worker; how many events it handled. */
int mpccl_shim_ucx_progress(void);

/* ---- point-to-point (shim_send.c, shim_recv.c) ---- */
/* Should this call be looked at at all (shim on, not nested, a communicator)? */
int mpccl_shim_p2p_wanted(const void *buf, MPI_Comm comm);
/* Sends (sync: synchronous mode); req NULL: blocking.  Host buffers go to
 * MPI unchanged. */
int mpccl_shim_send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, int sync,
                    MPI_Request *req, const char *what);
/* The same straight to MPI (blocking ones progress the shim's transfers). */
int mpccl_shim_send_mpi(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, int sync,
                        MPI_Request *req);
/* Must this receive land through the shim (an envelope may come)? */
int mpccl_shim_recv_wanted(const void *buf, MPI_Comm comm, int source);
int mpccl_shim_recv(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm, MPI_Request *req,
                    MPI_Status *status, const char *what);
int mpccl_shim_recv_post(shim_op_t *op, int source, int tag);
int mpccl_shim_recv_launch(shim_op_t *op, MPI_Request *req, MPI_Status *status);
void mpccl_shim_land_free(void *p, int owned);
/* Probe (block), Iprobe (flag), and their matched forms (msg). */
int mpccl_shim_probe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *st, MPI_Message *msg, int block);
int mpccl_shim_mrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *msg, MPI_Status *status, MPI_Request *req);
void mpccl_shim_stash_fini(void);

/* ---- completion (shim_wait.c) ---- */
/* Waits for an MPI request, progressing the shim's transfers meanwhile. */
int mpccl_shim_wait_mpi(MPI_Request *req, MPI_Status *st);
pthread_mutex_t *mpccl_shim_ops_lock(void);
/* A transfer whose user request req completes with an error on comm. */
void mpccl_shim_failed_add(MPI_Request req, MPI_Comm comm, int error);

#endif
