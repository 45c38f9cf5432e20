/* Windows and one-sided operations on GPU communicators, for peers on this
 * node (doc/ONESIDED.md).  Windows (cudaMalloc or ncclMemAlloc memory) and the
 * signal area are exported to the node's peers (lib/cuda/cuda_ipc.c) at registration, so each rank holds
 * device pointers into its node peers' windows and counters.  A put up to
 * MPCCL_PUT_KERNEL_BYTES is one kernel (up to MPCCL_PUT_CTAS CTAs) that
 * stores into the peer's window and then adds 1 to the peer's counter; a
 * larger one is a peer copy (cudaMemcpyAsync, the copy engines) followed on
 * the same stream by the signal kernel.  A wait is a kernel that spins on this rank's
 * counters.  Peers on other nodes go through the proxy's one-sided channel
 * (gpu_win_remote.c); the wait kernel serves them alike (same counters). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "util/config.h"
#include "cuda/cuda_rt.h"
#include "gpu/gpu_abort.h"
#include "gpu/gpu_launch.h"
#include "cuda/cuda_ipc.h"
#include "kernels/onesided.h"
#include "kernels/onesided_remote.h"
#include "util/log.h"
#include "nccl_device/core.h"
#include "gpu/gpu_win_remote.h"
#include "gpu/gpu_win_rma.h"
#include "gpu/gpu_win.h"

struct mpccl_win_gpu {
    void *area;             /* device: counters [nsig_words] then expected [nsig_words] */
    mpccl_ipc_desc_t *desc; /* [nranks] every rank's area */
    uint64_t **peer_sig;    /* [nranks] counters of reachable peers in this address space, else NULL */
    uint64_t put_kernel_bytes, put_one_cta_bytes, put_cta_bytes; /* MPCCL_PUT_* */
    unsigned put_ctas;
};

struct mpccl_wingpu {
    mpccl_ipc_desc_t *desc; /* [nranks] each rank's window allocation */
    uint64_t *offset;       /* [nranks] window base - allocation base */
    char **peer_base;       /* [nranks] window base of reachable peers, else NULL */
    struct ncclWindow_vidmem *dev; /* device descriptor (the window's handle), then its lsaPtrs */
};

/* Builds the descriptor kernels read through ncclGetLsaPointer and friends:
 * the window of every LSA member as this device sees it. */
