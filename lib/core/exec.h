/* Runs one rank's schedule over a transport, without blocking: the caller drives
 * mpccl_exec_progress (a group progresses all its tasks of all communicators in
 * one loop, so ranks in one thread cannot deadlock). */
#ifndef MPCCL_EXEC_H
#define MPCCL_EXEC_H

#include "algo/algo_schedule.h"
#include "core/transport.h"

typedef struct mpccl_task {
    const mpccl_sched_t *sched;
    const void *in;   /* the user's input (scaled into scratch first if
                       * sched->needs_prescale) */
    void *out;        /* the user's output */
    ncclDataType_t dt;
    mpccl_op_t op;
    unsigned char scalar[8]; /* one element of dt for STEP_SCALE / prescale */
    uint64_t divisor;        /* STEP_DIVIDE */
    const void *scalar_dev;  /* GPU: a device-resident PreMulSum scalar, read by the
                              * prescale kernel when it runs (then scalar is unused) */
} mpccl_task_t;

typedef struct mpccl_exec mpccl_exec_t;

/* Tags: a message to peer p carries (rank << 40) | (send_seq[p] + step.msg); the
 * counters (nranks entries each, owned by the communicator) advance by the number
 * of messages the schedule exchanges with each peer, so consecutive tasks and
 * p2p calls match in program order. */
mpccl_status_t mpccl_exec_start(const mpccl_task_t *task, mpccl_transport_t *t, int rank,
                                uint64_t *send_seq, uint64_t *recv_seq, mpccl_exec_t **out);
/* Posts whatever became ready and checks completions; never blocks.  *done = 1 once
 * every step finished.  An error stops the task (in-flight requests cancelled). */
mpccl_status_t mpccl_exec_progress(mpccl_exec_t *ex, int *done);
void mpccl_exec_free(mpccl_exec_t *ex);

#endif
