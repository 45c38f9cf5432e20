/* The UCX transport: one ucp_worker per communicator, tagged send/recv over
 * eagerly created endpoints (self included), and a close that never hangs. */
#define _GNU_SOURCE /* ppoll */
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "ucx.h"
#include "ucx_rma.h"
#include "ucx_tp.h"
#include "ucx/ucx_address_check.h"

/* Settings (lib/util/config.c): MPCCL_UCX_IDLE_US, MPCCL_UCX_SPIN_US, MPCCL_UCX_ERR_MODE. */
static long us_setting(const char *name, long dflt)
{
    int64_t x = mpccl_config_int(name);
    return (x >= 0 && x <= 1000000) ? (long)x : dflt;
}
static long idle_us_setting(void)
{
    return us_setting("UCX_IDLE_US", 1000);
}
static long spin_us_setting(void)
{
    return us_setting("UCX_SPIN_US", 50);
}

/* "peer" asks UCX to detect failed peers, which UCX 1.13-1.16 supports only on
 * network transports (tcp, ib): same-machine peers then talk over tcp loopback
 * instead of shared memory.  "none" lets UCX use shm, cma and self; a dead
 * peer is then noticed by the peer watcher (same machine) or operation
 * timeouts.  "auto" (default): none to the peers of this machine, which the
 * peer watcher covers, peer to the others.  Returns the mode for a peer. */
static ucp_err_handling_mode_t err_mode_for(const char *v, int same_machine)
{
    if (v && strcmp(v, "none") == 0) return UCP_ERR_HANDLING_MODE_NONE;
    if (v && strcmp(v, "peer") == 0) return UCP_ERR_HANDLING_MODE_PEER;
    return same_machine ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
}

static const char *err_mode_setting(void)
{
    const char *v = mpccl_config_str("UCX_ERR_MODE");
    if (v && *v && strcmp(v, "peer") != 0 && strcmp(v, "none") != 0 && strcmp(v, "auto") != 0) {
        MPCCL_WARN(MPCCL_SUB_NET, "MPCCL_UCX_ERR_MODE=%s is not auto, peer or none; using auto", v);
        v = "auto";
    }
    return v;
}

/* ---- completion ---- */

static void list_add(mpccl_ucx_tp_t *tp, mpccl_ucx_op_t *op)
{
    op->next = tp->inflight.next;
    op->prev = &tp->inflight;
    tp->inflight.next->prev = op;
    tp->inflight.next = op;
}

static void list_del(mpccl_ucx_op_t *op)
{
    op->prev->next = op->next;
    op->next->prev = op->prev;
    op->prev = op->next = NULL;
}

/* A request that ended because peer's connection broke: the error names the
 * connection here, in the thread that completes the request (UCX may report
 * the failure itself on its async thread, whose last error nobody reads).
 * Logged as a warning once per peer: a GPU communicator's proxy keeps a
 * dozen or more receives posted to each peer, and each fails alike; at INFO
 * for a receive posted ahead of need, whose owner reports what it stranded. */
static mpccl_status_t peer_failure(mpccl_ucx_tp_t *tp, int peer, int ahead)
{
    mpccl_ucx_peer_t *p = &tp->peers[peer];
    char msg[160];
    snprintf(msg, sizeof(msg), "UCX connection from rank %d to rank %d failed: %s", tp->pub.rank, peer,
             ucs_status_string(p->fail_status));
    if (!ahead && !__atomic_exchange_n(&p->warned, 1, __ATOMIC_RELAXED)) /* UCX's async thread may too */
        return mpccl_fail(MPCCL_ERR_REMOTE, "%s", msg);
    mpccl_record_error(msg);
    MPCCL_INFO(MPCCL_SUB_NET, "%s (%s)", msg, ahead ? "a receive posted ahead of need" : "again");
    return MPCCL_ERR_REMOTE;
}

/* Records the first failure seen on a connection; later requests on it end in
 * MPCCL_ERR_REMOTE without repeating the message. */
static void peer_failed(mpccl_ucx_tp_t *tp, int peer, ucs_status_t st)
{
    mpccl_ucx_peer_t *p = &tp->peers[peer];
    if (p->failed) return;
    p->failed = 1;
    p->fail_status = st;
    tp->failures_pending = 1;
    /* A peer that destroyed its communicator first looks the same as one that
     * died; only a failure that strands a request here is an error (the request
     * reports it; receives posted ahead of need do not count), the rest is a
     * normal teardown. */
    int stranded = 0;
    for (mpccl_ucx_op_t *op = tp->inflight.next; op != &tp->inflight && !stranded; op = op->next)
        stranded = op->peer == peer && !(op->owner && op->owner->ahead);
    if (stranded)
        (void)peer_failure(tp, peer, 0);
    else
        MPCCL_INFO(MPCCL_SUB_NET, "UCX connection from rank %d to rank %d closed: %s (nothing needed in flight)",
                   tp->pub.rank, peer, ucs_status_string(st));
}

