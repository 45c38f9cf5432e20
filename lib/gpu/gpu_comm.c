/* Per-communicator GPU state: geometry, mailboxes and the link table (see
 * gpu_comm.h and doc/GPU_DESIGN.md "Links and the message protocol").
 *
 * Mailbox of rank r (one cudaMalloc): for each NVLINK sender s of r, in rank
 * order, an rx area [slots | ready | len]; for each NVLINK receiver, a tx_ack
 * array; then tx_seq, rx_seq, tx_acked and rx_clean.  Every rank derives
 * every other rank's layout from the agreed link kinds, so a descriptor
 * exchange is all it takes.  HOST pairs keep the same four arrays per ordered
 * pair in a POSIX shared memory segment created by the receiver. */
#define _GNU_SOURCE
#include "gpu/gpu_comm.h"
#include "gpu/gpu_path.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda/cuda_fdpass.h"
#include "util/config.h"
#include "util/log.h"
#include "util/shm_map.h"
#include "core/topo.h"

#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))

/* ---- settings ---------------------------------------------------------------------- */

/* A setting from lib/util/config.c's table, checked against its range. */
static long setting(const char *name, long def, long lo, long hi, long multiple)
{
    if (!mpccl_config_is_set(name)) return def; /* the default may depend on the communicator */
    int64_t x = mpccl_config_int(name);
    if (x == 0 && def > 0 && !strcmp(name, "GPU_CTAS")) return def; /* 0: automatic */
    if (x < lo || x > hi || x % multiple != 0) {
        MPCCL_WARN(MPCCL_SUB_INIT, "MPCCL_%s=%lld is not valid (expected %ld..%ld%s); using %ld", name, (long long)x,
                   lo, hi, multiple > 1 ? ", a multiple of 16" : "", def);
        return def;
    }
    return (long)x;
}

/* GPU-direct: what is left of a CTA's part of a message to another node goes
 * whole from this size on (devplan.h, whole messages); off by default: over
 * UCX's cuda_ipc a transfer from a buffer the application freed and
 * allocated again deadlocks in cuIpcCloseMemHandle on the proxy thread
 * (doc/GPU_DESIGN.md), and over TCP it gained nothing (2 x H100,
 * 2026-11-28). */
#define PROXY_WHOLE_DEFAULT 0u

/* Staged pieces between nodes where the network's rendezvous is dear (UCX over
 * TCP): at most this many bytes near the end of a CTA's part (devplan.h,
 * eager pieces), just under UCX's eager limit there (65528 bytes with its
 * default 64 KB segments).  A 64 KB piece went by rendezvous: send/recv of
 * 256 KB (four CTAs, 64 KB each) took 120-175 us, in pieces of 65520 bytes
 * 92-98, of 32 KB 89 (2 x H200, UCX 1.22, 2026-11-28). */
#define PROXY_EAGER_DEFAULT 65520u

/* Slots of communicators whose every peer is on another node pin at most this. */
#define NET_SLOT_BUDGET (256ull << 20)

/* remote_peers > 0: every peer is on another node (one rank per node: the
 * rail of a hierarchical communicator, or one GPU per node).  Each piece
 * then crosses the network, where a message costs more than a 64 KB slot
 * carries: over TCP (two simulated nodes, UCX 1.22, 2026-11-26) 1 MB slots on
 * 4 CTAs moved 2.0-3.0 GB/s where 64 KB slots on 16 CTAs moved 1.0-1.2, and
 * ucx_perftest itself moved 1.4 GB/s in 64 KB messages.  The slots shrink
 * (to 64 KB at least) so that no communicator pins more than
 * NET_SLOT_BUDGET of them.
 *
 * direct: those slots will be device memory that UCX moves itself
 * (GPU-direct, gpu_proxy_mem.c).  No CPU copies a piece then, and the CTAs'
 * own copies into and out of the slots bound the rate: over cuda_ipc (two
 * simulated nodes, 2 x H200, 2026-11-27) send/recv of 64 MB moved 73 GB/s on
 * 4 CTAs and 119-122 on 8.  Each CTA takes at least 256 KB of a message, as
 * each piece is a UCX rendezvous: 1 MB on 8 CTAs of 128 KB took 85-93 us,
 * with 256 KB shares 71. */
