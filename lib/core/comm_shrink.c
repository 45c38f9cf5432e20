/* ncclCommShrink: the surviving ranks form a child without the excluded ones. */
#include <stdio.h>
#include <stdlib.h>

#include "core/comm_fail.h"
#include "core/comm_init.h"
#include "core/group.h"
#include "core/shrink_door.h"
#include "core/tags.h"
#include "util/log.h"

/* The excluded ranks may be dead, so nothing collective over the parent can
 * be used: the lowest surviving rank makes the child's bootstrap id and hands
 * it to every other survivor at its door, a socket each rank listens on from
 * setup (core/shrink_door.h), never touching an excluded rank; then the
 * survivors join that bootstrap as ncclCommInitRank does, in parent order.
 * Where a rank has no door, the id goes over the parent's transport instead,
 * with a reserved tag: the proxy's tag space with a CTA index no launch uses
 * (core/tags.h). */

/* Waits for req, exchanged with peer; gives up when peer dies meanwhile. */
static mpccl_status_t wait_req(ncclComm_t comm, int peer, mpccl_req_t *req)
{
    mpccl_transport_t *t = comm->transport;
    while (!req->done) {
        if (mpccl_bootstrap_cancelled()) { /* this child or the parent is being aborted */
            t->ops->cancel(t, req);
            return mpccl_fail(MPCCL_ERR_USAGE, "ncclCommShrink: given up waiting for rank %d, the communicator "
                              "was aborted (ncclCommAbort)", peer);
        }
        if (mpccl_comm_peer_dead(comm, peer)) {
            t->ops->cancel(t, req);
            return mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: rank %d died during the shrink (exclude it too)",
                              peer);
        }
        if (t->ops->progress(t) == 0) t->ops->idle(t);
    }
    return req->status;
}

/* The survivors already served wait at the child's bootstrap root, in this
 * process (the maker's): fail them now rather than at its timeout, keeping
 * this shrink's own failure as the last error. */
static void withdraw_child_id(mpccl_init_job_t *job)
{
    char why[512];
    snprintf(why, sizeof(why), "%s", mpccl_last_error());
    (void)mpccl_socket_withdraw_unique_id(job->id.internal);
    mpccl_record_error(why);
}

static mpccl_status_t shrink_share_id(mpccl_init_job_t *job)
{
    ncclComm_t parent = job->parent;
    mpccl_transport_t *t = parent->transport;
    if (t == NULL)
        return mpccl_fail(MPCCL_ERR_USAGE, "ncclCommShrink: the parent communicator was finalized (its transport "
                          "is closed)");
    int root = job->survivors[0];
    mpccl_status_t st = MPCCL_OK;
    if (parent->rank == root) {
        MPCCL_CHECK(mpccl_socket_get_unique_id(job->id.internal));
        int lost = -1;
        for (int i = 1; i < job->nranks; i++) {
            int peer = job->survivors[i];
            const mpccl_sockaddr_t *door = mpccl_comm_door_to(parent, peer);
            if (st != MPCCL_OK) {
                /* The survivors not served yet wait at their doors: tell
                 * them, or they wait for an id that never comes. */
                if (door && lost >= 0) mpccl_shrink_door_send_failure(parent, peer, door, lost);
                continue;
            }
            if (door) {
                st = mpccl_shrink_door_send(parent, peer, door, &job->id, sizeof(job->id));
                if (st != MPCCL_OK) lost = peer;
                continue;
            }
            mpccl_req_t req = {0};
            st = t->ops->isend(t, peer, mpccl_tag_shrink(root), &job->id, sizeof(job->id), &req);
            if (st == MPCCL_OK) st = wait_req(parent, peer, &req);
        }
        if (st != MPCCL_OK) withdraw_child_id(job);
    } else if (mpccl_comm_door_to(parent, root)) {
        st = mpccl_shrink_door_recv(parent, mpccl_comm_door_fd(parent), root, mpccl_comm_door_to(parent, root),
                                    &job->id, sizeof(job->id));
    } else {
        mpccl_req_t req = {0};
        st = t->ops->irecv(t, root, mpccl_tag_shrink(root), &job->id, sizeof(job->id), &req);
        if (st == MPCCL_OK) st = wait_req(parent, root, &req);
    }
    return st;
}

/* The child's rendezvous gives up when a survivor dies meanwhile: as the
 * parent learns it (the peer watcher, UCX), and, on the rank that made the
 * child's id, by knocking on the other survivors' doors once a second (a dead
 * process's door refuses), since nothing else may report a peer on another
 * machine that has nothing in flight.  Returns that survivor's rank in the
 * child, or -1.  Only while the shrink still holds the parent. */