static mpccl_status_t upload_descriptor(ncclComm_t comm, struct mpccl_win *w, struct mpccl_wingpu *wg)
{
    int first = comm->lsa_first, n = comm->lsa_size;
    size_t head = (sizeof(struct ncclWindow_vidmem) + 15) & ~(size_t)15;
    size_t bytes = head + (size_t)n * sizeof(char *);
    unsigned char *host = calloc(1, bytes);
    if (!host) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a window descriptor");
    void *dev = NULL;
    int saved;
    mpccl_status_t st = mpccl_cuda_push_device(comm->cuda_dev, &saved);
    if (st != MPCCL_OK) {
        free(host);
        return st;
    }
    cudaStream_t s = NULL;
    cudaError_t e = cudaMalloc(&dev, bytes);
    if (e == cudaSuccess) {
        struct ncclWindow_vidmem *d = (struct ncclWindow_vidmem *)host;
        char **ptrs = (char **)(host + head);
        for (int i = 0; i < n; i++) ptrs[i] = wg->peer_base[first + i];
        d->localPtr = w->base;
        d->size = w->size;
        d->worldRank = comm->rank;
        d->lsaRank = comm->rank - first;
        d->lsaSize = n;
        d->flags = w->flags;
        d->lsaPtrs = (char *const *)((unsigned char *)dev + head);
        d->magic = MPCCL_WIN_MAGIC;
        e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (s) cudaStreamDestroy(s);
    mpccl_cuda_restore_device(saved);
    free(host);
    if (e != cudaSuccess) {
        if (dev) cudaFree(dev);
        return mpccl_cuda_error(e, "window descriptor upload");
    }
    wg->dev = (struct ncclWindow_vidmem *)dev;
    return MPCCL_OK;
}

void *mpccl_gpu_win_lsa_ptr(ncclComm_t comm, struct mpccl_win *w, int i)
{
    if (!w->gpu || i < 0 || i >= comm->lsa_size) return NULL;
    return w->gpu->peer_base[comm->lsa_first + i];
}

int mpccl_gpu_win_sym_peers(ncclComm_t comm, const void *p, size_t bytes, char **peers)
{
    mpccl_win_state_t *ws = comm->win;
    if (!ws || !p || !bytes) return 0;
    int found = 0;
    pthread_mutex_lock(&ws->lock);
    for (struct mpccl_win *w = ws->wins; w && !found; w = w->next) {
        if (!(w->flags & NCCL_WIN_COLL_SYMMETRIC) || !w->gpu) continue;
        const char *b = w->base;
        if ((const char *)p < b) continue;
        size_t off = (size_t)((const char *)p - b);
        if (off > w->size || bytes > w->size - off) continue;
        found = 1;
        for (int r = 0; r < comm->nranks && found; r++) {
            if (r == comm->rank) peers[r] = (char *)p;
            else if (w->gpu->peer_base[r] && w->peer_size[r] >= off + bytes) peers[r] = w->gpu->peer_base[r] + off;
            else found = 0;
        }
    }
    pthread_mutex_unlock(&ws->lock);
    return found;
}

/* Peers this rank's kernels can store into: same node and P2P (or same GPU).
 * A peer the engine reaches through host memory (no P2P, or MPCCL_P2P_DISABLE)
 * is not: one-sided operations go to it through the proxy's channel. */
static mpccl_status_t reachable(ncclComm_t comm, const mpccl_ipc_desc_t *d, int r, int *ok)
{
    *ok = 0;
    if (comm->topo.node_of[r] != comm->topo.node_of[comm->rank] || d[r].host_hash != d[comm->rank].host_hash)
        return MPCCL_OK;
    if (mpccl_gpu_link_kind(comm, r) == MPCCL_LINK_HOST) return MPCCL_OK;
    const char *how = "";
    MPCCL_CHECK(mpccl_ipc_p2p(comm->cuda_dev, d[comm->rank].uuid, d[r].uuid, ok, &how));
    if (!*ok)
        MPCCL_INFO(MPCCL_SUB_P2P, "one-sided: rank %d cannot store into rank %d's GPU (%s)", comm->rank, r, how);
    return MPCCL_OK;
}

/* Collective: exports the allocation holding [base, base + size), gathers
 * every rank's description and opens those of reachable peers.  out[r] is
 * the peer's allocation base in this address space (NULL: unreachable). */
static mpccl_status_t exchange(ncclComm_t comm, void *base, size_t size, mpccl_ipc_desc_t **descs, uint64_t **offs,
                               void ***out)
{
    int n = comm->nranks;
    const mpccl_cu_fns_t *cu = NULL;
    mpccl_ipc_desc_t *d = calloc((size_t)n, sizeof(*d));
    uint64_t *off = calloc((size_t)n, sizeof(*off));
    void **ptr = calloc((size_t)n, sizeof(*ptr));
    mpccl_status_t st = (d && off && ptr) ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for IPC descriptors");
    CUdeviceptr abase = 0;
    size_t asize = 0;
    int saved = -1;
    /* Driver calls act on the current context: the communicator's device. */
    if (st == MPCCL_OK) st = mpccl_cuda_push_device(comm->cuda_dev, &saved);
    if (st == MPCCL_OK) st = mpccl_cu_get(&cu);
    if (st == MPCCL_OK) {
        CUresult r = cu->cuMemGetAddressRange(&abase, &asize, (CUdeviceptr)(uintptr_t)base);
        if (r != CUDA_SUCCESS) st = mpccl_cu_error(r, "cuMemGetAddressRange (window)");
    }
    if (st == MPCCL_OK) {
        st = mpccl_ipc_export((void *)(uintptr_t)abase, asize, &d[comm->rank]);
        if (st != MPCCL_OK) {
            char why[512];
            snprintf(why, sizeof(why), "%s", mpccl_last_error());
            st = mpccl_fail(MPCCL_ERR_ARG,
                            "ncclCommWindowRegister: buff = %p cannot be shared with this node's peers: windows on "
                            "GPU communicators are cudaMalloc or ncclMemAlloc memory of the communicator's device (%s)",
                            base, why);
        }
    }
    off[comm->rank] = (uint64_t)((uintptr_t)base - (uintptr_t)abase);
    (void)size;
    MPCCL_CHECK_GOTO(mpccl_win_agree(comm, st, "GPU window exchange"), st, fail);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&comm->bs, d, sizeof(*d)), st, fail);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&comm->bs, off, sizeof(*off)), st, fail);
    for (int r = 0; r < n && st == MPCCL_OK; r++) {
        int ok = 0;
        st = reachable(comm, d, r, &ok);
        if (st == MPCCL_OK && ok) st = mpccl_ipc_import(&d[r], comm->cuda_dev, &ptr[r]);
    }
    MPCCL_CHECK_GOTO(mpccl_win_agree(comm, st, "GPU window exchange"), st, fail);
    *descs = d;
    *offs = off;
    *out = ptr;
    if (saved >= 0) mpccl_cuda_restore_device(saved);
    return MPCCL_OK;