static void gpu_settings(int sm_count, int remote_peers, int direct, uint32_t *ctas, uint32_t *slot_bytes,
                         uint32_t *cta_min_bytes, int *p2p_disable)
{
    long def_ctas = sm_count < 16 ? sm_count : 16, def_slot = 64 << 10, def_cta_min = 32 << 10;
    if (def_ctas < 1) def_ctas = 1;
    if (remote_peers > 0) {
        long most = direct ? 8 : 4;
        if (def_ctas > most) def_ctas = most;
        if (direct) def_cta_min = 256 << 10;
        def_slot = 1 << 20;
        while (def_slot > (64 << 10) &&
               (uint64_t)def_slot * (uint64_t)def_ctas * MPCCL_GPU_NSLOTS * 2u * (uint64_t)remote_peers > NET_SLOT_BUDGET)
            def_slot /= 2;
    }
    *ctas = (uint32_t)setting("GPU_CTAS", def_ctas, 1, MPCCL_GPU_MAX_CTAS, 1);
    *slot_bytes = (uint32_t)setting("GPU_SLOT_BYTES", def_slot, 1 << 10, 16 << 20, 16);
    *cta_min_bytes = (uint32_t)setting("GPU_CTA_MIN_BYTES", def_cta_min, 0, 16 << 20, 16);
    *p2p_disable = (int)setting("P2P_DISABLE", 0, 0, 1, 1);
}

/* ---- shared host segments (HOST links) ------------------------------------------------- */

/* One mapping per name in this process: a pair of ranks that live in the same
 * process shares the receiver's mapping instead of pinning the pages twice. */
struct mpccl_host_seg {
    struct mpccl_host_seg *next;
    char name[64];
    void *host;
    char *dptr; /* device view (portable registration: valid on every device) */
    size_t bytes;
    int refs;
    int creator_unlink; /* the name still exists and this process created it */
};

static pthread_mutex_t seg_mu = PTHREAD_MUTEX_INITIALIZER;
static mpccl_host_seg_t *segs;

static void seg_name(char out[64], uint64_t nonce, int sender, int receiver)
{
    snprintf(out, 64, "/mpccl-%016llx-%d-%d", (unsigned long long)nonce, sender, receiver);
}

static mpccl_status_t seg_get(const char *name, size_t bytes, int create, mpccl_host_seg_t **out)
{
    mpccl_status_t st = MPCCL_OK;
    pthread_mutex_lock(&seg_mu);
    for (mpccl_host_seg_t *s = segs; s; s = s->next) {
        if (strcmp(s->name, name) == 0) {
            s->refs++;
            *out = s;
            pthread_mutex_unlock(&seg_mu);
            return MPCCL_OK;
        }
    }
    mpccl_host_seg_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "host mailbox %s: out of memory", name);
        goto out;
    }
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->bytes = bytes;
    s->host = MAP_FAILED;
    void *host = NULL;
    if ((st = mpccl_shm_map(name, bytes, create, "host mailbox", &host)) != MPCCL_OK) goto out;
    s->host = host;
    s->creator_unlink = create;
    /* A fresh segment reads as zeros, which is the initial state of every
     * flag and counter in it. */
    cudaError_t ce = cudaHostRegister(s->host, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (ce != cudaSuccess) {
        st = mpccl_cuda_error(ce, "cudaHostRegister (host mailbox)");
        munmap(s->host, bytes);
        s->host = MAP_FAILED;
        goto out;
    }
    void *d = NULL;
    ce = cudaHostGetDevicePointer(&d, s->host, 0);
    if (ce != cudaSuccess) {
        st = mpccl_cuda_error(ce, "cudaHostGetDevicePointer (host mailbox)");
        cudaHostUnregister(s->host);
        munmap(s->host, bytes);
        s->host = MAP_FAILED;
        goto out;
    }
    s->dptr = d;
    s->refs = 1;
    s->next = segs;
    segs = s;
    *out = s;
out:
    if (st != MPCCL_OK && s) {
        if (s->creator_unlink) shm_unlink(name);
        free(s);
    }
    pthread_mutex_unlock(&seg_mu);
    return st;
}

/* Once every peer has mapped the segment its name is no longer needed;
 * unlinking early means a crash leaves nothing behind in /dev/shm. */
static void seg_unlink(mpccl_host_seg_t *s)
{
    pthread_mutex_lock(&seg_mu);
    if (s->creator_unlink) {
        shm_unlink(s->name);
        s->creator_unlink = 0;
    }
    pthread_mutex_unlock(&seg_mu);
}

