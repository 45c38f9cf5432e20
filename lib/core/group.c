/* Group collection: calls and inits gathered between ncclGroupStart and
 * ncclGroupEnd, handed to their communicators' executors at the end. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/estimate.h"
#include "core/group.h"
#include "core/check_mode.h"
#include "core/comm_fail.h"

typedef struct mpccl_deferred_init {
    mpccl_init_fn_t fn;
    void *arg;
    ncclComm_t nonblocking; /* runs in this communicator's worker, not joined */
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

static void free_ops(mpccl_call_t *ops)
{
    while (ops) {
        mpccl_call_t *next = ops->next;
        /* A call dropped unrun (an error in its group) leaves its record. */
        if (ops->comm && (ops->comm->progress.state == MPCCL_PROGRESS_GROUPED || ops->comm->progress.state == MPCCL_PROGRESS_RUNNING))
            mpccl_progress_leave(&ops->comm->progress, 0);
        mpccl_call_free(ops);
        ops = next;
    }
}

/* Takes out of *ops the calls whose communicator runs on exec (keeping their order). */
static mpccl_call_t *take_executor(mpccl_call_t **ops, const mpccl_executor_t *exec)
{
    mpccl_call_t *mine = NULL, **tail = &mine;
    while (*ops) {
        mpccl_call_t *op = *ops;
        if (op->comm->exec == exec) {
            *ops = op->next;
            op->next = NULL;
            *tail = op;
            tail = &op->next;
        } else {
            ops = &op->next;
        }
    }
    return mine;
}

/* Every call counts as a user of its communicator while it runs, so that
 * ncclCommAbort from another thread waits for it to leave (comm_async.h). */
static void leave_calls(mpccl_call_t *ops, const mpccl_call_t *stop)
{
    for (mpccl_call_t *op = ops; op != stop; op = op->next) mpccl_comm_leave(op->comm);
}

static mpccl_status_t enter_calls(mpccl_call_t *ops)
{
    for (mpccl_call_t *op = ops; op; op = op->next) {
        mpccl_status_t st = mpccl_comm_enter(op->comm, "ncclGroupEnd");
        if (st != MPCCL_OK) {
            leave_calls(ops, op);
            return st;
        }
    }
    return MPCCL_OK;
}

/* Runs a group's calls, each executor's together.  Executors on streams go
 * first: they only enqueue, while the others progress to completion, and a
 * peer of this thread may wait for a kernel launched here. */
static mpccl_status_t run_calls(mpccl_call_t *ops)
{
    mpccl_status_t st = MPCCL_OK;
    for (int streams = 1; streams >= 0; streams--) {
        for (mpccl_call_t *op = ops; op && st == MPCCL_OK;) {
            if (op->comm->exec->on_streams != streams) {
                op = op->next;
                continue;
            }
            const mpccl_executor_t *exec = op->comm->exec;
            mpccl_call_t *mine = take_executor(&ops, exec);
            st = enter_calls(mine);
            if (st == MPCCL_OK) {
                for (mpccl_call_t *c = mine; c; c = c->next) mpccl_progress_run(&c->comm->progress);
                st = mpccl_check_calls(mine); /* check mode (nothing when off) */
                if (st == MPCCL_OK) st = exec->run_group(mine);
                for (mpccl_call_t *c = mine; c; c = c->next) mpccl_progress_leave(&c->comm->progress, st == MPCCL_OK);
                leave_calls(mine, NULL);
            }
            free_ops(mine);
            op = ops;
        }
    }
    free_ops(ops); /* what an error left unrun */
    return st;
}

mpccl_status_t mpccl_group_enqueue(mpccl_call_t *op)
{
    op->next = NULL;
    if (group_depth == 0) {
        ncclComm_t comm = op->comm;
        mpccl_status_t st = mpccl_comm_enter(comm, "collective or send/recv");
        if (st == MPCCL_OK) {
            if (comm->check) st = mpccl_check_calls(op); /* check mode: the peers' calls first */
            if (st == MPCCL_OK) st = comm->exec->run_group(op);
            mpccl_comm_leave(comm);
        }
        mpccl_progress_leave(&comm->progress, st == MPCCL_OK);
        mpccl_call_free(op);
        return st;
    }
    if (group_ops_tail) group_ops_tail->next = op;
    else group_ops = op;
    group_ops_tail = op;
    return MPCCL_OK;
}

static mpccl_status_t defer(mpccl_init_fn_t fn, void *arg, ncclComm_t nonblocking)
{
    mpccl_deferred_init_t *d = calloc(1, sizeof(*d));
    if (!d) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory queueing a grouped communicator init");
    d->fn = fn;
    d->arg = arg;
    d->nonblocking = nonblocking;
    if (group_inits_tail) group_inits_tail->next = d;
    else group_inits = d;
    group_inits_tail = d;
    return MPCCL_OK;
}

mpccl_status_t mpccl_group_defer_init(mpccl_init_fn_t fn, void *arg)
{
    return group_depth == 0 ? fn(arg) : defer(fn, arg, NULL);
}

mpccl_status_t mpccl_group_defer_comm_init(ncclComm_t comm, mpccl_init_fn_t fn, void *arg)
{
    ncclComm_t nonblocking = mpccl_comm_nonblocking(comm) ? comm : NULL;
    if (group_depth > 0) return defer(fn, arg, nonblocking);
    return nonblocking ? mpccl_comm_async_start(comm, fn, arg) : fn(arg);
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
    int single = inits && !inits->next, in_progress = 0;
    for (mpccl_deferred_init_t *d = inits; d; d = d->next) {
        if (d->nonblocking) {
            /* Each in its own worker, so that they progress together as the
             * threads below do; ncclGroupEnd returns ncclInProgress. */
            d->status = mpccl_comm_async_start(d->nonblocking, d->fn, d->arg);
            if (d->status == MPCCL_INPROGRESS) in_progress = 1, d->status = MPCCL_OK;
            d->thread = 0;
        } else if (single) {
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
    return st == MPCCL_OK && in_progress ? MPCCL_INPROGRESS : st;
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
    /* Nonblocking inits of the group continue in their workers: the calls of
     * the group (on other communicators) still run now. */
    if ((st == MPCCL_OK || st == MPCCL_INPROGRESS) && ops) {
        mpccl_status_t calls = run_calls(ops);
        return calls != MPCCL_OK ? calls : st;
    }
    free_ops(ops);
    return st;
}

mpccl_status_t mpccl_group_simulate_end(double *seconds)
{
    int outermost;
    mpccl_call_t *ops;
    mpccl_status_t st = close_group("ncclGroupSimulateEnd", &outermost, &ops);
    if ((st == MPCCL_OK || st == MPCCL_INPROGRESS) && outermost) *seconds = mpccl_group_estimate(ops);
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
