/* GPU-direct one-sided operations between nodes (gpu_win_rma.h).
 *
 * Registration (user threads, collective): the counters and each window are
 * registered with ucp_mem_map on the registering thread, so UCX detects the
 * memory there and never on the proxy thread, and every rank's address and
 * packed remote key are allgathered.  Remote keys are unpacked on the proxy
 * thread while the registration waits (they belong to the endpoints of the
 * transport the proxy drives), never at a put.  Each window is also a UCX
 * region of this rank, so a put whose source lies in one of its own windows
 * leaves from there, with no copy into a slot.  A released window's keys and
 * region are kept until the proxy lets go of the transport (a put of the
 * window may still be in UCX's hands), then destroyed (mpccl_os_rma_drop_keys).
 *
 * Signals: counter (ctx, sig, s) of a rank has one writer, rank s.  The
 * source's proxy handles its pieces to a peer in order and counts the signals
 * it sent on each counter, so it puts the counter's new value (after a fence
 * that lands the data first) instead of an atomic add, which UCX may not
 * offer on device memory. */
#include "gpu/gpu_win_rma.h"

#ifdef MPCCL_HAVE_CUDA
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/onesided_remote.h"
#include "gpu/gpu_win.h"
#include "ucx/ucx.h"
#include "ucx/ucx_rma.h"
#include "util/config.h"
#include "util/log.h"

_Static_assert(MPCCL_OS_HDR_BYTES == MPCCL_PROXY_OS_DATA_OFFSET, "a piece's data follows its header");

/* What a released window leaves until the proxy lets go of the transport. */
typedef struct {
    void *p;
    int region; /* 1: a source region (mpccl_ucx_region_close), 0: a remote key */
} grave_t;

struct mpccl_os_rma {
    ncclComm_t comm;
    mpccl_proxy_comm_t *pc;   /* the proxy that carries the puts */
    int on;                   /* decided at the signal area's setup, the same on every rank */
    size_t per;               /* counters a rank owns per source: MPCCL_WIN_NCTX * MPCCL_WIN_NSIG */
    mpccl_ucx_mem_t sig_mem;  /* this rank's counters */
    uint64_t *peer_sig_addr;  /* [nranks] */
    unsigned char *sig_keys;  /* allgathered blobs (sig_stride bytes each) */
    size_t sig_stride;
    void **peer_sig_rkey;     /* [nranks] unpacked by the proxy thread */
    uint64_t *sent;           /* [nranks][per] signals sent on each counter (proxy thread) */
    pthread_mutex_t grave_mu;
    grave_t *grave;           /* remote keys and source regions of released windows */
    size_t ngrave, cap;
};

/* A rank's blob: whether it can (the signal area's only), its address, then
 * its packed key. */
typedef struct {
    uint64_t can;
    uint64_t addr;
} blob_head_t;

mpccl_status_t mpccl_os_rma_new(ncclComm_t comm, mpccl_os_rma_t **out)
{
    mpccl_os_rma_t *r = calloc(1, sizeof(*r));
    if (!r) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the one-sided state");
    r->comm = comm;
    r->per = (size_t)MPCCL_WIN_NCTX * MPCCL_WIN_NSIG;
    pthread_mutex_init(&r->grave_mu, NULL);
    *out = r;
    return MPCCL_OK;
}

int mpccl_os_rma_on(const mpccl_os_rma_t *r) { return r && r->on; }

/* Without a NIC that writes GPU memory itself, UCX puts into device memory
 * through TCP (emulated: 0.4 GB/s against 4.7 staged) or, between processes
 * of one machine, cuda_ipc, whose key unpacking and copies are CUDA calls on
 * the proxy thread (doc/ONESIDED.md): auto leaves both to the staged channel. */
static const char *refusal(void)
{
    const char *mode = mpccl_config_str("ONESIDED_DIRECT");
    if (mode && strcmp(mode, "0") == 0) return "MPCCL_ONESIDED_DIRECT=0";
    if (mode && strcmp(mode, "1") == 0) return NULL;
    if (mode && strcmp(mode, "auto") != 0) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            MPCCL_WARN(MPCCL_SUB_P2P, "MPCCL_ONESIDED_DIRECT=%s is not 0, 1 or auto; using auto", mode);
    }
    return mpccl_ucx_gdr_nic() ? NULL
                               : "MPCCL_ONESIDED_DIRECT=auto and no network device of UCX reads GPU memory (GPUDirect "
                                 "RDMA)";
}