static void seg_put(mpccl_host_seg_t *s)
{
    pthread_mutex_lock(&seg_mu);
    if (--s->refs == 0) {
        mpccl_host_seg_t **pp = &segs;
        while (*pp != s) pp = &(*pp)->next;
        *pp = s->next;
        if (s->creator_unlink) shm_unlink(s->name);
        cudaHostUnregister(s->host);
        munmap(s->host, s->bytes);
        free(s);
    }
    pthread_mutex_unlock(&seg_mu);
}

/* ---- layout ------------------------------------------------------------------------- */

typedef struct {
    size_t slots;      /* bytes of [nctas][nslots][slot_bytes] */
    size_t flags;      /* bytes of one [nctas][nslots] uint32 array */
    size_t rx_stride;  /* one rx area: slots, ready, len */
    size_t ack_stride; /* one [nctas] uint32 array */
    size_t seq_bytes;  /* one [nranks][nctas] uint32 array */
    size_t clean_bytes; /* rx_clean: [nranks][nctas][nslots] uint32 */
} layout_t;

static layout_t layout_of(const mpccl_gpu_comm_t *g)
{
    layout_t l;
    l.slots = (size_t)g->nctas * g->nslots * g->slot_bytes;
    l.flags = (size_t)g->nctas * g->nslots * sizeof(uint32_t);
    l.rx_stride = ALIGN_UP(l.slots + 2 * l.flags, 256);
    l.ack_stride = ALIGN_UP((size_t)g->nctas * sizeof(uint32_t), 256);
    l.seq_bytes = ALIGN_UP((size_t)g->nranks * g->nctas * sizeof(uint32_t), 256);
    l.clean_bytes = ALIGN_UP((size_t)g->nranks * g->nctas * g->nslots * sizeof(uint32_t), 256);
    return l;
}

/* Offsets in the mailbox of a rank with m NVLINK peers. */
static size_t rx_off(const layout_t *l, int idx) { return (size_t)idx * l->rx_stride; }
static size_t ack_off(const layout_t *l, int m, int idx) { return (size_t)m * l->rx_stride + (size_t)idx * l->ack_stride; }
static size_t seq_off(const layout_t *l, int m) { return (size_t)m * l->rx_stride + (size_t)m * l->ack_stride; }
static size_t mailbox_bytes(const layout_t *l, int m) { return seq_off(l, m) + 3 * l->seq_bytes + l->clean_bytes; }

/* Host segment of one ordered pair: slots, ready, len, ack. */
static size_t seg_bytes(const layout_t *l)
{
    size_t b = ALIGN_UP(l->slots + 2 * l->flags, 256) + l->ack_stride;
    long page = sysconf(_SC_PAGESIZE);
    return ALIGN_UP(b, (size_t)(page > 0 ? page : 4096));
}

/* ---- setup exchange -------------------------------------------------------------------- */

typedef struct {
    int32_t st;          /* this rank's setup status so far */
    int32_t pid;
    uint64_t host_hash;
    uint64_t nonce;
    unsigned char uuid[16];
    uint32_t nctas, slot_bytes, cta_min_bytes, proxy_ll_bytes, proxy_whole_bytes, proxy_eager_bytes;
    int32_t p2p_disable;
    int32_t dev;
} rank_info_t;

static uint64_t make_nonce(void)
{
    uint64_t n = 0;
    if (getrandom(&n, sizeof(n), GRND_NONBLOCK) != (ssize_t)sizeof(n)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        n = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    return n ^ ((uint64_t)getpid() << 40);
}

/* Local part before the first exchange: device, geometry proposal, identity. */
static mpccl_status_t local_init(mpccl_gpu_comm_t *g, const mpccl_topo_t *topo, rank_info_t *me)
{
    MPCCL_CUDA_CHECK(cudaFree(NULL)); /* the primary context, before anything else */
    int sms = 0;
    MPCCL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g->dev));
    int p2p_disable;
    int alone = topo->nnodes > 1 && topo->nnodes == topo->nranks; /* one rank per node */
    gpu_settings(sms, alone ? topo->nranks - 1 : 0, alone && g->direct, &me->nctas, &me->slot_bytes, &me->cta_min_bytes,
                 &p2p_disable);
    me->p2p_disable = p2p_disable;
    /* LL pieces need the slots in host memory, where the proxy checks their
     * flags and zeroes them (devplan.h); GPU-direct ranks propose none */
    me->proxy_ll_bytes = g->direct ? 0 : (uint32_t)setting("PROXY_LL_BYTES", 4096, 0, MPCCL_PROXY_LL_MAX, 1);
    /* Whole messages need UCX to move the launches' buffers themselves:
     * GPU-direct ranks only (devplan.h) */
    me->proxy_whole_bytes = g->direct ? (uint32_t)setting("PROXY_WHOLE_BYTES", PROXY_WHOLE_DEFAULT, 0,
                                                          MPCCL_PROXY_WHOLE_MAX, 1) : 0;
    const char *eager_set = mpccl_config_str("PROXY_EAGER_BYTES");
    uint32_t eager = topo->nnodes > 1 && g->eager_net ? PROXY_EAGER_DEFAULT : 0;
    if (eager_set && strcmp(eager_set, "auto") != 0)
        eager = (uint32_t)setting("PROXY_EAGER_BYTES", eager, 0, 16 << 20, 16);
    me->proxy_eager_bytes = g->direct ? 0 : eager;
    MPCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    MPCCL_CHECK(mpccl_ipc_device_uuid(g->dev, me->uuid));
    return MPCCL_OK;
}

