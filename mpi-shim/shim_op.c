/* Point-to-point operations in flight, and the progress that moves them.
 *
 * An operation waits on one internal MPI request at a time; when it
 * completes, the operation's step runs (copy the data, answer the sender,
 * post the next request) or ends it.  The user holds a generalized request
 * that the shim completes at the end, so every completion call of MPI works
 * on it, and the intercepted ones (Wait*, Test*) progress every operation of
 * the process while they wait: a receive whose envelope has arrived is
 * served while its owner waits for something else, as MPI itself would. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim_p2p.h"

static pthread_mutex_t ops_lock = PTHREAD_MUTEX_INITIALIZER;
static shim_op_t *active;
static atomic_int nactive;

shim_op_t *mpccl_shim_op_new(void)
{
    shim_op_t *op = calloc(1, sizeof(*op));
    if (op == NULL) return NULL;
    op->ireq = MPI_REQUEST_NULL;
    op->greq = MPI_REQUEST_NULL;
    op->peer_world = -1;
    op->source = MPI_ANY_SOURCE;
    op->tag = MPI_ANY_TAG;
    return op;
}

void mpccl_shim_op_start(shim_op_t *op)
{
    pthread_mutex_lock(&ops_lock);
    op->prev = NULL;
    op->next = active;
    if (active) active->prev = op;
    active = op;
    op->linked = 1;
    atomic_fetch_add(&nactive, 1);
    pthread_mutex_unlock(&ops_lock);
}

/* Callers hold ops_lock. */
static void unlink_op(shim_op_t *op)
{
    if (!op->linked) return;
    if (op->prev) op->prev->next = op->next;
    else active = op->next;
    if (op->next) op->next->prev = op->prev;
    op->linked = 0;
    atomic_fetch_sub(&nactive, 1);
}

void mpccl_shim_op_status(const shim_op_t *op, MPI_Status *st)
{
    if (st == MPI_STATUS_IGNORE) return;
    st->MPI_SOURCE = op->source;
    st->MPI_TAG = op->tag;
    st->MPI_ERROR = op->error;
    PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)op->bytes);
    PMPI_Status_set_cancelled(st, op->cancelled);
}

static int greq_query(void *extra, MPI_Status *st)
{
    shim_op_t *op = extra;
    mpccl_shim_op_status(op, st);
    /* errors reach the user through the completion call (shim_wait.c) */
    if (st != MPI_STATUS_IGNORE) st->MPI_ERROR = MPI_SUCCESS;
    return MPI_SUCCESS;
}

static int greq_free(void *extra)
{
    shim_op_t *op = extra;
    /* Open MPI calls this once the request is both complete and freed by
     * the user (possibly inside our MPI_Grequest_complete). */
    if (atomic_load(&op->done)) {
        mpccl_shim_op_free(op);
    } else {
        atomic_store(&op->released, 1);
    }
    return MPI_SUCCESS;
}

static int greq_cancel(void *extra, int complete)
{
    shim_op_t *op = extra;
    /* Only a receive still waiting for its message can be cancelled; the
     * progress does it (MPI is not called back from inside MPI). */
    if (!complete) atomic_store(&op->cancel_asked, 1);
    return MPI_SUCCESS;
}

int mpccl_shim_op_handle(shim_op_t *op, MPI_Request *req)
{
    int rc = PMPI_Grequest_start(greq_query, greq_free, greq_cancel, op, &op->greq);
    if (rc == MPI_SUCCESS) *req = op->greq;
    return rc;
}

