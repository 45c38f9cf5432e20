/* The host executor: calls on host memory run as schedules (host_exec.c) over
 * the communicator's transport and complete before the API call returns.  A
 * group's calls of every host communicator progress in one loop, so ranks
 * driven by one thread cannot deadlock. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/comm_drain.h"
#include "core/comm_fail.h"
#include "core/group.h"
#include "core/hang_report.h"
#include "host/host_exec.h"
#include "host/host_win.h"
#include "util/clock.h"
#include "util/config.h"

/* Scratch memory kept between calls (host_scratch.h), one pool for all host
 * communicators of the process, so that many communicators do not each hold
 * MPCCL_HOST_SCRATCH_KEEP: created with the first, freed with the last. */
static struct {
    pthread_mutex_t lock;
    int users;
    mpccl_scratch_pool_t *pool;
} shared_scratch = {PTHREAD_MUTEX_INITIALIZER, 0, NULL};

static mpccl_status_t start_op(mpccl_call_t *op)
{
    ncclComm_t c = op->comm;
    uint64_t *sseq = op->is_p2p ? c->p2p_send_seq : c->coll_send_seq;
    uint64_t *rseq = op->is_p2p ? c->p2p_recv_seq : c->coll_recv_seq;
    op->started = 1;
    /* The pool pointer is read without the lock: this communicator holds a
     * share from its setup to its release, and its calls run in between, so
     * the pool exists and does not change meanwhile (the pool locks itself). */
    return mpccl_exec_start(&op->task, c->transport, shared_scratch.pool, c->rank, sseq, rseq, &op->run);
}

static int op_can_start(const mpccl_call_t *op)
{
    /* Collectives of one communicator run in program order (a later one may read
     * what an earlier one wrote); p2p calls of a group all run at once. */
    return op->is_p2p || op->prev_coll == NULL || op->prev_coll->done;
}

/* A failed communicator's call stops: its peers are told (revoke), and the
 * error returned names the failure and the call. */
static mpccl_status_t stop_failed(mpccl_call_t *ops, mpccl_status_t st)
{
    ncclComm_t failed = NULL;
    const mpccl_call_t *what = NULL;
    for (mpccl_call_t *op = ops; op && !failed; op = op->next)
        if (mpccl_comm_failed(op->comm)) failed = op->comm, what = op;
    if (!failed) return st;
    /* A peer that revoked after a timeout kept a report naming who is to
     * blame: this rank's error names them too.  Fetched before this rank
     * passes the revoke on, so that a rank that hears of it from here first
     * finds the report here too (revokes travel from rank to rank). */
    int revoker = mpccl_comm_failed_by_revoke(failed);
    if (revoker >= 0) mpccl_hang_report_from(failed, revoker);
    for (mpccl_call_t *op = ops; op; op = op->next)
        if (mpccl_comm_failed(op->comm)) mpccl_comm_send_revoke(op->comm);
    char fn[64];
    snprintf(fn, sizeof(fn), "%s (%s)", mpccl_coll_name(what->desc.coll), ops->next ? "in a group" : "alone");
    return mpccl_comm_fail_report(failed, fn);
}

/* Progresses every op of the list until all are done or one fails. */
/* Whether op still needs rank (a death of a rank it no longer waits for is
 * not its failure).  A call not started yet needs everyone it may talk to. */
static int op_needs(void *arg, int rank)
{
    const mpccl_call_t *op = arg;
    return op->run == NULL || mpccl_exec_needs_peer(op->run, rank);
}

/* Whether comm appears in ops before op (one report per communicator). */
static int seen_before(const mpccl_call_t *ops, const mpccl_call_t *op)
{
    for (const mpccl_call_t *q = ops; q != op; q = q->next)
        if (q->comm == op->comm && !q->done) return 1;
    return 0;
}

/* MPCCL_OP_TIMEOUT passed: each communicator still waited on gets a
 * job-wide report, and fails with its summary (naming the ranks to blame). */
static mpccl_status_t timed_out(mpccl_call_t *ops, int64_t timeout)
{
    char why[160], summary[1024];
    snprintf(why, sizeof(why), "MPCCL_OP_TIMEOUT=%lld s passed", (long long)timeout);
    for (mpccl_call_t *op = ops; op; op = op->next) {
        if (op->done || seen_before(ops, op) || mpccl_comm_failed(op->comm)) continue;
        mpccl_hang_report(op->comm, why, 1, summary, sizeof(summary));
        mpccl_comm_fail(op->comm, ncclRemoteError, "%s", summary);
    }
    return stop_failed(ops, MPCCL_ERR_REMOTE);
}

/* No timeout, but the call has waited MPCCL_STALL_REPORT_S: one report
 * (printed by the lowest waiting rank), and the wait goes on. */