/* Row of the P2P matrix: 1 where this rank could write into peer j's device
 * memory and j into ours. */
static mpccl_status_t p2p_row(const mpccl_gpu_comm_t *g, const mpccl_topo_t *topo, const rank_info_t *info,
                              unsigned char *row)
{
    const rank_info_t *me = &info[g->rank];
    int any_disable = 0;
    for (int r = 0; r < g->nranks; r++) any_disable |= info[r].p2p_disable;
    for (int j = 0; j < g->nranks; j++) {
        row[j] = 0;
        if (j == g->rank || topo->node_of[j] != topo->node_of[g->rank] || any_disable) continue;
        if (info[j].host_hash != me->host_hash)
            return mpccl_fail(MPCCL_ERR_USAGE, "ranks %d and %d are on one node by their host id but their "
                              "hosts differ (MPCCL_HOSTID / NCCL_HOSTID set to equal values on different "
                              "machines?)", g->rank, j);
        int ok = 0;
        const char *how = "";
        MPCCL_CHECK(mpccl_ipc_p2p(g->dev, me->uuid, info[j].uuid, &ok, &how));
        row[j] = (unsigned char)ok;
        if (!ok)
            MPCCL_INFO(MPCCL_SUB_INIT, "rank %d (device %d) and rank %d (its device %d): no P2P (%s)", g->rank,
                       g->dev, j, (int)info[j].dev, how);
    }
    return MPCCL_OK;
}

/* The path rank a takes to rank b (gpu_path.h).  A rank's link to itself is a
 * loopback inside its own mailbox: ncclSend / ncclRecv to oneself go through
 * the same protocol as any peer. */
static const mpccl_gpu_path_t *path_of(const mpccl_topo_t *topo, const unsigned char *rows, int n, int a, int b)
{
    const mpccl_gpu_pair_t p = {.topo = topo, .p2p = rows, .n = n, .a = a, .b = b};
    return mpccl_gpu_path_pick(&p);
}

static uint32_t link_kind(const mpccl_topo_t *topo, const unsigned char *rows, int n, int a, int b)
{
    return path_of(topo, rows, n, a, b)->link;
}

/* Index of `peer` among the NVLINK peers of `owner` (rank order), and their count. */
static int nv_index(const mpccl_topo_t *topo, const unsigned char *rows, int n, int owner, int peer)
{
    int idx = 0;
    for (int j = 0; j < peer && j < n; j++)
        if (link_kind(topo, rows, n, owner, j) == MPCCL_LINK_NVLINK) idx++;
    return idx;
}

static void set_host_link(mpccl_dev_link_t *L, const layout_t *l, mpccl_host_seg_t *tx, mpccl_host_seg_t *rx)
{
    size_t ack = ALIGN_UP(l->slots + 2 * l->flags, 256);
    L->tx_slots = tx->dptr;
    L->tx_ready = (volatile uint32_t *)(tx->dptr + l->slots);
    L->tx_len = (volatile uint32_t *)(tx->dptr + l->slots + l->flags);
    L->tx_ack = (volatile uint32_t *)(tx->dptr + ack);
    L->rx_slots = rx->dptr;
    L->rx_ready = (volatile uint32_t *)(rx->dptr + l->slots);
    L->rx_len = (volatile uint32_t *)(rx->dptr + l->slots + l->flags);
    L->rx_ack = (volatile uint32_t *)(rx->dptr + ack);
}

