/* Per-communicator GPU state: the device, the launch geometry every rank agrees
 * on, the mailboxes that peers of the same node write into, and the link table
 * the device engine reads (lib/kernels/devplan.h, doc/GPU_DESIGN.md).
 *
 * Settings (described in lib/util/config.c; read in gpu_comm.c, the engine's
 * geometry in gpu_settings, the proxy's LL and whole-message sizes beside it):
 *   MPCCL_GPU_CTAS        CTAs per launch; default min(SM count, 16); the
 *                         minimum over the ranks is used
 *   MPCCL_GPU_SLOT_BYTES  bytes per mailbox slot per CTA; default 64 KiB,
 *                         a multiple of 16; the minimum over the ranks is used
 *   MPCCL_GPU_CTA_MIN_BYTES  a step of the engine gives each CTA at least
 *                         this many bytes (fewer CTAs for small messages);
 *                         default 32 KiB; the minimum over the ranks is used
 *   MPCCL_P2P_DISABLE     (NCCL_P2P_DISABLE) 1: peers of one node talk through
 *                         shared host memory even when P2P is possible
 * Only built with CUDA. */
#ifndef MPCCL_GPU_COMM_H
#define MPCCL_GPU_COMM_H

#include "cuda/cuda_rt.h"

#ifdef MPCCL_HAVE_CUDA

#include <stdint.h>

#include "bootstrap/bootstrap.h"
#include "gpu/gpu_abort.h"
#include "cuda/cuda_ipc.h"
#include "kernels/devplan.h"
#include "algo/algo_plan.h"

#define MPCCL_GPU_NSLOTS 4
#define MPCCL_GPU_MAX_CTAS 64

typedef struct mpccl_host_seg mpccl_host_seg_t; /* gpu_comm.c */

typedef struct mpccl_gpu_comm {
    int dev;                     /* CUDA device ordinal of this rank */
    int rank, nranks;
    uint32_t nctas, nslots, slot_bytes;
    uint32_t cta_min_bytes;      /* mpccl_dev_partition's min_bytes */
    uint32_t proxy_ll_bytes;     /* LL pieces to other nodes up to this size (devplan.h) */
    uint32_t proxy_whole_bytes;  /* whole messages to other nodes from this size (devplan.h; 0: none) */
    uint32_t proxy_eager_bytes;  /* eager pieces to other nodes of at most this size (devplan.h; 0: none) */
    int eager_net;               /* staged over a network whose rendezvous is dear (MPCCL_GPU_NET_EAGER) */
    int direct;                  /* this rank's slots to other nodes will be device memory
                                  * (GPU-direct, gpu_proxy_mem.c): its geometry proposal */
    mpccl_dev_link_t *links_host; /* [nranks] host copy; PROXY entries are the proxy's to fill */
    const struct mpccl_gpu_path **peer_path; /* [nranks] each peer's path, chosen at creation (gpu_path.h) */
    int proxy_peers;              /* peers whose path is the proxy (other nodes) */
    mpccl_dev_comm_t *dcomm;      /* device copy of the communicator (mpccl_gpu_comm_commit) */
    mpccl_dev_link_t *dlinks;     /* device copy of links_host, dcomm->links */
    uint32_t *tx_seq, *rx_seq, *tx_acked; /* device, [nranks][nctas], zeroed at creation */
    uint32_t *rx_clean;           /* device, [nranks][nctas][nslots], zeroed at creation */

    /* owned resources */
    cudaStream_t stream;          /* private: setup copies never wait on user streams */
    void *mailbox;                /* device allocation: NVLINK rx areas, tx acks, counters */
    size_t mailbox_bytes;
    mpccl_ipc_desc_t *peer_desc;  /* [nranks] every rank's mailbox description */
    void **peer_mailbox;          /* [nranks] imported mailbox of each NVLINK peer, else NULL */
    mpccl_host_seg_t **seg_rx;    /* [nranks] HOST peers: segment for peer -> me (I created it) */
    mpccl_host_seg_t **seg_tx;    /* [nranks] HOST peers: segment for me -> peer */
    uint64_t nonce;               /* names this communicator's shared memory segments */
    mpccl_gpu_abort_ctl_t *abort; /* the abort word every kernel of the communicator checks */
    int32_t *fd_peers;            /* pids of the peers on this machine the fd server admits */
    int n_fd_peers;
} mpccl_gpu_comm_t;

/* Collective over bs (the ranks of topo): binds cuda_dev, agrees on the
 * geometry, builds and maps the mailboxes, fills links_host (NONE for this
 * rank, NVLINK / HOST for peers of the same node, PROXY with NULL pointers for
 * other nodes) and uploads it.  net: how this rank will move its pieces to
 * other nodes, which its geometry proposal follows: MPCCL_GPU_NET_DIRECT
 * GPU-direct (mpccl_gpu_proxy_net), else staged, with
 * MPCCL_GPU_NET_EAGER where the network's rendezvous is dear (UCX over TCP:
 * eager pieces by default, devplan.h).  Every rank returns an error when any
 * rank failed. */
#define MPCCL_GPU_NET_DIRECT 1
#define MPCCL_GPU_NET_EAGER 2
#define MPCCL_GPU_NET_FLUSH 4 /* with DIRECT: a NIC's writes are flushed before each hand-over */
mpccl_status_t mpccl_gpu_comm_create(mpccl_bootstrap_t *bs, const mpccl_topo_t *topo, int cuda_dev, int net,
                                     mpccl_gpu_comm_t **out);
/* Uploads links_host (e.g. after the proxy filled the PROXY links) and the
 * communicator header into dcomm.  Synchronous on a private stream. */
mpccl_status_t mpccl_gpu_comm_commit(mpccl_gpu_comm_t *g);
/* Local; releases everything (NULL is fine). */
void mpccl_gpu_comm_destroy(mpccl_gpu_comm_t *g);

#endif /* MPCCL_HAVE_CUDA */
#endif
