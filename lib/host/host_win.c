/* One-sided operations on host communicators, over UCX RMA (doc/ONESIDED.md).
 * A put is ucp_put_nbx into the peer's window, then ucp_worker_fence, then an
 * atomic add of 1 on the signal counter (ctx, sigIdx, me) in the peer's signal
 * area: the fence makes the data complete at the target before the add
 * begins, and orders it after every earlier operation of this rank, so puts
 * and signals to one peer keep program order.  A flush of the endpoint then
 * makes the call complete at the target before it returns (host communicators
 * have no stream, nor a progress thread: over shared memory UCX emulates RMA
 * with messages that may still need this rank's progress after UCX reported
 * them complete locally); inside a group, at ncclGroupEnd (the group's puts
 * are in flight together). */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm_drain.h"
#include "core/comm_fail.h"
#include "util/clock.h"
#include "util/config.h"
#include "core/group.h"
#include "util/log.h"
#include "host/host_win.h"

static mpccl_status_t unpack_all(ncclComm_t comm, const unsigned char *all, size_t stride, void **rkeys)
{
    for (int r = 0; r < comm->nranks; r++)
        MPCCL_CHECK(mpccl_ucx_rkey_unpack(comm->transport, r, all + (size_t)r * stride + sizeof(uint64_t),
                                          &rkeys[r]));
    return MPCCL_OK;
}

/* Remote keys belong to the worker (UCX keeps small ones in its pools):
 * once ncclCommFinalize closed the transport they went with it. */
static void destroy_rkeys(ncclComm_t comm, void **rkeys)
{
    for (int r = 0; rkeys && comm->transport && r < comm->nranks; r++) mpccl_ucx_rkey_destroy(rkeys[r]);
    free(rkeys);
}

/* Collective: maps [addr, addr+len), exchanges addresses and keys, unpacks
 * every peer's key.  On failure everything local is undone. */
static mpccl_status_t map_and_exchange(ncclComm_t comm, void *addr, size_t len, mpccl_ucx_mem_t *mem,
                                       uint64_t **peer_addr, void ***peer_rkey, const char *what)
{
    int n = comm->nranks;
    unsigned char *all = NULL;
    size_t stride = 0;
    *peer_addr = calloc((size_t)n, sizeof(uint64_t));
    *peer_rkey = calloc((size_t)n, sizeof(void *));
    mpccl_status_t st = (*peer_addr && *peer_rkey) ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", what);
    if (st == MPCCL_OK) st = mpccl_ucx_mem_map(addr, len, mem);
    MPCCL_CHECK_GOTO(mpccl_win_agree(comm, st, what), st, fail);
    (*peer_addr)[comm->rank] = (uint64_t)(uintptr_t)addr;
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&comm->bs, *peer_addr, sizeof(uint64_t)), st, fail);
    MPCCL_CHECK_GOTO(mpccl_win_allgather_blobs(comm, mem->packed, mem->packed_len, &all, &stride), st, fail);
    st = unpack_all(comm, all, stride, *peer_rkey);
    free(all);
    MPCCL_CHECK_GOTO(mpccl_win_agree(comm, st, what), st, fail);
    return MPCCL_OK;
fail:
    destroy_rkeys(comm, *peer_rkey);
    free(*peer_addr);
    *peer_rkey = NULL;
    *peer_addr = NULL;
    mpccl_ucx_mem_unmap(mem);
    return st;
}

mpccl_status_t mpccl_host_sig_setup(ncclComm_t comm, mpccl_win_state_t *ws)
{
    size_t bytes = ws->nsig_words * sizeof(uint64_t);
    ws->sig = calloc(ws->nsig_words, sizeof(uint64_t));
    ws->expected = calloc(ws->nsig_words, sizeof(uint64_t));
    mpccl_status_t st = (ws->sig && ws->expected) ? MPCCL_OK
                                                   : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for signal counters");
    st = mpccl_win_agree(comm, st, "signal area setup");
    if (st == MPCCL_OK)
        st = map_and_exchange(comm, ws->sig, bytes, &ws->sig_mem, &ws->peer_sig_addr, &ws->peer_sig_rkey,
                              "signal area setup");
    if (st != MPCCL_OK) {
        free(ws->sig);
        free(ws->expected);
        ws->sig = ws->expected = NULL;
    }
    return st;
}

void mpccl_host_sig_free(ncclComm_t comm, mpccl_win_state_t *ws)
{
    destroy_rkeys(comm, ws->peer_sig_rkey);
    free(ws->peer_sig_addr);
    mpccl_ucx_mem_unmap(&ws->sig_mem);
    free(ws->sig);
    free(ws->expected);
    ws->peer_sig_rkey = NULL;
    ws->peer_sig_addr = NULL;
    ws->sig = ws->expected = NULL;
}

mpccl_status_t mpccl_host_win_setup(ncclComm_t comm, struct mpccl_win *w)
{
    /* UCX cannot map an empty range; a zero-size window is addressable by no
     * put, so its rank maps one byte of a private word instead. */
    static uint64_t empty;
    void *addr = w->size ? w->base : (void *)&empty;
    return map_and_exchange(comm, addr, w->size ? w->size : 1, &w->mem, &w->peer_addr, &w->peer_rkey,
                            "ncclCommWindowRegister");
}

