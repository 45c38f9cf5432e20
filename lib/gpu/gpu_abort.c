/* Stopping a GPU communicator's kernels (gpu_abort.h): mpccl_gpu_comm_stop,
 * the bounded drain of ncclCommAbort and the conversion of a kernel's
 * MPCCL_OP_TIMEOUT into the communicator's ncclRemoteError. */
#include "gpu/gpu_abort.h"

#ifdef MPCCL_HAVE_CUDA

#include <stdio.h>
#include <time.h>

#include "bootstrap/bootstrap_net.h"
#include "core/comm.h"
#include "core/hang_report.h"
#include "core/comm_hooks.h"
#include "gpu/gpu_launch.h"
#include "proxy/proxy_wake.h"
#include "util/log.h"

void mpccl_gpu_comm_stop(struct ncclComm *comm)
{
    if (!comm) return;
    mpccl_gpu_abort_raise(mpccl_gpu_abort_ctl(comm));
    mpccl_comm_hooks_stop(comm); /* kernels waiting in device communicators' barriers */
    mpccl_proxy_wake(); /* proxy-driven steps see the stopped kernels' ends */
}

int mpccl_gpu_comm_drain(struct ncclComm *comm, int max_ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int done = mpccl_gpu_launches_done(comm);
        if (done) return 1;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double ms = (t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6;
        if (ms >= max_ms) return 0;
        struct timespec nap = {0, 200000}; /* 0.2 ms */
        nanosleep(&nap, NULL);
    }
}

mpccl_status_t mpccl_gpu_comm_check_hang(struct ncclComm *comm)
{
    if (!comm || comm->cuda_dev < 0) return MPCCL_OK;
    mpccl_gpu_abort_ctl_t *ctl = mpccl_gpu_abort_ctl(comm);
    mpccl_status_t st = mpccl_gpu_abort_hang_status(ctl, comm->rank, comm->parent_ranks);
    if (st == MPCCL_OK) return st;
    if (comm->async_error == ncclSuccess) comm->async_error = ncclRemoteError;
    /* Once: the job-wide report (who launched the call, where each rank's
     * kernels wait), whose summary every later error repeats. */
    if (__atomic_exchange_n(&ctl->job_reported, 1, __ATOMIC_ACQ_REL) == 0) {
        char kernel[1024], summary[768];
        snprintf(kernel, sizeof(kernel), "%s", mpccl_last_error());
        mpccl_hang_report(comm, "a GPU kernel gave up (MPCCL_OP_TIMEOUT)", 1, summary, sizeof(summary));
        snprintf(ctl->job_summary, sizeof(ctl->job_summary), "%s", summary);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        return mpccl_fail(MPCCL_ERR_REMOTE, "%s; %s", kernel, ctl->job_summary);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (ctl->job_summary[0]) {
        char kernel[1024];
        snprintf(kernel, sizeof(kernel), "%s", mpccl_last_error());
        st = mpccl_fail(MPCCL_ERR_REMOTE, "%s; %s", kernel, ctl->job_summary);
    }
    return st;
}

void mpccl_gpu_comm_describe(struct ncclComm *comm, char *buf, size_t len)
{
    if (len) buf[0] = '\0';
    if (!comm || comm->cuda_dev < 0) return;
    mpccl_gpu_abort_describe(mpccl_gpu_abort_ctl(comm), comm->parent_ranks, buf, len);
}

int mpccl_gpu_comm_stalled(struct ncclComm *comm, int limit_s)
{
    mpccl_gpu_abort_ctl_t *c = comm->cuda_dev >= 0 ? mpccl_gpu_abort_ctl(comm) : NULL;
    if (!c || __atomic_load_n(&c->seq, __ATOMIC_RELAXED) == 0) return 0; /* nothing launched yet */
    const volatile mpccl_gpu_abort_t *h = c->host;
    if (h->timeout_ns || h->stop || h->hung) return 0; /* the kernels end the wait themselves, or stopped */
    uint64_t stamp = h->wait_stamp; /* written last by the kernel */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    double waited = mpccl_stall_observe(&c->stall, h->wait_seq, stamp, mpccl_socket_now_ms());
    if (waited < limit_s || c->stall.reported == c->stall.seq) return 0;
    c->stall.reported = c->stall.seq;
    return 1;
}

void mpccl_gpu_comm_drain_logged(struct ncclComm *comm)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ok = mpccl_gpu_comm_drain(comm, MPCCL_GPU_ABORT_DRAIN_MS);
    clock_gettime(CLOCK_MONOTONIC, &t);
    double ms = (t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6;
    if (ok)
        MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx rank %d: kernels stopped, launches exited in %.1f ms",
                   (unsigned long long)comm->id, comm->rank, ms);
    else
        MPCCL_WARN(MPCCL_SUB_INIT, "comm 0x%llx rank %d: kernels told to stop have not exited after %d ms",
                   (unsigned long long)comm->id, comm->rank, MPCCL_GPU_ABORT_DRAIN_MS);
}

mpccl_status_t mpccl_gpu_comm_quiesce(struct ncclComm *comm, const char *fn)
{
    while (!mpccl_gpu_launches_done(comm)) {
        MPCCL_CHECK(mpccl_gpu_comm_check_hang(comm));
        struct timespec nap = {0, 200000};
        nanosleep(&nap, NULL);
    }
    (void)fn;
    return MPCCL_OK;
}

#endif /* MPCCL_HAVE_CUDA */