static mpccl_status_t map_status(mpccl_ucx_tp_t *tp, int peer, uint64_t tag, size_t bytes,
                                 ucs_status_t st, int ahead)
{
    if (st == UCS_OK) return MPCCL_OK;
    if (st == UCS_ERR_MESSAGE_TRUNCATED)
        return mpccl_fail(MPCCL_ERR_INTERNAL,
                          "rank %d: message from rank %d with tag %#llx is larger than the "
                          "%zu-byte receive posted for it",
                          tp->pub.rank, peer, (unsigned long long)tag, bytes);
    /* Cancelled by the caller, by a peer failure or by close: the reason was
     * reported where it happened. */
    if (st == UCS_ERR_CANCELED) return tp->peers[peer].failed ? peer_failure(tp, peer, ahead) : MPCCL_ERR_REMOTE;
    peer_failed(tp, peer, st); /* any other error means the connection broke */
    return peer_failure(tp, peer, ahead);
}

static void finish(mpccl_req_t *req, mpccl_status_t st)
{
    req->status = st;
    req->impl = NULL;
    __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

static void release(mpccl_ucx_op_t *op)
{
    op->owner = NULL;
    op->tp = NULL;
    ucp_request_free(op);
}

/* user_data is the transport.  An op not yet tracked (tp NULL: ours are reset
 * on release and zeroed by request_init) completes inside the nbx call that
 * posts it, which some UCX versions do and then return the request anyway. */
static void op_complete(void *request, ucs_status_t st, void *user_data, size_t length)
{
    mpccl_ucx_op_t *op = request;
    if (op->tp == NULL) {
        mpccl_ucx_tp_t *tp = user_data;
        mpccl_ucx_op_t *p = &tp->posting;
        p->owner->bytes = length;
        finish(p->owner, map_status(tp, p->peer, p->tag, p->bytes, st, p->owner->ahead));
        tp->posting_done = 1;
        release(op);
        return;
    }
    mpccl_status_t ms = map_status(op->tp, op->peer, op->tag, op->bytes, st, op->owner && op->owner->ahead);
    list_del(op);
    if (op->owner) {
        op->owner->bytes = length;
        finish(op->owner, ms);
    }
    release(op);
}

static void send_cb(void *request, ucs_status_t st, void *user_data)
{
    op_complete(request, st, user_data, 0);
}

static void recv_cb(void *request, ucs_status_t st, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    op_complete(request, st, user_data, st == UCS_OK && info ? info->length : 0);
}

/* What an nbx call returned: done now, failed now, or a request to track. */
static void track(mpccl_ucx_tp_t *tp, ucs_status_ptr_t sp, mpccl_req_t *req, int peer,
                  uint64_t tag, size_t bytes, int is_recv)
{
    if (tp->posting_done) return; /* the callback already ran and released it */
    if (sp == NULL) {
        finish(req, MPCCL_OK);
        return;
    }
    if (UCS_PTR_IS_ERR(sp)) {
        finish(req, map_status(tp, peer, tag, bytes, UCS_PTR_STATUS(sp), req->ahead));
        return;
    }
    /* Other callbacks run from progress/cancel only, so filling the op after the
     * call returned is race-free (the worker is used by one thread at a time). */
    mpccl_ucx_op_t *op = sp;
    op->owner = req;
    op->tp = tp;
    op->tag = tag;
    op->bytes = bytes;
    op->peer = peer;
    op->is_recv = is_recv;
    list_add(tp, op);
    req->impl = op;
}

/* ---- operations ---- */

static mpccl_status_t check_peer(mpccl_ucx_tp_t *tp, int peer, mpccl_req_t *req)
{
    if (req == NULL) return mpccl_fail(MPCCL_ERR_INTERNAL, "UCX transport: request is NULL");
    if (peer < 0 || peer >= tp->pub.nranks) {
        mpccl_status_t st = mpccl_fail(MPCCL_ERR_INTERNAL, "UCX transport: peer %d out of range [0,%d)",
                                       peer, tp->pub.nranks);
        finish(req, st);
        return st;
    }
    req->done = 0;
    req->status = MPCCL_OK;
    req->impl = NULL;
    return MPCCL_OK;
}

static void set_params(mpccl_ucx_tp_t *tp, ucp_request_param_t *prm, mpccl_req_t *req, int peer,
                       uint64_t tag, size_t bytes, int is_recv)
{
    memset(prm, 0, sizeof(*prm));
    prm->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE |
                        UCP_OP_ATTR_FIELD_USER_DATA;
    prm->datatype = ucp_dt_make_contig(1);
    prm->user_data = tp;
    tp->posting = (mpccl_ucx_op_t){.owner = req, .tag = tag, .bytes = bytes, .peer = peer,
                                   .is_recv = is_recv};
    tp->posting_done = 0;
}

/* Errors of the communication itself (truncation, a failed peer) arrive on the
 * request; the return value reports only misuse.  region: NULL, or the region
 * (ucx_region.c) buf lies in. */
static mpccl_status_t send_in(mpccl_transport_t *t, int peer, uint64_t tag, const void *buf, size_t bytes,
                              const mpccl_ucx_region_t *region, mpccl_req_t *req)
{
    mpccl_ucx_tp_t *tp = t->impl;
    MPCCL_CHECK(check_peer(tp, peer, req));
    if (tp->peers[peer].failed) {
        finish(req, mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: send of %zu bytes to rank %d, whose connection is "
                                                 "closed (it failed, or destroyed its communicator early)",
                               tp->pub.rank, bytes, peer));
        return MPCCL_OK;
    }
    ucp_request_param_t prm;
    set_params(tp, &prm, req, peer, tag, bytes, 0);
    if (region) MPCCL_CHECK(mpccl_ucx_region_params(region, buf, bytes, &prm));
    prm.cb.send = send_cb;
    ucs_status_ptr_t sp = ucp_tag_send_nbx(tp->peers[peer].ep, buf, bytes, tag, &prm);
    track(tp, sp, req, peer, tag, bytes, 0);
    return MPCCL_OK;
}

