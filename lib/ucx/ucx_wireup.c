/* Network endpoints finish connecting before the transport is handed out
 * (ucx_tp.h, mpccl_ucx_complete_wireup).
 *
 * ucp_ep_create only starts the handshake; UCX completes it from later
 * progress, so on a loaded machine a pair may still be connecting when the
 * first calls run, and when a peer dies then, the survivors handle connection
 * packets of a half-open connection.  UCX 1.13's tcp transport can abort the
 * process there (a survivor crashed in uct_tcp_cm_handle_conn_pkt while
 * another rank had been killed).  A flush of an endpoint completes only once
 * every lane of it is connected, so flushing each network endpoint here, with
 * every rank doing the same, leaves no connection to set up later.
 * Shared-memory endpoints (error mode none) have no such handshake. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/bootstrap_net.h"
#include "util/log.h"
#include "ucx_tp.h"

static int64_t wireup_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

mpccl_status_t mpccl_ucx_complete_wireup(mpccl_ucx_tp_t *tp)
{
    int n = tp->pub.nranks, pending = 0;
    ucs_status_ptr_t *sp = calloc((size_t)n, sizeof(*sp));
    if (sp == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the UCX wireup of %d ranks", n);
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    mpccl_status_t st = MPCCL_OK;
    for (int i = 0; i < n && st == MPCCL_OK; i++) {
        if (i == tp->pub.rank || tp->peers[i].err_mode != UCP_ERR_HANDLING_MODE_PEER) continue;
        sp[i] = ucp_ep_flush_nbx(tp->peers[i].ep, &prm);
        if (UCS_PTR_IS_ERR(sp[i]))
            st = mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: the UCX connection to rank %d failed while it was set up: %s",
                            tp->pub.rank, i, ucs_status_string(UCS_PTR_STATUS(sp[i])));
        if (UCS_PTR_IS_PTR(sp[i])) pending++;
        else sp[i] = NULL;
    }
    int64_t deadline = wireup_now_ns() + (int64_t)mpccl_bootstrap_timeout_s() * 1000000000;
    while (pending > 0 && st == MPCCL_OK) {
        unsigned progressed = ucp_worker_progress(tp->worker);
        for (int i = 0; i < n && st == MPCCL_OK; i++) {
            if (sp[i] == NULL) continue;
            ucs_status_t us = ucp_request_check_status(sp[i]);
            if (us == UCS_INPROGRESS) continue;
            ucp_request_free(sp[i]);
            sp[i] = NULL;
            pending--;
            if (us != UCS_OK)
                st = mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: the UCX connection to rank %d failed while it was set "
                                "up: %s", tp->pub.rank, i, ucs_status_string(us));
        }
        if (st != MPCCL_OK || pending == 0) break;
        if (mpccl_bootstrap_cancelled())
            st = mpccl_fail(MPCCL_ERR_USAGE, "rank %d: communicator aborted while its UCX connections were set up",
                            tp->pub.rank);
        else if (wireup_now_ns() > deadline) {
            int late = 0;
            while (sp[late] == NULL) late++;
            st = mpccl_fail(MPCCL_ERR_REMOTE, "rank %d: %d UCX connections (the first to rank %d) not set up after "
                            "%d s (MPCCL_BOOTSTRAP_TIMEOUT)", tp->pub.rank, pending, late,
                            mpccl_bootstrap_timeout_s());
        } else if (progressed == 0)
            tp->pub.ops->idle(&tp->pub); /* sleeps on the worker's fd: ranks may share a core */
        else
            tp->idle_since = 0;
    }
    /* On failure the flushes still pending are dropped: the endpoints are
     * closed by the caller's cleanup, which ends them. */
    for (int i = 0; i < n; i++)
        if (sp[i]) ucp_request_free(sp[i]);
    free(sp);
    tp->idle_since = 0;
    if (st == MPCCL_OK) MPCCL_TRACE(MPCCL_SUB_NET, "rank %d: UCX network endpoints connected", tp->pub.rank);
    return st;
}