static void set_nvlink_link(mpccl_dev_link_t *L, const layout_t *l, char *mine, int m_mine, int my_idx_of_peer,
                            char *theirs, int m_theirs, int their_idx_of_me)
{
    char *tx = theirs + rx_off(l, their_idx_of_me); /* the peer's rx area for me */
    char *rx = mine + rx_off(l, my_idx_of_peer);    /* my rx area for the peer */
    L->tx_slots = tx;
    L->tx_ready = (volatile uint32_t *)(tx + l->slots);
    L->tx_len = (volatile uint32_t *)(tx + l->slots + l->flags);
    L->tx_ack = (volatile uint32_t *)(mine + ack_off(l, m_mine, my_idx_of_peer));
    L->rx_slots = rx;
    L->rx_ready = (volatile uint32_t *)(rx + l->slots);
    L->rx_len = (volatile uint32_t *)(rx + l->slots + l->flags);
    L->rx_ack = (volatile uint32_t *)(theirs + ack_off(l, m_theirs, their_idx_of_me));
}

/* After the kinds are known: my mailbox, its zeroing, and its descriptor. */
static mpccl_status_t build_mailbox(mpccl_gpu_comm_t *g, const layout_t *l, int m)
{
    g->mailbox_bytes = mailbox_bytes(l, m);
    MPCCL_CUDA_CHECK(cudaMalloc(&g->mailbox, g->mailbox_bytes));
    MPCCL_CUDA_CHECK(cudaMemsetAsync(g->mailbox, 0, g->mailbox_bytes, g->stream));
    MPCCL_CUDA_CHECK(cudaStreamSynchronize(g->stream));
    g->tx_seq = (uint32_t *)((char *)g->mailbox + seq_off(l, m));
    g->rx_seq = (uint32_t *)((char *)g->mailbox + seq_off(l, m) + l->seq_bytes);
    g->tx_acked = (uint32_t *)((char *)g->mailbox + seq_off(l, m) + 2 * l->seq_bytes);
    g->rx_clean = (uint32_t *)((char *)g->mailbox + seq_off(l, m) + 3 * l->seq_bytes);
    return mpccl_ipc_export(g->mailbox, g->mailbox_bytes, &g->peer_desc[g->rank]);
}

/* Chooses each peer's path once (gpu_path.h), maps every same-node peer's
 * side of our links and fills links_host. */
static mpccl_status_t map_peers(mpccl_gpu_comm_t *g, const mpccl_topo_t *topo, const unsigned char *rows,
                                const layout_t *l, int phase)
{
    int n = g->nranks, me = g->rank;
    for (int j = 0; j < n; j++) {
        if (phase == 0) {
            g->peer_path[j] = path_of(topo, rows, n, me, j);
            g->proxy_peers += g->peer_path[j]->link == MPCCL_LINK_PROXY;
        }
        uint32_t kind = g->peer_path[j]->link;
        if (kind == MPCCL_LINK_HOST) {
            char name[64];
            if (phase == 0) { /* receiver side: create the segment for j -> me */
                seg_name(name, g->nonce, j, me);
                MPCCL_CHECK(seg_get(name, seg_bytes(l), 1, &g->seg_rx[j]));
            } else {          /* sender side: open the segment j created for me -> j */
                seg_name(name, g->nonce, me, j);
                MPCCL_CHECK(seg_get(name, seg_bytes(l), 0, &g->seg_tx[j]));
                set_host_link(&g->links_host[j], l, g->seg_tx[j], g->seg_rx[j]);
                MPCCL_INFO(MPCCL_SUB_INIT, "rank %d <-> rank %d: no P2P between their GPUs, messages go "
                           "through shared pinned host memory", me, j);
            }
        } else if (kind == MPCCL_LINK_NVLINK && phase == 1) {
            MPCCL_CHECK(mpccl_ipc_import(&g->peer_desc[j], g->dev, &g->peer_mailbox[j]));
            int m_me = nv_index(topo, rows, n, me, n), m_j = nv_index(topo, rows, n, j, n);
            set_nvlink_link(&g->links_host[j], l, g->mailbox, m_me, nv_index(topo, rows, n, me, j),
                            g->peer_mailbox[j], m_j, nv_index(topo, rows, n, j, me));
        }
        g->links_host[j].kind = kind;
    }
    return MPCCL_OK;
}

static mpccl_status_t alloc_host_state(mpccl_gpu_comm_t *g)
{
    size_t n = (size_t)g->nranks;
    g->links_host = calloc(n, sizeof(*g->links_host));
    g->peer_desc = calloc(n, sizeof(*g->peer_desc));
    g->peer_mailbox = calloc(n, sizeof(void *));
    g->seg_rx = calloc(n, sizeof(void *));
    g->seg_tx = calloc(n, sizeof(void *));
    g->peer_path = calloc(n, sizeof(*g->peer_path));
    if (!g->links_host || !g->peer_desc || !g->peer_mailbox || !g->seg_rx || !g->seg_tx || !g->peer_path)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "GPU communicator: out of memory for %d ranks", g->nranks);
    return MPCCL_OK;
}