/* Tags carry the source rank, so one worker-wide receive with the full mask
 * matches the right peer; peer only names it in errors and failure handling. */
static mpccl_status_t recv_in(mpccl_transport_t *t, int peer, uint64_t tag, void *buf, size_t bytes,
                              const mpccl_ucx_region_t *region, mpccl_req_t *req)
{
    mpccl_ucx_tp_t *tp = t->impl;
    MPCCL_CHECK(check_peer(tp, peer, req));
    /* A peer that closed its endpoints after its last send (ncclCommDestroy while
     * this rank is still finishing) looks failed, yet its flushed messages may be
     * waiting in the unexpected queue: receive those, fail only what never came. */
    ucp_tag_recv_info_t info;
    if (tp->peers[peer].failed && ucp_tag_probe_nb(tp->worker, tag, (ucp_tag_t)-1, 0, &info) == NULL) {
        finish(req, mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: receive of %zu bytes from rank %d, whose connection "
                                                 "is closed (it failed, or destroyed its communicator early)",
                               tp->pub.rank, bytes, peer));
        return MPCCL_OK;
    }
    ucp_request_param_t prm;
    set_params(tp, &prm, req, peer, tag, bytes, 1);
    if (region) MPCCL_CHECK(mpccl_ucx_region_params(region, buf, bytes, &prm));
    prm.cb.recv = recv_cb;
    /* UCX reports the received length only to the callback (an immediate
     * completion leaves recv_info unfilled): always complete through it. */
    prm.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    req->bytes = 0;
    ucs_status_ptr_t sp = ucp_tag_recv_nbx(tp->worker, buf, bytes, tag, (ucp_tag_t)-1, &prm);
    track(tp, sp, req, peer, tag, bytes, 1);
    return MPCCL_OK;
}

static mpccl_status_t ucx_isend(mpccl_transport_t *t, int peer, uint64_t tag, const void *buf, size_t bytes,
                                mpccl_req_t *req)
{
    return send_in(t, peer, tag, buf, bytes, NULL, req);
}

static mpccl_status_t ucx_irecv(mpccl_transport_t *t, int peer, uint64_t tag, void *buf, size_t bytes,
                                mpccl_req_t *req)
{
    return recv_in(t, peer, tag, buf, bytes, NULL, req);
}

static mpccl_status_t ucx_isend_region(mpccl_transport_t *t, int peer, uint64_t tag, const void *buf,
                                       size_t bytes, void *region, mpccl_req_t *req)
{
    return send_in(t, peer, tag, buf, bytes, region, req);
}

