/* One-sided operations between nodes on GPU communicators (gpu_win_remote.h).
 *
 * Sender: mpccl_os_remote_put launches one kernel on the user's stream that
 * reserves piece numbers for the peer on the device, copies the data into the
 * proxy's slots and raises them; the proxy sends them in piece order.
 *
 * Target: the proxy hands each piece to deliver() below, in piece order per
 * sender.  It finds the window by its ordinal (registration is collective, so
 * ordinals agree across ranks; a put never carries a raw address the target
 * would have to trust), checks the bounds, and enqueues on the delivery
 * stream the copy into the window and the delivered kernel: signal add, then
 * the slot's acknowledgement.  One stream keeps every sender's pieces, and
 * each signal after its data, in order. */
#include "gpu/gpu_win_remote.h"

#ifdef MPCCL_HAVE_CUDA
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/config.h"
#include "cuda/cuda_rt.h"
#include "gpu/gpu_proxy_work.h"
#include "kernels/onesided_remote.h"
#include "util/log.h"
#include "gpu/gpu_win_rma.h"
#include "gpu/gpu_win.h"

struct mpccl_os_remote {
    pthread_mutex_t mu;      /* deliveries against close */
    ncclComm_t comm;
    int rank, nranks, dev;
    int closed;
    cudaStream_t stream;     /* deliveries */
    uint32_t *reserve;       /* device [nranks]: pieces handed out per peer */
    mpccl_dev_link_t *links; /* [nranks] the peers' one-sided channels (kind PROXY when remote) */
    uint32_t nslots, slot_bytes;
    mpccl_os_rma_t *rma;     /* GPU-direct puts (gpu_win_rma.c), when every rank can */
};

/* The proxy thread launches into its own stream while a user thread may be
 * capturing a graph in global mode: relaxed mode keeps those launches legal. */
static void relax_capture_mode(void)
{
    static __thread int done;
    if (done) return;
    enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&m);
    done = 1;
}

static int refuse(int src, uint32_t piece, const char *why)
{
    mpccl_fail(MPCCL_ERR_INTERNAL, "one-sided: piece %u from rank %d cannot be delivered: %s", piece, src, why);
    return -1;
}