/* The fd server hands memory descriptors only to processes its communicators
 * name: this communicator's other processes on this machine. */
static mpccl_status_t allow_fd_peers(mpccl_gpu_comm_t *g, const rank_info_t *info)
{
    const rank_info_t *me = &info[g->rank];
    g->fd_peers = calloc((size_t)g->nranks, sizeof(*g->fd_peers));
    if (g->fd_peers == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "GPU communicator: out of memory for %d peers", g->nranks);
    for (int r = 0; r < g->nranks; r++) {
        if (r == g->rank || info[r].host_hash != me->host_hash || info[r].pid == me->pid) continue;
        MPCCL_CHECK(mpccl_fdpass_allow((pid_t)info[r].pid));
        g->fd_peers[g->n_fd_peers++] = info[r].pid;
    }
    return MPCCL_OK;
}

static mpccl_status_t create_steps(mpccl_gpu_comm_t *g, mpccl_bootstrap_t *bs, const mpccl_topo_t *topo)
{
    int n = g->nranks;
    rank_info_t *info = calloc((size_t)n, sizeof(*info));
    unsigned char *rows = calloc((size_t)n, (size_t)n + 1);
    mpccl_status_t st = (info && rows) ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "GPU communicator: out of memory");

    /* 1: identities and geometry proposals. */
    rank_info_t *me = info ? &info[g->rank] : NULL;
    if (st == MPCCL_OK) {
        me->pid = (int32_t)getpid();
        me->host_hash = mpccl_topo_host_hash();
        me->nonce = make_nonce();
        me->dev = g->dev;
        st = local_init(g, topo, me);
        me->st = st;
    }
    if (st != MPCCL_OK && info == NULL) goto out; /* cannot take part; peers time out in the bootstrap */
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(bs, info, sizeof(*info)), st, out);
    for (int r = 0; r < n && st == MPCCL_OK; r++)
        if (info[r].st != MPCCL_OK)
            st = r == g->rank ? (mpccl_status_t)info[r].st
                              : mpccl_fail(MPCCL_ERR_REMOTE, "GPU communicator setup: rank %d could not set up "
                                           "its device", r);
    if (st != MPCCL_OK) goto out;
    MPCCL_CHECK_GOTO(allow_fd_peers(g, info), st, out);
    g->nctas = info[0].nctas;
    g->slot_bytes = info[0].slot_bytes;
    g->cta_min_bytes = info[0].cta_min_bytes;
    g->proxy_ll_bytes = info[0].proxy_ll_bytes;
    g->proxy_whole_bytes = info[0].proxy_whole_bytes;
    g->proxy_eager_bytes = info[0].proxy_eager_bytes;
    for (int r = 1; r < n; r++) {
        if (info[r].proxy_eager_bytes < g->proxy_eager_bytes) g->proxy_eager_bytes = info[r].proxy_eager_bytes;
        if (info[r].proxy_ll_bytes < g->proxy_ll_bytes) g->proxy_ll_bytes = info[r].proxy_ll_bytes;
        if (info[r].proxy_whole_bytes < g->proxy_whole_bytes) g->proxy_whole_bytes = info[r].proxy_whole_bytes;
        if (info[r].nctas < g->nctas) g->nctas = info[r].nctas;
        if (info[r].slot_bytes < g->slot_bytes) g->slot_bytes = info[r].slot_bytes;
        if (info[r].cta_min_bytes < g->cta_min_bytes) g->cta_min_bytes = info[r].cta_min_bytes;
    }
    if (g->proxy_ll_bytes > g->slot_bytes / 2) g->proxy_ll_bytes = g->slot_bytes / 2; /* lines: twice the bytes */
    /* an LL piece is one piece of the engine's cut, so never larger than an
     * eager one (the small-call kernel sends each message as one LL piece) */
    if (g->proxy_eager_bytes && g->proxy_ll_bytes > g->proxy_eager_bytes) g->proxy_ll_bytes = g->proxy_eager_bytes;
    for (int r = 0; r < n && g->proxy_whole_bytes && g->rank == 0; r++)
        if (topo->node_of[r] != topo->node_of[0] && info[r].host_hash == info[0].host_hash) {
            MPCCL_WARN(MPCCL_SUB_NET, "MPCCL_PROXY_WHOLE_BYTES=%u with nodes of one machine (ranks 0 and %d, "
                       "MPCCL_HOSTID): where UCX uses cuda_ipc between them, a whole transfer from a buffer "
                       "that was freed and allocated again deadlocks (UCX closes the old IPC mapping on the "
                       "proxy thread while the kernel waits for the transfer; doc/GPU_DESIGN.md)",
                       g->proxy_whole_bytes, r);
            break;
        }
    g->nslots = MPCCL_GPU_NSLOTS;
    g->nonce = info[0].nonce;

    /* 2: P2P rows (the last byte carries the status); a pair is NVLINK only
     * when both ends say so, so both ends always agree. */
    unsigned char *row = rows + (size_t)g->rank * (n + 1);
    mpccl_status_t rst = p2p_row(g, topo, info, row);
    row[n] = (unsigned char)rst;
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(bs, rows, (size_t)n + 1), st, out);
    for (int r = 0; r < n && st == MPCCL_OK; r++)
        if (rows[(size_t)r * (n + 1) + n] != MPCCL_OK)
            st = r == g->rank ? rst
                              : mpccl_fail(MPCCL_ERR_REMOTE, "GPU communicator setup: rank %d could not "
                                           "determine its P2P peers", r);
    if (st != MPCCL_OK) goto out;

    /* 3: my mailbox, sized for my NVLINK peers; descriptors to everyone. */
    layout_t l = layout_of(g);
    int m = nv_index(topo, rows, n, g->rank, n);
    mpccl_status_t bst = build_mailbox(g, &l, m);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_agree(bs, bst, 0, "GPU communicator setup (allocating its mailbox)"), st, out);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(bs, g->peer_desc, sizeof(*g->peer_desc)), st, out);

    /* 4: host segments exist before anyone opens them; everything is mapped
     * before anyone may write (the caller's first launch). */
    MPCCL_CHECK_GOTO(mpccl_bootstrap_agree(bs, map_peers(g, topo, rows, &l, 0), 0,
                                           "GPU communicator setup (creating host mailboxes)"), st, out);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_agree(bs, map_peers(g, topo, rows, &l, 1), 0,
                                           "GPU communicator setup (mapping peer mailboxes)"), st, out);
    for (int j = 0; j < n; j++)
        if (g->seg_rx[j]) seg_unlink(g->seg_rx[j]);

    /* 5: the device copy. */
    size_t hdr = ALIGN_UP(sizeof(mpccl_dev_comm_t), 256);
    cudaError_t ce = cudaMalloc((void **)&g->dcomm, hdr + (size_t)n * sizeof(mpccl_dev_link_t));
    mpccl_status_t ust = ce == cudaSuccess ? MPCCL_OK : mpccl_cuda_error(ce, "cudaMalloc (device communicator)");
    if (ust == MPCCL_OK) {
        g->dlinks = (mpccl_dev_link_t *)((char *)g->dcomm + hdr);
        ust = mpccl_gpu_comm_commit(g);
    }
    st = mpccl_bootstrap_agree(bs, ust, 0, "GPU communicator setup (uploading its communicator)");