#define SURVIVOR_KNOCK_MS 1000

typedef struct {
    mpccl_init_job_t *job;
    int64_t next_knock_ms; /* 0: this rank does not knock */
} survivor_watch_t;

static int survivor_lost(void *arg)
{
    survivor_watch_t *w = arg;
    mpccl_init_job_t *job = w->job;
    for (int i = 0; i < job->nranks; i++)
        if (i != job->rank && mpccl_comm_peer_dead(job->parent, job->survivors[i])) return i;
    if (w->next_knock_ms == 0 || mpccl_socket_now_ms() < w->next_knock_ms) return -1;
    for (int i = 0; i < job->nranks; i++) {
        const mpccl_sockaddr_t *door = mpccl_comm_door_addr(job->parent, job->survivors[i]);
        if (i != job->rank && door && mpccl_shrink_door_refuses(door)) return i;
    }
    w->next_knock_ms = mpccl_socket_now_ms() + SURVIVOR_KNOCK_MS;
    return -1;
}

static mpccl_status_t init_shrink(void *arg)
{
    mpccl_init_job_t *job = arg;
    mpccl_bootstrap_t bs = {0};
    mpccl_log_set_rank(job->rank);
    ncclComm_t parent = job->parent;
    mpccl_bootstrap_set_cancel(&job->comm->aborting, &parent->aborting);
    /* The child's listeners keep off the parent's doors: one freed by a dead
     * survivor and taken again would answer the knocks below for it. */
    uint16_t *door_ports = calloc((size_t)parent->nranks, sizeof(*door_ports));
    int ndoors = 0;
    for (int r = 0; door_ports && r < parent->nranks; r++) {
        const mpccl_sockaddr_t *door = mpccl_comm_door_addr(parent, r);
        if (door) door_ports[ndoors++] = mpccl_sockaddr_port(door);
    }
    mpccl_socket_avoid_ports(door_ports, ndoors);
    mpccl_status_t st = shrink_share_id(job);
    if (st == MPCCL_OK) {
        int maker = parent->rank == job->survivors[0];
        survivor_watch_t watch = {.job = job, .next_knock_ms = maker ? mpccl_socket_now_ms() + SURVIVOR_KNOCK_MS : 0};
        mpccl_bootstrap_set_watch(survivor_lost, &watch);
        st = mpccl_socket_bootstrap_create(job->id.internal, job->rank, job->nranks, &bs);
        mpccl_bootstrap_set_watch(NULL, NULL); /* before the withdrawal, which it would count as a loss too */
        if (st != MPCCL_OK && maker) withdraw_child_id(job);
    }
    mpccl_socket_avoid_ports(NULL, 0);
    free(door_ports);
    if (st == MPCCL_OK)
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommShrink: parent rank %d -> rank %d of %d", job->parent->rank, job->rank,
                   job->nranks);
    free(job->survivors);
    job->survivors = NULL;
    mpccl_comm_leave(parent); /* entered by mpccl_comm_shrink */
    mpccl_bootstrap_set_cancel(&job->comm->aborting, NULL);
    st = mpccl_init_job_finish(job, &bs, st);
    mpccl_bootstrap_set_cancel(NULL, NULL); /* the child may be gone */
    return st;
}

mpccl_status_t mpccl_comm_shrink(const char *fn, ncclComm_t parent, int *survivors, int count, int newrank,
                                 const ncclConfig_t *config, int abort, ncclComm_t *slot)
{
    /* The shrink uses the parent's transport until the id is shared: an
     * abort of the parent from another thread waits for it (comm_async.h). */
    mpccl_status_t st = mpccl_comm_enter(parent, fn);
    if (st != MPCCL_OK) {
        free(survivors);
        return st;
    }
    mpccl_init_job_t *job = mpccl_init_job_new(slot, config, newrank, count);
    if (!job) {
        mpccl_comm_leave(parent);
        free(survivors);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn);
    }
    job->cuda_dev = parent->cuda_dev;
    job->parent = parent;
    job->survivors = survivors;
    /* A survivor may still wait in a call for a rank that is gone: the revoke
     * ends it, so that it reaches this shrink too (host communicators: their
     * calls drive the transport from this thread). */
    if (abort && !parent->exec->on_streams) mpccl_comm_send_revoke(parent);
    /* GPU: the parent's kernels stop and exit before the child is built; the
     * parent takes no more work and keeps its mappings until it is destroyed. */
    if (abort && parent->exec->on_streams) {
        parent->exec->abort(parent);
        parent->revoked = 1;
    }
    return mpccl_group_defer_comm_init(job->comm, init_shrink, job);
}
