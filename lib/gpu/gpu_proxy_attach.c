/* The proxy thread for a GPU communicator: attached at setup when it spans
 * nodes, or at the first window when a node's peers share no P2P (one-sided
 * operations only). */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_rt.h"
#include "gpu/gpu_launch.h"
#include "gpu/gpu_proxy_mem.h"
#include "gpu/gpu_state.h"
#include "core/comm_fail.h"
#include "ucx/ucx.h"
#include "util/config.h"
#include "util/cpu_affinity.h"
#include "util/log.h"

/* Lanes of the proxy (proxy.h) this rank asks for: MPCCL_PROXY_LANES, or
 * where every peer is on another node and no NIC moves GPU memory itself
 * (GPUDirect RDMA: UCX's zero-copy needs no CPU per byte), one per CTA up to
 * 4.  Over TCP one connection and the thread copying its bytes cap the
 * traffic: ucx_perftest over loopback moved 4.6 GB/s with one pair and 19
 * GB/s with four side by side (2 x H200, UCX 1.22, 2026-11-27).  Each lane
 * connects to every peer, so communicators of more than LANES_MAX_RANKS
 * ranks keep one by default (file descriptors, UCX's endpoints). */
#define LANES_MAX_RANKS 64

static uint32_t lanes_wanted(ncclComm_t comm, const mpccl_gpu_state_t *s)
{
    int alone = comm->topo.nnodes == comm->nranks; /* one rank per node */
    int lanes = alone && comm->nranks <= LANES_MAX_RANKS && mpccl_ucx_gdr_nic() == NULL;
    uint32_t def = lanes ? (s->g->nctas < 4 ? s->g->nctas : 4) : 1;
    if (!mpccl_config_is_set("PROXY_LANES")) return def;
    int64_t x = mpccl_config_int("PROXY_LANES");
    if (x == 0) return def;
    if (x < 1 || x > MPCCL_PROXY_MAX_LANES) {
        MPCCL_WARN(MPCCL_SUB_NET, "MPCCL_PROXY_LANES=%lld is not valid (expected 0..%d); using %u", (long long)x,
                   MPCCL_PROXY_MAX_LANES, def);
        return def;
    }
    return (uint32_t)x;
}

/* The transports of lanes 1..nlanes-1: as many on every rank (the fewest any
 * rank asked for), each created collectively. */
static mpccl_status_t open_lanes(ncclComm_t comm, mpccl_gpu_state_t *s, mpccl_transport_t **lanes)
{
    lanes[0] = comm->transport;
    s->nlanes = 1;
    if (comm->topo.nnodes < 2) return MPCCL_OK; /* peers without P2P: one-sided operations only */
    uint32_t *want = calloc((size_t)comm->nranks, sizeof(uint32_t)), n = MPCCL_PROXY_MAX_LANES;
    if (!want) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory");
    want[comm->rank] = lanes_wanted(comm, s);
    mpccl_status_t st = mpccl_bootstrap_allgather(&comm->bs, want, sizeof(uint32_t));
    for (int r = 0; r < comm->nranks && st == MPCCL_OK; r++) n = want[r] < n ? want[r] : n;
    free(want);
    MPCCL_CHECK(st);
    if (n > s->g->nctas) n = s->g->nctas;
    for (; (uint32_t)s->nlanes < n; s->nlanes++)
        MPCCL_CHECK(mpccl_ucx_transport_create_local(&comm->bs, mpccl_comm_same_machine(comm),
                                                     &s->lane_t[s->nlanes]));
    for (int l = 1; l < s->nlanes; l++) lanes[l] = s->lane_t[l];
    return MPCCL_OK;
}

void mpccl_gpu_close_lanes(mpccl_gpu_state_t *s, int force)
{
    for (int l = 1; l < s->nlanes; l++)
        if (s->lane_t[l]) s->lane_t[l]->ops->close(s->lane_t[l], force);
    memset(s->lane_t, 0, sizeof(s->lane_t));
    s->nlanes = 0;
}

/* Moves the calling thread onto the CPUs local to the device for the attach
 * (MPCCL_PROXY_CPU_AFFINITY=auto): the proxy threads it starts run there, and
 * the pinned staging it allocates lands on their NUMA node, where the GPU
 * writes and polls it.  With --bind-to none a spinning proxy otherwise lands
 * on either socket, each run differently. */
