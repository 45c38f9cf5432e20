/* Leaving a host call with nothing owed to the peers: see comm_drain.h.
 * Between ranks of one machine UCX carries messages through shared memory,
 * whose queues are small: the acknowledgement of a rendezvous receive, or the
 * completion of an emulated put or atomic, may find the peer's queue full and
 * wait in this rank's endpoint, sent only when the worker is progressed
 * again.  Each endpoint is flushed: UCX 1.13's worker flush returns once its
 * interfaces are flushed, with such messages still queued on endpoints; and
 * only the endpoints to peers the call received from (comm_drain.h). */
#include <stdlib.h>

#include "core/comm_drain.h"
#include "core/comm_fail.h"
#include "core/transport.h"
#include "util/clock.h"
#include "util/config.h"

/* The flushes of every peer of every communicator, progressed together. */
typedef struct drain {
    ncclComm_t *comms;
    int ncomms;
    mpccl_req_t *reqs; /* comms[c]'s peer p at first[c] + p */
    size_t *first;
    size_t nreqs;
    unsigned char *ignore; /* per request: its peer ended, its result does not count */
} drain_t;

static void cancel_all(drain_t *d)
{
    for (int c = 0; c < d->ncomms; c++) {
        mpccl_transport_t *t = d->comms[c]->transport;
        for (int p = 0; p < d->comms[c]->nranks; p++) t->ops->cancel(t, &d->reqs[d->first[c] + (size_t)p]);
    }
}

/* The call is complete: what it may still owe a peer that ended (it
 * finalized and exited, or died) is owed to nobody, so that peer's flush is
 * cancelled and its result ignored.  A death is failed by the next call that
 * needs the rank, or by a revoke. */
static int needs_none(void *arg, int rank)
{
    (void)arg, (void)rank;
    return 0;
}

static void skip_dead(drain_t *d, int c)
{
    ncclComm_t comm = d->comms[c];
    for (int p = 0; p < comm->nranks; p++) {
        size_t i = d->first[c] + (size_t)p;
        if (d->ignore[i] || !mpccl_comm_peer_dead(comm, p)) continue;
        d->ignore[i] = 1;
        if (!__atomic_load_n(&d->reqs[i].done, __ATOMIC_ACQUIRE)) comm->transport->ops->cancel(comm->transport, &d->reqs[i]);
    }
}

static mpccl_status_t post_all(drain_t *d, const unsigned char *want)
{
    for (size_t i = 0; i < d->nreqs; i++) {
        d->reqs[i].done = 1;
        d->reqs[i].status = MPCCL_OK;
        d->reqs[i].impl = NULL;
    }
    for (int c = 0; c < d->ncomms; c++) {
        ncclComm_t comm = d->comms[c];
        for (int p = 0; p < comm->nranks; p++)
            if (p != comm->rank && want[d->first[c] + (size_t)p] && comm->transport->ops->drains(comm->transport, p))
                MPCCL_CHECK(comm->transport->ops->flush(comm->transport, p, &d->reqs[d->first[c] + (size_t)p]));
    }
    return MPCCL_OK;
}

