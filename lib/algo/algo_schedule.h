/* Schedules: plain data describing one collective for one rank -- steps of send,
 * recv, reduce, copy on element ranges, with dependencies.  Produced by the
 * planner (algo_plan.c, algo_*.c), run by an executor (host_exec.c today; a CUDA
 * executor later) or by the simulated executor in the tests. */
#ifndef MPCCL_SCHEDULE_H
#define MPCCL_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include "util/datatype.h"
#include "util/status.h"

/* Buffers a step names.  IN is the rank's input (the user's send buffer, or the
 * pre-scaled copy of it the executor makes for PreMulSum/float avg), OUT the user's
 * receive buffer, TMP scratch owned by the executor (sched->tmp_elems elements). */
enum { MPCCL_BUF_IN = 0, MPCCL_BUF_OUT = 1, MPCCL_BUF_TMP = 2, MPCCL_NUM_BUFS = 3 };

typedef enum {
    MPCCL_STEP_SEND = 0, /* send src0[0..count) to peer */
    MPCCL_STEP_RECV,     /* receive count elements from peer into dst */
    MPCCL_STEP_COPY,     /* dst = src0 */
    MPCCL_STEP_REDUCE,   /* dst = src0 (op) src1; dst may alias a source */
    MPCCL_STEP_SCALE,    /* dst = src0 * scalar (PreMulSum, float avg) */
    MPCCL_STEP_DIVIDE,   /* dst = src0 / nranks (integer avg) */
    MPCCL_STEP_NOP       /* joins dependencies */
} mpccl_step_kind_t;

typedef struct mpccl_ref {
    uint32_t buf; /* MPCCL_BUF_* */
    uint64_t off; /* in elements */
} mpccl_ref_t;

typedef struct mpccl_step {
    uint8_t kind;
    int32_t peer;       /* SEND/RECV: rank in the communicator */
    uint32_t msg;       /* SEND/RECV: index of this message among the schedule's
                         * messages to (or from) that peer, in step order */
    uint64_t count;     /* elements */
    mpccl_ref_t dst, src0, src1;
    uint32_t dep_first; /* deps[dep_first .. dep_first+ndeps) are earlier steps */
    uint32_t ndeps;
} mpccl_step_t;

typedef struct mpccl_sched {
    mpccl_step_t *steps;
    uint32_t nsteps, steps_cap;
    uint32_t *deps;
    uint32_t ndeps, deps_cap;
    uint64_t tmp_elems;    /* scratch the schedule needs */
    uint64_t in_elems;     /* elements of IN the schedule reads (prescale size) */
    int needs_prescale;    /* IN must be the scaled copy of the user's input */
    int algo;              /* mpccl_algo_t that built it (logging, tests) */
} mpccl_sched_t;

#endif
