/* The GPU proxy (see proxy.h): moves pieces between host staging slots
 * shared with the device engine and the transport, one pass over one
 * communicator's lane at a time (the threads: proxy_thread.c).  Compiles
 * without CUDA: the staging memory comes from the caller's allocator. */
#define _GNU_SOURCE
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "proxy/proxy_impl.h"
#include "proxy/proxy_wake.h"

#ifndef MPCCL_REQ_HAS_BYTES
#error "the proxy needs the received length of each piece (mpccl_req_t.bytes) for rx_word"
#endif

/* ---- serving one communicator (proxy thread only) ---- */

/* Launches of kind k posted and not yet done (lane 0 counts those posted). */
static int32_t unfinished(const mpccl_proxy_comm_t *pc, int k)
{
    const mpccl_proxy_comm_t *lead = pc->lead ? pc->lead : pc;
    return (int32_t)(__atomic_load_n(&lead->posted[k], __ATOMIC_SEQ_CST) - *pc->done[k]);
}

/* Pieces posted to channel g of pe that this lane has not yet sent, or not
 * yet received and handed to the kernel; none once the communicator's
 * kernels were stopped (they will move no more). */
static int chan_due(const mpccl_proxy_comm_t *pc, const proxy_peer_t *pe, uint32_t g)
{
    if (pc->stop && __atomic_load_n(pc->stop, __ATOMIC_RELAXED)) return 0;
    const proxy_chan_t *c = &pe->chan[g];
    return (int32_t)(__atomic_load_n(&c->tx_due, __ATOMIC_ACQUIRE) - c->tx_next) > 0 ||
           (int32_t)(__atomic_load_n(&c->rx_due, __ATOMIC_ACQUIRE) - c->rx_pub) > 0 ||
           (int32_t)(__atomic_load_n(&c->whole_due[0], __ATOMIC_ACQUIRE) - c->whole_fin[0]) > 0 ||
           (int32_t)(__atomic_load_n(&c->whole_due[1], __ATOMIC_ACQUIRE) - c->whole_fin[1]) > 0;
}

/* Nothing posted is unfinished on this lane: no launch of a kind that counts
 * itself done, no piece of an engine launch on a channel the lane serves. */
static int idle(const mpccl_proxy_comm_t *pc)
{
    for (int k = 0; k < MPCCL_PROXY_WORK_KINDS; k++)
        if (unfinished(pc, k) > 0) return 0;
    for (int k = 0; k < pc->npeers; k++)
        for (uint32_t g = pc->peers[k].first_chan; g < pc->nctas; g++)
            if (chan_served(pc, g) && chan_due(pc, &pc->peers[k], g)) return 0;
    return 1;
}

/* The first failure stops the communicator: its kernel gets no further acks or
 * pieces, and mpccl_proxy_error reports it.  A pre-posted receive whose
 * connection fails while nothing is in flight is most often a peer that
 * destroyed its communicator first (its endpoints close and reset ours):
 * nothing waits for it, so serve_rx passes quiet: logged at INFO, and
 * whatever next uses the communicator gets the error (with this message as
 * ncclGetLastError's). */
static int fail_as(mpccl_proxy_comm_t *pc, mpccl_status_t st, const char *what, uint32_t piece, uint32_t g,
                   int peer, int quiet)
{
    if (pc->failed) return 0;
    pc->failed = 1;
    char chan[32], msg[256];
    if (g < pc->nctas) snprintf(chan, sizeof(chan), "CTA %u", g);
    else snprintf(chan, sizeof(chan), "the one-sided channel");
    snprintf(msg, sizeof(msg), "proxy: rank %d: %s piece %u of %s with rank %d failed (%s)%s; "
             "the proxy stops serving this communicator", pc->rank, what, piece, chan, peer, mpccl_status_name(st),
             quiet ? " while nothing was in flight (the peer destroyed its communicator, or died)" : "");
    if (quiet) {
        MPCCL_INFO(MPCCL_SUB_NET, "%s", msg);
        mpccl_record_error(msg);
    } else {
        mpccl_fail(st, "%s", msg);
    }
    memcpy(pc->error_msg, msg, sizeof(msg));
    __atomic_store_n(&pc->error, st, __ATOMIC_RELEASE);
    return 1;
}

int mpccl_proxy_fail(mpccl_proxy_comm_t *pc, mpccl_status_t st, const char *what, uint32_t piece, uint32_t g,
                     int peer)
{
    return fail_as(pc, st, what, piece, g, peer, 0);
}



/* Where channel g's slot s lies (rx = 1: receive side), as the transport sees it. */
static char *slot_ptr(const mpccl_proxy_comm_t *pc, const proxy_peer_t *pe, int rx, uint32_t g, uint32_t s)
{
    if (g < pc->nctas) return (rx ? pe->cta_rx : pe->cta_tx) + ((size_t)g * pc->nslots + s) * pc->slot_bytes;
    return (rx ? pe->os_rx : pe->os_tx) + (size_t)s * pc->slot_bytes;
}

/* The tag's g field of channel c. */
static uint32_t chan_tag_g(const mpccl_proxy_comm_t *pc, uint32_t c)
{
    return c < pc->nctas ? c : MPCCL_PROXY_OS_G;
}