static int deliver(void *ctx, int src, uint32_t piece, const void *host, const void *dev, uint32_t len,
                   volatile uint32_t *ack)
{
    mpccl_os_remote_t *r = ctx;
    int took = 0;
    pthread_mutex_lock(&r->mu);
    mpccl_win_state_t *ws = r->closed ? NULL : __atomic_load_n(&r->comm->win, __ATOMIC_ACQUIRE);
    /* A peer may put as soon as its own registration returned, before this
     * rank finished the same collective call: the piece waits. */
    if (ws == NULL || !__atomic_load_n(&ws->sig_ready, __ATOMIC_ACQUIRE)) {
        MPCCL_TRACE(MPCCL_SUB_NET, "one-sided: piece %u from rank %d waits (%s)", piece, src,
                    r->closed ? "closed" : "no signal area yet");
        goto out;
    }
    const mpccl_os_msg_hdr_t *h = host;
    if (len < MPCCL_OS_HDR_BYTES || h->magic != MPCCL_OS_MSG_MAGIC || h->bytes != len - MPCCL_OS_HDR_BYTES) {
        took = refuse(src, piece, "malformed header");
        goto out;
    }
    uint64_t *word = NULL;
    if (h->sig) {
        uint64_t idx = h->sig - 1;
        if (idx >= ws->nsig_words || (int)(idx % (uint64_t)r->nranks) != src) {
            took = refuse(src, piece, "signal counter out of range, or not the sender's");
            goto out;
        }
        word = mpccl_gpu_sig_area(r->comm) + idx;
    }
    char *dst = NULL;
    if (h->bytes) {
        void *base = NULL;
        size_t size = 0;
        int found = mpccl_win_find_id(ws, h->win_id, &base, &size);
        if (found == 0) { /* registered by the sender, not yet here */
            MPCCL_TRACE(MPCCL_SUB_NET, "one-sided: piece %u from rank %d waits for window #%u", piece, src, h->win_id);
            goto out;
        }
        if (found < 0) {
            mpccl_fail(MPCCL_ERR_USAGE, "one-sided: rank %d put into window #%u of rank %d, which rank %d "
                       "deregistered already", src, h->win_id, r->rank, r->rank);
            took = -1;
            goto out;
        }
        if (h->offset > size || h->bytes > size - h->offset) {
            took = refuse(src, piece, "past the end of the window");
            goto out;
        }
        dst = (char *)base + h->offset;
    }
    relax_capture_mode();
    int saved;
    if (mpccl_cuda_push_device(r->dev, &saved) != MPCCL_OK) {
        took = -1;
        goto out;
    }
    mpccl_status_t st = MPCCL_OK;
    uint32_t in_kernel = dst && h->bytes <= MPCCL_OS_DELIVER_KERNEL_BYTES ? h->bytes : 0;
    if (dst && !in_kernel) {
        cudaError_t e = cudaMemcpyAsync(dst, (const char *)host + MPCCL_OS_HDR_BYTES, h->bytes,
                                        cudaMemcpyHostToDevice, r->stream);
        if (e != cudaSuccess) st = mpccl_cuda_error(e, "cudaMemcpyAsync (one-sided delivery)");
    }
    if (st == MPCCL_OK)
        st = mpccl_os_delivered_launch(dst, (const char *)dev + MPCCL_OS_HDR_BYTES, in_kernel, word, ack, piece + 1,
                                       r->stream);
    mpccl_cuda_restore_device(saved);
    took = st == MPCCL_OK ? 1 : -1;
    MPCCL_TRACE(MPCCL_SUB_NET, "one-sided: piece %u from rank %d: %u bytes into window #%u at %llu%s", piece, src,
                h->bytes, h->win_id, (unsigned long long)h->offset, word ? ", signal" : "");
out:
    pthread_mutex_unlock(&r->mu);
    return took;
}

static int rma_target(void *ctx, int peer, const void *hdr, uint32_t len, mpccl_proxy_rma_t *out)
{
    return mpccl_os_rma_target(((mpccl_os_remote_t *)ctx)->rma, peer, hdr, len, out);
}

mpccl_status_t mpccl_os_remote_create(ncclComm_t comm, uint32_t nslots, uint32_t slot_bytes,
                                      mpccl_os_remote_t **out, mpccl_proxy_os_t *os, mpccl_dev_link_t **links)
{
    mpccl_os_remote_t *r = calloc(1, sizeof(*r));
    if (r) r->links = calloc((size_t)comm->nranks, sizeof(*r->links));
    if (!r || !r->links) {
        free(r);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the one-sided channel of %d ranks", comm->nranks);
    }
    pthread_mutex_init(&r->mu, NULL);
    r->comm = comm;
    r->rank = comm->rank;
    r->nranks = comm->nranks;
    r->dev = comm->cuda_dev;
    /* Pieces in flight per peer: a put has no kernel at the target pulling
     * pieces along, each waits for a send and a delivery; more slots than a
     * CTA's keep a large put streaming. */
    int64_t k = mpccl_config_int("PROXY_OS_SLOTS");
    r->nslots = k >= 1 && k <= 256 && (k & (k - 1)) == 0 ? (uint32_t)k : nslots;
    if (r->nslots != (uint32_t)k)
        MPCCL_WARN(MPCCL_SUB_INIT, "MPCCL_PROXY_OS_SLOTS = %lld is not a power of two in 1..256; using %u",
                   (long long)k, r->nslots);
    r->slot_bytes = slot_bytes;
    /* The caller made comm's device current. */
    size_t bytes = (size_t)comm->nranks * sizeof(uint32_t);
    cudaError_t e = cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc((void **)&r->reserve, bytes);
    if (e == cudaSuccess) e = cudaMemsetAsync(r->reserve, 0, bytes, r->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(r->stream);
    mpccl_status_t st = e == cudaSuccess ? mpccl_os_remote_preload() : mpccl_cuda_error(e, "one-sided channel setup");
    if (st == MPCCL_OK) st = mpccl_os_rma_new(comm, &r->rma);
    if (st != MPCCL_OK) {
        mpccl_os_remote_free(r);
        return st;
    }
    os->deliver = deliver;
    os->rma_target = rma_target;
    os->rma_slots = mpccl_os_rma_wanted();
    os->ctx = r;
    os->nslots = r->nslots;
    *links = r->links;
    *out = r;
    return MPCCL_OK;
}

void mpccl_os_remote_close(mpccl_os_remote_t *r, int aborting)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->closed = 1;
    pthread_mutex_unlock(&r->mu);
    /* Copies still queued write into windows and counters about to go; a
     * GPU-direct put kernel still running needs its window until the proxy
     * put its pieces (NCCL's destroy waits for the device too). */
    if (!aborting && r->stream) {
        int saved;
        if (mpccl_cuda_push_device(r->dev, &saved) == MPCCL_OK) {
            cudaError_t e = mpccl_os_rma_on(r->rma) ? cudaDeviceSynchronize() : cudaStreamSynchronize(r->stream);
            if (e != cudaSuccess) (void)cudaGetLastError();
            mpccl_cuda_restore_device(saved);
        }
    }
}