static mpccl_status_t ucx_irecv_region(mpccl_transport_t *t, int peer, uint64_t tag, void *buf, size_t bytes,
                                       void *region, mpccl_req_t *req)
{
    return recv_in(t, peer, tag, buf, bytes, region, req);
}

/* Regions belong to the process-wide context, not to this worker. */
static mpccl_status_t ucx_region_open(mpccl_transport_t *t, void *buf, size_t bytes, int kind, void **region)
{
    (void)t;
    mpccl_ucx_region_t *r = NULL;
    MPCCL_CHECK(mpccl_ucx_region_open(buf, bytes, kind, &r));
    *region = r;
    return MPCCL_OK;
}

static void ucx_region_close(mpccl_transport_t *t, void *region)
{
    (void)t;
    mpccl_ucx_region_close(region);
}

/* Receives from a failed peer would never match: end them (outside UCX's
 * callbacks, which must not re-enter the worker). */
static int cancel_failed_recvs(mpccl_ucx_tp_t *tp)
{
    int n = 0;
    tp->failures_pending = 0;
    mpccl_ucx_op_t *op = tp->inflight.next, *next;
    for (; op != &tp->inflight; op = next) {
        next = op->next;
        if (op->is_recv && tp->peers[op->peer].failed) {
            ucp_request_cancel(tp->worker, op);
            n++;
        }
    }
    return n;
}

static int ucx_progress(mpccl_transport_t *t)
{
    mpccl_ucx_tp_t *tp = t->impl;
    int n = (int)ucp_worker_progress(tp->worker);
    if (tp->failures_pending) n += cancel_failed_recvs(tp);
    if (tp->revoke_arrived) {
        tp->revoke_arrived = 0;
        mpccl_ucx_post_revoke_recv(tp);
        if (t->on_revoke) t->on_revoke(t->owner, tp->revoke_from, tp->revoke_word);
        n++;
    }
    if (n > 0) tp->idle_since = 0;
    return n;
}

/* Yields for the first spin_ns of a wait (a reply usually comes within
 * microseconds, and sleeping on the fd costs a wake-up on both sides), then
 * sleeps on the worker's event fd for at most idle_ns: wakes as soon as a
 * message arrives, yet frees the core for oversubscribed ranks. */
static void ucx_idle(mpccl_transport_t *t)
{
    mpccl_ucx_tp_t *tp = t->impl;
    int64_t now = mpccl_now_ns();
    if (tp->idle_since == 0) tp->idle_since = now;
    if (tp->efd < 0 || tp->idle_ns == 0 || now - tp->idle_since < tp->spin_ns) {
        sched_yield();
        return;
    }
    ucs_status_t st = ucp_worker_arm(tp->worker);
    if (st != UCS_OK) { /* UCS_ERR_BUSY: events wait to be progressed */
        sched_yield();
        return;
    }
    struct pollfd pfd = {.fd = tp->efd, .events = POLLIN};
    struct timespec ts = {.tv_sec = tp->idle_ns / 1000000000, .tv_nsec = tp->idle_ns % 1000000000};
    ppoll(&pfd, 1, &ts, NULL);
}

/* The worker's event fd, armed (transport.h).  A failed peer's receives are
 * cancelled by progress, so they count as work waiting. */
static int ucx_arm(mpccl_transport_t *t)
{
    mpccl_ucx_tp_t *tp = t->impl;
    if (tp->efd < 0) return MPCCL_ARM_NONE;
    if (tp->failures_pending || tp->revoke_arrived) return MPCCL_ARM_BUSY;
    ucs_status_t st = ucp_worker_arm(tp->worker);
    if (st == UCS_OK) return tp->efd;
    return st == UCS_ERR_BUSY ? MPCCL_ARM_BUSY : MPCCL_ARM_NONE;
}

/* A receive UCX cancels at once; a send UCX cannot cancel, so the caller is
 * detached from it (its request ends now) and UCX finishes or drops it by
 * close.  Until then UCX may still read the send buffer. */
static void ucx_cancel(mpccl_transport_t *t, mpccl_req_t *req)
{
    mpccl_ucx_tp_t *tp = t->impl;
    if (req == NULL || req->done || req->impl == NULL) return;
    mpccl_ucx_op_t *op = req->impl;
    ucp_request_cancel(tp->worker, op);
    if (!req->done && !op->is_recv) {
        op->owner = NULL;
        finish(req, MPCCL_ERR_REMOTE);
    }
}

/* ---- close ---- */

/* Progresses until request sp completes or the deadline passes; releases it
 * either way.  Returns 1 when it completed. */