out:
    free(info);
    free(rows);
    return st;
}

mpccl_status_t mpccl_gpu_comm_create(mpccl_bootstrap_t *bs, const mpccl_topo_t *topo, int cuda_dev, int net,
                                     mpccl_gpu_comm_t **out)
{
    if (bs == NULL || topo == NULL || out == NULL || topo->nranks != bs->nranks || topo->rank != bs->rank)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "mpccl_gpu_comm_create: bootstrap and topology disagree");
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess) return mpccl_cuda_error(ce, "cudaGetDeviceCount");
    if (cuda_dev < 0 || cuda_dev >= ndev)
        return mpccl_fail(MPCCL_ERR_ARG, "CUDA device %d does not exist (this process sees %d device%s)",
                          cuda_dev, ndev, ndev == 1 ? "" : "s");
    mpccl_gpu_comm_t *g = calloc(1, sizeof(*g));
    if (g == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "GPU communicator: out of memory");
    g->dev = cuda_dev;
    g->direct = (net & MPCCL_GPU_NET_DIRECT) != 0;
    g->eager_net = (net & MPCCL_GPU_NET_EAGER) != 0;
    g->rank = bs->rank;
    g->nranks = bs->nranks;
    int saved = -1;
    mpccl_status_t st = alloc_host_state(g);
    if (st == MPCCL_OK) st = mpccl_cuda_push_device(cuda_dev, &saved);
    if (st == MPCCL_OK) {
        st = create_steps(g, bs, topo);
        mpccl_cuda_restore_device(saved);
    }
    if (st != MPCCL_OK) {
        mpccl_gpu_comm_destroy(g);
        return st;
    }
    int nv = 0, host = 0, proxy = 0;
    for (int j = 0; j < g->nranks; j++) {
        nv += g->links_host[j].kind == MPCCL_LINK_NVLINK;
        host += g->links_host[j].kind == MPCCL_LINK_HOST;
        proxy += g->links_host[j].kind == MPCCL_LINK_PROXY;
    }
    MPCCL_INFO(MPCCL_SUB_INIT, "GPU comm rank %d/%d on device %d: %u CTAs x %u slots x %u bytes, at least %u "
               "bytes per CTA and step, mailbox %zu bytes, links: %d P2P, %d host memory, %d proxy (LL pieces up to "
               "%u bytes, whole messages from %u bytes, eager pieces of %u bytes)", g->rank, g->nranks, g->dev,
               g->nctas, g->nslots, g->slot_bytes, g->cta_min_bytes, g->mailbox_bytes, nv, host, proxy,
               proxy ? g->proxy_ll_bytes : 0, proxy ? g->proxy_whole_bytes : 0, proxy ? g->proxy_eager_bytes : 0);
    *out = g;
    return MPCCL_OK;
}