/* The region channel g's slots lie in (NULL: the transport has none). */
static void *chan_region(const mpccl_proxy_comm_t *pc, uint32_t g)
{
    return g < pc->nctas && pc->slots ? pc->slots_region : pc->stage_region;
}

/* A send or receive on channel g's slot, through the slots' region where there
 * is one: no memory detection by the transport on this thread. */
static mpccl_status_t slot_send(mpccl_proxy_comm_t *pc, int peer, uint32_t g, uint64_t tag, const void *buf,
                                size_t bytes, mpccl_req_t *req)
{
    return proxy_isend(pc, chan_region(pc, g), peer, tag, buf, bytes, req);
}

static mpccl_status_t slot_recv(mpccl_proxy_comm_t *pc, int peer, uint32_t g, uint64_t tag, void *buf,
                                size_t bytes, mpccl_req_t *req)
{
    return proxy_irecv(pc, chan_region(pc, g), peer, tag, buf, bytes, req);
}

/* Piece p of pe's channel g (slot index i) as the kernel raised it: 1 with
 * its length once all of it is in the staging, else 0.  The one-sided
 * channel's kernel fences a piece before ready / len; the CTAs' raise it in
 * one word (devplan.h), fenced, or as LL lines whose flags tell when each
 * line is here.  -1: an LL piece the proxy cannot read (device slots). */
static int tx_piece(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g, size_t i, uint32_t p, uint32_t *len)
{
    if (g == pc->nctas) {
        if (pe->tx_ready[i] != p + 1) return 0;
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* len and data after ready */
        *len = pe->tx_len[i];
        return 1;
    }
    uint64_t w = __atomic_load_n(&pe->tx_word[i], __ATOMIC_ACQUIRE);
    if ((uint32_t)w != p + 1) return 0;
    uint32_t hi = (uint32_t)(w >> 32);
    *len = hi & ~MPCCL_PROXY_LL_BIT;
    if (!(hi & MPCCL_PROXY_LL_BIT)) return 1;
    if (pc->slots || *len % 16 || *len > 2 * MPCCL_PROXY_LL_MAX) return -1;
    const volatile uint32_t *line = (const volatile uint32_t *)slot_ptr(pc, pe, 0, g, p % pc->nslots);
    uint32_t f = MPCCL_PROXY_LL_FLAG(p);
    for (uint32_t k = 0; k < *len / 4; k += 4)
        if (line[k + 1] != f || line[k + 3] != f) return 0; /* a line still on its way */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return 1;
}

/* After piece p of channel g was sent from staging: its first bytes (where LL
 * lines go) back to zero before the kernel may refill the slot, so that no
 * word of an earlier piece can pass for an LL flag. */
static void tx_clear(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g, size_t i, uint32_t p)
{
    uint32_t ll = __atomic_load_n(&pc->ll_bytes, __ATOMIC_RELAXED);
    if (g >= pc->nctas || pc->slots || ll == 0) return;
    uint32_t len = (uint32_t)(__atomic_load_n(&pe->tx_word[i], __ATOMIC_RELAXED) >> 32) & ~MPCCL_PROXY_LL_BIT;
    uint32_t span = 16u * MPCCL_PROXY_LL_LINES(ll);
    memset(slot_ptr(pc, pe, 0, g, p % pc->nslots), 0, len < span ? len : span);
}

static int post_recv(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g, uint32_t p)
{
    uint32_t s = p % chan_slots(pc, g);
    size_t i = peer_slot(pc, pe, g, s);
    pe->rx_req[i].ahead = 1; /* no launch may need it yet: a failure alone is not a warning */
    mpccl_status_t st = slot_recv(pc, pe->rank, g, mpccl_proxy_tag(pe->rank, chan_tag_g(pc, g), p),
                                  slot_ptr(pc, pe, 1, g, s), pc->slot_bytes, &pe->rx_req[i]);
    if (st != MPCCL_OK) return mpccl_proxy_fail(pc, st, "posting the receive of", p, g, pe->rank), -1;
    return 0;
}

static int start(mpccl_proxy_comm_t *pc)
{
    pc->started = 1;
    for (int k = 0; k < pc->npeers; k++)
        for (uint32_t g = pc->peers[k].first_chan; g < pc->nchan; g++) {
            if (!chan_served(pc, g)) continue;
            proxy_chan_t *c = &pc->peers[k].chan[g];
            for (uint32_t p = 0; p < chan_slots(pc, g); p++)
                if (post_recv(pc, &pc->peers[k], g, p) < 0) return 1;
            c->rx_posted = chan_slots(pc, g);
        }
    return 1;
}

/* Sends the pieces the kernel raised; acknowledges completed sends in order
 * (the kernel reuses slot p % nslots once tx_ack > p). */