static int wait_bounded(mpccl_ucx_tp_t *tp, ucs_status_ptr_t sp, int64_t deadline)
{
    if (sp == NULL) return 1;
    if (UCS_PTR_IS_ERR(sp)) return 0;
    int complete;
    while (!(complete = ucp_request_check_status(sp) != UCS_INPROGRESS) && mpccl_now_ns() < deadline)
        if (ucp_worker_progress(tp->worker) == 0) sched_yield();
    ucp_request_free(sp);
    return complete;
}

/* Workers left behind on purpose (ucx_close) stay reachable, for the life of the process. */
static ucp_worker_h kept_workers[64];
static int nkept;

static void keep_worker(ucp_worker_h w)
{
    int i = __atomic_fetch_add(&nkept, 1, __ATOMIC_RELAXED);
    if (i < (int)(sizeof(kept_workers) / sizeof(kept_workers[0]))) kept_workers[i] = w;
}

static void ucx_close(mpccl_transport_t *t, int force)
{
    mpccl_ucx_tp_t *tp = t->impl;
    int nranks = t->nranks, i;
    int64_t deadline = mpccl_now_ns() + (force ? 0 : tp->close_timeout_ms * 1000000);
    int flushed = 0;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    if (!force) flushed = wait_bounded(tp, ucp_worker_flush_nbx(tp->worker, &prm), deadline);
    if (!force && !flushed)
        MPCCL_WARN(MPCCL_SUB_NET, "rank %d: UCX flush did not finish in %ld ms; closing endpoints by force",
                   t->rank, tp->close_timeout_ms);
    /* Pending receives would never complete once the worker is gone. */
    tp->closing = 1;
    if (tp->revoke_req) ucp_request_cancel(tp->worker, tp->revoke_req);
    for (mpccl_ucx_op_t *op = tp->inflight.next, *next; op != &tp->inflight; op = next) {
        next = op->next;
        if (op->is_recv) ucp_request_cancel(tp->worker, op);
    }
    /* A send still in flight (cancelled, or never matched) would keep a flushing
     * close waiting: only a forced close releases it. */
    for (mpccl_ucx_op_t *op = tp->inflight.next; op != &tp->inflight; op = op->next)
        if (!op->is_recv) tp->peers[op->peer].force_close = 1;
    void **closing = calloc((size_t)nranks, sizeof(void *));
    for (i = 0; i < nranks; i++) {
        mpccl_ucx_peer_t *p = &tp->peers[i];
        if (p->ep == NULL) continue;
        prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        prm.flags = (force || !flushed || p->failed || p->force_close) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        ucs_status_ptr_t sp = ucp_ep_close_nbx(p->ep, &prm);
        p->ep = NULL;
        if (closing && sp && !UCS_PTR_IS_ERR(sp)) closing[i] = sp;
        else if (sp && !UCS_PTR_IS_ERR(sp)) ucp_request_free(sp);
    }
    int late = 0;
    for (i = 0; closing && i < nranks; i++)
        if (closing[i] && !wait_bounded(tp, closing[i], deadline)) late++;
    free(closing);
    if (late)
        MPCCL_INFO(MPCCL_SUB_NET, "rank %d: %d UCX endpoints did not close in time; dropped",
                   t->rank, late);
    /* Whatever is still in flight dies with the worker: its callers must not
     * wait.  The ops stay listed in case destroying the worker runs callbacks. */
    for (mpccl_ucx_op_t *op = tp->inflight.next; op != &tp->inflight; op = op->next) {
        if (op->owner) finish(op->owner, MPCCL_ERR_REMOTE);
        op->owner = NULL;
    }
    /* UCX 1.13 cannot destroy a worker whose shared-memory (cma) endpoint
     * failed with operations queued on it (it asserts): after such a failure
     * the worker is left behind, unused, rather than crash the survivor. */
    int keep = 0;
    for (i = 0; i < nranks; i++) keep |= tp->peers[i].failed && tp->peers[i].err_mode == UCP_ERR_HANDLING_MODE_NONE;
    /* Nor can UCX 1.22 destroy one whose requests are still out (a send to a
     * peer that died, never completed): its leak report describes each
     * request's protocol and crashed doing so over tcp (an abort's teardown).
     * 1.13 destroys it without complaint.  (Not progressed here: a forced
     * close would then run pending sends whose buffers are gone.) */
    int out = tp->inflight.next != &tp->inflight && mpccl_ucx_version_at_least(1, 22);
    if (keep || out) {
        MPCCL_INFO(MPCCL_SUB_NET, "rank %d: %s; its UCX worker is kept, not destroyed", t->rank,
                   keep ? "a shared-memory endpoint failed" : "UCX never completed some requests");
        keep_worker(tp->worker);
    } else {
        ucp_worker_destroy(tp->worker);
    }
    free(tp->peers);
    free(tp);
}

