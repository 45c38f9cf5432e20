/* Group collection and the progress loop that runs a group's operations. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "build_config.h"
#include "util/config.h"
#include "core/group.h"
#include "core/comm_fail.h"
#include "algo/algo_p2p_schedule.h"
#include "core/estimate.h"
#include "util/log.h"
#ifdef MPCCL_HAVE_CUDA
#include "gpu/gpu_launch.h"
#endif

typedef struct mpccl_deferred_init {
    mpccl_init_fn_t fn;
    void *arg;
    mpccl_status_t status;
    pthread_t thread;
    struct mpccl_deferred_init *next;
} mpccl_deferred_init_t;

/* Per thread, like NCCL: a group belongs to the thread that started it. */
static __thread int group_depth;
static __thread mpccl_call_t *group_ops, *group_ops_tail;
static __thread mpccl_deferred_init_t *group_inits, *group_inits_tail;
static __thread mpccl_status_t group_error; /* first error recorded inside the group */

int mpccl_group_depth(void)
{
    return group_depth;
}

/* Freed call records, at most CALL_CACHE_MAX, shared by the process's
 * threads.  Not per thread: a pthread key to free a thread's cache at exit
 * collides with other libraries' keys when mpccl is loaded a second time with
 * dlmopen (mpccl-perf --compare), and a lock without contention costs less
 * than malloc and free. */
#define CALL_CACHE_MAX 256
static pthread_mutex_t call_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static mpccl_call_t *call_cache;
static int call_cache_n;

mpccl_call_t *mpccl_call_alloc(void)
{
    pthread_mutex_lock(&call_cache_mu);
    mpccl_call_t *op = call_cache;
    if (op) {
        call_cache = op->next;
        call_cache_n--;
    }
    pthread_mutex_unlock(&call_cache_mu);
    return op ? memset(op, 0, sizeof(*op)) : calloc(1, sizeof(*op));
}

