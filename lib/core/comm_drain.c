/* Leaving a host call with nothing owed to the peers: see comm_drain.h.
 * Between ranks of one machine UCX carries messages through shared memory,
 * whose queues are small: the acknowledgement of a rendezvous receive, or the
 * completion of an emulated put or atomic, may find the peer's queue full and
 * wait in this rank's worker, sent only when the worker is progressed again. */
#include <sched.h>
#include <time.h>

#include "core/comm_drain.h"
#include "core/comm_fail.h"
#include "core/transport.h"
#include "util/config.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { DRAIN_BATCH = 16 };

/* Drains up to DRAIN_BATCH communicators with distinct transports. */
static mpccl_status_t drain_batch(ncclComm_t *comms, int n, const char *fn)
{
    mpccl_req_t req[DRAIN_BATCH];
    int posted = 0;
    mpccl_status_t st = MPCCL_OK;
    for (int i = 0; i < n; i++) {
        mpccl_transport_t *t = comms[i]->transport;
        req[i].done = 1;
        req[i].status = MPCCL_OK;
        if (t == NULL || t->ops->flush == NULL) continue;
        st = t->ops->flush(t, -1, &req[i]);
        if (st != MPCCL_OK) break;
        posted = i + 1;
    }
    int64_t timeout = mpccl_config_int("OP_TIMEOUT");
    double start = timeout > 0 ? now_seconds() : 0;
    unsigned idle = 0;
    for (;;) {
        int pending = 0, events = 0;
        mpccl_transport_t *idle_on = NULL;
        for (int i = 0; i < posted; i++) {
            if (__atomic_load_n(&req[i].done, __ATOMIC_ACQUIRE)) continue;
            pending++;
            idle_on = comms[i]->transport;
            events += idle_on->ops->progress(idle_on);
        }
        if (!pending) break;
        if (events) {
            idle = 0;
            continue;
        }
        if (++idle <= 16) continue;
        idle_on->ops->idle(idle_on);
        for (int i = 0; i < posted; i++) {
            if (req[i].done || !mpccl_comm_failed_idle(comms[i])) continue;
            /* a peer died or revoked (comm_fail.h): nothing more can be owed to it */
            for (int j = 0; j < posted; j++) comms[j]->transport->ops->cancel(comms[j]->transport, &req[j]);
            mpccl_comm_send_revoke(comms[i]);
            return mpccl_comm_fail_report(comms[i], fn);
        }
        if (timeout > 0 && now_seconds() - start > (double)timeout) {
            for (int j = 0; j < posted; j++) comms[j]->transport->ops->cancel(comms[j]->transport, &req[j]);
            return mpccl_fail(MPCCL_ERR_REMOTE,
                              "%s: rank %d: its last messages did not leave within MPCCL_OP_TIMEOUT=%lld s "
                              "(a peer stopped receiving)",
                              fn, comms[0]->rank, (long long)timeout);
        }
    }
    for (int i = 0; i < posted && st == MPCCL_OK; i++) st = req[i].status;
    return st;
}

mpccl_status_t mpccl_comm_drain_all(ncclComm_t *comms, int n, const char *fn)
{
    ncclComm_t batch[DRAIN_BATCH];
    int nb = 0;
    mpccl_status_t st = MPCCL_OK;
    /* Larger groups drain in batches; each batch progresses its members together. */
    for (int i = 0; i < n && st == MPCCL_OK; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = comms[j] == comms[i];
        if (seen || comms[i]->transport == NULL) continue;
        batch[nb++] = comms[i];
        if (nb == DRAIN_BATCH) {
            st = drain_batch(batch, nb, fn);
            nb = 0;
        }
    }
    if (st == MPCCL_OK && nb) st = drain_batch(batch, nb, fn);
    return st;
}

mpccl_status_t mpccl_comm_drain(ncclComm_t comm, const char *fn)
{
    return mpccl_comm_drain_all(&comm, 1, fn);
}