static int serve_tx(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g)
{
    proxy_chan_t *c = &pe->chan[g];
    uint32_t K = chan_slots(pc, g);
    int act = 0;
    while (c->tx_next - c->tx_done < K) {
        uint32_t p = c->tx_next;
        size_t i = peer_slot(pc, pe, g, p % K);
        uint32_t len = 0;
        int here = tx_piece(pc, pe, g, i, p, &len);
        if (here == 0) break;
        if (here < 0)
            return mpccl_proxy_fail(pc, MPCCL_ERR_INTERNAL, "sending (an LL piece the proxy cannot read)", p, g,
                                    pe->rank);
        if (len > pc->slot_bytes)
            return mpccl_proxy_fail(pc, MPCCL_ERR_INTERNAL, "sending (the kernel gave a length over the slot size)",
                        p, g, pe->rank);
        mpccl_status_t st = slot_send(pc, pe->rank, g, mpccl_proxy_tag(pc->rank, chan_tag_g(pc, g), p),
                                      slot_ptr(pc, pe, 0, g, p % K), len, &pe->tx_req[i]);
        if (st != MPCCL_OK) return mpccl_proxy_fail(pc, st, "sending", p, g, pe->rank);
        MPCCL_TRACE(MPCCL_SUB_NET, "proxy: rank %d: piece %u of channel %u (%u bytes) to rank %d posted", pc->rank, p,
                    g, len, pe->rank);
        c->tx_next++;
        act++;
    }
    uint32_t done = c->tx_done;
    while (done != c->tx_next) {
        mpccl_req_t *r = &pe->tx_req[peer_slot(pc, pe, g, done % K)];
        if (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) break;
        if (r->status != MPCCL_OK) return mpccl_proxy_fail(pc, r->status, "sending", done, g, pe->rank);
        MPCCL_TRACE(MPCCL_SUB_NET, "proxy: rank %d: piece %u of channel %u to rank %d sent", pc->rank, done, g,
                    pe->rank);
        tx_clear(pc, pe, g, peer_slot(pc, pe, g, done % K), done);
        done++;
    }
    return act + publish_tx_ack(pe, g, done);
}

/* Hands completed receives to the kernel in order and re-posts a slot once the
 * kernel consumed the piece that used it. */
static int serve_rx(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g)
{
    proxy_chan_t *c = &pe->chan[g];
    uint32_t K = chan_slots(pc, g);
    int act = 0;
    while (c->rx_pub != c->rx_posted) {
        uint32_t p = c->rx_pub;
        size_t i = peer_slot(pc, pe, g, p % K);
        mpccl_req_t *r = &pe->rx_req[i];
        if (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) break;
        if (r->status != MPCCL_OK) /* a reset of a receive posted ahead while idle: see fail_as */
            return fail_as(pc, r->status, "receiving", p, g, pe->rank,
                           r->ahead && r->status == MPCCL_ERR_REMOTE && idle(pc));
        MPCCL_TRACE(MPCCL_SUB_NET, "proxy: rank %d: piece %u of channel %u (%zu bytes) from rank %d arrived", pc->rank,
                    p, g, r->bytes, pe->rank);
        if (g == pc->nctas) { /* the one-sided channel: the host hands the piece over */
            size_t off = (size_t)(p % K) * pc->slot_bytes;
            int took = pc->os.deliver(pc->os.ctx, pe->rank, p, pe->os_rx + off, pe->os_rx_dev + off,
                                      (uint32_t)r->bytes, pe->rx_ack_dev + peer_chan(pe, g));
            if (took < 0) return mpccl_proxy_fail(pc, MPCCL_ERR_INTERNAL, "delivering", p, g, pe->rank);
            if (took == 0) break;
            c->rx_pub++;
            act++;
            continue;
        }
        if (pc->slots && pc->alloc.flush && !pc->flushed) { /* one flush covers every receive done so far */
            pc->alloc.flush(pc->alloc.ctx);
            pc->flushed = 1;
        }
        /* ready and length in one aligned 64-bit store: the kernel reads
         * both with one load over PCIe */
        __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the data before the word */
        __atomic_store_n(&pe->rx_word[i], ((uint64_t)r->bytes << 32) | (uint64_t)(p + 1), __ATOMIC_RELAXED);
        c->rx_pub++;
        act++;
    }
    uint32_t ack = pe->rx_ack[peer_chan(pe, g)];
    /* Piece q reuses the slot of q - K, free once ack >= q - K + 1. */
    while (c->rx_posted - c->rx_pub < K && (int32_t)(ack - (c->rx_posted - K + 1)) >= 0) {
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the kernel's reads of the slot came before its ack */
        if (post_recv(pc, pe, g, c->rx_posted) < 0) return 1;
        c->rx_posted++;
        act++;
    }
    return act;
}

/* Whether channel g of pe is the one-sided one carried as GPU-direct puts. */
static int os_rma_chan(mpccl_proxy_comm_t *pc, const proxy_peer_t *pe, uint32_t g)
{
    return g == pc->nctas && pe->os_tx_dev && __atomic_load_n(&pc->os_rma, __ATOMIC_ACQUIRE);
}

int mpccl_proxy_serve(mpccl_proxy_comm_t *pc)
{
    if (pc->failed) return 0;
    if (pc->slots && pc->alloc.bind) pc->alloc.bind(pc->alloc.ctx);
    pc->flushed = 0; /* completions come from progress below */
    int act = pc->started ? 0 : start(pc);
    if (pc->t->ops->progress(pc->t) > 0) act++;
    for (int k = 0; k < pc->npeers && !pc->failed; k++)
        for (uint32_t g = pc->peers[k].first_chan; g < pc->nchan && !pc->failed; g++) {
            if (!chan_served(pc, g)) continue;
            act += os_rma_chan(pc, &pc->peers[k], g) ? mpccl_proxy_serve_os_rma(pc, &pc->peers[k])
                                                     : serve_tx(pc, &pc->peers[k], g);
            act += serve_rx(pc, &pc->peers[k], g);
            if (pc->peers[k].whole && g < pc->nctas) act += mpccl_proxy_serve_whole(pc, &pc->peers[k], g);
        }
    return act;
}