static void stalled(mpccl_call_t *ops, double stall_s)
{
    char why[160], summary[1024];
    snprintf(why, sizeof(why), "stalled for %.0f s (MPCCL_STALL_REPORT_S; no MPCCL_OP_TIMEOUT, still waiting)",
             stall_s);
    for (mpccl_call_t *op = ops; op; op = op->next)
        if (!op->done && !seen_before(ops, op)) mpccl_hang_report(op->comm, why, 1, summary, sizeof(summary));
}

static mpccl_status_t run_ops(mpccl_call_t *ops)
{
    mpccl_status_t st = MPCCL_OK;
    int64_t timeout = mpccl_config_int("OP_TIMEOUT");
    double start = timeout > 0 ? mpccl_now_seconds() : 0;
    int64_t stall_s = timeout > 0 ? 0 : -1; /* read once a wait lasts: not on the fast path */
    double first_wait = 0; /* when the calls first found nothing to do */
    unsigned idle_passes = 0;
    double quiet_since = 0; /* when the transport last stopped reporting events */
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
                    mpccl_comm_set_error(op->comm, st);
                    return stop_failed(ops, st);
                }
                events++;
            }
            if (op->comm->transport) {
                events += op->comm->transport->ops->progress(op->comm->transport);
                idle_on = op->comm->transport;
            }
            int done = 0;
            st = mpccl_exec_progress(op->run, &done);
            if (st == MPCCL_OK && !done && mpccl_comm_failed(op->comm)) st = MPCCL_ERR_REMOTE;
            if (st != MPCCL_OK) {
                mpccl_comm_set_error(op->comm, st);
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
        if (++idle_passes == 1) {
            quiet_since = mpccl_now_seconds();
            if (first_wait == 0) {
                first_wait = quiet_since;
                for (mpccl_call_t *op = ops; op; op = op->next) mpccl_progress_waiting(&op->comm->progress, first_wait);
            }
        }
        /* Ranks oversubscribe cores in tests: give the CPU away while waiting. */
        if (idle_passes > 16) {
            for (mpccl_call_t *op = ops; op; op = op->next)
                if (!op->done && (mpccl_comm_failed_idle_for(op->comm, op_needs, op) ||
                                  mpccl_comm_failed_stalled(op->comm, quiet_since)))
                    return stop_failed(ops, MPCCL_ERR_REMOTE);
            if (idle_on) idle_on->ops->idle(idle_on);
            else sched_yield();
            if (stall_s < 0 && (idle_passes & 255) == 0) stall_s = mpccl_config_int("STALL_REPORT_S");
            if (stall_s > 0 && (idle_passes & 255) == 0 && mpccl_now_seconds() - first_wait > (double)stall_s) {
                stalled(ops, (double)stall_s);
                stall_s = 0; /* once per call */
            }
        }
        if (timeout > 0 && mpccl_now_seconds() - start > (double)timeout) return timed_out(ops, timeout);
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

/* Once the calls completed: what this rank still owes the peers it received
 * from (rendezvous acknowledgements) leaves before the call returns
 * (core/comm_drain.h). */
static mpccl_status_t drain_comms(mpccl_call_t *ops)
{
    int n = 0;
    for (mpccl_call_t *op = ops; op; op = op->next) n++;
    ncclComm_t *comms = malloc(sizeof(*comms) * (size_t)(n ? n : 1));
    unsigned char **from = calloc((size_t)(n ? n : 1), sizeof(*from));
    mpccl_status_t st = comms && from ? MPCCL_OK
                                      : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory draining a group of %d calls", n);
    int i = 0;
    for (mpccl_call_t *op = ops; op && st == MPCCL_OK; op = op->next, i++) {
        comms[i] = op->comm;
        from[i] = calloc((size_t)op->comm->nranks, 1);
        if (from[i] == NULL) st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory draining a group of %d calls", n);
        else if (op->run) mpccl_exec_recv_peers(op->run, from[i]);
    }
    if (st == MPCCL_OK) st = mpccl_comm_drain_all(comms, (const unsigned char *const *)from, n, "ncclGroupEnd");
    for (int j = 0; from && j < n; j++) free(from[j]);
    free(from);
    free(comms);
    return st;
}

/* Runs a list of calls to completion; the caller frees them. */
static mpccl_status_t host_run_group(mpccl_call_t *ops)
{
    link_collectives(ops);
    mpccl_status_t st = run_ops(ops);
    if (st == MPCCL_OK) st = drain_comms(ops);
    for (mpccl_call_t *op = ops; op; op = op->next) {
        if (op->run) mpccl_exec_free(op->run);
        op->run = NULL;
    }
    return st;
}

/* Calls outside a group go through run_group (on_streams = 0): these two are
 * the same run for a caller holding a list. */
static mpccl_status_t host_launch(mpccl_call_t *call)
{
    call->next = NULL;
    return host_run_group(call);
}

static mpccl_status_t host_launch_p2p(mpccl_call_t **calls, int n)
{
    for (int i = 0; i < n; i++) calls[i]->next = i + 1 < n ? calls[i + 1] : NULL;
    return n > 0 ? host_run_group(calls[0]) : MPCCL_OK;
}

static int host_current_device(void)
{
    return -1;
}

static mpccl_status_t host_enter_device(int cuda_dev)
{
    (void)cuda_dev;
    return MPCCL_OK;
}

/* The transport, topology and counters the core builds are all a host
 * communicator needs, and a share of the process's scratch pool. */
static mpccl_status_t host_setup(ncclComm_t comm)
{
    (void)comm;
    mpccl_status_t st = MPCCL_OK;
    pthread_mutex_lock(&shared_scratch.lock);
    if (shared_scratch.users == 0) {
        int64_t keep = mpccl_config_int("HOST_SCRATCH_KEEP");
        shared_scratch.pool = mpccl_scratch_pool_new(keep > 0 ? (size_t)keep : 0);
    }
    if (shared_scratch.pool) shared_scratch.users++;
    else st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the scratch pool");
    pthread_mutex_unlock(&shared_scratch.lock);
    return st;
}

static void host_comm_noop(ncclComm_t comm)
{
    (void)comm;
}

/* Every call of comm has returned (a failed one kept its scratch out of the
 * pool).  Only a communicator that was set up holds a share. */
static void host_release(ncclComm_t comm, int force)
{
    (void)force;
    if (!comm->exec_ready) return;
    comm->exec_ready = 0;
    pthread_mutex_lock(&shared_scratch.lock);
    if (shared_scratch.users > 0 && --shared_scratch.users == 0) {
        mpccl_scratch_pool_free(shared_scratch.pool);
        shared_scratch.pool = NULL;
    }
    pthread_mutex_unlock(&shared_scratch.lock);
}

static uint64_t host_mem_bytes(ncclComm_t comm)
{
    (void)comm;
    return 0; /* no GPU memory */
}

/* Host pointers cannot be checked further than the argument checks did. */
static mpccl_status_t host_check_buffers(const char *fn, ncclComm_t comm, mpccl_coll_t coll, const void *in,
                                         const void *out, size_t count, ncclDataType_t dt, int root)
{
    (void)fn, (void)comm, (void)coll, (void)in, (void)out, (void)count, (void)dt, (void)root;
    return MPCCL_OK;
}

static int host_rma_reaches_all(ncclComm_t comm)
{
    (void)comm;
    return 1; /* UCX RMA to every peer */
}

static int host_takes_flat(ncclComm_t comm, const mpccl_coll_desc_t *d)
{
    (void)comm, (void)d;
    return 0;
}

/* A call returns when its data is complete, so nothing is in flight to stop:
 * a revoked communicator stops taking work and keeps its transport for
 * ncclCommShrink; shrinking and suspending need nothing of the executor (a
 * host communicator holds no GPU memory). */
/* Host calls poll the failure state in their wait loops: nothing to stop. */
static void host_stop(ncclComm_t comm)
{
    (void)comm;
}

static mpccl_status_t host_revoke(ncclComm_t comm, const char *fn)
{
    (void)comm, (void)fn;
    return MPCCL_OK;
}

static mpccl_status_t host_can_shrink(ncclComm_t comm, const char *fn, int abort)
{
    (void)comm, (void)fn, (void)abort;
    return MPCCL_OK;
}

static mpccl_status_t host_can_suspend(ncclComm_t comm, const char *fn)
{
    (void)comm, (void)fn;
    return MPCCL_OK;
}

/* Host calls run on the calling thread: the progress record says it all. */
static void host_describe(ncclComm_t comm, char *buf, size_t len)
{
    (void)comm;
    if (len) buf[0] = '\0';
}

static const mpccl_executor_t host_executor = {
    .name = "host",
    .memory = "host",
    .current_device = host_current_device,
    .enter_device = host_enter_device,
    .setup = host_setup,
    .finalize = host_comm_noop,
    .release = host_release,
    .mem_bytes = host_mem_bytes,
    .check_buffers = host_check_buffers,
    .plans_at_call = 1,
    .on_streams = 0,
    .launch = host_launch,
    .launch_p2p = host_launch_p2p,
    .run_group = host_run_group,
    .takes_flat = host_takes_flat,
    .sig_setup = mpccl_host_sig_setup,
    .sig_free = mpccl_host_sig_free,
    .win_setup = mpccl_host_win_setup,
    .win_free = mpccl_host_win_free,
    .win_stop = mpccl_host_win_stop,
    .reg_export = mpccl_host_reg_export,
    .reg_free = mpccl_host_reg_free,
    .put_signal = mpccl_host_put_signal_call,
    .wait_signal = mpccl_host_wait_signal_call,
    .rma_reaches_all = host_rma_reaches_all,
    .device_api = 0,
    .stop = host_stop,
    .poll_error = host_stop,
    .abort = host_comm_noop,
    .revoke = host_revoke,
    .can_shrink = host_can_shrink,
    .can_suspend = host_can_suspend,
    .describe = host_describe,
};

/* When the library loads (core/exec.h). */
__attribute__((constructor)) static void register_host_executor(void)
{
    mpccl_exec_register(&host_executor, 0);
}