void mpccl_host_win_free(ncclComm_t comm, struct mpccl_win *w)
{
    destroy_rkeys(comm, w->peer_rkey);
    free(w->peer_addr);
    mpccl_ucx_mem_unmap(&w->mem);
    w->peer_rkey = NULL;
    w->peer_addr = NULL;
}

/* Progresses comm's transport until every request of reqs is done, yielding
 * when idle (oversubscribed ranks); bounded by MPCCL_OP_TIMEOUT, after which
 * the requests are detached (their storage may then go). */
static mpccl_status_t wait_reqs(ncclComm_t comm, mpccl_req_t *reqs, int n)
{
    mpccl_transport_t *t = comm->transport;
    int64_t timeout = mpccl_config_int("OP_TIMEOUT");
    double start = timeout > 0 ? mpccl_now_seconds() : 0;
    unsigned idle = 0;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++)
            if (!__atomic_load_n(&reqs[i].done, __ATOMIC_ACQUIRE)) pending++;
        if (!pending) break;
        if (t->ops->progress(t)) {
            idle = 0;
            continue;
        }
        if (++idle > 16) t->ops->idle(t);
        if (idle > 16 && mpccl_comm_failed_idle(comm)) { /* a peer died or revoked (comm_fail.h) */
            for (int i = 0; i < n; i++) t->ops->cancel(t, &reqs[i]);
            mpccl_comm_send_revoke(comm);
            return mpccl_comm_fail_report(comm, "ncclPutSignal");
        }
        if (timeout > 0 && mpccl_now_seconds() - start > (double)timeout) {
            for (int i = 0; i < n; i++) t->ops->cancel(t, &reqs[i]);
            return mpccl_fail(MPCCL_ERR_REMOTE, "ncclPutSignal: rank %d: a put did not complete within "
                                                "MPCCL_OP_TIMEOUT=%lld s", comm->rank, (long long)timeout);
        }
    }
    for (int i = 0; i < n; i++)
        if (reqs[i].status != MPCCL_OK) return reqs[i].status;
    return MPCCL_OK;
}

/* The requests of one put (data, signal, flush); on the heap while a group
 * keeps it in flight, since UCX writes their completion later. */
typedef struct mpccl_host_put {
    mpccl_req_t reqs[3];
    int n;
    struct mpccl_host_put *next;
} mpccl_host_put_t;

mpccl_status_t mpccl_host_put_signal(ncclComm_t comm, const void *src, size_t bytes, int peer,
                                     struct mpccl_win *w, size_t offset, int sig, int ctx, int defer)
{
    mpccl_win_state_t *ws = comm->win;
    mpccl_transport_t *t = comm->transport;
    mpccl_host_put_t local, *op = &local;
    if (defer && !(op = malloc(sizeof(*op))))
        return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclPutSignal: out of memory for a grouped put");
    memset(op, 0, sizeof(*op));
    mpccl_status_t st = MPCCL_OK;
    if (w && bytes) {
        MPCCL_CHECK_GOTO(t->ops->put(t, peer, src, bytes, w->peer_addr[peer] + offset, w->peer_rkey[peer],
                                     &op->reqs[op->n]),
                         st, fail);
        op->n++;
        MPCCL_CHECK_GOTO(mpccl_ucx_fence(t), st, fail);
    }
    uint64_t addr = ws->peer_sig_addr[peer] + mpccl_sig_index(comm->nranks, ctx, sig, comm->rank) * sizeof(uint64_t);
    MPCCL_CHECK_GOTO(t->ops->atomic_add(t, peer, 1, addr, ws->peer_sig_rkey[peer], &op->reqs[op->n]), st, fail);
    op->n++;
    /* Remote completion over shared memory: nothing of this call may wait
     * in our queues for our next progress.  Not over a network endpoint:
     * its flush needs the target to answer after the flush request arrived,
     * and a target already back in the application (its ncclWaitSignal saw
     * the signal) never would; the put and signal have left once their
     * requests completed, and the fence orders them at the target. */
    if (t->ops->drains && t->ops->drains(t, peer)) {
        MPCCL_CHECK_GOTO(t->ops->flush(t, peer, &op->reqs[op->n]), st, fail);
        op->n++;
    }
    /* No fence after the add: a later put to this peer is preceded by its own
     * fence, and counters only add (their order does not matter). */
    if (!defer) return wait_reqs(comm, op->reqs, op->n);
    /* In a group: in flight together with the group's other puts, completed
     * by mpccl_host_flush at ncclGroupEnd. */
    op->next = ws->host_puts;
    ws->host_puts = op;
    return MPCCL_OK;
fail:
    /* Posted requests must finish before their storage goes away. */
    if (op->n) wait_reqs(comm, op->reqs, op->n);
    if (op != &local) free(op);
    return st;
}

