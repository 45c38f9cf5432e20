/* Stopping a GPU communicator's kernels: the abort word every wait loop
 * checks (lib/kernels/abort.h, abort.cuh), the bounded wait for the launches
 * to exit, and the hang record MPCCL_OP_TIMEOUT leaves behind, turned into
 * ncclRemoteError.  See doc/RELIABILITY.md, "GPU communicators".  Only built
 * with CUDA. */
#ifndef MPCCL_GPU_ABORT_H
#define MPCCL_GPU_ABORT_H

#include "cuda/cuda_rt.h"

#ifdef MPCCL_HAVE_CUDA

#include <stdint.h>

#include "core/stall_watch.h"
#include "kernels/abort.h"
#include "util/status.h"

struct ncclComm;

/* One per GPU communicator (mpccl_gpu_comm_t.abort). */
typedef struct mpccl_gpu_abort_ctl {
    mpccl_gpu_abort_t *host; /* pinned, mapped */
    mpccl_gpu_abort_t *dev;  /* the same memory as kernels see it */
    uint32_t seq;            /* launches handed an abort argument (atomic) */
    int reported;            /* the hang record was turned into an error (atomic) */
    int job_reported;        /* the job-wide report was gathered (atomic; core/hang_report.h) */
    char job_summary[768];   /* its summary line, added to the error from then on */
    mpccl_stall_track_t stall; /* the stall watch's looks (side channel thread only) */
} mpccl_gpu_abort_ctl_t;

/* Allocates the word (cleared) with MPCCL_OP_TIMEOUT as the kernels' timeout. */
mpccl_status_t mpccl_gpu_abort_create(mpccl_gpu_abort_ctl_t **out);
/* Frees it; only once no kernel of the communicator can run (NULL is fine). */
void mpccl_gpu_abort_free(mpccl_gpu_abort_ctl_t *c);
/* The argument of the next launch ({NULL, 0} for c = NULL). */
mpccl_abort_arg_t mpccl_gpu_abort_arg(mpccl_gpu_abort_ctl_t *c);
/* Raises the word (release store).  Non-blocking, idempotent, any thread. */
void mpccl_gpu_abort_raise(mpccl_gpu_abort_ctl_t *c);
/* Whether the word is raised. */
int mpccl_gpu_abort_raised(const mpccl_gpu_abort_ctl_t *c);
/* MPCCL_OK, or MPCCL_ERR_REMOTE naming the operation, its launch number,
 * count, datatype and the peer a kernel timed out waiting for (rank: this
 * rank, for the message; rank_names: NULL, or the rank each of the
 * communicator's ranks has in the one the user sees, for a hierarchical
 * collective's node or rail communicator). */
mpccl_status_t mpccl_gpu_abort_hang_status(mpccl_gpu_abort_ctl_t *c, int rank, const int *rank_names);

/* Where the kernels of c are, in words, into buf (hang reports): launches
 * so far, a kernel's current wait (operation, launch, the peer and the flag
 * value it waits for, the value it sees), a hang record.  Reads only. */
void mpccl_gpu_abort_describe(mpccl_gpu_abort_ctl_t *c, const int *rank_names, char *buf, size_t len);

/* The communicator-level entry points (gpu_abort.c). */

/* Stops every kernel of comm: raises its abort word (and its device
 * communicators' barrier words) and wakes the proxy, so steps the proxy
 * drives stop too.  Non-blocking, callable from any thread, idempotent. */
void mpccl_gpu_comm_stop(struct ncclComm *comm);
/* After mpccl_gpu_comm_stop: waits up to max_ms for the communicator's
 * launches to exit; 1 once they did, 0 if the bound passed. */
int mpccl_gpu_comm_drain(struct ncclComm *comm, int max_ms);
/* How long ncclCommAbort / NCCL_SHRINK_ABORT wait for the kernels to exit. */
#define MPCCL_GPU_ABORT_DRAIN_MS 5000
/* mpccl_gpu_comm_drain with that bound, logging the time it took. */
void mpccl_gpu_comm_drain_logged(struct ncclComm *comm);
/* Waits until the communicator's launches completed (ncclCommSuspend); an
 * error if a kernel timed out meanwhile.  fn names the API call. */
mpccl_status_t mpccl_gpu_comm_quiesce(struct ncclComm *comm, const char *fn);
/* The executor's describe (core/exec.h): mpccl_gpu_abort_describe of comm. */
void mpccl_gpu_comm_describe(struct ncclComm *comm, char *buf, size_t len);
/* The executor's stalled (core/exec.h): a kernel of comm has waited in one
 * launch for limit_s seconds, with no MPCCL_OP_TIMEOUT; 1 once per launch. */
int mpccl_gpu_comm_stalled(struct ncclComm *comm, int limit_s);
/* A kernel of comm timed out (MPCCL_OP_TIMEOUT): records ncclRemoteError as
 * comm's asynchronous error and returns the error (with its message); else
 * MPCCL_OK. */
mpccl_status_t mpccl_gpu_comm_check_hang(struct ncclComm *comm);

#endif /* MPCCL_HAVE_CUDA */
#endif