void mpccl_call_free(mpccl_call_t *op)
{
    if (!op) return;
    if (op->exec) mpccl_exec_free(op->exec);
    mpccl_sched_free(&op->sched);
    pthread_mutex_lock(&call_cache_mu);
    int keep = call_cache_n < CALL_CACHE_MAX;
    if (keep) {
        op->next = call_cache;
        call_cache = op;
        call_cache_n++;
    }
    pthread_mutex_unlock(&call_cache_mu);
    if (!keep) free(op);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static mpccl_status_t start_op(mpccl_call_t *op)
{
    ncclComm_t c = op->comm;
    uint64_t *sseq = op->is_p2p ? c->p2p_send_seq : c->coll_send_seq;
    uint64_t *rseq = op->is_p2p ? c->p2p_recv_seq : c->coll_recv_seq;
    op->started = 1;
    return mpccl_exec_start(&op->task, c->transport, c->rank, sseq, rseq, &op->exec);
}

static int op_can_start(const mpccl_call_t *op)
{
    /* Collectives of one communicator run in program order (a later one may read
     * what an earlier one wrote); p2p calls of a group all run at once. */
    return op->is_p2p || op->prev_coll == NULL || op->prev_coll->done;
}

static void fail_comm(ncclComm_t comm, mpccl_status_t st)
{
    /* A peer or the network failed: the communicator is unusable; every rank
     * learns it (comm_fail.c). */
    if (st == MPCCL_ERR_REMOTE) {
        mpccl_comm_fail(comm, ncclRemoteError, "%s", mpccl_last_error());
        return;
    }
    if (comm->async_error == ncclSuccess) {
        switch (st) {
        case MPCCL_ERR_REMOTE: comm->async_error = ncclRemoteError; break;
        case MPCCL_ERR_SYSTEM: comm->async_error = ncclSystemError; break;
        case MPCCL_ERR_CUDA: comm->async_error = ncclUnhandledCudaError; break;
        default: comm->async_error = ncclInternalError; break;
        }
    }
}

/* ---- failures (comm_fail.c) ---- */

/* A failed communicator's call stops: its peers are told (revoke), and the
 * error returned names the failure and the call. */
static mpccl_status_t stop_failed(mpccl_call_t *ops, mpccl_status_t st)
{
    ncclComm_t failed = NULL;
    const mpccl_call_t *what = NULL;
    for (mpccl_call_t *op = ops; op; op = op->next)
        if (mpccl_comm_failed(op->comm)) {
            if (!op->comm->gpu) mpccl_comm_send_revoke(op->comm);
            if (!failed) failed = op->comm, what = op;
        }
    if (!failed) return st;
    char fn[64];
    snprintf(fn, sizeof(fn), "%s (%s)", mpccl_coll_name(what->desc.coll), ops->next ? "in a group" : "alone");
    return mpccl_comm_fail_report(failed, fn);
}

/* ---- the host progress loop ---- */

/* Progresses every op of the list until all are done or one fails. */
static mpccl_status_t run_ops(mpccl_call_t *ops)
{
    mpccl_status_t st = MPCCL_OK;
    int64_t timeout = mpccl_config_int("OP_TIMEOUT");
    double start = timeout > 0 ? now_seconds() : 0;
    unsigned idle_passes = 0;
    for (;;) {
        int pending = 0, events = 0;
        mpccl_transport_t *idle_on = NULL;
        for (mpccl_call_t *op = ops; op; op = op->next) {
            if (op->done) continue;
            if (!op->started) {
                if (!op_can_start(op)) {
                    pending++;
                    continue;
                }
                st = start_op(op);
                if (st != MPCCL_OK) {
                    fail_comm(op->comm, st);
                    return stop_failed(ops, st);
                }
                events++;
            }
            if (op->comm->transport) {
                events += op->comm->transport->ops->progress(op->comm->transport);
                idle_on = op->comm->transport;
            }
            int done = 0;
            st = mpccl_exec_progress(op->exec, &done);
            if (st == MPCCL_OK && !done && mpccl_comm_failed(op->comm)) st = MPCCL_ERR_REMOTE;
            if (st != MPCCL_OK) {
                fail_comm(op->comm, st);
                return stop_failed(ops, st);
            }
            if (done) {
                op->done = 1;
                events++;
            } else {
                pending++;
            }
        }
        if (!pending) return MPCCL_OK;
        if (events) {
            idle_passes = 0;
            continue;
        }
        /* Ranks oversubscribe cores in tests: give the CPU away while waiting. */
        if (++idle_passes > 16) {
            for (mpccl_call_t *op = ops; op; op = op->next)
                if (!op->done && mpccl_comm_failed_idle(op->comm)) return stop_failed(ops, MPCCL_ERR_REMOTE);
            if (idle_on) idle_on->ops->idle(idle_on);
            else sched_yield();
        }
        if (timeout > 0 && now_seconds() - start > (double)timeout) {
            st = mpccl_fail(MPCCL_ERR_REMOTE,
                            "operation did not complete within MPCCL_OP_TIMEOUT=%lld s: a peer is not "
                            "participating (it called a different collective, or died)",
                            (long long)timeout);
            for (mpccl_call_t *op = ops; op; op = op->next)
                if (!op->done) fail_comm(op->comm, MPCCL_ERR_REMOTE);
            return stop_failed(ops, st);
        }
    }
}

static void free_ops(mpccl_call_t *ops)
{
    while (ops) {
        mpccl_call_t *next = ops->next;
        mpccl_call_free(ops);
        ops = next;
    }
}

/* Links each collective to the previous collective of its communicator. */
static void link_collectives(mpccl_call_t *ops)
{
    for (mpccl_call_t *op = ops; op; op = op->next) {
        if (op->is_p2p) continue;
        for (mpccl_call_t *q = op->next; q; q = q->next)
            if (q->comm == op->comm && !q->is_p2p) {
                q->prev_coll = op;
                break;
            }
    }
}

#ifdef MPCCL_HAVE_CUDA
/* A communicator's p2p calls of a group: one launch when its call table holds
 * them, else launches cut so that none waits for a later one on another rank
 * (algo_p2p_schedule.h). */
static mpccl_status_t launch_p2p_calls(ncclComm_t comm, mpccl_call_t **p2p, int np)
{
    enum { TABLE = MPCCL_ENGINE_MAX_BUFS - 3 };
    if (np <= TABLE) return mpccl_gpu_launch_p2p(p2p, np);
    mpccl_p2p_call_ref_t *refs = malloc((size_t)np * sizeof(*refs));
    int *order = malloc((size_t)np * sizeof(*order));
    uint64_t *key = malloc((size_t)np * sizeof(*key));
    mpccl_call_t **batch = malloc((size_t)TABLE * sizeof(*batch));
    mpccl_status_t st = MPCCL_OK;
    int launches = -1;
    if (refs && order && key && batch) {
        for (int i = 0; i < np; i++) {
            refs[i].peer = p2p[i]->desc.root;
            refs[i].send = p2p[i]->desc.coll == MPCCL_COLL_SEND;
        }
        launches = mpccl_p2p_schedule(comm->rank, comm->nranks, refs, np, TABLE, order, key);
    }
    if (launches < 0) st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory scheduling a group of %d send/recv calls", np);
    else
        MPCCL_INFO(MPCCL_SUB_P2P, "group of %d send/recv calls on rank %d: %d launches", np, comm->rank, launches);
    for (int i = 0; i < np && st == MPCCL_OK;) {
        int m = 0;
        for (uint64_t k = key[i]; i < np && key[i] == k; i++) batch[m++] = p2p[order[i]];
        st = mpccl_gpu_launch_p2p(batch, m);
    }
    free(refs);
    free(order);
    free(key);
    free(batch);
    return st;
}
#endif

/* GPU calls only enqueue work on their streams.  Per communicator (in order of
 * first appearance): its collectives in program order, then its p2p calls as one
 * launch.  Every rank must put messages into a pair's channels in the same order,
 * and NCCL lets ranks order a group's p2p and collectives differently, so the
 * order is made canonical (NCCL gives no order inside a group either). */
static mpccl_status_t launch_gpu_calls(mpccl_call_t *ops)
{
#ifdef MPCCL_HAVE_CUDA
    mpccl_status_t st = MPCCL_OK;
    int n = 0;
    for (mpccl_call_t *op = ops; op; op = op->next) n++;
    /* groups of up to SMALL_GROUP calls (nearly all) allocate nothing */
    enum { SMALL_GROUP = 64 };
    mpccl_call_t *p2p_small[SMALL_GROUP];
    char done_small[SMALL_GROUP];
    int small = n <= SMALL_GROUP;
    mpccl_call_t **p2p = small ? p2p_small : calloc((size_t)n, sizeof(*p2p));
    char *done = small ? memset(done_small, 0, sizeof(done_small)) : calloc((size_t)n, 1);
    if (!p2p || !done) {
        if (!small) {
            free(p2p);
            free(done);
        }
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory launching a group of %d calls", n);
    }
    int i = 0;
    for (mpccl_call_t *first = ops; first && st == MPCCL_OK; first = first->next, i++) {
        if (done[i]) continue;
        ncclComm_t comm = first->comm;
        int np = 0, j = i;
        for (mpccl_call_t *op = first; op && st == MPCCL_OK; op = op->next, j++) {
            if (op->comm != comm) continue;
            done[j] = 1;
            if (op->is_p2p) p2p[np++] = op;
            else st = mpccl_gpu_launch(op);
        }
        if (np > 0 && st == MPCCL_OK) st = launch_p2p_calls(comm, p2p, np);
        if (st != MPCCL_OK) fail_comm(comm, st);
    }
    if (!small) {
        free(p2p);
        free(done);
    }
    return st;
#else
    (void)ops;
    return MPCCL_OK;
#endif
}

static int is_gpu_call(const mpccl_call_t *op)
{
    return op->comm->gpu != NULL;
}

/* Runs a list: GPU calls are launched, host calls progressed to completion. */
static mpccl_status_t run_calls(mpccl_call_t *ops)
{
    mpccl_call_t *gpu = NULL, **gtail = &gpu, *host = NULL, **htail = &host;
    while (ops) {
        mpccl_call_t *next = ops->next;
        ops->next = NULL;
        if (is_gpu_call(ops)) *gtail = ops, gtail = &ops->next;
        else *htail = ops, htail = &ops->next;
        ops = next;
    }
    mpccl_status_t st = launch_gpu_calls(gpu);
    if (st == MPCCL_OK && host) {
        link_collectives(host);
        st = run_ops(host);
    }
    free_ops(gpu);
    free_ops(host);
    return st;
}

mpccl_status_t mpccl_group_run_eager_gpu(mpccl_call_t *op)
{
#ifdef MPCCL_HAVE_CUDA
    op->next = NULL;
    mpccl_status_t st = op->is_p2p ? mpccl_gpu_launch_p2p(&op, 1) : mpccl_gpu_launch(op);
    if (st != MPCCL_OK) fail_comm(op->comm, st);
    return st;
#else
    (void)op;
    return mpccl_fail(MPCCL_ERR_INTERNAL, "a GPU call in a build without CUDA");
#endif
}

mpccl_status_t mpccl_group_enqueue(mpccl_call_t *op)
{
    op->next = NULL;
    if (group_depth == 0) {
        mpccl_status_t st = is_gpu_call(op) ? launch_gpu_calls(op) : run_ops(op);
        mpccl_call_free(op);
        return st;
    }
    if (group_ops_tail) group_ops_tail->next = op;
    else group_ops = op;
    group_ops_tail = op;
    return MPCCL_OK;
}

mpccl_status_t mpccl_group_defer_init(mpccl_init_fn_t fn, void *arg)
{
    if (group_depth == 0) return fn(arg);
    mpccl_deferred_init_t *d = calloc(1, sizeof(*d));
    if (!d) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory queueing a grouped communicator init");
    d->fn = fn;
    d->arg = arg;
    if (group_inits_tail) group_inits_tail->next = d;
    else group_inits = d;
    group_inits_tail = d;
    return MPCCL_OK;
}

mpccl_status_t mpccl_group_start(void)
{
    if (group_depth == 0) group_error = MPCCL_OK;
    group_depth++;
    return MPCCL_OK;
}

static void *init_thread_main(void *arg)
{
    mpccl_deferred_init_t *d = arg;
    d->status = d->fn(d->arg);
    return NULL;
}

/* Runs the group's inits, each in its own thread: they are collective with each
 * other (several ranks initialised from one thread). */
static mpccl_status_t run_inits(mpccl_deferred_init_t *inits)
{
    mpccl_status_t st = MPCCL_OK;
    int single = inits && !inits->next;
    for (mpccl_deferred_init_t *d = inits; d; d = d->next) {
        if (single) {
            d->status = d->fn(d->arg);
            d->thread = 0;
        } else if (pthread_create(&d->thread, NULL, init_thread_main, d) != 0) {
            d->status = d->fn(d->arg); /* cannot fail the others: run inline */
            d->thread = 0;
        }
    }
    for (mpccl_deferred_init_t *d = inits; d; d = d->next) {
        if (d->thread) pthread_join(d->thread, NULL);
        if (d->status != MPCCL_OK && st == MPCCL_OK) st = d->status;
    }
    while (inits) {
        mpccl_deferred_init_t *next = inits->next;
        free(inits);
        inits = next;
    }
    return st;
}

/* Closes one group level (fn names the call for the error).  At the outermost
 * level (*outermost = 1) the group's inits run and its
 * calls are handed to the caller; a call rejected inside the group makes the
 * result that error, and the caller must then launch nothing (every rank saw
 * the same bad call, or the user gets the error and must not wait on peers). */
static mpccl_status_t close_group(const char *fn, int *outermost, mpccl_call_t **ops)
{
    *outermost = 0;
    *ops = NULL;
    if (group_depth == 0) return mpccl_fail(MPCCL_ERR_USAGE, "%s called without a matching ncclGroupStart", fn);
    if (--group_depth > 0) return MPCCL_OK;
    *outermost = 1;
    mpccl_deferred_init_t *inits = group_inits;
    *ops = group_ops;
    group_inits = group_inits_tail = NULL;
    group_ops = group_ops_tail = NULL;
    mpccl_status_t st = run_inits(inits);
    if (group_error != MPCCL_OK) {
        st = group_error;
        group_error = MPCCL_OK;
    }
    return st;
}

mpccl_status_t mpccl_group_end(void)
{
    int outermost;
    mpccl_call_t *ops;
    mpccl_status_t st = close_group("ncclGroupEnd", &outermost, &ops);
    if (st == MPCCL_OK && ops) return run_calls(ops);
    free_ops(ops);
    return st;
}

mpccl_status_t mpccl_group_simulate_end(double *seconds)
{
    int outermost;
    mpccl_call_t *ops;
    mpccl_status_t st = close_group("ncclGroupSimulateEnd", &outermost, &ops);
    if (st == MPCCL_OK && outermost) *seconds = mpccl_group_estimate(ops);
    free_ops(ops);
    return st;
}

void mpccl_group_discard_comm(ncclComm_t comm)
{
    /* A failed communicator's calls are refused with ncclRemoteError (comm_fail.c). */
    if (group_depth > 0 && group_error == MPCCL_OK)
        group_error = comm && comm->magic == MPCCL_COMM_MAGIC && mpccl_comm_failed(comm) ? MPCCL_ERR_REMOTE
                                                                                         : MPCCL_ERR_ARG;
}