int mpccl_os_rma_wanted(void) { return refusal() == NULL; }

static void to_grave(mpccl_os_rma_t *r, void *p, int region)
{
    pthread_mutex_lock(&r->grave_mu);
    if (r->ngrave == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        grave_t *g = realloc(r->grave, cap * sizeof(*g));
        if (!g) { /* leak it rather than free it under the proxy */
            pthread_mutex_unlock(&r->grave_mu);
            MPCCL_WARN(MPCCL_SUB_P2P, "one-sided: out of memory keeping a released %s; it is leaked",
                       region ? "window's UCX region" : "remote key");
            return;
        }
        r->grave = g;
        r->cap = cap;
    }
    r->grave[r->ngrave++] = (grave_t){p, region};
    pthread_mutex_unlock(&r->grave_mu);
}

static void bury(mpccl_os_rma_t *r, void **keys)
{
    for (int i = 0; keys && i < r->comm->nranks; i++)
        if (keys[i]) to_grave(r, keys[i], 0);
}

void mpccl_os_rma_drop_keys(mpccl_os_rma_t *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->grave_mu);
    for (size_t i = 0; i < r->ngrave; i++) {
        if (r->grave[i].region) mpccl_ucx_region_close(r->grave[i].p);
        else mpccl_ucx_rkey_destroy(r->grave[i].p);
    }
    r->ngrave = 0;
    pthread_mutex_unlock(&r->grave_mu);
}

void mpccl_os_rma_free(mpccl_os_rma_t *r)
{
    if (!r) return;
    mpccl_os_rma_sig_free(r);
    mpccl_os_rma_drop_keys(r);
    free(r->grave);
    pthread_mutex_destroy(&r->grave_mu);
    free(r);
}

/* Maps [addr, addr + bytes) when *can, and allgathers every rank's blob;
 * *can becomes whether every rank could. */
static mpccl_status_t map_and_share(ncclComm_t comm, void *addr, size_t bytes, int *can, mpccl_ucx_mem_t *mem,
                                    unsigned char **all, size_t *stride)
{
    memset(mem, 0, sizeof(*mem));
    if (*can && mpccl_ucx_mem_map(addr, bytes, mem) != MPCCL_OK) {
        MPCCL_INFO(MPCCL_SUB_P2P, "one-sided: UCX cannot register %zu bytes at %p (above); staged puts", bytes, addr);
        *can = 0;
    }
    size_t len = sizeof(blob_head_t) + (*can ? mem->packed_len : 0);
    unsigned char *mine = calloc(1, len);
    if (!mine) {
        mpccl_ucx_mem_unmap(mem);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a remote key");
    }
    blob_head_t h = {(uint64_t)*can, (uint64_t)(uintptr_t)addr};
    memcpy(mine, &h, sizeof(h));
    if (*can) memcpy(mine + sizeof(h), mem->packed, mem->packed_len);
    mpccl_status_t st = mpccl_win_allgather_blobs(comm, mine, len, all, stride);
    free(mine);
    if (st != MPCCL_OK) {
        mpccl_ucx_mem_unmap(mem);
        return st;
    }
    for (int i = 0; i < comm->nranks; i++) {
        blob_head_t p;
        memcpy(&p, *all + (size_t)i * *stride + sizeof(uint64_t), sizeof(p));
        if (!p.can) *can = 0;
    }
    return MPCCL_OK;
}

static uint64_t blob_addr(const unsigned char *all, size_t stride, int i)
{
    blob_head_t p;
    memcpy(&p, all + (size_t)i * stride + sizeof(uint64_t), sizeof(p));
    return p.addr;
}

static const void *blob_key(const unsigned char *all, size_t stride, int i)
{
    return all + (size_t)i * stride + sizeof(uint64_t) + sizeof(blob_head_t);
}

/* *slot, unpacked from blob i of all on the endpoint to peer when not yet. */
static int rkey_of(mpccl_os_rma_t *r, int peer, void **slot, const unsigned char *all, size_t stride)
{
    if (*slot) return 1;
    return mpccl_ucx_rkey_unpack(r->comm->transport, peer, blob_key(all, stride, peer), slot) == MPCCL_OK ? 1 : -1;
}

