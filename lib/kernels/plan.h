/* Device plans: a schedule (lib/algo/algo_schedule.h) turned into the device form the
 * engine runs (lib/kernels/devplan.h) and uploaded into one device allocation.
 * The conversion is plain C (testable without a GPU); upload and free need CUDA
 * (MPCCL_HAVE_CUDA). */
#ifndef MPCCL_GPU_PLAN_H
#define MPCCL_GPU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#if defined(__has_include)
#if __has_include("build_config.h")
#include "build_config.h" /* MPCCL_HAVE_CUDA */
#endif
#endif
#include "kernels/devplan.h"
#include "algo/algo_schedule.h"
#include "util/status.h"
#include "kernels/proxy_due.h"

/* Largest window (steps a CTA keeps in progress at once) the engine supports:
 * its per-step progress lives in shared memory. */
#define MPCCL_ENGINE_MAX_WINDOW 64

/* How IN and OUT relate in memory, for the locality rule: it must know which
 * references can touch the same elements. */
typedef enum {
    MPCCL_INOUT_UNKNOWN = 0, /* they may overlap anywhere (always safe) */
    MPCCL_INOUT_DISTINCT,    /* separate memory (out of place, or IN is the prescaled copy) */
    MPCCL_INOUT_OFFSET       /* in place: IN element x is OUT element x + in_off */
} mpccl_inout_t;

/* Fills steps[s->nsteps] and deps[s->ndeps] (caller-allocated) from s, with
 * each dependency's `local` flag: 1 when CTA g doing its part of the earlier
 * step (and of everything that step locally depends on) is all the dependent
 * step's part g needs -- both have the same count, and every pair of their
 * references that can touch a common element with one of them writing starts at
 * the same element (so partition g meets partition g only).  The rule is applied
 * transitively: a local chain is only as local as every link of it, which is
 * tracked with a bounded set of regions per step (when the set would grow past
 * its bound, dependents of that step wait for all CTAs).  io/in_off describe IN
 * versus OUT (a schedule with needs_prescale always has them distinct). */
mpccl_status_t mpccl_gpu_plan_convert(const mpccl_sched_t *s, mpccl_inout_t io, int64_t in_off,
                                      mpccl_dev_step_t *steps, mpccl_dev_dep_t *deps);

/* A plan in device memory: header, steps, deps and counters in one allocation. */
typedef struct mpccl_gpu_plan {
    mpccl_dev_plan_t *dev; /* device pointer: the engine's args.plan */
    void *dev_mem;         /* the allocation (dev points into it) */
    size_t bytes;
    uint32_t nsteps, ndeps;
    uint32_t nctas;        /* the launch width it was uploaded for */
    uint32_t window;
    uint32_t nlocal;       /* dependencies marked local (statistics, tests) */
    mpccl_proxy_due_t *due; /* between nodes: the pieces of each launch per channel
                             * (mpccl_gpu_plan_pieces), set by the launcher; freed
                             * with the plan */
    uint32_t ndue;
    mpccl_dev_small_step_t *small; /* device: the plan flattened for the small-call kernel, which
                                    * then runs it (lib/kernels/plan_small.h; set by the launcher) */
    uint32_t small_nsteps;
    int small_overlap;     /* its launches may start before the previous kernel ends */
} mpccl_gpu_plan_t;

/* Byte layout of the allocation: the host image (pointers filled for device
 * base `base`, counters zero) that upload copies.  Exposed for the unit test.
 * *image is malloc'ed; free() it. */
mpccl_status_t mpccl_gpu_plan_image(const mpccl_sched_t *s, mpccl_inout_t io, int64_t in_off, uint32_t window,
                                    uintptr_t base, void **image, size_t *bytes, uint32_t *nlocal);

/* How the engine cuts messages to other nodes, as its communicator says
 * (mpccl_dev_comm_t): nctas CTAs, the minimum share min_bytes, slot_bytes per
 * slot, whole messages from whole_bytes on and eager pieces of eager_bytes
 * (devplan.h; 0: none). */
typedef struct mpccl_gpu_cut {
    uint32_t nctas, min_bytes, slot_bytes, whole_bytes, eager_bytes;
} mpccl_gpu_cut_t;

/* The pieces a launch of s (es bytes per element) moves through each channel
 * with a peer whose link is MPCCL_LINK_PROXY, cut as the engine cuts them:
 * each SEND / RECV step's part on CTA g (mpccl_dev_partition) cut by
 * mpccl_dev_proxy_piece into whole messages and slot pieces.  The proxy polls
 * a channel while pieces posted for it are unfinished
 * (mpccl_proxy_post_pieces).  *out: one entry per channel with pieces, sorted
 * by rank, then CTA (malloc'ed; NULL with *n = 0 when none). */
mpccl_status_t mpccl_gpu_plan_pieces(const mpccl_sched_t *s, uint32_t es, const mpccl_gpu_cut_t *cut,
                                     const mpccl_dev_link_t *links, int nranks, mpccl_proxy_due_t **out,
                                     uint32_t *n);

#if defined(MPCCL_HAVE_CUDA) && !defined(MPCCL_GPU_PLAN_CONVERT_ONLY)
/* Converts and uploads s for launches of nctas CTAs keeping window steps in
 * progress (1..MPCCL_ENGINE_MAX_WINDOW).  IN and OUT are assumed to possibly
 * overlap (safe for any call); _io gives the exact relation for more local
 * dependencies.  Allocates and copies synchronously on a private stream, so it
 * works while the calling thread captures a graph on another stream; not for the
 * fast path (plans are cached). */
mpccl_status_t mpccl_gpu_plan_upload(const mpccl_sched_t *s, uint32_t nctas, uint32_t window, mpccl_gpu_plan_t *out);
mpccl_status_t mpccl_gpu_plan_upload_io(const mpccl_sched_t *s, uint32_t nctas, uint32_t window, mpccl_inout_t io,
                                        int64_t in_off, mpccl_gpu_plan_t *out);
/* Allocates device memory for bytes and copies img there (synchronously, as
 * the upload above: safe while the thread captures a graph).  cudaFree it. */
mpccl_status_t mpccl_gpu_upload_bytes(const void *img, size_t bytes, void **dev);
/* Frees the device memory (no launch of the plan may still be pending). */
void mpccl_gpu_plan_free(mpccl_gpu_plan_t *p);
#endif

#endif
