/* Progress records: per communicator, what this rank is doing in it -- the
 * call it is in and the last collective it completed, with their arguments
 * and sequence numbers -- kept with a few plain stores per call so that a
 * hang report (core/hang_report.h) can say, job-wide, who is where.  Peers
 * read them through the side channel (core/side_channel.h) while this rank
 * is busy or stuck. */
#ifndef MPCCL_CORE_PROGRESS_H
#define MPCCL_CORE_PROGRESS_H

#include <stdint.h>

#include "nccl.h"
#include "algo/algo_plan.h"

/* One call as a record: fixed layout, it travels between ranks as is (every
 * rank of a job runs the same library). */
typedef struct mpccl_call_rec {
    uint64_t seq;    /* collectives: the communicator's collective number (from 1);
                      * send/recv: its point-to-point number (from 1); 0: none */
    uint64_t count;  /* elements */
    uint64_t stream; /* cudaStream_t as a number (0 on host communicators) */
    int32_t coll;    /* mpccl_coll_t; -1: none */
    int32_t dt;      /* ncclDataType_t */
    int32_t op;      /* ncclRedOp_t as passed (reductions), else -1 */
    int32_t root;    /* root, or the peer of a send/recv; -1: none */
    int32_t group;   /* calls in the group it belongs to (1: none) */
    int32_t pad;
} mpccl_call_rec_t;

/* Where the rank is in the communicator. */
enum {
    MPCCL_PROGRESS_IDLE = 0,  /* in no call of this communicator */
    MPCCL_PROGRESS_GROUPED,   /* called, inside ncclGroupStart/End: not launched yet */
    MPCCL_PROGRESS_RUNNING,   /* inside the call (host), or in ncclGroupEnd */
    MPCCL_PROGRESS_FAILED,    /* in no call: the last one failed (a report must not
                               * take it for a rank that never entered it) */
};

typedef struct mpccl_progress {
    uint32_t version;        /* odd while the writer changes the record */
    int32_t state;           /* MPCCL_PROGRESS_* */
    uint64_t ncoll, np2p;    /* calls entered so far */
    mpccl_call_rec_t cur;    /* the last call entered */
    mpccl_call_rec_t coll;   /* the last collective entered */
    mpccl_call_rec_t done;   /* the last collective completed (GPU: launched) */
    double wait_since;       /* mpccl_now_seconds when its current call began to wait; 0: unknown */
} mpccl_progress_t;

/* A call entered (in a group or not).  Stores only: the hot path. */
static inline void mpccl_progress_enter(mpccl_progress_t *p, mpccl_coll_t coll, size_t count, ncclDataType_t dt,
                                        ncclRedOp_t op, int root, void *stream, int grouped)
{
    int is_p2p = coll == MPCCL_COLL_SEND || coll == MPCCL_COLL_RECV;
    uint32_t v = __atomic_load_n(&p->version, __ATOMIC_RELAXED);
    __atomic_store_n(&p->version, v + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    mpccl_call_rec_t r = {.seq = is_p2p ? ++p->np2p : ++p->ncoll,
                          .count = count,
                          .stream = (uint64_t)(uintptr_t)stream,
                          .coll = (int32_t)coll,
                          .dt = (int32_t)dt,
                          .op = (int32_t)op,
                          .root = root,
                          .group = 1};
    if (grouped && p->state == MPCCL_PROGRESS_GROUPED) r.group = p->cur.group + 1;
    p->cur = r;
    if (!is_p2p) p->coll = r;
    p->state = grouped ? MPCCL_PROGRESS_GROUPED : MPCCL_PROGRESS_RUNNING;
    p->wait_since = 0;
    __atomic_store_n(&p->version, v + 2, __ATOMIC_RELEASE);
}

/* ncclGroupEnd began running the group's calls. */
static inline void mpccl_progress_run(mpccl_progress_t *p)
{
    if (p->state == MPCCL_PROGRESS_GROUPED) __atomic_store_n(&p->state, MPCCL_PROGRESS_RUNNING, __ATOMIC_RELEASE);
}

/* The call (or group) finished, successfully or not: the last collective of
 * it becomes the last completed one. */
static inline void mpccl_progress_leave(mpccl_progress_t *p, int completed)
{
    uint32_t v = __atomic_load_n(&p->version, __ATOMIC_RELAXED);
    __atomic_store_n(&p->version, v + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (completed && p->coll.seq > p->done.seq) p->done = p->coll;
    p->state = completed ? MPCCL_PROGRESS_IDLE : MPCCL_PROGRESS_FAILED;
    __atomic_store_n(&p->version, v + 2, __ATOMIC_RELEASE);
}

/* The calling thread waits for peers from now on (host executors: read once,
 * when a wait first finds nothing to do). */
static inline void mpccl_progress_waiting(mpccl_progress_t *p, double now)
{
    if (p->wait_since == 0) __atomic_store(&p->wait_since, &now, __ATOMIC_RELAXED);
}

/* A consistent copy (another thread may write meanwhile). */
void mpccl_progress_read(const mpccl_progress_t *p, mpccl_progress_t *out);

/* "allreduce call 6 (4096 float32 sum)", "broadcast call 6 (4096 int8, root 0)",
 * "send call 3 (16 float32 to rank 2)" into buf; returns buf. */
const char *mpccl_call_rec_str(const mpccl_call_rec_t *r, char *buf, size_t len);
/* Whether a and b are the same call (operation, sequence and arguments but
 * the stream). */
int mpccl_call_rec_same(const mpccl_call_rec_t *a, const mpccl_call_rec_t *b);

#endif