/* Unpacks the keys of every peer on another node: on the proxy thread
 * (mpccl_proxy_run), while the registration waits.  UCX may make CUDA calls
 * to unpack a key (cuda_ipc maps the peer's memory); made at the first put
 * instead, they could wait for kernels that wait for that very put. */
typedef struct {
    mpccl_os_rma_t *r;
    struct mpccl_win *w; /* NULL: the counters */
} unpack_job_t;

static int unpack_all(void *arg)
{
    unpack_job_t *j = arg;
    ncclComm_t comm = j->r->comm;
    for (int i = 0; i < comm->nranks; i++) {
        if (comm->topo.node_of[i] == comm->topo.node_of[comm->rank]) continue;
        int ok = j->w ? rkey_of(j->r, i, &j->w->peer_rkey[i], j->w->peer_keys, j->w->key_stride)
                      : rkey_of(j->r, i, &j->r->peer_sig_rkey[i], j->r->sig_keys, j->r->sig_stride);
        if (ok < 0) return -1;
    }
    return 0;
}

static mpccl_status_t unpack_now(mpccl_os_rma_t *r, struct mpccl_win *w, const char *what)
{
    unpack_job_t j = {r, w};
    if (mpccl_proxy_run(r->pc, unpack_all, &j) == 0) return MPCCL_OK;
    return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: the remote keys of the peers on other nodes could not be unpacked "
                      "(above)", what);
}

mpccl_status_t mpccl_os_rma_sig_setup(ncclComm_t comm, mpccl_os_rma_t *r, mpccl_proxy_comm_t *pc, void *counters,
                                      size_t bytes)
{
    if (comm->topo.nnodes < 2) return MPCCL_OK; /* every rank knows: no exchange */
    const char *why = r != NULL && pc != NULL ? refusal() : "this rank has no proxy";
    int can = why == NULL;
    if (can && !mpccl_proxy_os_rma(pc, 0))
        can = 0, why = "collectives between nodes are staged (MPCCL_GPU_DIRECT), or the transport has no puts";
    mpccl_ucx_mem_t mem;
    unsigned char *all = NULL;
    size_t stride = 0;
    int mine = can;
    MPCCL_CHECK(map_and_share(comm, counters, bytes, &can, &mem, &all, &stride));
    if (!can) {
        mpccl_ucx_mem_unmap(&mem);
        free(all);
        MPCCL_INFO(MPCCL_SUB_P2P, "comm 0x%llx: one-sided operations between nodes: pinned host staging (%s)",
                   (unsigned long long)comm->id, why ? why : mine ? "another rank cannot put GPU-direct" : "above");
        return MPCCL_OK;
    }
    int n = comm->nranks;
    r->peer_sig_addr = calloc((size_t)n, sizeof(uint64_t));
    r->peer_sig_rkey = calloc((size_t)n, sizeof(void *));
    r->sent = calloc((size_t)n * r->per, sizeof(uint64_t));
    mpccl_status_t st = r->peer_sig_addr && r->peer_sig_rkey && r->sent
                            ? MPCCL_OK
                            : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the one-sided state of %d ranks", n);
    st = mpccl_win_agree(comm, st, "one-sided setup");
    if (st != MPCCL_OK) {
        r->sig_mem = mem;
        r->sig_keys = all;
        mpccl_os_rma_sig_free(r);
        return st;
    }
    for (int i = 0; i < n; i++) r->peer_sig_addr[i] = blob_addr(all, stride, i);
    r->sig_mem = mem;
    r->sig_keys = all;
    r->sig_stride = stride;
    r->pc = pc;
    st = mpccl_win_agree(comm, unpack_now(r, NULL, "one-sided setup"), "one-sided setup");
    if (st != MPCCL_OK) {
        mpccl_os_rma_sig_free(r);
        return st;
    }
    r->on = 1;
    mpccl_proxy_os_rma(pc, 1);
    MPCCL_INFO(MPCCL_SUB_P2P, "comm 0x%llx: one-sided operations between nodes: GPU-direct UCX puts into the "
               "peers' windows and counters", (unsigned long long)comm->id);
    return MPCCL_OK;
}