static void place_near_device(ncclComm_t comm, mpccl_cpu_affinity_t *near)
{
    memset(near, 0, sizeof(*near));
    const char *v = mpccl_config_str("PROXY_CPU_AFFINITY");
    if (v && strcmp(v, "auto") != 0) {
        if (strcmp(v, "0") != 0)
            MPCCL_WARN(MPCCL_SUB_NET, "MPCCL_PROXY_CPU_AFFINITY=%s is not auto or 0; using 0", v);
        return;
    }
    char busid[32], where[256];
    if (cudaDeviceGetPCIBusId(busid, sizeof(busid), comm->cuda_dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    mpccl_cpu_affinity_near(busid, near, where, sizeof(where));
    if (near->active)
        MPCCL_INFO(MPCCL_SUB_NET, "comm 0x%llx: proxy threads and staging near GPU %d (%s): CPUs %s",
                   (unsigned long long)comm->id, comm->cuda_dev, busid, where);
}

/* Attaches the communicator to the proxy thread, which serves peers on other
 * nodes (CTA channels and the one-sided channel) and, for one-sided operations
 * only, peers of this node whose GPUs share no P2P (their collectives use the
 * host-memory links).  The caller has the device current. */
mpccl_status_t mpccl_gpu_attach_proxy(ncclComm_t comm, mpccl_gpu_state_t *s)
{
    mpccl_status_t st = MPCCL_OK;
    uint8_t *remote = calloc((size_t)comm->nranks, 1);
    if (!remote) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory");
    int proxied = 0;
    for (int r = 0; r < comm->nranks; r++) {
        if (comm->topo.node_of[r] != comm->topo.node_of[comm->rank]) remote[r] = MPCCL_PROXY_REMOTE;
        else if (s->g->links_host[r].kind == MPCCL_LINK_HOST) remote[r] = MPCCL_PROXY_ONESIDED_ONLY;
        proxied += remote[r] != 0;
    }
    mpccl_cpu_affinity_t near = {0};
    if (proxied) {
        place_near_device(comm, &near);
        mpccl_proxy_os_t os;
        mpccl_dev_link_t *os_links = NULL;
        mpccl_proxy_alloc_t alloc;
        const char *why = s->net_why;
        int direct = (s->net & MPCCL_GPU_NET_DIRECT) != 0;
        mpccl_gpu_proxy_memory(comm, s->net, &alloc);
        MPCCL_CHECK_GOTO(mpccl_os_remote_create(comm, s->g->nslots, s->g->slot_bytes, &s->os_remote, &os, &os_links),
                         st, out);
        mpccl_transport_t *lanes[MPCCL_PROXY_MAX_LANES];
        MPCCL_CHECK_GOTO(open_lanes(comm, s, lanes), st, out);
        MPCCL_CHECK_GOTO(mpccl_proxy_attach_lanes(lanes, s->nlanes, comm->rank, comm->nranks, remote, s->g->nctas,
                                                  s->g->nslots, s->g->slot_bytes, &alloc, s->g->links_host, &os,
                                                  os_links, &s->proxy),
                         st, out);
        mpccl_proxy_set_ll_bytes(s->proxy, s->g->proxy_ll_bytes);
        for (int r = 0; r < comm->nranks && s->g->proxy_whole_bytes; r++)
            if (remote[r] == MPCCL_PROXY_REMOTE && s->g->links_host[r].tx_whole == NULL) {
                st = mpccl_fail(MPCCL_ERR_INTERNAL, "comm 0x%llx rank %d: whole messages to other nodes were "
                                "agreed (GPU-direct), but the proxy's link to rank %d has none (%s)",
                                (unsigned long long)comm->id, comm->rank, r, why);
                goto out;
            }
        if (s->g->abort) mpccl_proxy_set_stop_word(s->proxy, &s->g->abort->host->stop);
        MPCCL_CHECK_GOTO(mpccl_proxy_work_init(&s->work, s->proxy), st, out);
        if (comm->topo.nnodes > 1)
            MPCCL_INFO(MPCCL_SUB_NET, "comm 0x%llx: collectives and send/recv to other nodes: %s (%s), %d "
                       "lane(s); one-sided operations: decided at the first window", (unsigned long long)comm->id,
                       direct ? "GPU-direct, UCX moves the device's slots" : "pinned host staging and UCX", why,
                       s->nlanes);
    }
out:
    mpccl_cpu_affinity_restore(&near);
    if (st != MPCCL_OK && s->proxy == NULL) mpccl_gpu_close_lanes(s, 1);
    if (st != MPCCL_OK && s->proxy == NULL && s->os_remote) { /* a later window may try again */
        mpccl_os_remote_free(s->os_remote);
        s->os_remote = NULL;
    }
    free(remote);
    return st;
}

mpccl_status_t mpccl_gpu_onesided_channel(ncclComm_t comm)
{
    mpccl_gpu_state_t *s = comm->gpu;
    if (!s || !s->g || s->proxy) return MPCCL_OK;
    int saved = -1;
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    mpccl_status_t st = mpccl_gpu_attach_proxy(comm, s);
    mpccl_cuda_restore_device(saved);
    return st;
}