/* ---- detaching (proxy thread side) ---- */

/* Requests of pc still in flight: sends in [tx_done, tx_next), receives in
 * [rx_pub, rx_posted) that are not done; cancel = 1 cancels them too. */
static int in_flight(mpccl_proxy_comm_t *pc, int sends, int cancel)
{
    int n = 0;
    for (int k = 0; k < pc->npeers; k++)
        for (uint32_t g = pc->peers[k].first_chan; g < pc->nchan; g++) {
            if (!chan_served(pc, g)) continue;
            proxy_peer_t *pe = &pc->peers[k];
            proxy_chan_t *c = &pe->chan[g];
            uint32_t first = sends ? c->tx_done : c->rx_pub, end = sends ? c->tx_next : c->rx_posted;
            uint32_t K = chan_slots(pc, g);
            for (uint32_t p = first; p != end; p++) {
                mpccl_req_t *r = (sends ? pe->tx_req : pe->rx_req) + peer_slot(pc, pe, g, p % K);
                if (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) continue;
                if (cancel) pc->t->ops->cancel(pc->t, r);
                n++;
            }
            if (sends && os_rma_chan(pc, pe, g)) n += mpccl_proxy_os_rma_pending(pc, pe, cancel);
            if (pe->whole && g < pc->nctas) n += mpccl_proxy_whole_in_flight(pc, pe, g, sends, cancel);
        }
    return n;
}

/* Non-blocking, called once per pass: flush (bounded) drains the sends first;
 * then every receive is cancelled; memory a request still holds is leaked. */
int mpccl_proxy_detach_step(mpccl_proxy_comm_t *pc, int mode)
{
    mpccl_transport_t *t = pc->t;
    if (pc->slots && pc->alloc.bind) pc->alloc.bind(pc->alloc.ctx);
    if (!pc->started) {
        mpccl_proxy_thread_leave(pc);
        return 1;
    }
    if (pc->detach_phase == 0) {
        int64_t ms = mode == DETACH_FORCE ? 0 : mpccl_config_int("UCX_CLOSE_TIMEOUT");
        pc->deadline = mpccl_now_ns() + ms * 1000000;
        pc->detach_phase = 1;
    }
    if (pc->detach_phase == 1) {
        /* Pieces the device raised are sent too: a one-sided put is complete
         * on its stream once its data is staged, before the proxy sent it. */
        for (int k = 0; mode != DETACH_FORCE && k < pc->npeers && !pc->failed; k++)
            for (uint32_t g = pc->peers[k].first_chan; g < pc->nchan && !pc->failed; g++)
                if (!chan_served(pc, g)) continue;
                else if (os_rma_chan(pc, &pc->peers[k], g)) mpccl_proxy_serve_os_rma(pc, &pc->peers[k]);
                else serve_tx(pc, &pc->peers[k], g);
        t->ops->progress(t);
        if (in_flight(pc, 1, 0) > 0 && mpccl_now_ns() < pc->deadline) return 1;
        /* A cancelled send is detached from us, but UCX may still read the slot. */
        if (in_flight(pc, 1, 1) > 0) {
            pc->leak = 1;
            MPCCL_INFO(MPCCL_SUB_NET, "proxy: rank %d: detached with sends in flight; their staging "
                       "stays allocated", pc->rank);
        }
        in_flight(pc, 0, 1);
        pc->detach_phase = 2;
    }
    t->ops->progress(t);
    int pending = in_flight(pc, 0, 0);
    if (pending > 0 && mpccl_now_ns() < pc->deadline) return 1;
    if (pending > 0) {
        /* Matched receives UCX would not cancel: it will write into the slots
         * and the requests, so neither may be freed. */
        pc->leak = 2;
        MPCCL_INFO(MPCCL_SUB_NET, "proxy: rank %d: %d receives still in flight at detach; their "
                   "staging stays allocated", pc->rank, pending);
    }
    mpccl_proxy_thread_leave(pc);
    return 1;
}

/* ---- what the lane's thread asks ---- */

/* Whether pc needs the thread awake: work posted and unfinished, sends in
 * flight or raised, pieces handed over but not yet acknowledged on the
 * one-sided channel (its acks come from delivery kernels), receives to
 * re-post.  Pieces waiting for a kernel not yet launched need nothing: that
 * launch posts work. */