/* Lets go of one registration (the counters', a window's): its unpacked keys
 * to the grave, the peers' addresses and packed keys freed, our memory
 * unregistered. */
static void release_keys(mpccl_os_rma_t *r, void ***rkeys, uint64_t **addrs, unsigned char **blobs,
                         mpccl_ucx_mem_t *mem)
{
    if (r) bury(r, *rkeys);
    free(*rkeys);
    free(*addrs);
    free(*blobs);
    *rkeys = NULL;
    *addrs = NULL;
    *blobs = NULL;
    mpccl_ucx_mem_unmap(mem);
}

void mpccl_os_rma_sig_free(mpccl_os_rma_t *r)
{
    if (!r) return;
    release_keys(r, &r->peer_sig_rkey, &r->peer_sig_addr, &r->sig_keys, &r->sig_mem);
    free(r->sent);
    r->sent = NULL;
    r->on = 0;
}

mpccl_status_t mpccl_os_rma_win_setup(mpccl_os_rma_t *r, struct mpccl_win *w)
{
    ncclComm_t comm = r->comm;
    int can = 1;
    unsigned char *all = NULL;
    size_t stride = 0;
    mpccl_ucx_mem_t mem;
    MPCCL_CHECK(map_and_share(comm, w->base, w->size, &can, &mem, &all, &stride));
    int n = comm->nranks;
    w->peer_addr = calloc((size_t)n, sizeof(uint64_t));
    w->peer_rkey = calloc((size_t)n, sizeof(void *));
    mpccl_status_t st = !can ? mpccl_fail(MPCCL_ERR_SYSTEM, "ncclCommWindowRegister: a rank could not register its "
                                          "window with UCX for puts from other nodes (its log says why)")
                        : w->peer_addr && w->peer_rkey ? MPCCL_OK
                        : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a window of %d ranks", n);
    st = mpccl_win_agree(comm, st, "ncclCommWindowRegister");
    w->mem = mem;
    w->peer_keys = all;
    w->key_stride = stride;
    if (st != MPCCL_OK) {
        mpccl_os_rma_win_free(r, w);
        return st;
    }
    for (int i = 0; i < n; i++) w->peer_addr[i] = blob_addr(all, stride, i);
    st = mpccl_win_agree(comm, unpack_now(r, w, "ncclCommWindowRegister"), "ncclCommWindowRegister");
    if (st != MPCCL_OK) {
        mpccl_os_rma_win_free(r, w);
        return st;
    }
    /* local: without it, puts from this window are copied to a slot first */
    if (mpccl_config_int("ONESIDED_FROM_WINDOW") != 0 &&
        mpccl_ucx_region_open(w->base, w->size, MPCCL_REGION_DEVICE, (mpccl_ucx_region_t **)&w->local_region) !=
        MPCCL_OK) {
        MPCCL_INFO(MPCCL_SUB_P2P, "rank %d: window #%u: puts from it are copied to a slot first (%s)", comm->rank,
                   w->id, mpccl_last_error());
        w->local_region = NULL;
    }
    return MPCCL_OK;
}

void mpccl_os_rma_win_free(mpccl_os_rma_t *r, struct mpccl_win *w)
{
    /* Kept until the proxy lets go, like the keys: a put still reading the
     * window broke NCCL's rule (no operation in flight on a window at its
     * deregistration), but the proxy may have looked the region up already. */
    if (w->local_region && r) to_grave(r, w->local_region, 1);
    else if (w->local_region) mpccl_ucx_region_close(w->local_region);
    w->local_region = NULL;
    release_keys(r, &w->peer_rkey, &w->peer_addr, &w->peer_keys, &w->mem);
}

int mpccl_os_rma_source(mpccl_os_rma_t *r, const void *src, size_t bytes, uint32_t *win_id, uint64_t *off)
{
    mpccl_win_state_t *ws = r && r->on ? __atomic_load_n(&r->comm->win, __ATOMIC_ACQUIRE) : NULL;
    if (!ws || bytes == 0) return 0;
    int found = 0;
    uintptr_t p = (uintptr_t)src;
    pthread_mutex_lock(&ws->lock);
    for (struct mpccl_win *w = ws->wins; w && !found; w = w->next) {
        uintptr_t b = (uintptr_t)w->base;
        if (!w->local_region || p < b || p - b > w->size || bytes > w->size - (p - b)) continue;
        *win_id = w->id;
        *off = (uint64_t)(p - b);
        found = 1;
    }
    pthread_mutex_unlock(&ws->lock);
    return found;
}

