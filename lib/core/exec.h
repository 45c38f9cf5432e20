/* The executor interface: what runs a communicator's calls.  The core (comm,
 * group, enqueue, estimate) reaches host memory or GPUs only through this
 * table; lib/host/host_executor.c and lib/gpu/gpu_exec.c fill one each, and
 * mpccl_comm_setup picks one per communicator (comm->exec). */
#ifndef MPCCL_CORE_EXEC_H
#define MPCCL_CORE_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "algo/algo_plan.h"
#include "util/status.h"

struct mpccl_call;
struct mpccl_win_state;
struct mpccl_win;
struct mpccl_reg;

/* One call as an executor runs it: the schedule (host calls) and the buffers. */
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

/* Modelled on NCCL's transport tables: every entry is set in both executors
 * (no NULL checks in the core). */
struct mpccl_executor {
    const char *name;   /* log lines: "host", "gpu" */
    const char *memory; /* log lines: where the buffers live, "host" or "device" */

    /* ---- devices (called before a communicator exists) ---- */
    /* The device a communicator created now by this thread binds to, -1: none. */
    int (*current_device)(void);
    /* Makes cuda_dev current in this thread (init threads of a group). */
    mpccl_status_t (*enter_device)(int cuda_dev);

    /* ---- a communicator's resources ---- */
    /* Collective, after the transport exists and the ranks agreed on the device. */
    mpccl_status_t (*setup)(ncclComm_t comm);
    /* ncclCommFinalize: let go of the transport before the core closes it. */
    void (*finalize)(ncclComm_t comm);
    /* Releases what setup built, before the transport closes; force: abort
     * (no waiting for queued work).  Safe after a failed or partial setup. */
    void (*release)(ncclComm_t comm, int force);
    /* Device memory held (ncclCommMemStats). */
    uint64_t (*mem_bytes)(ncclComm_t comm);

    /* ---- calls ---- */
    /* The call's buffers against the communicator's memory (fn names the API call). */
    mpccl_status_t (*check_buffers)(const char *fn, ncclComm_t comm, mpccl_coll_t coll, const void *in,
                                    const void *out, size_t count, ncclDataType_t dt, int root);
    /* 1: calls carry a schedule planned at the call (mpccl_plan); 0: the
     * executor plans at launch (its own plan cache). */
    int plans_at_call;
    /* 1: calls run on the user's CUDA stream after the API call returns: a
     * call outside a group goes straight to launch / launch_p2p (the caller
     * keeps the call record), and device-resident scalars are read on the
     * stream.  0: calls complete before the API call returns, and a call
     * outside a group runs through run_group like a group of one. */
    int on_streams;
    /* Enqueues one planned collective, or n send/recv calls of one communicator. */
    mpccl_status_t (*launch)(struct mpccl_call *call);
    mpccl_status_t (*launch_p2p)(struct mpccl_call **calls, int n);
    /* Runs (or enqueues) a group's calls of this executor, any communicators;
     * the caller frees them afterwards. */
    mpccl_status_t (*run_group)(struct mpccl_call *ops);
    /* Whether call d runs on the flat kernels (ncclGroupSimulateEnd's model). */
    int (*takes_flat)(ncclComm_t comm, const mpccl_coll_desc_t *d);

    /* ---- windows, registrations, one-sided (lib/onesided) ---- */
    mpccl_status_t (*sig_setup)(ncclComm_t comm, struct mpccl_win_state *ws);
    void (*sig_free)(ncclComm_t comm, struct mpccl_win_state *ws);
    mpccl_status_t (*win_setup)(ncclComm_t comm, struct mpccl_win *w);
    void (*win_free)(ncclComm_t comm, struct mpccl_win *w);
    /* Before windows are released: stop deliveries and drop puts in flight. */
    void (*win_stop)(ncclComm_t comm);
    /* Makes a registration reachable by peers; reg_free undoes it. */
    mpccl_status_t (*reg_export)(ncclComm_t comm, struct mpccl_reg *r);
    void (*reg_free)(ncclComm_t comm, struct mpccl_reg *r);
    /* ncclPutSignal / ncclSignal (bytes 0) after the checks, group semantics included. */
    mpccl_status_t (*put_signal)(ncclComm_t comm, const void *src, size_t bytes, int peer, struct mpccl_win *w,
                                 size_t offset, int sig, int ctx, cudaStream_t stream);
    mpccl_status_t (*wait_signal)(ncclComm_t comm, int n, const ncclWaitSignalDesc_t *d, cudaStream_t stream);
    /* ncclCommQueryProperties: whether put/signal/wait reach every peer
     * (hostRmaSupport), and whether device communicators exist (deviceApiSupport). */
    int (*rma_reaches_all)(ncclComm_t comm);
    int device_api;

    /* ---- stopping ---- */
    /* A failure (comm_fail.c): stop this communicator's in-flight work now,
     * without waiting; any thread, any number of times. */
    void (*stop)(ncclComm_t comm);
    /* ncclCommAbort, before the forced release: stop this communicator's
     * in-flight work. */
    void (*abort)(ncclComm_t comm);
    /* ncclCommRevoke: MPCCL_OK when in-flight work is stopped (the core then
     * marks the communicator revoked), an error when it cannot be. */
    mpccl_status_t (*revoke)(ncclComm_t comm, const char *fn);
    /* ncclCommShrink on comm (abort: NCCL_SHRINK_ABORT): whether its executor
     * lets the survivors rendezvous over its transport. */
    mpccl_status_t (*can_shrink)(ncclComm_t comm, const char *fn, int abort);
    /* ncclCommSuspend: whether its memory can be released. */
    mpccl_status_t (*can_suspend)(ncclComm_t comm, const char *fn);
    /* ncclCommGetAsyncError: turn a failure only the executor sees (a GPU
     * kernel that hit MPCCL_OP_TIMEOUT) into the communicator's async error. */
    void (*poll_error)(ncclComm_t comm);

    /* ---- hang reports (core/hang_report.h) ---- */
    /* Where this communicator's kernels are, in words ("" when nothing is
     * known: host communicators).  Called by the side channel's thread while
     * the application thread may be stuck: reads only, never waits. */
    void (*describe)(ncclComm_t comm, char *buf, size_t len);
    /* Whether this communicator's kernels have waited in one launch for
     * limit_s seconds or more with no MPCCL_OP_TIMEOUT to end the wait; said
     * once per launch (core/stall_watch.h).  NULL where calls wait on the
     * host and report their stalls themselves.  Called about once a second
     * from the side channel's thread: reads only, never waits. */
    int (*stalled)(ncclComm_t comm, int limit_s);
};

typedef struct mpccl_executor mpccl_executor_t;

/* The executors of this build (exec.c).  Each registers itself when the
 * library loads (a constructor in lib/host/host_executor.c and
 * lib/gpu/gpu_exec.c), so the core picks one without naming the layers
 * above it.  gpu: 1 for the GPU executor, 0 for the host one. */
void mpccl_exec_register(const mpccl_executor_t *e, int gpu);
/* The host executor: schedules over the transport. */
const mpccl_executor_t *mpccl_exec_host(void);
/* The GPU executor; NULL in a build without CUDA. */
const mpccl_executor_t *mpccl_exec_gpu(void);

#endif