int mpccl_proxy_has_work(mpccl_proxy_comm_t *pc)
{
    if (__atomic_load_n(&pc->detach_req, __ATOMIC_SEQ_CST) != DETACH_NONE) return 1;
    if (__atomic_load_n(&pc->call_fn, __ATOMIC_SEQ_CST) && !pc->call_done) return 1;
    if (pc->failed) return 0;
    if (!pc->started) return 1;
    /* Launches posted and not done, one of which uses this lane (lane 0:
     * every launch); the counts of launches done cover every lane's. */
    for (int k = 0; k < MPCCL_PROXY_WORK_KINDS; k++)
        if (unfinished(pc, k) > 0 &&
            (pc->lane == 0 || (int32_t)(__atomic_load_n(&pc->needed[k], __ATOMIC_SEQ_CST) - *pc->done[k]) > 0))
            return 1;
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the put kernels' flags after their done count */
    for (int k = 0; k < pc->npeers; k++)
        for (uint32_t g = pc->peers[k].first_chan; g < pc->nchan; g++) {
            if (!chan_served(pc, g)) continue;
            proxy_peer_t *pe = &pc->peers[k];
            proxy_chan_t *c = &pe->chan[g];
            uint32_t K = chan_slots(pc, g), ack = pe->rx_ack[peer_chan(pe, g)];
            size_t next = peer_slot(pc, pe, g, c->tx_next % K);
            uint32_t raised = g < pc->nctas ? (uint32_t)pe->tx_word[next] : pe->tx_ready[next];
            if (c->tx_next != c->tx_done || raised == c->tx_next + 1) return 1;
            if (g < pc->nctas && chan_due(pc, pe, g)) return 1;
            if (pe->whole && g < pc->nctas && mpccl_proxy_whole_busy(pc, pe, g)) return 1;
            if (pe->rx_req[peer_slot(pc, pe, g, c->rx_pub % K)].done && c->rx_pub != c->rx_posted) return 1;
            if (g == pc->nctas && c->rx_posted - c->rx_pub != K) return 1;
            if (c->rx_posted - c->rx_pub < K && (int32_t)(ack - (c->rx_posted - K + 1)) >= 0) return 1;
        }
    return 0;
}

/* ---- attach / detach (user threads) ---- */

static mpccl_status_t check_args(mpccl_transport_t *t, int rank, int nranks, const uint8_t *is_remote,
                                 uint32_t nctas, uint32_t nslots, uint32_t slot_bytes,
                                 const mpccl_proxy_alloc_t *alloc, mpccl_dev_link_t *links,
                                 mpccl_proxy_comm_t **out)
{
    if (t == NULL || out == NULL || is_remote == NULL || links == NULL)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: transport, is_remote, links and out must "
                          "not be NULL");
    if (alloc == NULL || alloc->alloc == NULL || alloc->free == NULL)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: allocator with alloc and free expected");
    if ((alloc->alloc_slots == NULL) != (alloc->free_slots == NULL))
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: alloc_slots and free_slots come together");
    if (nranks < 1 || rank < 0 || rank >= nranks || nranks != t->nranks || rank != t->rank)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: rank %d of %d does not match the "
                          "transport (rank %d of %d)", rank, nranks, t->rank, t->nranks);
    if (nctas < 1 || nctas > MPCCL_PROXY_MAX_CTAS)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: nctas = %u, expected 1..%d (8 tag bits, two "
                          "values reserved)", nctas, MPCCL_PROXY_MAX_CTAS);
    if (nslots < 1 || (nslots & (nslots - 1)) != 0)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: nslots = %u, expected a power of two "
                          "(piece numbers wrap at 2^32)", nslots);
    if (slot_bytes == 0 || slot_bytes % 16 != 0)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: slot_bytes = %u, expected a positive "
                          "multiple of 16", slot_bytes);
    if (is_remote[rank])
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: rank %d marked remote to itself", rank);
    for (int i = 0; i < nranks; i++)
        if (is_remote[i] > MPCCL_PROXY_ONESIDED_ONLY)
            return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: is_remote[%d] = %u, expected 0, "
                              "MPCCL_PROXY_REMOTE or MPCCL_PROXY_ONESIDED_ONLY", i, is_remote[i]);
    return MPCCL_OK;
}

/* Describes the staging (host memory) and the device slots to the transport
 * once, on the attaching thread (proxy_impl.h, stage_region). */
static mpccl_status_t open_regions(mpccl_proxy_comm_t *pc)
{
    const struct mpccl_transport_ops *o = pc->t->ops;
    if (!o->region_open || !o->region_close || !o->isend_region || !o->irecv_region) return MPCCL_OK;
    MPCCL_CHECK(o->region_open(pc->t, pc->mem, pc->mem_bytes, MPCCL_REGION_HOST, &pc->stage_region));
    if (pc->slots) {
        MPCCL_CHECK(o->region_open(pc->t, pc->slots, pc->slots_bytes, pc->alloc.slots_kind, &pc->slots_region));
        MPCCL_CHECK(o->region_open(pc->t, NULL, 0, pc->alloc.slots_kind, &pc->user_region));
    }
    return MPCCL_OK;
}

/* A lane that shares its leader's staging (pc->lead) never frees it; where
 * its transport may still touch it, the leader keeps it too. */
static void free_pc(mpccl_proxy_comm_t *pc)
{
    if (pc->leak == 0) {
        if (pc->user_region) pc->t->ops->region_close(pc->t, pc->user_region);
        if (pc->slots_region) pc->t->ops->region_close(pc->t, pc->slots_region);
        if (pc->stage_region) pc->t->ops->region_close(pc->t, pc->stage_region);
    } else { /* requests in flight may still name them: kept, on purpose */
#ifdef __SANITIZE_ADDRESS__
        if (pc->user_region) __lsan_ignore_object(pc->user_region);
        if (pc->slots_region) __lsan_ignore_object(pc->slots_region);
        if (pc->stage_region) __lsan_ignore_object(pc->stage_region);
#endif
    }
    if (pc->lead && pc->leak) pc->lead->keep_staging = 1;
    int owner = pc->lead == NULL && pc->leak == 0 && !pc->keep_staging;
    if (pc->mem && owner) pc->alloc.free(pc->alloc.ctx, pc->mem);
    if (pc->slots && owner) pc->alloc.free_slots(pc->alloc.ctx, pc->slots);
    if (pc->leak == 2) return; /* the transport may still complete these requests */
    free(pc->reqs);
    free(pc->sig_reqs);
    free(pc->chans);
    free(pc->peers);
    free(pc);
}

