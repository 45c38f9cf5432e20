/* The GPU executor's per-communicator state (comm->gpu), shared by the files
 * of lib/gpu/ that launch (gpu_launch.c) and attach the proxy
 * (gpu_proxy_attach.c).  Private to lib/gpu/. */
#ifndef MPCCL_GPU_STATE_H
#define MPCCL_GPU_STATE_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/comm.h"
#include "algo/algo.h"
#include "gpu/gpu_comm.h"
#include "gpu/gpu_flat.h"
#include "kernels/plan.h"
#include "proxy/proxy.h"
#include "gpu/gpu_proxy_work.h"
#include "proxy/proxy_wake.h"
#include "gpu/gpu_win_remote.h"

/* What identifies a plan: everything mpccl_plan reads that can differ between
 * calls of one communicator. */
typedef struct plan_key {
    int32_t coll, dt, op, root;
    uint8_t prescale, divide, in_place, pad;
    uint64_t count;
} plan_key_t;

typedef struct plan_entry {
    plan_key_t key;
    mpccl_sched_t sched;
    mpccl_gpu_plan_t gp;
    struct plan_entry *next;
} plan_entry_t;

#define PLAN_BUCKETS 256

/* Scratch is never freed while the communicator lives: a captured CUDA graph may
 * still hold a pointer to an older, smaller one. */
typedef struct scratch_block {
    void *ptr;
    size_t bytes;
    struct scratch_block *older;
} scratch_block_t;

typedef struct mpccl_gpu_state {
    mpccl_gpu_comm_t *g;
    mpccl_proxy_comm_t *proxy;
    /* The proxy's lanes beyond the first (which is comm->transport): their own
     * transports, closed after the proxy detached (gpu_proxy_attach.c). */
    mpccl_transport_t *lane_t[MPCCL_PROXY_MAX_LANES];
    int nlanes;
    mpccl_proxy_work_t work;      /* launches that need the proxy post themselves through it */
    mpccl_os_remote_t *os_remote; /* one-sided operations with other nodes, carried by proxy */
    mpccl_flat_comm_t *flat; /* single node, P2P everywhere: the flat kernels */
    struct mpccl_gpu_hier *hier; /* spanning equal nodes: hierarchical collectives (gpu_hier.c); NULL if none */
    struct mpccl_gpu_shared *shared; /* processes sharing the GPU without MPS (gpu_shared.c); NULL if not */
    int check_pointers;      /* MPCCL_CHECK_POINTERS: ask the driver about every buffer */
    int net;                 /* between nodes: how pieces go (mpccl_gpu_proxy_net); 0 on one node */
    char net_why[192];       /* and why, for the proxy's INFO line */
    plan_entry_t *plans[PLAN_BUCKETS];
    unsigned nplans;
    scratch_block_t *scratch;
    /* Launches of one communicator run one after another, whatever streams the
     * user passes (they share mailboxes and counters): a launch on a new stream
     * waits for the previous launch's event. */
    cudaEvent_t last_done;
    cudaEvent_t join; /* joins the streams of a grouped p2p launch */
    cudaStream_t last_stream;
    int have_last;
} mpccl_gpu_state_t;

/* The cached plan of d's call shape, made and kept on first use
 * (gpu_plan_cache.c). */
mpccl_status_t mpccl_gpu_plan_lookup(ncclComm_t comm, mpccl_gpu_state_t *s, const mpccl_coll_desc_t *d,
                                     plan_entry_t **out);
/* The plan of a group's n p2p calls of comm, cached by the calls' shape: one
 * launch moves them all (buffer 3+k is call k's). */
mpccl_status_t mpccl_gpu_plan_lookup_p2p(ncclComm_t comm, mpccl_gpu_state_t *s, struct mpccl_call **calls, int n,
                                         plan_entry_t **out);
/* Frees every cached plan; the device memory they hold, in bytes. */
void mpccl_gpu_plans_free(mpccl_gpu_state_t *s);
uint64_t mpccl_gpu_plans_bytes(const mpccl_gpu_state_t *s);

/* Scratch from a list that only grows (head: the newest, largest block):
 * a block of at least bytes. */
mpccl_status_t mpccl_gpu_scratch_get(scratch_block_t **head, size_t bytes, void **out);
/* Frees every block of the list (no launch may still use them); the bytes
 * the list holds. */
void mpccl_gpu_scratch_free(scratch_block_t **head);
uint64_t mpccl_gpu_scratch_bytes(const scratch_block_t *head);

/* Attaches comm to the proxy thread (gpu_proxy_attach.c); the caller has the
 * device current. */
mpccl_status_t mpccl_gpu_attach_proxy(ncclComm_t comm, mpccl_gpu_state_t *s);
/* Closes the proxy's own lane transports (after it detached); force: abort. */
void mpccl_gpu_close_lanes(mpccl_gpu_state_t *s, int force);

#endif