mpccl_status_t mpccl_gpu_comm_commit(mpccl_gpu_comm_t *g)
{
    mpccl_dev_comm_t h;
    memset(&h, 0, sizeof(h));
    h.rank = g->rank;
    h.nranks = g->nranks;
    h.nctas = g->nctas;
    h.nslots = g->nslots;
    h.slot_bytes = g->slot_bytes;
    h.cta_min_bytes = g->cta_min_bytes;
    h.proxy_ll_bytes = g->proxy_ll_bytes;
    h.proxy_whole_bytes = g->proxy_whole_bytes;
    h.proxy_eager_bytes = g->proxy_eager_bytes;
    h.links = g->dlinks;
    h.tx_seq = g->tx_seq;
    h.rx_seq = g->rx_seq;
    h.tx_acked = g->tx_acked;
    h.rx_clean = g->rx_clean;
    int saved;
    MPCCL_CHECK(mpccl_cuda_push_device(g->dev, &saved));
    cudaError_t ce = cudaMemcpyAsync(g->dcomm, &h, sizeof(h), cudaMemcpyHostToDevice, g->stream);
    if (ce == cudaSuccess)
        ce = cudaMemcpyAsync(g->dlinks, g->links_host, (size_t)g->nranks * sizeof(mpccl_dev_link_t),
                             cudaMemcpyHostToDevice, g->stream);
    /* The sources are pageable host memory that may change after return. */
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(g->stream);
    mpccl_cuda_restore_device(saved);
    return ce == cudaSuccess ? MPCCL_OK : mpccl_cuda_error(ce, "uploading the GPU communicator");
}

void mpccl_gpu_comm_destroy(mpccl_gpu_comm_t *g)
{
    if (g == NULL) return;
    int saved = -1;
    int pushed = mpccl_cuda_push_device(g->dev, &saved) == MPCCL_OK;
    mpccl_gpu_abort_free(g->abort); /* no kernel of the communicator runs any more */
    g->abort = NULL;
    for (int j = 0; j < g->nranks; j++) {
        if (g->peer_mailbox && g->peer_mailbox[j]) mpccl_ipc_release(&g->peer_desc[j]);
        if (g->seg_tx && g->seg_tx[j]) seg_put(g->seg_tx[j]);
        if (g->seg_rx && g->seg_rx[j]) seg_put(g->seg_rx[j]);
    }
    if (g->dcomm) cudaFree(g->dcomm);
    if (g->mailbox) cudaFree(g->mailbox);
    if (g->stream) cudaStreamDestroy(g->stream);
    (void)cudaGetLastError(); /* teardown errors are not the caller's next error */
    if (pushed) mpccl_cuda_restore_device(saved);
    free(g->links_host);
    free(g->peer_desc);
    free(g->peer_mailbox);
    free(g->seg_rx);
    free(g->seg_tx);
    for (int i = 0; i < g->n_fd_peers; i++) mpccl_fdpass_forget((pid_t)g->fd_peers[i]);
    free(g->fd_peers);
    free(g->peer_path);
    free(g);
}