/* Callers hold ops_lock (progress) or own op alone (not started). */
void mpccl_shim_op_finish(shim_op_t *op)
{
    unlink_op(op);
    if (op->land_owned) mpccl_shim_land_free(op->land, op->land_owned);
    op->land = NULL;
    op->land_owned = 0;
    if (op->bounce) mpccl_shim_land_free(op->bounce, op->bounce_owned ? op->bounce_owned : 1);
    op->bounce = NULL;
    MPI_Request g = op->greq;
    int released = atomic_load(&op->released);
    atomic_store(&op->done, 1);
    if (g != MPI_REQUEST_NULL && op->error != MPI_SUCCESS) mpccl_shim_failed_add(g, op->comm, op->error);
    if (g != MPI_REQUEST_NULL) {
        /* May free op (the user already freed the request): not touched after. */
        PMPI_Grequest_complete(g);
        if (released) mpccl_shim_op_free(op);
    }
}

void mpccl_shim_op_free(shim_op_t *op)
{
    free(op);
}

pthread_mutex_t *mpccl_shim_ops_lock(void)
{
    return &ops_lock;
}

int mpccl_shim_ops_active(void)
{
    return atomic_load(&nactive) > 0;
}

/* What one pass of progress tests: every operation's internal request.
 * Only the thread holding ops_lock uses these (grown, never shrunk).  A pass
 * must look at every operation: a window of sends waits on the peer's
 * receives, which wait on ours, so leaving some for later can leave them
 * forever. */
static MPI_Request *pass_reqs;
static MPI_Status *pass_sts;
static shim_op_t **pass_ops;
static int *pass_idx, pass_cap;

static int pass_room(int need)
{
    if (need <= pass_cap) return 1;
    int cap = pass_cap ? pass_cap : 64;
    while (cap < need) cap *= 2;
    MPI_Request *r = realloc(pass_reqs, (size_t)cap * sizeof(*r));
    if (r) pass_reqs = r;
    MPI_Status *st = realloc(pass_sts, (size_t)cap * sizeof(*st));
    if (st) pass_sts = st;
    shim_op_t **o = realloc(pass_ops, (size_t)cap * sizeof(*o));
    if (o) pass_ops = o;
    int *ix = realloc(pass_idx, (size_t)cap * sizeof(*ix));
    if (ix) pass_idx = ix;
    if (!r || !st || !o || !ix) return 0;
    pass_cap = cap;
    return 1;
}