/* The staging of every remote peer, the done counts after it, and (split)
 * the CTAs' slots: allocated by the leader, shared by the other lanes. */
static mpccl_status_t alloc_staging(mpccl_proxy_comm_t *pc, const mpccl_proxy_alloc_t *alloc)
{
    size_t done_off = pc->mem_bytes;
    pc->mem_bytes += 128 * MPCCL_PROXY_WORK_KINDS; /* the done counts, on lines of their own */
    MPCCL_CHECK(alloc->alloc(alloc->ctx, pc->mem_bytes, &pc->mem, &pc->mem_dev));
    memset(pc->mem, 0, pc->mem_bytes); /* ready/len/ack start at 0 */
    for (int k = 0; k < MPCCL_PROXY_WORK_KINDS; k++) {
        pc->done[k] = (volatile uint32_t *)((char *)pc->mem + done_off + 128 * k);
        pc->done_dev[k] = (uint32_t *)((char *)pc->mem_dev + done_off + 128 * k);
    }
    if (pc->slots_bytes) MPCCL_CHECK(alloc->alloc_slots(alloc->ctx, pc->slots_bytes, &pc->slots));
    return MPCCL_OK;
}

static void share_staging(mpccl_proxy_comm_t *pc, const mpccl_proxy_comm_t *lead)
{
    pc->mem = lead->mem;
    pc->mem_dev = lead->mem_dev;
    pc->mem_bytes = lead->mem_bytes;
    pc->slots = lead->slots;
    pc->slots_bytes = lead->slots_bytes;
    for (int k = 0; k < MPCCL_PROXY_WORK_KINDS; k++) {
        pc->done[k] = lead->done[k];
        pc->done_dev[k] = lead->done_dev[k];
    }
}

/* One lane of a communicator: lead == NULL for lane 0, which allocates the
 * staging and fills the device links; the others share both. */
static mpccl_status_t attach_lane(mpccl_transport_t *t, uint32_t lane, uint32_t nlanes, mpccl_proxy_comm_t *lead,
                                  int rank, int nranks, const uint8_t *is_remote, uint32_t nctas, uint32_t nslots,
                                  uint32_t slot_bytes, const mpccl_proxy_alloc_t *alloc, mpccl_dev_link_t *links,
                                  const mpccl_proxy_os_t *os, mpccl_dev_link_t *os_links, mpccl_proxy_comm_t **out)
{
    uint32_t os_nslots = os ? (os->nslots ? os->nslots : nslots) : 0;
    mpccl_status_t st = MPCCL_OK;
    int npeers = 0;
    for (int i = 0; i < nranks; i++) npeers += is_remote[i] != 0;
    uint32_t nchan = nctas + (os ? 1 : 0);
    size_t per = (size_t)nctas * nslots + os_nslots;
    /* A one-sided-only peer's staging holds the one-sided channel alone. */
    int split = alloc->alloc_slots != NULL;
    int os_dev = os && os->rma_slots;
    layout_t l = mpccl_proxy_layout(nchan, (size_t)nctas * nslots, os_nslots, slot_bytes, split, os_dev);
    layout_t l_os = mpccl_proxy_layout(1, 0, os_nslots, slot_bytes, split, 0);
    mpccl_proxy_comm_t *pc = calloc(1, sizeof(*pc));
    if (pc) pc->peers = calloc((size_t)npeers + 1, sizeof(proxy_peer_t));
    if (pc && pc->peers) pc->chans = calloc((size_t)npeers * nchan + 1, sizeof(proxy_chan_t));
    if (pc && pc->chans) pc->reqs = calloc((size_t)npeers * (2 * per + 2 * nchan) + 1, sizeof(mpccl_req_t));
    if (pc && pc->reqs) pc->sig_reqs = calloc((size_t)npeers * os_nslots + 1, sizeof(mpccl_req_t));
    if (pc == NULL || pc->sig_reqs == NULL) {
        if (pc) free_pc(pc);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "proxy attach: out of memory for %d remote peers", npeers);
    }
    pc->t = t;
    pc->lane = lane;
    pc->nlanes = nlanes;
    pc->lead = lead;
    pc->rank = rank;
    pc->nctas = nctas;
    pc->nchan = nchan;
    pc->os_nslots = os_nslots;
    pc->nslot_total = per;
    if (os) pc->os = *os;
    pc->nslots = nslots;
    pc->slot_bytes = slot_bytes;
    pc->alloc = *alloc;
    pc->npeers = npeers;
    if (npeers > 0) {
        for (int i = 0; i < nranks; i++)
            if (is_remote[i]) {
                int os_only = is_remote[i] == MPCCL_PROXY_ONESIDED_ONLY;
                pc->mem_bytes += os_only ? l_os.bytes : l.bytes;
                pc->slots_bytes += os_only ? 0 : l.dev_bytes;
            }
        if (lead) share_staging(pc, lead);
        else MPCCL_CHECK_GOTO(alloc_staging(pc, alloc), st, fail);
        MPCCL_CHECK_GOTO(open_regions(pc), st, fail);
        size_t off = 0, soff = 0;
        for (int i = 0, k = 0; i < nranks; i++)
            if (is_remote[i]) {
                /* A one-sided-only peer keeps the engine's link it has; the
                 * device links are the leader's to fill. */
                mpccl_dev_link_t unused, unused_os;
                int os_only = is_remote[i] == MPCCL_PROXY_ONESIDED_ONLY;
                proxy_peer_t *pe = &pc->peers[k];
                pe->rank = i;
                pe->first_chan = os_only ? nctas : 0;
                pe->first_slot = os_only ? (size_t)nctas * nslots : 0;
                pe->sig_req = pc->sig_reqs + (size_t)k * os_nslots;
                mpccl_proxy_set_views(pc, pe, k, off, pc->mem, pc->mem_dev, soff, os_only ? &l_os : &l,
                                      os_only || lead ? &unused : &links[i],
                                      os ? (lead ? &unused_os : &os_links[i]) : NULL);
                off += os_only ? l_os.bytes : l.bytes;
                soff += os_only ? 0 : l.dev_bytes;
                k++;
            }
    }
    if (lane == 0)
        MPCCL_INFO(MPCCL_SUB_NET, "proxy: rank %d attached: %d remote peers, %u CTAs%s x %u slots x %u bytes, "
                   "%zu bytes of staging, %zu bytes of device slots%s, %u lane(s)", rank, npeers, nctas,
                   os ? " + one-sided" : "", nslots, slot_bytes, pc->mem_bytes, pc->slots_bytes,
                   pc->slots ? " (the transport reads and writes them directly)" : "", nlanes);
    if (npeers > 0) MPCCL_CHECK_GOTO(mpccl_proxy_thread_add(pc), st, fail); /* none: no thread needed */
    *out = pc;
    return MPCCL_OK;