void mpccl_host_drop(ncclComm_t comm)
{
    mpccl_win_state_t *ws = comm->win;
    while (ws->host_puts) {
        mpccl_host_put_t *op = ws->host_puts;
        ws->host_puts = op->next;
        for (int i = 0; i < op->n; i++) comm->transport->ops->cancel(comm->transport, &op->reqs[i]);
        free(op);
    }
}

mpccl_status_t mpccl_host_flush(ncclComm_t comm)
{
    mpccl_win_state_t *ws = comm->win;
    mpccl_status_t st = MPCCL_OK;
    while (ws->host_puts) {
        mpccl_host_put_t *op = ws->host_puts;
        ws->host_puts = op->next;
        mpccl_status_t s = wait_reqs(comm, op->reqs, op->n);
        if (st == MPCCL_OK) st = s;
        free(op);
    }
    return st;
}

mpccl_status_t mpccl_host_wait_signal(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t *descs)
{
    mpccl_win_state_t *ws = comm->win;
    mpccl_transport_t *t = comm->transport;
    int64_t timeout = mpccl_config_int("OP_TIMEOUT");
    double start = timeout > 0 ? mpccl_now_seconds() : 0;
    unsigned idle = 0;
    for (int i = 0; i < ndesc; i++) {
        size_t k = mpccl_sig_index(comm->nranks, descs[i].ctx, descs[i].sigIdx, descs[i].peer);
        uint64_t want = ws->expected[k] + (uint64_t)descs[i].opCnt;
        while (__atomic_load_n(&ws->sig[k], __ATOMIC_ACQUIRE) < want) {
            if (t->ops->progress(t)) {
                idle = 0;
                continue;
            }
            if (++idle > 16) t->ops->idle(t);
            if (idle > 16 && mpccl_comm_failed_idle(comm)) { /* a peer died or revoked (comm_fail.h) */
                mpccl_comm_send_revoke(comm);
                return mpccl_comm_fail_report(comm, "ncclWaitSignal");
            }
            if (timeout > 0 && mpccl_now_seconds() - start > (double)timeout)
                return mpccl_fail(MPCCL_ERR_REMOTE,
                                  "ncclWaitSignal: %llu of %d signals from rank %d (sigIdx %d, ctx %d) arrived "
                                  "within MPCCL_OP_TIMEOUT=%lld s",
                                  (unsigned long long)(__atomic_load_n(&ws->sig[k], __ATOMIC_ACQUIRE) -
                                                       ws->expected[k]),
                                  descs[i].opCnt, descs[i].peer, descs[i].sigIdx, descs[i].ctx, (long long)timeout);
        }
        ws->expected[k] = want;
    }
    /* Emulated atomics owe their origins a completion message: it leaves
     * before this call returns (core/comm_drain.h). */
    unsigned char *from = calloc((size_t)comm->nranks, 1);
    if (from == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclWaitSignal: out of memory for %d peers", comm->nranks);
    for (int i = 0; i < ndesc; i++) from[descs[i].peer] = 1;
    mpccl_status_t st = mpccl_comm_drain(comm, from, "ncclWaitSignal");
    free(from);
    return st;
}

/* ---- the host executor's one-sided hooks (lib/host/host_executor.c) ---- */

/* ncclGroupEnd: completes the host puts the group left in flight. */
static mpccl_status_t run_flush(void *arg)
{
    ncclComm_t comm = arg;
    pthread_mutex_lock(&comm->win->wait_lock);
    comm->win->flush_queued = 0;
    mpccl_status_t st = mpccl_host_flush(comm);
    pthread_mutex_unlock(&comm->win->wait_lock);
    return st;
}

mpccl_status_t mpccl_host_put_signal_call(ncclComm_t comm, const void *src, size_t bytes, int peer,
                                          struct mpccl_win *w, size_t offset, int sig, int ctx, cudaStream_t stream)
{
    (void)stream; /* host communicators have no stream */
    if (mpccl_group_depth() == 0) return mpccl_host_put_signal(comm, src, bytes, peer, w, offset, sig, ctx, 0);
    if (!comm->win->flush_queued) {
        MPCCL_CHECK(mpccl_group_defer_init(run_flush, comm));
        comm->win->flush_queued = 1;
    }
    return mpccl_host_put_signal(comm, src, bytes, peer, w, offset, sig, ctx, 1);
}

mpccl_status_t mpccl_host_wait_signal_call(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t *descs,
                                           cudaStream_t stream)
{
    (void)stream;
    return mpccl_host_wait_signal(comm, ndesc, descs);
}

void mpccl_host_win_stop(ncclComm_t comm)
{
    /* Puts of a group that never ended: detached from their requests, which
     * the transport's close then drops. */
    if (comm->win && comm->transport) mpccl_host_drop(comm);
}

mpccl_status_t mpccl_host_reg_export(ncclComm_t comm, mpccl_reg_t *r)
{
    (void)comm;
    return mpccl_ucx_mem_map(r->base, r->size, &r->mem);
}

void mpccl_host_reg_free(ncclComm_t comm, mpccl_reg_t *r)
{
    /* The UCX mapping goes in mpccl_reg_free, for every executor. */
    (void)comm;
    (void)r;
}