/* ---- create ---- */

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    (void)ep;
    mpccl_ucx_peer_t *p = arg;
    peer_failed(p->tp, p->rank, st);
}

/* The lanes UCX picked for this endpoint, one INFO line (only when logged). */
static void log_ep(mpccl_ucx_tp_t *tp, int peer)
{
    if (!MPCCL_LOG_ON(MPCCL_LOG_INFO)) return;
    char *text = NULL, line[512];
    size_t len = 0, used = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) return;
    ucp_ep_print_info(tp->peers[peer].ep, f);
    fclose(f);
    line[0] = '\0';
    for (char *s = text, *e; s && *s; s = e ? e + 1 : NULL) {
        e = strchr(s, '\n');
        if (e) *e = '\0';
        char *lane = strstr(s, "lane[");
        if (lane && used < sizeof(line))
            used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%s", used ? "; " : "",
                                     lane);
    }
    MPCCL_INFO(MPCCL_SUB_NET, "rank %d -> %d UCX lanes: %s", tp->pub.rank, peer, line);
    free(text);
}

static mpccl_status_t exchange_addresses(mpccl_ucx_tp_t *tp, mpccl_bootstrap_t *bs,
                                         unsigned char **all, size_t *stride)
{
    int n = bs->nranks;
    ucp_address_t *addr;
    size_t len;
    ucs_status_t us = ucp_worker_get_address(tp->worker, &addr, &len);
    if (us != UCS_OK)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "ucp_worker_get_address: %s", ucs_status_string(us));
    mpccl_status_t st = MPCCL_OK;
    unsigned char *buf = NULL;
    uint64_t *lens = calloc((size_t)n, sizeof(uint64_t));
    if (lens == NULL) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for %d address lengths", n);
        goto out;
    }
    lens[bs->rank] = len;
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(bs, lens, sizeof(uint64_t)), st, out);
    size_t max = 0;
    int bad = mpccl_ucx_address_lengths_bad(lens, n, &max);
    if (bad >= 0) {
        st = mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: rank %d's UCX worker address is %llu bytes (expected 1..%u): "
                        "its bootstrap data is corrupt", bs->rank, bad, (unsigned long long)lens[bad],
                        MPCCL_UCX_ADDRESS_MAX);
        goto out;
    }
    buf = calloc((size_t)n, max);
    if (buf == NULL) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for %d UCX addresses of %zu bytes", n, max);
        goto out;
    }
    memcpy(buf + (size_t)bs->rank * max, addr, len);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(bs, buf, max), st, out);
    *all = buf;
    *stride = max;
    buf = NULL;
out:
    free(buf);
    free(lens);
    ucp_worker_release_address(tp->worker, addr);
    return st;
}

static mpccl_status_t connect_all(mpccl_ucx_tp_t *tp, const unsigned char *all, size_t stride)
{
    for (int i = 0; i < tp->pub.nranks; i++) {
        mpccl_ucx_peer_t *p = &tp->peers[i];
        ucp_ep_params_t ep;
        memset(&ep, 0, sizeof(ep));
        ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.address = (const ucp_address_t *)(all + (size_t)i * stride);
        ep.err_mode = p->err_mode;
        ep.err_handler.cb = ep_error;
        ep.err_handler.arg = p;
        ucs_status_t us = ucp_ep_create(tp->worker, &ep, &p->ep);
        if (us != UCS_OK) {
            p->ep = NULL;
            return mpccl_fail(MPCCL_ERR_SYSTEM, "rank %d: UCX endpoint to rank %d: %s",
                              tp->pub.rank, i, ucs_status_string(us));
        }
        log_ep(tp, i);
    }
    return MPCCL_OK;
}

/* ---- one-sided (windows; lib/ucx/ucx_rma.h) ---- */

/* rkey: a ucp_rkey_h unpacked on the endpoint to peer (mpccl_ucx_rkey_unpack).
 * Completion is local: src may be reused; remote visibility is ordered by a
 * fence (mpccl_ucx_fence) before a later operation to the same peer. */