int mpccl_shim_progress(void)
{
    int n = 0, out = 0, finished = 0;
    if (atomic_load(&nactive) == 0) return 0;
    /* One thread progresses at a time; the others go on waiting. */
    if (pthread_mutex_trylock(&ops_lock) != 0) return 0;
    /* UCX transfers (and peers reading our memory) move on our progress */
    finished += mpccl_shim_ucx_progress();
    for (shim_op_t *op = active, *next; op; op = next) {
        next = op->next;
        if (op->poll && op->ireq == MPI_REQUEST_NULL) {
            if (op->poll(op)) {
                if (op->finish) op->finish(op);
                mpccl_shim_op_finish(op);
                finished++;
            }
            continue;
        }
        if (op->ireq == MPI_REQUEST_NULL) continue;
        if (atomic_load(&op->cancel_asked) && op->cancellable) {
            PMPI_Cancel(&op->ireq);
            op->cancellable = 0;
        }
        if (n == pass_cap && !pass_room(n + 1)) continue; /* out of memory: the rest next time */
        pass_ops[n] = op;
        pass_reqs[n++] = op->ireq;
    }
    MPI_Request *reqs = pass_reqs;
    MPI_Status *sts = pass_sts;
    shim_op_t **ops = pass_ops;
    int *idx = pass_idx;
    for (int i = 0; i < n; i++) sts[i].MPI_ERROR = MPI_SUCCESS; /* set by MPI only on errors */
    int rc = n ? PMPI_Testsome(n, reqs, &out, idx, sts) : MPI_SUCCESS;
    if (n && (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) && out != MPI_UNDEFINED) {
        for (int i = 0; i < out; i++) {
            shim_op_t *op = ops[idx[i]];
            op->ireq = MPI_REQUEST_NULL;
            op->step(op, &sts[i]); /* may free op */
            finished++;
        }
    }
    pthread_mutex_unlock(&ops_lock);
    return finished;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mpccl_shim_backoff_init(shim_backoff_t *b)
{
    b->spins = 0;
    b->start = b->last_check = now();
}

int mpccl_shim_peer_dead(int world_rank, const char *what)
{
    int pid = mpccl_shim_peer_pid(world_rank);
    if (world_rank >= 0 && pid > 0 && mpccl_shim_peer_host(world_rank) != mpccl_shim_hostid()) {
        /* another host: what UCX says of it (shim_ucx.c) */
        if (!mpccl_shim_ucx_peer_failed(world_rank)) return 0;
        SHIM_WARN("%s: rank %d of MPI_COMM_WORLD (pid %d on another host) is unreachable through UCX",
                  what ? what : "point-to-point", world_rank, pid);
        return 1;
    }
    if (world_rank < 0 || pid <= 0 || mpccl_shim_peer_host(world_rank) != mpccl_shim_hostid()) return 0;
    if (kill(pid, 0) == 0 || errno != ESRCH) return 0;
    SHIM_WARN("%s: rank %d of MPI_COMM_WORLD (pid %d on this host) died before the transfer finished",
              what ? what : "point-to-point", world_rank, pid);
    return 1;
}

/* Fails the operations whose peer on this host has died (kill(pid, 0)
 * says it is gone); returns how many. */
static int reap_dead_peers(void)
{
    int n = 0;
    pthread_mutex_lock(&ops_lock);
    for (shim_op_t *op = active, *next; op; op = next) {
        next = op->next;
        if (!mpccl_shim_peer_dead(op->peer_world, op->what)) continue;
        if (op->ireq != MPI_REQUEST_NULL) {
            PMPI_Cancel(&op->ireq);
            PMPI_Request_free(&op->ireq);
        }
        op->error = MPI_ERR_OTHER;
        op->dead_peer = 1;
        mpccl_shim_op_finish(op);
        n++;
    }
    pthread_mutex_unlock(&ops_lock);
    return n;
}

/* The polite wait itself; 1 when a second has passed since the last look
 * at the peers. */
static int backoff_wait(shim_backoff_t *b)
{
    int due = 0;
    b->spins++;
    if (b->spins < 256) return 0;
    double t = now();
    if (t - b->last_check > 1.0) {
        b->last_check = t;
        due = 1;
    }
    if (t - b->start < 0.01) {
        sched_yield();
    } else {
        /* Waited long: sleep, so oversubscribed ranks get the cores. */
        struct timespec ts = {0, t - b->start < 1.0 ? 20000 : 200000};
        nanosleep(&ts, NULL);
    }
    return due;
}

int mpccl_shim_backoff(shim_backoff_t *b)
{
    if (backoff_wait(b)) reap_dead_peers();
    return MPI_SUCCESS;
}

int mpccl_shim_backoff_due(shim_backoff_t *b)
{
    return backoff_wait(b);
}

int mpccl_shim_op_wait(shim_op_t *op)
{
    shim_backoff_t b;
    mpccl_shim_backoff_init(&b);
    while (!atomic_load(&op->done)) {
        if (mpccl_shim_progress() == 0 && !atomic_load(&op->done)) mpccl_shim_backoff(&b);
    }
    return op->error;
}

void mpccl_shim_p2p_fini(void)
{
    shim_backoff_t b;
    mpccl_shim_backoff_init(&b);
    /* A peer may still be copying from us or answering: a bounded drain. */
    while (mpccl_shim_ops_active() && b.spins < 1000000) {
        if (mpccl_shim_progress() == 0) mpccl_shim_backoff(&b);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - b.start > 5.0) {
            SHIM_WARN("MPI_Finalize: %d point-to-point transfers still unfinished after 5 s",
                      atomic_load(&nactive));
            break;
        }
    }
    mpccl_shim_stash_fini();
    mpccl_shim_ipc_fini();
    mpccl_shim_ucx_fini();
    mpccl_shim_world_fini();
}
