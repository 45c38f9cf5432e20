/* Which ranks of a communicator are processes sharing one GPU, and whether
 * their collectives take the shared-device path (lib/gpu/gpu_shared.c): the
 * decision, from what every rank reports about itself.  Pure: no CUDA, so the
 * unit tests fake any topology.
 *
 * Why it matters: without MPS the GPU time-slices the contexts of different
 * processes, and a kernel that waits for a peer's kernel spins until its slice
 * ends, milliseconds per call.  With MPS (or ranks in one process, which share
 * a context) their kernels run together and the usual kernels are fastest.
 *
 * Setting MPCCL_SHARED_GPU:
 *   auto    the shared-device path when every rank of the communicator sits
 *           on one GPU, two or more processes share it and MPS is off for any
 *           of them
 *   leader  the shared-device path whenever every rank sits on one GPU in two
 *           or more processes, MPS or not (testing, measuring)
 *   kernels (default) never: the usual kernels, which time-slice without MPS.
 *           The default until the shared-device path has run on GPUs (it is
 *           built and its decision unit-tested, but no GPU was available to
 *           validate it when it was written; test/gpu/shared-gpu.sh does). */
#ifndef MPCCL_GPU_SHARED_ROUTE_H
#define MPCCL_GPU_SHARED_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

/* What one rank says about itself at setup. */
typedef struct mpccl_dev_ident {
    uint64_t host_hash;     /* mpccl_topo_host_hash() */
    unsigned char uuid[16]; /* its GPU */
    int32_t pid;
    int32_t mps;            /* 1: MPS serves its context, 0: not, -1: unknown (taken as off) */
} mpccl_dev_ident_t;

typedef enum {
    MPCCL_SHARED_NONE = 0,  /* no GPU holds ranks of two processes */
    MPCCL_SHARED_TOGETHER,  /* processes share GPUs, and their kernels run together (MPS) */
    MPCCL_SHARED_SLICED,    /* processes share GPUs without MPS, and the usual kernels take the calls */
    MPCCL_SHARED_LEADER,    /* every rank on one GPU: the leader runs each collective for all */
} mpccl_shared_mode_t;

#define MPCCL_SHARED_MAX_LEADER_RANKS 32 /* lib/kernels/shared_dev.h */

typedef struct mpccl_shared_route {
    mpccl_shared_mode_t mode;
    int leader;            /* LEADER: the rank whose process runs the launches (the lowest) */
    int max_procs;         /* the most processes sharing one GPU */
    int mps_off;           /* some rank that shares a GPU runs without MPS */
} mpccl_shared_route_t;

/* The decision over ids[0..nranks) (every rank computes the same).  setting:
 * the value of MPCCL_SHARED_GPU (NULL: auto); an unknown value is
 * MPCCL_ERR_USAGE.  why: a line for the log, e.g. "ranks 0-1 (2 processes)
 * share GPU 3f2a..., MPS off: the leader runs every collective". */
mpccl_status_t mpccl_shared_route(const mpccl_dev_ident_t *ids, int nranks, const char *setting,
                                  mpccl_shared_route_t *out, char *why, size_t whylen);

#endif