static mpccl_status_t put_common(mpccl_transport_t *t, int peer, const void *src, size_t bytes, void *region,
                                 uint64_t remote_addr, void *rkey, mpccl_req_t *req)
{
    mpccl_ucx_tp_t *tp = t->impl;
    MPCCL_CHECK(check_peer(tp, peer, req));
    if (tp->peers[peer].failed) {
        finish(req, mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: put of %zu bytes to rank %d, whose connection is closed",
                               tp->pub.rank, bytes, peer));
        return MPCCL_OK;
    }
    ucp_request_param_t prm;
    set_params(tp, &prm, req, peer, 0, bytes, 0);
    prm.cb.send = send_cb;
    if (region) MPCCL_CHECK(mpccl_ucx_region_params(region, src, bytes, &prm));
    ucs_status_ptr_t sp = ucp_put_nbx(tp->peers[peer].ep, src, bytes, remote_addr, (ucp_rkey_h)rkey, &prm);
    track(tp, sp, req, peer, 0, bytes, 0);
    return MPCCL_OK;
}

static mpccl_status_t ucx_put(mpccl_transport_t *t, int peer, const void *src, size_t bytes,
                              uint64_t remote_addr, void *rkey, mpccl_req_t *req)
{
    return put_common(t, peer, src, bytes, NULL, remote_addr, rkey, req);
}

static mpccl_status_t ucx_put_region(mpccl_transport_t *t, int peer, const void *src, size_t bytes, void *region,
                                     uint64_t remote_addr, void *rkey, mpccl_req_t *req)
{
    return put_common(t, peer, src, bytes, region, remote_addr, rkey, req);
}

static mpccl_status_t ucx_fence(mpccl_transport_t *t)
{
    ucs_status_t us = ucp_worker_fence(((mpccl_ucx_tp_t *)t->impl)->worker);
    return us == UCS_OK ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "ucp_worker_fence: %s", ucs_status_string(us));
}

/* Adds value to the 64-bit word at remote_addr (no result fetched).  UCX reads
 * *value during the call or until completion: it lives in the caller's storage. */
static mpccl_status_t ucx_atomic_add(mpccl_transport_t *t, int peer, uint64_t value, uint64_t remote_addr,
                                     void *rkey, mpccl_req_t *req)
{
    mpccl_ucx_tp_t *tp = t->impl;
    MPCCL_CHECK(check_peer(tp, peer, req));
    if (tp->peers[peer].failed) {
        finish(req, mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: signal to rank %d, whose connection is closed",
                               tp->pub.rank, peer));
        return MPCCL_OK;
    }
    /* UCX may read the operand after the call returns: keep it in the request. */
    req->bytes = (size_t)value;
    ucp_request_param_t prm;
    set_params(tp, &prm, req, peer, 0, sizeof(uint64_t), 0);
    prm.cb.send = send_cb;
    prm.datatype = ucp_dt_make_contig(sizeof(uint64_t));
    ucs_status_ptr_t sp = ucp_atomic_op_nbx(tp->peers[peer].ep, UCP_ATOMIC_OP_ADD, &req->bytes, 1, remote_addr,
                                            (ucp_rkey_h)rkey, &prm);
    track(tp, sp, req, peer, 0, sizeof(uint64_t), 0);
    return MPCCL_OK;
}

/* ucp_ep_flush_nbx: its callback is a send callback, so it is tracked as a
 * send (peer failure and close end it as they end sends).  An endpoint flush
 * also waits for what UCX queued on the endpoint, which UCX 1.13's worker
 * flush does not. */
static mpccl_status_t ucx_flush(mpccl_transport_t *t, int peer, mpccl_req_t *req)
{
    mpccl_ucx_tp_t *tp = t->impl;
    MPCCL_CHECK(check_peer(tp, peer, req));
    if (tp->peers[peer].failed) {
        /* Nothing can leave for a closed connection; the operations that
         * needed it ended with their own errors. */
        finish(req, MPCCL_OK);
        return MPCCL_OK;
    }
    ucp_request_param_t prm;
    set_params(tp, &prm, req, peer, 0, 0, 0);
    prm.op_attr_mask &= ~(uint32_t)UCP_OP_ATTR_FIELD_DATATYPE;
    prm.cb.send = send_cb;
    ucs_status_ptr_t sp = ucp_ep_flush_nbx(tp->peers[peer].ep, &prm);
    track(tp, sp, req, peer, 0, 0, 0);
    return MPCCL_OK;
}

/* Shared-memory endpoints (no UCX error handling) flush locally; a network
 * endpoint's flush (error handling "peer": tcp, ib) waits for the peer to
 * acknowledge, and in UCX 1.13-1.16 that needs the peer to progress. */
