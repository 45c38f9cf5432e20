/* Group semantics: calls between ncclGroupStart/End (per thread) are collected
 * and launched together at the outermost ncclGroupEnd; a call outside a group is
 * a group of one.  Deferred communicator inits of a group run concurrently. */
#ifndef MPCCL_GROUP_H
#define MPCCL_GROUP_H

#include "core/comm.h"
#include "core/exec.h"

typedef struct mpccl_call {
    ncclComm_t comm;
    int is_p2p;
    mpccl_coll_desc_t desc;
    int user_op;                /* the ncclRedOp_t as passed (check mode compares it) */
    mpccl_sched_t sched;
    mpccl_task_t task;
    void *stream;               /* cudaStream_t of GPU calls */
    struct mpccl_exec *run;     /* the host executor's schedule runner while it runs */
    struct mpccl_call *prev_coll; /* the previous collective on the same comm */
    int started, done;
    struct mpccl_call *next;
} mpccl_call_t;

/* Takes ownership of op (malloc'd, sched built).  Outside a group runs it to
 * completion; inside, queues it for ncclGroupEnd. */
mpccl_status_t mpccl_group_enqueue(mpccl_call_t *op);

/* A communicator init that must progress concurrently with the other inits of
 * its group.  Outside a group fn runs at once.  fn owns arg. */
typedef mpccl_status_t (*mpccl_init_fn_t)(void *arg);
mpccl_status_t mpccl_group_defer_init(mpccl_init_fn_t fn, void *arg);
/* The same for the init of comm: on a nonblocking communicator fn runs in
 * comm's worker (comm_async.h), at once or at ncclGroupEnd, and the call
 * returns MPCCL_INPROGRESS. */
mpccl_status_t mpccl_group_defer_comm_init(ncclComm_t comm, mpccl_init_fn_t fn, void *arg);

mpccl_status_t mpccl_group_start(void);
mpccl_status_t mpccl_group_end(void);
/* ncclGroupSimulateEnd: ends the group like mpccl_group_end (communicator
 * inits of the group do run), but instead of launching its calls returns
 * their modelled time in seconds (estimate.h) and drops them.  *seconds is
 * left alone when this closes an inner group only. */
mpccl_status_t mpccl_group_simulate_end(double *seconds);
int mpccl_group_depth(void);
/* Drops whatever the current group collected (an error inside the group). */
void mpccl_group_discard_comm(ncclComm_t comm);

/* A zeroed call record, from a process-wide cache of freed ones (a group's
 * calls cost no malloc once a group of that size has run); NULL when out of
 * memory.  mpccl_call_free releases its schedule and returns it. */
mpccl_call_t *mpccl_call_alloc(void);
void mpccl_call_free(mpccl_call_t *op);

#endif