static mpccl_status_t wait_all(drain_t *d, const char *fn)
{
    int64_t timeout = mpccl_config_int("OP_TIMEOUT");
    double start = timeout > 0 ? mpccl_now_seconds() : 0;
    unsigned idle = 0;
    for (;;) {
        int pending = 0, events = 0;
        mpccl_transport_t *idle_on = NULL;
        for (int c = 0; c < d->ncomms; c++) {
            int left = 0;
            for (int p = 0; p < d->comms[c]->nranks && !left; p++)
                left = !__atomic_load_n(&d->reqs[d->first[c] + (size_t)p].done, __ATOMIC_ACQUIRE);
            if (!left) continue;
            pending++;
            idle_on = d->comms[c]->transport;
            events += idle_on->ops->progress(idle_on);
        }
        if (!pending) break;
        if (events) {
            idle = 0;
            continue;
        }
        if (++idle <= 16) continue;
        idle_on->ops->idle(idle_on);
        for (int c = 0; c < d->ncomms; c++) {
            skip_dead(d, c);
            if (!mpccl_comm_failed_idle_for(d->comms[c], needs_none, NULL)) continue;
            /* a peer died or revoked (comm_fail.h): nothing more can be owed to it */
            cancel_all(d);
            mpccl_comm_send_revoke(d->comms[c]);
            return mpccl_comm_fail_report(d->comms[c], fn);
        }
        if (timeout > 0 && mpccl_now_seconds() - start > (double)timeout) {
            cancel_all(d);
            return mpccl_fail(MPCCL_ERR_REMOTE,
                              "%s: rank %d: its last messages did not leave within MPCCL_OP_TIMEOUT=%lld s "
                              "(a peer stopped receiving)",
                              fn, d->comms[0]->rank, (long long)timeout);
        }
    }
    /* A flush that failed: the connection to that peer broke, and the
     * communicator fails as a call's failed transfer would fail it. */
    for (int c = 0; c < d->ncomms; c++)
        for (int p = 0; p < d->comms[c]->nranks; p++) {
            size_t i = d->first[c] + (size_t)p;
            if (d->reqs[i].status == MPCCL_OK || d->ignore[i]) continue;
            mpccl_comm_set_error(d->comms[c], d->reqs[i].status);
            mpccl_comm_send_revoke(d->comms[c]);
            return d->reqs[i].status;
        }
    return MPCCL_OK;
}

mpccl_status_t mpccl_comm_drain_all(ncclComm_t *comms, const unsigned char *const *from, int n, const char *fn)
{
    drain_t d = {0};
    unsigned char *want = NULL;
    int *slot = malloc(sizeof(int) * (size_t)(n ? n : 1));
    d.comms = malloc(sizeof(*d.comms) * (size_t)(n ? n : 1));
    d.first = malloc(sizeof(*d.first) * (size_t)(n ? n : 1));
    if (d.comms == NULL || d.first == NULL || slot == NULL) {
        free(d.comms);
        free(d.first);
        free(slot);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory draining %d communicators", fn, n);
    }
    for (int i = 0; i < n; i++) {
        slot[i] = -1;
        for (int j = 0; j < d.ncomms && slot[i] < 0; j++)
            if (d.comms[j] == comms[i]) slot[i] = j;
        mpccl_transport_t *t = comms[i]->transport;
        if (slot[i] >= 0 || t == NULL || t->ops->flush == NULL || t->ops->drains == NULL) continue;
        slot[i] = d.ncomms;
        d.first[d.ncomms] = d.nreqs;
        d.comms[d.ncomms++] = comms[i];
        d.nreqs += (size_t)comms[i]->nranks;
    }
    mpccl_status_t st = MPCCL_OK;
    if (d.nreqs) {
        d.reqs = calloc(d.nreqs, sizeof(*d.reqs));
        d.ignore = calloc(d.nreqs, 1);
        want = calloc(d.nreqs, 1);
        for (int i = 0; want && i < n; i++)
            for (int p = 0; slot[i] >= 0 && from[i] && p < comms[i]->nranks; p++)
                want[d.first[slot[i]] + (size_t)p] |= from[i][p];
        st = d.reqs && want && d.ignore ? post_all(&d, want)
                            : mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory for %zu flushes", fn, d.nreqs);
        if (st == MPCCL_OK) st = wait_all(&d, fn);
        else if (d.reqs && want && d.ignore) cancel_all(&d); /* posted flushes must not write into freed storage */
    }
    free(want);
    free(slot);
    free(d.reqs);
    free(d.ignore);
    free(d.comms);
    free(d.first);
    return st;
}

mpccl_status_t mpccl_comm_drain(ncclComm_t comm, const unsigned char *from, const char *fn)
{
    return mpccl_comm_drain_all(&comm, &from, 1, fn);
}