fail:
    for (int r = 0; ptr && r < n; r++)
        if (ptr[r]) mpccl_ipc_release(&d[r]);
    if (d) mpccl_ipc_unexport(&d[comm->rank]);
    free(d);
    free(off);
    free(ptr);
    if (saved >= 0) mpccl_cuda_restore_device(saved);
    return st;
}

/* Undoes exchange(): closes the peers' regions and ends this rank's export. */
static void unimport(int n, int me, mpccl_ipc_desc_t *d, void **ptr)
{
    for (int r = 0; ptr && r < n; r++)
        if (ptr[r]) mpccl_ipc_release(&d[r]);
    if (d) mpccl_ipc_unexport(&d[me]);
}

static mpccl_os_rma_t *rma_of(ncclComm_t comm) { return mpccl_os_remote_rma(mpccl_gpu_os_remote(comm)); }

mpccl_status_t mpccl_gpu_sig_setup(ncclComm_t comm, mpccl_win_state_t *ws)
{
    struct mpccl_win_gpu *g = calloc(1, sizeof(*g));
    size_t bytes = 2 * ws->nsig_words * sizeof(uint64_t);
    mpccl_status_t st = g ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the GPU signal state");
    /* Peers of this node without P2P are reached through the proxy. */
    if (st == MPCCL_OK) st = mpccl_gpu_onesided_channel(comm);
    int saved = -1;
    if (st == MPCCL_OK) st = mpccl_cuda_push_device(comm->cuda_dev, &saved);
    if (st == MPCCL_OK) {
        /* Zeroed on a private stream and waited for: before any peer can add,
         * without touching the user's streams. */
        cudaStream_t s = NULL;
        cudaError_t e = cudaMalloc(&g->area, bytes);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaMemsetAsync(g->area, 0, bytes, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        if (s) cudaStreamDestroy(s);
        if (e != cudaSuccess) st = mpccl_cuda_error(e, "cudaMalloc/cudaMemsetAsync (signal counters)");
        mpccl_cuda_restore_device(saved);
    }
    st = mpccl_win_agree(comm, st, "signal area setup");
    uint64_t *offs = NULL;
    if (st == MPCCL_OK) st = exchange(comm, g->area, bytes, &g->desc, &offs, (void ***)&g->peer_sig);
    free(offs); /* the area is its own allocation: offsets are 0 */
    /* Peers on other nodes: GPU-direct puts into the counters, where every rank can. */
    if (st == MPCCL_OK) {
        st = mpccl_os_rma_sig_setup(comm, rma_of(comm), mpccl_gpu_proxy(comm), g->area,
                                    ws->nsig_words * sizeof(uint64_t));
        if (st != MPCCL_OK) {
            unimport(comm->nranks, comm->rank, g->desc, (void **)g->peer_sig);
            free(g->desc);
            free(g->peer_sig);
        }
    }
    if (st != MPCCL_OK) {
        if (g && g->area) cudaFree(g->area);
        free(g);
        return st;
    }
    int64_t v = mpccl_config_int("PUT_KERNEL_BYTES");
    g->put_kernel_bytes = v < 0 ? 0 : (uint64_t)v;
    v = mpccl_config_int("PUT_ONE_CTA_BYTES");
    g->put_one_cta_bytes = v < 0 ? 0 : (uint64_t)v;
    v = mpccl_config_int("PUT_CTA_BYTES");
    g->put_cta_bytes = v < 1 ? 1 : (uint64_t)v;
    v = mpccl_config_int("PUT_CTAS");
    g->put_ctas = v < 1 ? 1 : v > 128 ? 128 : (unsigned)v;
    if (mpccl_cuda_push_device(comm->cuda_dev, &saved) == MPCCL_OK) {
        unsigned fit = mpccl_os_put_max_ctas(comm->cuda_dev);
        if (g->put_ctas > fit) g->put_ctas = fit;
        if (mpccl_os_preload() != MPCCL_OK)
            MPCCL_WARN(MPCCL_SUB_INIT, "one-sided kernels not preloaded (%s); a wait could stall on lazy loading", mpccl_last_error());
        mpccl_cuda_restore_device(saved);
    }
    ws->gpu = g;
    return MPCCL_OK;
}

uint64_t *mpccl_gpu_sig_area(ncclComm_t comm)
{
    return comm->win && comm->win->gpu ? (uint64_t *)comm->win->gpu->area : NULL;
}

void mpccl_gpu_sig_free(ncclComm_t comm, mpccl_win_state_t *ws)
{
    struct mpccl_win_gpu *g = ws->gpu;
    if (!g) return;
    mpccl_os_rma_sig_free(rma_of(comm));
    unimport(comm->nranks, comm->rank, g->desc, (void **)g->peer_sig);
    /* Work still queued on user streams may touch the area: destroy waits
     * for the device as NCCL's does (no user stream is synchronised). */
    if (g->area && !comm->aborting) {
        cudaError_t e = cudaFree(g->area);
        if (e != cudaSuccess) (void)cudaGetLastError();
    }
    free(g->desc);
    free(g->peer_sig);
    free(g);
    ws->gpu = NULL;
}

mpccl_status_t mpccl_gpu_win_setup(ncclComm_t comm, struct mpccl_win *w)
{
    struct mpccl_wingpu *wg = calloc(1, sizeof(*wg));
    mpccl_status_t st = wg ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a GPU window");
    if (st == MPCCL_OK && w->size) st = mpccl_check_gpu_buffer("ncclCommWindowRegister", "buff", w->base, w->size, comm->cuda_dev);
    if (st == MPCCL_OK && w->size) {
        int kind = -1;
        st = mpccl_mem_kind(w->base, comm->cuda_dev, &kind);
        if (st == MPCCL_OK && kind != MPCCL_MEM_DEVICE)
            st = mpccl_fail(MPCCL_ERR_ARG,
                            "ncclCommWindowRegister: buff = %p is %s memory; windows on GPU communicators are device "
                            "memory of the communicator's device",
                            w->base, mpccl_mem_kind_name(kind));
    }
    st = mpccl_win_agree(comm, st, "ncclCommWindowRegister");
    /* Every rank exports an allocation: a zero-size window has none. */
    for (int r = 0; st == MPCCL_OK && r < comm->nranks; r++)
        if (w->peer_size[r] == 0)
            st = mpccl_fail(MPCCL_ERR_ARG,
                            "ncclCommWindowRegister: rank %d registered size 0; windows on GPU communicators need "
                            "memory on every rank",
                            r);
    if (st == MPCCL_OK) st = exchange(comm, w->base, w->size, &wg->desc, &wg->offset, (void ***)&wg->peer_base);
    if (st != MPCCL_OK) {
        free(wg);
        return st;
    }
    for (int r = 0; r < comm->nranks; r++)
        if (wg->peer_base[r]) wg->peer_base[r] += wg->offset[r];
    w->gpu = wg;
    st = mpccl_win_agree(comm, upload_descriptor(comm, w, wg), "window descriptor");
    if (st != MPCCL_OK) {
        mpccl_gpu_win_free(comm, w);
        return st;
    }
    if (mpccl_os_rma_on(rma_of(comm))) { /* the same on every rank */
        st = mpccl_os_rma_win_setup(rma_of(comm), w);
        if (st != MPCCL_OK) {
            mpccl_gpu_win_free(comm, w);
            return st;
        }
    }
    w->handle = (ncclWindow_t)wg->dev;
    return MPCCL_OK;
}

void mpccl_gpu_win_free(ncclComm_t comm, struct mpccl_win *w)
{
    struct mpccl_wingpu *wg = w->gpu;
    if (!wg) return;
    if (w->peer_rkey || w->peer_keys || w->mem.memh) mpccl_os_rma_win_free(rma_of(comm), w);
    for (int r = 0; r < comm->nranks; r++)
        if (wg->peer_base[r]) wg->peer_base[r] -= wg->offset[r];
    unimport(comm->nranks, comm->rank, wg->desc, (void **)wg->peer_base);
    if (wg->dev && !comm->aborting) {
        cudaError_t e = cudaFree(wg->dev);
        if (e != cudaSuccess) (void)cudaGetLastError();
    }
    free(wg->desc);
    free(wg->offset);
    free(wg->peer_base);
    free(wg);
    w->gpu = NULL;
}

/* *remote = 1: peer is reached through the proxy's one-sided channel (another
 * node, or this node without P2P). */
static mpccl_status_t check_peer_reachable(ncclComm_t comm, int peer, const char *fn, int *remote)
{
    struct mpccl_win_gpu *g = comm->win->gpu;
    *remote = 0;
    if (g->peer_sig[peer]) return MPCCL_OK;
    if (mpccl_os_remote_reaches(mpccl_gpu_os_remote(comm), peer)) {
        *remote = 1;
        return MPCCL_OK;
    }
    if (comm->topo.node_of[peer] != comm->topo.node_of[comm->rank])
        return mpccl_fail(MPCCL_ERR_INTERNAL, "%s: peer = %d is on another node and this communicator has no "
                          "one-sided channel to it", fn, peer);
    return mpccl_fail(MPCCL_ERR_USAGE,
                      "%s: peer = %d is on this node but its GPU is not reachable by peer-to-peer stores from "
                      "device %d, and the communicator's engine has no host-memory link to it either",
                      fn, peer, comm->cuda_dev);
}

/* CTAs of the put kernel for a put of bytes (0: the copy engines).  One CTA
 * while its copy takes less than the grid barrier that more would need: up to
 * 64 KB it moves them in ~0.5 us on one GPU and ~1.7 us over NVLink, the
 * barrier costs ~1 us (doc/PERFORMANCE.md, 2026-11-25 put kernel). */
static unsigned put_kernel_ctas(const struct mpccl_win_gpu *g, size_t bytes)
{
    if (bytes == 0 || bytes > g->put_kernel_bytes) return 0;
    if (bytes <= g->put_one_cta_bytes) return 1;
    uint64_t n = (bytes + g->put_cta_bytes - 1) / g->put_cta_bytes;
    return n < g->put_ctas ? (unsigned)n : g->put_ctas;
}

mpccl_status_t mpccl_gpu_put_signal(ncclComm_t comm, const void *src, size_t bytes, int peer,
                                    struct mpccl_win *w, size_t offset, int sig, int ctx,
                                    cudaStream_t stream)
{
    static const char fn[] = "ncclPutSignal";
    int remote;
    MPCCL_CHECK(check_peer_reachable(comm, peer, w ? fn : "ncclSignal", &remote));
    if (bytes) MPCCL_CHECK(mpccl_check_gpu_buffer(fn, "localbuff", src, bytes, comm->cuda_dev));
    int saved;
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    mpccl_status_t st = MPCCL_OK;
    struct mpccl_win_gpu *g = comm->win->gpu;
    size_t idx = mpccl_sig_index(comm->nranks, ctx, sig, comm->rank);
    unsigned nctas = w && !remote ? put_kernel_ctas(g, bytes) : 0;
    uint64_t *word = remote ? NULL : g->peer_sig[peer] + idx;
    if (remote) {
        st = mpccl_os_remote_put(mpccl_gpu_os_remote(comm), mpccl_gpu_proxy_work(comm), peer, src, bytes,
                                 w ? w->id : MPCCL_OS_NO_WIN, offset, (uint32_t)idx + 1,
                                 mpccl_gpu_abort_arg(mpccl_gpu_abort_ctl(comm)), stream);
    } else if (nctas) {
        /* One launch stores the data and signals. */
        st = mpccl_os_put_signal_launch(w->gpu->peer_base[peer] + offset, src, bytes, word, nctas, stream);
    } else {
        if (w && bytes) {
            cudaError_t e = cudaMemcpyAsync(w->gpu->peer_base[peer] + offset, src, bytes, cudaMemcpyDefault, stream);
            if (e != cudaSuccess) st = mpccl_cuda_error(e, "cudaMemcpyAsync (put into a peer's window)");
        }
        if (st == MPCCL_OK) st = mpccl_os_signal_launch(word, stream);
    }
    mpccl_cuda_restore_device(saved);
    return st;
}

mpccl_status_t mpccl_gpu_wait_signal(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t *descs,
                                     cudaStream_t stream)
{
    struct mpccl_win_gpu *g = comm->win->gpu;
    for (int i = 0; i < ndesc; i++) {
        int remote;
        MPCCL_CHECK(check_peer_reachable(comm, descs[i].peer, "ncclWaitSignal", &remote));
        /* A channel that failed delivers nothing more: do not wait for it forever. */
        if (remote) MPCCL_CHECK(mpccl_proxy_error(mpccl_gpu_proxy(comm)));
    }
    mpccl_os_wait_args_t a;
    memset(&a, 0, sizeof(a));
    a.sig = g->peer_sig[comm->rank];
    a.expected = a.sig + comm->win->nsig_words;
    a.ab = mpccl_gpu_abort_arg(mpccl_gpu_abort_ctl(comm));
    int saved;
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    mpccl_status_t st = MPCCL_OK;
    for (int i = 0; i < ndesc && st == MPCCL_OK; i++) {
        a.idx[a.n] = (uint32_t)mpccl_sig_index(comm->nranks, descs[i].ctx, descs[i].sigIdx, descs[i].peer);
        a.cnt[a.n] = (uint32_t)descs[i].opCnt;
        a.peer[a.n] = descs[i].peer;
        if (++a.n == MPCCL_OS_WAIT_MAX || i == ndesc - 1) {
            st = mpccl_os_wait_launch(&a, stream);
            a.n = 0;
        }
    }
    mpccl_cuda_restore_device(saved);
    return st;
}


void mpccl_gpu_win_stop(ncclComm_t comm)
{
    mpccl_os_remote_close(mpccl_gpu_os_remote(comm), comm->aborting);
}
