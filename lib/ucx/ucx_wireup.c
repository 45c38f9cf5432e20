/* Network endpoints finish connecting before the transport is handed out
 * (ucx_tp.h, mpccl_ucx_complete_wireup).
 *
 * ucp_ep_create only starts the handshake; UCX completes it from later
 * progress, so on a loaded machine a pair may still be connecting when the
 * first calls run, and when a peer dies then, the survivors handle connection
 * packets of a half-open connection.  UCX 1.13's tcp transport can abort the
 * process there (a survivor crashed in uct_tcp_cm_handle_conn_pkt while
 * another rank had been killed).
 *
 * Two phases.  A flush of an endpoint completes only once every lane of it is
 * connected, so each rank first flushes its endpoints to its network peers.
 * A handshake needs both sides' progress, and a rank whose own flushes are done
 * may still owe a peer the answers that complete the peer's: so each rank then
 * sends every network peer a note and keeps progressing until it has every
 * peer's note, sent only after that peer's flushes were done.  Shared-memory
 * endpoints (error mode none) have no handshake to wait for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/bootstrap_net.h"
#include "util/clock.h"
#include "util/log.h"
#include "ucx_tp.h"

typedef struct {
    mpccl_ucx_tp_t *tp;
    int64_t deadline_ns;
} wireup_t;

static int is_network_peer(const mpccl_ucx_tp_t *tp, int i)
{
    return i != tp->pub.rank && tp->peers[i].err_mode == UCP_ERR_HANDLING_MODE_PEER;
}

/* Between two rounds of checks: progress, else sleep on the worker's fd
 * (ranks may share a core).  Fails on an abort or at the deadline. */
static mpccl_status_t wait_step(wireup_t *w, const char *what, int pending, int first_late)
{
    mpccl_transport_t *t = &w->tp->pub;
    if (mpccl_bootstrap_cancelled()) {
        char msg[96];
        snprintf(msg, sizeof(msg), "rank %d: UCX endpoints %s", t->rank, what);
        return mpccl_bootstrap_fail_cancelled(msg);
    }
    if (mpccl_now_ns() > w->deadline_ns)
        return mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: %d UCX peers (the first rank %d) not done %s after %d s "
                          "(MPCCL_BOOTSTRAP_TIMEOUT)", t->rank, pending, first_late, what,
                          mpccl_bootstrap_timeout_s());
    if (t->ops->progress(t) == 0) t->ops->idle(t);
    return MPCCL_OK;
}

/* Phase 1: every endpoint to a network peer flushed (connected). */
static mpccl_status_t flush_all(wireup_t *w, ucs_status_ptr_t *sp)
{
    mpccl_ucx_tp_t *tp = w->tp;
    int n = tp->pub.nranks, pending = 0;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    for (int i = 0; i < n; i++) {
        if (!is_network_peer(tp, i)) continue;
        sp[i] = ucp_ep_flush_nbx(tp->peers[i].ep, &prm);
        if (UCS_PTR_IS_ERR(sp[i])) {
            ucs_status_t us = UCS_PTR_STATUS(sp[i]);
            sp[i] = NULL;
            return mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: the UCX connection to rank %d failed while it was set "
                              "up: %s", tp->pub.rank, i, ucs_status_string(us));
        }
        pending += sp[i] != NULL;
    }
    mpccl_status_t st = MPCCL_OK;
    while (pending > 0 && st == MPCCL_OK) {
        int first_late = -1;
        for (int i = 0; i < n && st == MPCCL_OK; i++) {
            if (sp[i] == NULL) continue;
            ucs_status_t us = ucp_request_check_status(sp[i]);
            if (us == UCS_INPROGRESS) {
                if (first_late < 0) first_late = i;
                continue;
            }
            ucp_request_free(sp[i]);
            sp[i] = NULL;
            pending--;
            if (us != UCS_OK)
                st = mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: the UCX connection to rank %d failed while it was set "
                                "up: %s", tp->pub.rank, i, ucs_status_string(us));
        }
        if (st == MPCCL_OK && pending > 0) st = wait_step(w, "connecting", pending, first_late);
    }
    return st;
}

/* Phase 2: a note to and from every network peer. */
static mpccl_status_t exchange_notes(wireup_t *w, mpccl_req_t *sends, mpccl_req_t *recvs)
{
    mpccl_ucx_tp_t *tp = w->tp;
    mpccl_transport_t *t = &tp->pub;
    static char note; /* zero bytes are sent; the buffer only has to exist */
    int n = t->nranks;
    for (int i = 0; i < n; i++) {
        if (!is_network_peer(tp, i)) continue;
        MPCCL_CHECK(t->ops->irecv(t, i, MPCCL_WIREUP_NOTE_TAG(i), &note, 0, &recvs[i]));
        MPCCL_CHECK(t->ops->isend(t, i, MPCCL_WIREUP_NOTE_TAG(t->rank), &note, 0, &sends[i]));
    }
    for (;;) {
        int pending = 0, first_late = -1;
        for (int i = 0; i < n; i++) {
            if (!is_network_peer(tp, i)) continue;
            for (int k = 0; k < 2; k++) {
                mpccl_req_t *r = k ? &recvs[i] : &sends[i];
                if (r->done && r->status != MPCCL_OK) return r->status; /* names the connection */
                if (!r->done && first_late < 0) first_late = i;
                pending += !r->done;
            }
        }
        if (pending == 0) return MPCCL_OK;
        MPCCL_CHECK(wait_step(w, "with the connection notes", pending, first_late));
    }
}

mpccl_status_t mpccl_ucx_complete_wireup(mpccl_ucx_tp_t *tp)
{
    int n = tp->pub.nranks, any = 0;
    for (int i = 0; i < n; i++) any |= is_network_peer(tp, i);
    if (!any) return MPCCL_OK;
    ucs_status_ptr_t *sp = calloc((size_t)n, sizeof(*sp));
    mpccl_req_t *reqs = calloc((size_t)n * 2, sizeof(*reqs));
    if (sp == NULL || reqs == NULL) {
        free(sp);
        free(reqs);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the UCX wireup of %d ranks", n);
    }
    for (int i = 0; i < 2 * n; i++) reqs[i].done = 1; /* not posted */
    wireup_t w = {.tp = tp, .deadline_ns = mpccl_now_ns() + (int64_t)mpccl_bootstrap_timeout_s() * 1000000000};
    mpccl_status_t st = flush_all(&w, sp);
    if (st == MPCCL_OK) st = exchange_notes(&w, reqs, reqs + n);
    /* On failure: flushes still pending are dropped, notes still posted are
     * cancelled; the caller then closes the endpoints. */
    for (int i = 0; i < n; i++) {
        if (sp[i]) ucp_request_free(sp[i]);
        tp->pub.ops->cancel(&tp->pub, &reqs[i]);
        tp->pub.ops->cancel(&tp->pub, &reqs[n + i]);
    }
    free(sp);
    free(reqs);
    tp->idle_since = 0;
    if (st == MPCCL_OK) MPCCL_TRACE(MPCCL_SUB_NET, "rank %d: UCX network endpoints connected", tp->pub.rank);
    return st;
}
