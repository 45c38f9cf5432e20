/* How a GPU communicator reaches each peer: a table of paths, tried in order,
 * the first that reaches the peer taking it.  The choice is made once per
 * peer when the communicator is created (gpu_comm.c stores it with the
 * peer's link); launches read the stored link and never choose again.
 *
 *   P2P       the peer's GPU memory mapped into this process (CUDA IPC over
 *             NVLink or PCIe): the device engine's mailboxes, the flat
 *             kernels and the copy engines when every peer has it; a rank
 *             reaches itself this way too (loopback in its own mailbox)
 *   proxy     a peer on another node: the proxy thread (lib/proxy) carries
 *             the engine's pieces over the transport
 *   host      a peer on this node without P2P: mailboxes in shared pinned
 *             host memory
 *
 * Adding a path: an entry in gpu_path.c (before the first one that would
 * otherwise take its peers), a link kind for the engine (kernels/devplan.h)
 * when it moves data another way, and its connection in gpu_comm.c
 * (map_peers). */
#ifndef MPCCL_GPU_PATH_H
#define MPCCL_GPU_PATH_H

#include <stdint.h>

#include "algo/algo_plan.h" /* mpccl_topo_t */

/* Two ranks of a communicator, as the table sees them. */
typedef struct mpccl_gpu_pair {
    const mpccl_topo_t *topo;
    /* p2p[a * (n + 1) + b] != 0: rank a's GPU maps rank b's memory (the last
     * byte of each row is the row's status, gpu_comm.c); NULL while unknown. */
    const unsigned char *p2p;
    int n;    /* ranks */
    int a, b; /* a reaches b */
} mpccl_gpu_pair_t;

typedef struct mpccl_gpu_path {
    const char *name; /* for the log */
    uint32_t link;    /* MPCCL_LINK_* of the engine's link (kernels/devplan.h) */
    int (*reaches)(const mpccl_gpu_pair_t *p);
} mpccl_gpu_path_t;

/* The path from p->a to p->b: the first entry of the table that reaches it. */
const mpccl_gpu_path_t *mpccl_gpu_path_pick(const mpccl_gpu_pair_t *p);
/* Whether some peer of rank me takes the proxy path.  The proxy path depends
 * on the nodes alone, so this is known before the P2P probe (the proxy's
 * network is chosen before the mailboxes are built). */
int mpccl_gpu_path_needs_proxy(const mpccl_topo_t *topo, int me);

#endif