/* Peers on this machine, unless UCX reaches them over a network transport
 * (UCX_TLS=tcp, no shared memory between containers): a flush there waits for
 * the peer's acknowledgement, which a peer back in the application never
 * sends.  Not known yet: drained, as shared memory is what such peers get. */
static int ucx_drains(mpccl_transport_t *t, int peer)
{
    mpccl_ucx_tp_t *tp = t->impl;
    return peer >= 0 && peer < t->nranks && tp->peers[peer].err_mode == UCP_ERR_HANDLING_MODE_NONE &&
           mpccl_ucx_lanes_local(tp, peer) != 0;
}

static const struct mpccl_transport_ops ucx_ops;

ucp_worker_h mpccl_ucx_worker(mpccl_transport_t *t)
{
    return t && t->ops == &ucx_ops ? ((mpccl_ucx_tp_t *)t->impl)->worker : NULL;
}

ucp_ep_h mpccl_ucx_ep(mpccl_transport_t *t, int peer)
{
    if (!t || t->ops != &ucx_ops || peer < 0 || peer >= t->nranks) return NULL;
    return ((mpccl_ucx_tp_t *)t->impl)->peers[peer].ep;
}

static const struct mpccl_transport_ops ucx_ops = {
    .isend = ucx_isend,
    .irecv = ucx_irecv,
    .progress = ucx_progress,
    .idle = ucx_idle,
    .cancel = ucx_cancel,
    .close = ucx_close,
    .put = ucx_put,
    .put_region = ucx_put_region,
    .fence = ucx_fence,
    .atomic_add = ucx_atomic_add,
    .flush = ucx_flush,
    .drains = ucx_drains,
    .eager_max = mpccl_ucx_eager_max,
    .arm = ucx_arm,
    .region_open = ucx_region_open,
    .region_close = ucx_region_close,
    .isend_region = ucx_isend_region,
    .irecv_region = ucx_irecv_region,
};

mpccl_status_t mpccl_ucx_transport_create(mpccl_bootstrap_t *bs, mpccl_transport_t **out)
{
    return mpccl_ucx_transport_create_local(bs, NULL, out);
}

mpccl_status_t mpccl_ucx_transport_create_local(mpccl_bootstrap_t *bs, const unsigned char *same_machine,
                                                mpccl_transport_t **out)
{
    ucp_context_h ctx;
    MPCCL_CHECK(mpccl_ucx_context(&ctx));
    mpccl_status_t st = MPCCL_OK;
    unsigned char *all = NULL;
    size_t stride = 0;
    mpccl_ucx_tp_t *tp = calloc(1, sizeof(*tp));
    if (tp) tp->peers = calloc((size_t)bs->nranks, sizeof(mpccl_ucx_peer_t));
    if (tp == NULL || tp->peers == NULL) {
        if (tp) free(tp);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a UCX transport of %d ranks", bs->nranks);
    }
    tp->pub.ops = &ucx_ops;
    tp->pub.rank = bs->rank;
    tp->pub.nranks = bs->nranks;
    tp->pub.impl = tp;
    tp->inflight.next = tp->inflight.prev = &tp->inflight;
    tp->efd = -1;
    tp->close_timeout_ms = (long)mpccl_config_int("UCX_CLOSE_TIMEOUT");
    tp->idle_ns = idle_us_setting() * 1000;
    tp->spin_ns = spin_us_setting() * 1000;
    const char *mode = err_mode_setting();
    for (int i = 0; i < bs->nranks; i++) {
        tp->peers[i].tp = tp;
        tp->peers[i].rank = i;
        tp->peers[i].err_mode = err_mode_for(mode, same_machine && same_machine[i]);
        tp->peers[i].lanes_local = -1;
    }
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED; /* one thread at a time per communicator */
    ucs_status_t us = ucp_worker_create(ctx, &wp, &tp->worker);
    if (us != UCS_OK) {
        free(tp->peers);
        free(tp);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "ucp_worker_create: %s", ucs_status_string(us));
    }
    if (mpccl_ucx_has_wakeup() && ucp_worker_get_efd(tp->worker, &tp->efd) != UCS_OK) tp->efd = -1;
    MPCCL_CHECK_GOTO(exchange_addresses(tp, bs, &all, &stride), st, fail);
    MPCCL_CHECK_GOTO(connect_all(tp, all, stride), st, fail);
    mpccl_ucx_post_revoke_recv(tp);
    MPCCL_CHECK_GOTO(mpccl_ucx_complete_wireup(tp), st, fail);
    free(all);
    *out = &tp->pub;
    return MPCCL_OK;
fail:
    free(all);
    ucx_close(&tp->pub, 1);
    return st;
}
