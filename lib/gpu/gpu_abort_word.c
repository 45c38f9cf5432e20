/* A GPU communicator's abort word (gpu_abort.h): pinned, mapped memory with
 * MPCCL_OP_TIMEOUT for the kernels, launch arguments, and the hang record a
 * timed-out kernel leaves, turned into an error message. */
#include "gpu/gpu_abort.h"

#ifdef MPCCL_HAVE_CUDA

#include <string.h>

#include <stdio.h>
#include <stdlib.h>

#include "kernels/flat_layout.h"
#include "util/config.h"
#include "util/datatype.h"
#include "util/log.h"

mpccl_status_t mpccl_gpu_abort_create(mpccl_gpu_abort_ctl_t **out)
{
    *out = NULL;
    mpccl_gpu_abort_ctl_t *c = calloc(1, sizeof(*c));
    if (!c) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a GPU communicator's abort word");
    cudaError_t e = cudaHostAlloc((void **)&c->host, sizeof(*c->host), cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
        free(c);
        return mpccl_cuda_error(e, "cudaHostAlloc(abort word)");
    }
    memset(c->host, 0, sizeof(*c->host));
    e = cudaHostGetDevicePointer((void **)&c->dev, c->host, 0);
    if (e != cudaSuccess) {
        cudaFreeHost(c->host);
        free(c);
        return mpccl_cuda_error(e, "cudaHostGetDevicePointer(abort word)");
    }
    int64_t t = mpccl_config_int("OP_TIMEOUT");
    c->host->timeout_ns = t > 0 ? (uint64_t)t * 1000000000ull : 0;
    *out = c;
    return MPCCL_OK;
}

void mpccl_gpu_abort_free(mpccl_gpu_abort_ctl_t *c)
{
    if (!c) return;
    cudaFreeHost(c->host);
    free(c);
}

mpccl_abort_arg_t mpccl_gpu_abort_arg(mpccl_gpu_abort_ctl_t *c)
{
    mpccl_abort_arg_t a = {0};
    if (!c) return a;
    a.word = c->dev;
    a.seq = __atomic_add_fetch(&c->seq, 1u, __ATOMIC_RELAXED);
    return a;
}

void mpccl_gpu_abort_raise(mpccl_gpu_abort_ctl_t *c)
{
    if (c) __atomic_store_n((uint32_t *)&c->host->stop, 1u, __ATOMIC_RELEASE);
}

int mpccl_gpu_abort_raised(const mpccl_gpu_abort_ctl_t *c)
{
    return c && __atomic_load_n((const uint32_t *)&c->host->stop, __ATOMIC_ACQUIRE) != 0;
}

static const char *op_name(int op, int sub)
{
    static const char *flat_modes[] = {"allreduce (one-shot)", "allreduce (two-shot)", "reduce_scatter", "allgather",
                                       "alltoall", "broadcast", "reduce", "gather", "scatter"};
    if (op == MPCCL_ABORT_OP_FLAT_WIN) /* a barrier kernel around copy-engine copies: MPCCL_FLAT_NUM_MODES + mode */
        switch (sub - MPCCL_FLAT_NUM_MODES) {
        case MPCCL_FLAT_ALLGATHER: return "allgather (copy engines)";
        case MPCCL_FLAT_ALLTOALL: return "alltoall (copy engines)";
        case MPCCL_FLAT_BROADCAST: return "broadcast (copy engines)";
        default: break;
        }
    switch (op) {
    case MPCCL_ABORT_OP_FLAT:
    case MPCCL_ABORT_OP_FLAT_WIN:
        return sub >= 0 && sub < (int)(sizeof(flat_modes) / sizeof(flat_modes[0])) ? flat_modes[sub]
                                                                                      : "flat collective";
    case MPCCL_ABORT_OP_FLAT_P2P: return sub ? "send" : "receive";
    case MPCCL_ABORT_OP_ENGINE: return "engine step";
    case MPCCL_ABORT_OP_OS_WAIT: return "ncclWaitSignal";
    case MPCCL_ABORT_OP_OS_PUT: return "ncclPutSignal to another node";
    default: return "operation";
    }
}

mpccl_status_t mpccl_gpu_abort_hang_status(mpccl_gpu_abort_ctl_t *c, int rank, const int *rank_names)
{
    if (!c || __atomic_load_n((const uint32_t *)&c->host->hung, __ATOMIC_ACQUIRE) != 2u) return MPCCL_OK;
    const mpccl_gpu_abort_t *h = c->host;
    char peer[64] = "an unknown peer";
    if (h->peer >= 0 && rank_names) snprintf(peer, sizeof(peer), "rank %d (%d among the phase's ranks)", rank_names[h->peer], h->peer);
    else if (h->peer >= 0) snprintf(peer, sizeof(peer), "rank %d", h->peer);
    if (rank_names) rank = rank_names[rank];
    char dt[48] = "no datatype";
    if (h->dtype >= 0) snprintf(dt, sizeof(dt), "datatype %s", mpccl_dtype_name((ncclDataType_t)h->dtype));
    char last[96] = "";
    if (h->want) snprintf(last, sizeof(last), "; waited for its flag %u, it had reached %u", h->want, h->seen);
    int first = __atomic_exchange_n(&c->reported, 1, __ATOMIC_ACQ_REL) == 0;
    mpccl_status_t st = mpccl_fail(MPCCL_ERR_REMOTE,
                                   "rank %d: a GPU kernel gave up after MPCCL_OP_TIMEOUT=%llu s: %s, launch #%u of "
                                   "the communicator, count %llu, %s, waiting for %s%s; the communicator's "
                                   "kernels are stopped (ncclCommAbort or ncclCommShrink it)",
                                   rank, (unsigned long long)(h->timeout_ns / 1000000000ull), op_name(h->op, h->sub),
                                   h->seq, (unsigned long long)h->count, dt, peer, last);
    if (first) MPCCL_WARN(MPCCL_SUB_COLL, "%s", mpccl_last_error());
    return st;
}

void mpccl_gpu_abort_describe(mpccl_gpu_abort_ctl_t *c, const int *rank_names, char *buf, size_t len)
{
    if (!len) return;
    buf[0] = '\0';
    if (!c) return;
    const volatile mpccl_gpu_abort_t *h = c->host;
    unsigned launched = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
    uint64_t stamp = h->wait_stamp;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    int peer = h->wait_peer;
    if (peer >= 0 && rank_names) peer = rank_names[peer];
    int n = snprintf(buf, len, "%u launches", launched);
    if (stamp && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, "; a kernel of launch %u (%s) last waited for rank %d's flag to "
                      "reach %u, it had reached %u", h->wait_seq, op_name(h->wait_op, h->wait_sub), peer,
                      h->wait_want, h->wait_seen);
    if (h->hung == 2u && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "; launch %u timed out (MPCCL_OP_TIMEOUT)", h->seq);
    if (h->stop && !h->hung && n >= 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, "; stopped");
}

#endif /* MPCCL_HAVE_CUDA */