fail:
    free_pc(pc);
    return st;
}

mpccl_status_t mpccl_proxy_attach_lanes(mpccl_transport_t *const *lanes, int nlanes, int rank, int nranks,
                                        const uint8_t *is_remote, uint32_t nctas, uint32_t nslots,
                                        uint32_t slot_bytes, const mpccl_proxy_alloc_t *alloc,
                                        mpccl_dev_link_t *links, const mpccl_proxy_os_t *os,
                                        mpccl_dev_link_t *os_links, mpccl_proxy_comm_t **out)
{
    if (lanes == NULL || nlanes < 1 || nlanes > MPCCL_PROXY_MAX_LANES)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: %d lanes, expected 1..%d", nlanes,
                          MPCCL_PROXY_MAX_LANES);
    for (int l = 0; l < nlanes; l++)
        MPCCL_CHECK(check_args(lanes[l], rank, nranks, is_remote, nctas, nslots, slot_bytes, alloc, links, out));
    if (os && (os->deliver == NULL || os_links == NULL))
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: the one-sided channel needs deliver and os_links");
    for (int i = 0; i < nranks && os == NULL; i++)
        if (is_remote[i] == MPCCL_PROXY_ONESIDED_ONLY)
            return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: rank %d is to be served for one-sided "
                              "operations only, but there is no one-sided channel", i);
    uint32_t os_nslots = os ? (os->nslots ? os->nslots : nslots) : 0;
    if (os && (os_nslots & (os_nslots - 1)) != 0)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "proxy attach: os->nslots = %u, expected a power of two", os_nslots);
    if ((uint32_t)nlanes > nctas) nlanes = (int)nctas; /* a lane serves at least one CTA's channels */
    mpccl_proxy_comm_t *lead = NULL;
    MPCCL_CHECK(attach_lane(lanes[0], 0, (uint32_t)nlanes, NULL, rank, nranks, is_remote, nctas, nslots, slot_bytes,
                            alloc, links, os, os_links, &lead));
    mpccl_proxy_comm_t **tail = &lead->lanes_next;
    for (int l = 1; l < nlanes; l++) {
        mpccl_status_t st = attach_lane(lanes[l], (uint32_t)l, (uint32_t)nlanes, lead, rank, nranks, is_remote,
                                        nctas, nslots, slot_bytes, alloc, links, os, os_links, tail);
        if (st != MPCCL_OK) {
            mpccl_proxy_detach(lead, 1);
            return st;
        }
        tail = &(*tail)->lanes_next;
    }
    *out = lead;
    return MPCCL_OK;
}

mpccl_status_t mpccl_proxy_attach(mpccl_transport_t *t, int rank, int nranks, const uint8_t *is_remote,
                                  uint32_t nctas, uint32_t nslots, uint32_t slot_bytes,
                                  const mpccl_proxy_alloc_t *alloc, mpccl_dev_link_t *links,
                                  const mpccl_proxy_os_t *os, mpccl_dev_link_t *os_links, mpccl_proxy_comm_t **out)
{
    return mpccl_proxy_attach_lanes(&t, 1, rank, nranks, is_remote, nctas, nslots, slot_bytes, alloc, links, os,
                                    os_links, out);
}

