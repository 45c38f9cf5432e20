/* The kernel of the shared-device path (lib/gpu/gpu_shared.c): when the ranks
 * of a communicator are processes that share one GPU without MPS, the GPU
 * time-slices their contexts and a kernel that waits for a peer's kernel spins
 * until its slice ends (milliseconds).  So one process, the leader, runs each
 * collective for everyone: a single launch reads every rank's input and writes
 * every rank's output through CUDA IPC mappings, and no kernel ever waits for
 * another.  The followers' hosts wait for the done word the launch writes last.
 *
 * A call is a list of groups.  A group moves `count` elements from one source
 * (src_sel = a rank) or from every rank's source reduced (src_sel = ALL) to
 * one rank's destination or to every rank's (dst_sel = ALL), at element
 * offsets src_off and dst_off.  Plain C, included by C and CUDA. */
#ifndef MPCCL_KERNELS_SHARED_DEV_H
#define MPCCL_KERNELS_SHARED_DEV_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MPCCL_SHR_MAX_RANKS 32
#define MPCCL_SHR_ALL (-1)
#define MPCCL_SHR_MAX_GROUPS 64 /* per launch; alltoall of more ranks takes several launches */

typedef struct mpccl_shr_group {
    uint64_t count;            /* elements */
    uint64_t src_off, dst_off; /* elements */
    uint32_t unit0;            /* first work unit of this group (prefix over the launch's groups) */
    int16_t src_sel, dst_sel;  /* a rank, or MPCCL_SHR_ALL */
} mpccl_shr_group_t;

/* Passed by value (about 3.6 KB, under the 4 KB every driver takes). */
typedef struct mpccl_shr_args {
    const char *src[MPCCL_SHR_MAX_RANKS]; /* every rank's source as the leader sees it */
    char *dst[MPCCL_SHR_MAX_RANKS];       /* every rank's destination */
    uint64_t scalar[MPCCL_SHR_MAX_RANKS]; /* PreMulSum / float average: one element of dtype per rank */
    mpccl_shr_group_t g[MPCCL_SHR_MAX_GROUPS];
    uint64_t divisor;           /* > 0: integer average, divide the reduced values */
    uint32_t *counter;          /* device word the CTAs count themselves out on (zero between launches) */
    volatile uint64_t *done;    /* host-mapped: set to seq when every CTA finished (NULL: no signal) */
    uint64_t seq;
    uint32_t ngroups, nunits, unit_elems;
    int32_t nranks, dtype, op;  /* op: mpccl_op_t (sum, prod, max, min) */
    int32_t scaled;             /* 1: multiply each source by its rank's scalar before reducing */
} mpccl_shr_args_t;

/* Enqueues the launch on stream (nctas CTAs); with count 0 everywhere it
 * still runs, so the done word is written in stream order. */
mpccl_status_t mpccl_shr_launch(const mpccl_shr_args_t *a, uint32_t nctas, cudaStream_t stream);
/* Loads the kernels into the current device's context now (lazy loading can
 * wait for running kernels: lib/gpu/gpu_kernels_load.c). */
mpccl_status_t mpccl_shr_load(void);

#ifdef __cplusplus
}
#endif
#endif