void mpccl_os_remote_free(mpccl_os_remote_t *r)
{
    if (!r) return;
    int saved;
    if (mpccl_cuda_push_device(r->dev, &saved) == MPCCL_OK) {
        if (r->stream) cudaStreamDestroy(r->stream);
        if (r->reserve && !r->comm->aborting) cudaFree(r->reserve);
        (void)cudaGetLastError();
        mpccl_cuda_restore_device(saved);
    }
    mpccl_os_rma_free(r->rma);
    pthread_mutex_destroy(&r->mu);
    free(r->links);
    free(r);
}

mpccl_os_rma_t *mpccl_os_remote_rma(mpccl_os_remote_t *r) { return r ? r->rma : NULL; }

int mpccl_os_remote_reaches(const mpccl_os_remote_t *r, int peer)
{
    return r && peer >= 0 && peer < r->nranks && r->links[peer].kind == MPCCL_LINK_PROXY;
}

mpccl_status_t mpccl_os_remote_put(mpccl_os_remote_t *r, struct mpccl_proxy_work *work, int peer, const void *src,
                                   size_t bytes, uint32_t win_id, size_t offset, uint32_t sig, mpccl_abort_arg_t ab,
                                   cudaStream_t stream)
{
    if (work == NULL) return mpccl_fail(MPCCL_ERR_INTERNAL, "one-sided put to rank %d without the proxy", peer);
    MPCCL_CHECK(mpccl_proxy_error(work->pc));
    mpccl_os_remote_put_t a;
    memset(&a, 0, sizeof(a));
    a.link = r->links[peer];
    a.data = mpccl_os_rma_on(r->rma) ? (char *)r->links[peer].rx_slots : NULL; /* NULL: staged (proxy.h) */
    a.reserve = r->reserve + peer;
    a.nslots = r->nslots;
    a.slot_bytes = r->slot_bytes;
    a.src = src;
    a.bytes = bytes;
    a.offset = offset;
    a.win_id = win_id;
    a.sig = sig;
    uint32_t src_win;
    if (a.data && mpccl_os_rma_source(r->rma, src, bytes, &src_win, &a.src_offset)) a.src_win = src_win + 1u;
    a.peer = peer;
    a.ab = ab; /* the communicator's abort word: a dead peer's slots never free up */
    mpccl_proxy_work_token_t tok;
    mpccl_proxy_work_args_t pa;
    MPCCL_CHECK(mpccl_proxy_work_begin(work, stream, MPCCL_PROXY_WORK_PUT, NULL, 0, &pa, &tok));
    a.proxy_count = pa.count;
    a.proxy_done = pa.done;
    mpccl_status_t st = mpccl_os_remote_put_launch(&a, stream);
    mpccl_status_t e = mpccl_proxy_work_end(work, stream, &tok, st);
    return st != MPCCL_OK ? st : e;
}
#endif