void mpccl_proxy_detach(mpccl_proxy_comm_t *pc, int force)
{
    if (pc == NULL) return;
    mpccl_proxy_comm_t *all[MPCCL_PROXY_MAX_LANES];
    int n = 0;
    for (mpccl_proxy_comm_t *x = pc; x && n < MPCCL_PROXY_MAX_LANES; x = x->lanes_next) all[n++] = x;
    /* No remote peers: no thread serves pc.  Else not under a lock:
     * communicators detaching at once wait side by side. */
    if (pc->npeers > 0) mpccl_proxy_thread_detach(all, n, force);
    for (int i = n - 1; i >= 0; i--) free_pc(all[i]); /* the leader last: the others share its staging */
}

void mpccl_proxy_post(mpccl_proxy_comm_t *pc, int kind, uint32_t launches, uint32_t ctas)
{
    if (pc == NULL || pc->npeers == 0 || kind < 0 || kind >= MPCCL_PROXY_WORK_KINDS) return;
    uint32_t now = __atomic_add_fetch(&pc->posted[kind], launches, __ATOMIC_SEQ_CST); /* pc: lane 0 */
    for (mpccl_proxy_comm_t *x = pc; x; x = x->lanes_next) {
        if (x->lane != 0 && x->lane >= ctas) continue; /* none of its channels is in these launches */
        if ((int32_t)launches > 0) __atomic_store_n(&x->needed[kind], now, __ATOMIC_SEQ_CST);
        mpccl_proxy_wake_lane((int)x->lane);
    }
}

/* The remote peer of rank r with CTA channels (pc->peers is in rank order), or NULL. */
static proxy_peer_t *cta_peer(mpccl_proxy_comm_t *pc, int32_t r)
{
    int lo = 0, hi = pc->npeers;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (pc->peers[mid].rank < r) lo = mid + 1;
        else hi = mid;
    }
    if (lo == pc->npeers || pc->peers[lo].rank != r || pc->peers[lo].first_chan != 0) return NULL;
    return &pc->peers[lo];
}

void mpccl_proxy_post_pieces(mpccl_proxy_comm_t *pc, const mpccl_proxy_due_t *due, uint32_t n, int32_t times)
{
    if (pc == NULL || pc->npeers == 0 || n == 0 || times == 0) return;
    uint32_t woken = 0; /* lanes to wake (bit per lane) */
    for (uint32_t i = 0; i < n; i++) {
        const mpccl_proxy_due_t *d = &due[i];
        if (d->chan >= pc->nctas || (d->tx == 0 && d->rx == 0 && d->whole_tx == 0 && d->whole_rx == 0)) continue;
        for (mpccl_proxy_comm_t *x = pc; x; x = x->lanes_next) {
            if (!chan_served(x, d->chan)) continue;
            proxy_peer_t *pe = cta_peer(x, d->rank);
            if (pe == NULL) break;
            proxy_chan_t *c = &pe->chan[d->chan];
            /* modulo 2^32: times < 0 subtracts */
            if (d->tx) __atomic_add_fetch(&c->tx_due, d->tx * (uint32_t)times, __ATOMIC_RELEASE);
            if (d->rx) __atomic_add_fetch(&c->rx_due, d->rx * (uint32_t)times, __ATOMIC_RELEASE);
            for (int dir = 0; dir < 2; dir++) {
                uint32_t wn = dir ? d->whole_rx : d->whole_tx;
                if (wn) __atomic_add_fetch(&c->whole_due[dir], wn * (uint32_t)times, __ATOMIC_RELEASE);
            }
            woken |= 1u << x->lane;
            break;
        }
    }
    for (mpccl_proxy_comm_t *x = pc; x && times > 0; x = x->lanes_next)
        if (woken & (1u << x->lane)) mpccl_proxy_wake_lane((int)x->lane);
}

void mpccl_proxy_set_stop_word(mpccl_proxy_comm_t *pc, const volatile uint32_t *stop)
{
    for (mpccl_proxy_comm_t *x = pc; x; x = x->lanes_next) x->stop = stop;
}

void mpccl_proxy_set_ll_bytes(mpccl_proxy_comm_t *pc, uint32_t bytes)
{
    for (mpccl_proxy_comm_t *x = pc; x; x = x->lanes_next) __atomic_store_n(&x->ll_bytes, bytes, __ATOMIC_RELAXED);
}

uint32_t *mpccl_proxy_done_counter(const mpccl_proxy_comm_t *pc, int kind, volatile uint32_t **host)
{
    int ok = pc && pc->npeers > 0 && kind >= 0 && kind < MPCCL_PROXY_WORK_KINDS;
    if (host) *host = ok ? pc->done[kind] : NULL;
    return ok ? pc->done_dev[kind] : NULL;
}

mpccl_status_t mpccl_proxy_error(mpccl_proxy_comm_t *pc)
{
    for (mpccl_proxy_comm_t *x = pc; x; x = x->lanes_next) {
        mpccl_status_t st = __atomic_load_n(&x->error, __ATOMIC_ACQUIRE);
        if (st != MPCCL_OK) return mpccl_fail(st, "%s", x->error_msg); /* on the caller's thread */
    }
    return MPCCL_OK;
}