/* A put never unpacks a key: that may be a CUDA call on the proxy thread,
 * which can wait for the very kernels waiting for this put (unpack_all did
 * it at registration). */
static int no_key(int peer, const char *what)
{
    mpccl_fail(MPCCL_ERR_INTERNAL, "one-sided: the remote key of rank %d's %s was not unpacked at registration",
               peer, what);
    return -1;
}

int mpccl_os_rma_target(mpccl_os_rma_t *r, int peer, const void *hdr, uint32_t len, mpccl_proxy_rma_t *out)
{
    const mpccl_os_msg_hdr_t *h = hdr;
    ncclComm_t comm = r->comm;
    mpccl_win_state_t *ws = __atomic_load_n(&comm->win, __ATOMIC_ACQUIRE);
    if (!r->on || !ws)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "one-sided: a GPU-direct put to rank %d without its setup", peer), -1;
    if (len < MPCCL_OS_HDR_BYTES || h->magic != MPCCL_OS_MSG_MAGIC || h->bytes != len - MPCCL_OS_HDR_BYTES)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "one-sided: a malformed piece to rank %d", peer), -1;
    memset(out, 0, sizeof(*out));
    if (h->sig) {
        uint64_t idx = h->sig - 1;
        int n = comm->nranks;
        if (idx >= r->per * (uint64_t)n || (int)(idx % (uint64_t)n) != comm->rank)
            return mpccl_fail(MPCCL_ERR_INTERNAL, "one-sided: signal counter %llu of rank %d is not this rank's",
                              (unsigned long long)idx, peer), -1;
        if (!r->peer_sig_rkey[peer]) return no_key(peer, "signal counters");
        out->sig_rkey = r->peer_sig_rkey[peer];
        out->sig_addr = r->peer_sig_addr[peer] + idx * sizeof(uint64_t);
        out->sig_value = ++r->sent[(size_t)peer * r->per + idx / (uint64_t)n];
    }
    if (h->bytes == 0) return 1;
    int found = 0, from = h->src_win == 0;
    pthread_mutex_lock(&ws->lock); /* against a deregistration (its keys go to the grave) */
    struct mpccl_win *src = NULL, *dst = NULL; /* one pass finds both windows */
    for (struct mpccl_win *w = ws->wins; w && (!dst || (!from && !src)); w = w->next) {
        if (!from && w->id == h->src_win - 1u) src = w;
        if (w->id == h->win_id) dst = w;
    }
    if (src) {
        from = src->local_region && h->src_offset <= src->size && h->bytes <= src->size - h->src_offset ? 1 : -1;
        out->src = (const char *)src->base + h->src_offset;
        out->src_region = src->local_region;
    }
    if (dst && from == 1) {
        found = dst->peer_rkey == NULL ? -1
              : h->offset > dst->peer_size[peer] || h->bytes > dst->peer_size[peer] - h->offset ? -2
              : !dst->peer_rkey[peer] ? -3
              : 1;
        if (found == 1) {
            out->data_rkey = dst->peer_rkey[peer];
            out->data_addr = dst->peer_addr[peer] + h->offset;
            out->data_bytes = h->bytes;
        }
    }
    pthread_mutex_unlock(&ws->lock);
    if (from != 1)
        return mpccl_fail(MPCCL_ERR_USAGE, "one-sided: rank %d put %u bytes from its window #%u at offset %llu, "
                          "which it deregistered before the put left (or which is not that large)",
                          comm->rank, h->bytes, h->src_win - 1u, (unsigned long long)h->src_offset), -1;
    if (found == 1) return 1;
    if (found == -3) return no_key(peer, "window");
    mpccl_fail(MPCCL_ERR_USAGE, "one-sided: rank %d put %u bytes at offset %llu into window #%u of rank %d, %s",
               comm->rank, h->bytes, (unsigned long long)h->offset, h->win_id, peer,
               found == -2 ? "past the end of that rank's window"
                           : "which this rank deregistered before the put left (or never registered)");
    return -1;
}
#endif
