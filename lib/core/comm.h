/* The communicator: what every layer below the API needs to reach. */
#ifndef MPCCL_COMM_H
#define MPCCL_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "bootstrap/bootstrap.h"
#include "nccl.h"
#include "algo/algo_plan.h"
#include "core/comm_async.h"
#include "core/exec.h"
#include "core/progress.h"
#include "core/transport.h"

#define MPCCL_COMM_MAGIC 0x6d7063636c636f6dULL /* "mpcclcom" */
#define MPCCL_COMM_DEAD 0x646561646465616dULL


typedef struct mpccl_redop_slot {
    int in_use;
    ncclDataType_t dt;
    ncclScalarResidence_t residence;
    unsigned char scalar[8]; /* host immediate: the value at creation */
    const void *scalar_ptr;  /* device residence: read at each call */
} mpccl_redop_slot_t;

#define MPCCL_MAX_CUSTOM_OPS 256

typedef enum { MPCCL_COMM_INITIALIZING = 0, MPCCL_COMM_READY, MPCCL_COMM_FINALIZED, MPCCL_COMM_FAILED } mpccl_comm_state_t;

#define MPCCL_COMM_MAX_HOOKS 4 /* windows and device communicators today */

struct ncclComm {
    uint64_t magic;
    int rank, nranks;
    int cuda_dev;          /* -1: host communicator */
    mpccl_comm_state_t state;
    ncclResult_t async_error;
    uint64_t id;           /* for log lines: random, same on every rank */
    /* Random, drawn by rank 0 for this communicator alone and spread over its
     * bootstrap (MPI for communicators made from MPI): the key of its doors'
     * gates (shrink_door.c).  Never sent anywhere else. */
    unsigned char secret[32];
    ncclConfig_t config;   /* the user's config, normalised to this header's size */

    mpccl_bootstrap_t bs;
    mpccl_transport_t *transport; /* NULL once finalized */
    mpccl_topo_t topo;
    mpccl_plan_params_t params;
    uint64_t *coll_send_seq, *coll_recv_seq; /* nranks each: tag counters */
    uint64_t *p2p_send_seq, *p2p_recv_seq;

    const mpccl_executor_t *exec; /* runs its calls (core/exec.h); chosen at setup */
    int exec_ready;               /* exec->setup succeeded (its release has something to give back) */
    struct mpccl_gpu_state *gpu; /* the GPU executor's state (gpu_launch.c); the core never reads it */
    int all_in_process; /* every rank lives in this process (ncclCommInitAll, grouped inits) */
    int aborting; /* atomic; ncclCommAbort began: device memory that a kernel
                   * waiting on a dead peer may still use is left allocated, since
                   * freeing it would wait for that kernel forever; new calls are
                   * refused and a pending init gives up (comm_async.h) */
    mpccl_comm_async_t async; /* nonblocking work, threads inside calls (comm_async.h) */
    struct mpccl_win_state *win; /* registrations, windows, signals (onesided_win.c); NULL until first used */
    /* The LSA team (device API): the world ranks lsa_first .. lsa_first +
     * lsa_size - 1, whose GPU memory this rank's kernels load and store
     * directly.  Just this rank on host communicators (devapi_comm.c). */
    int lsa_first, lsa_size;
    int lsa_uniform;               /* every LSA team has lsa_size ranks (rail teams exist) */
    int revoked;                   /* ncclCommRevoke: only shrink, queries and teardown remain */
    int suspended;                 /* ncclCommSuspend until ncclCommResume */
    struct mpccl_devcomm *devcomms; /* ncclDevCommCreate records (devapi_comm.c) */
    /* What the layers above keep for this communicator is stopped, finalized
     * and released through these (comm_hooks.h), in their order. */
    const struct mpccl_comm_hook *hooks[MPCCL_COMM_MAX_HOOKS];
    int nhooks;
    pthread_mutex_t hook_lock;
    struct mpccl_fail_state *fail;  /* failure state, peers, revoke (comm_fail.c); NULL before setup */
    struct mpccl_hier *hier;        /* node and rail children of a GPU communicator spanning nodes (comm_hier.h); NULL if none */
    const int *parent_ranks;        /* such a child: each of its ranks' rank in the parent (messages name those); else NULL */

    mpccl_progress_t progress;      /* what this rank is doing in it (core/progress.h) */
    struct mpccl_side_comm *side;   /* its side channel state (core/side_channel.h); NULL when not registered */
    struct mpccl_check_state *check; /* check mode's counters (core/check_mode.h); NULL when off */

    mpccl_redop_slot_t redops[MPCCL_MAX_CUSTOM_OPS];
    pthread_mutex_t redop_lock;
};

/* Builds comm (allocated by the caller, state INITIALIZING) over a bootstrap it
 * takes ownership of: topology, transport, planner parameters.  Collective. */
mpccl_status_t mpccl_comm_setup(ncclComm_t comm, mpccl_bootstrap_t *bs, const ncclConfig_t *config, int cuda_dev);
/* The device a communicator created now by this thread binds to (NCCL: the
 * current device), or -1 for a host communicator (no CUDA, or no usable GPU). */
int mpccl_comm_device_for_init(void);
/* Makes cuda_dev current in this thread (init threads of a group). */
mpccl_status_t mpccl_comm_enter_device(int cuda_dev);
ncclComm_t mpccl_comm_alloc(void);
/* Releases everything; force = 1 for abort (no flushing, no waiting on peers). */
void mpccl_comm_release(ncclComm_t comm, int force);
/* ncclCommFinalize: windows released, the transport closed gracefully. */
void mpccl_comm_finalize(ncclComm_t comm);
/* ncclCommFinalize: at once, or in the background on a nonblocking
 * communicator (MPCCL_INPROGRESS). */
mpccl_status_t mpccl_comm_finalize_call(ncclComm_t comm);
/* ncclCommDestroy (released like an abort once it failed, or while its init
 * is pending) and ncclCommAbort (stops calls stuck in other threads, comm_async.h). */
void mpccl_comm_destroy(ncclComm_t comm);
mpccl_status_t mpccl_comm_abort(ncclComm_t comm);
/* ncclCommRevoke after the checks: the executor stops in-flight work (or
 * refuses), then the communicator takes no more work. */
mpccl_status_t mpccl_comm_revoke(const char *fn, ncclComm_t comm);
/* Records st as the communicator's asynchronous error (the first one sticks). */
void mpccl_comm_set_error(ncclComm_t comm, mpccl_status_t st);

/* Copies a user config honouring its size field (older headers have fewer
 * fields); NULL gives the defaults.  Rejects a bad magic/size. */
mpccl_status_t mpccl_config_normalize(const ncclConfig_t *user, ncclConfig_t *out, const char *fn);

#endif
