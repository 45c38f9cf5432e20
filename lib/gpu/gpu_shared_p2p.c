/* Send/receive among processes sharing one GPU without MPS (gpu_shared.h):
 * no kernel, no wait on another context.  The sender drains its stream and
 * posts the buffer's CUDA IPC description on the ring to the receiver; the
 * receiver copies straight out of the mapping with the copy engine on its own
 * stream, waits for the copy and acknowledges; the sender returns once every
 * send of its group was acknowledged (its buffer is free again, as NCCL
 * promises once the stream reaches the call).
 *
 * One loop progresses a whole group: posts where a ring has room, copies what
 * arrived, collects acknowledgements.  No rank waits on one thing while a
 * peer waits on another, so any group that NCCL would run runs here. */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu/gpu_shared_impl.h"
#include "util/datatype.h"
#include "util/log.h"

enum { OP_WAITING = 0, OP_POSTED, OP_COPYING, OP_DONE };

typedef struct {
    mpccl_call_t *call;
    int send;
    int state;
    uint64_t msg;   /* the message's number on its ring */
    size_t bytes;
    const void *src; /* sends: what the receiver maps (the buffer, or its staging copy) */
} p2p_op_t;

int mpccl_gpu_shared_takes_p2p(const mpccl_gpu_shared_t *sh)
{
    return sh != NULL;
}

static size_t call_bytes(const mpccl_call_t *c)
{
    return (size_t)c->desc.count * mpccl_dtype_size(c->desc.dt);
}

/* Sends whose buffer CUDA IPC cannot share are copied, in one staging block. */
static mpccl_status_t stage_sends(mpccl_gpu_shared_t *sh, p2p_op_t *ops, int n)
{
    size_t need = 0;
    buf_ref_t probe;
    for (int i = 0; i < n; i++) {
        ops[i].src = ops[i].call->task.in;
        if (ops[i].send && ops[i].bytes && !mpccl_shr_export_ref(sh, ops[i].src, &probe)) need += (ops[i].bytes + 255) & ~(size_t)255;
    }
    if (!need) return MPCCL_OK;
    char *stage = NULL;
    MPCCL_CHECK(mpccl_gpu_scratch_get(&sh->stage_p2p, need, (void **)&stage));
    for (int i = 0; i < n; i++) {
        if (!ops[i].send || !ops[i].bytes || mpccl_shr_export_ref(sh, ops[i].src, &probe)) continue;
        MPCCL_CUDA_CHECK(cudaMemcpyAsync(stage, ops[i].src, ops[i].bytes, cudaMemcpyDefault,
                                         (cudaStream_t)ops[i].call->stream));
        ops[i].src = stage;
        stage += (ops[i].bytes + 255) & ~(size_t)255;
    }
    return MPCCL_OK;
}

/* One pass over the group; *progress when anything moved. */
static mpccl_status_t pass(mpccl_gpu_shared_t *sh, p2p_op_t *ops, int n, int *left, int *progress)
{
    const int me = sh->rank;
    *left = 0;
    *progress = 0;
    for (int i = 0; i < n; i++) {
        p2p_op_t *o = &ops[i];
        int peer = o->call->desc.root;
        if (o->state == OP_DONE) continue;
        if (o->send) {
            mpccl_shr_ring_t *ring = mpccl_shr_ring(sh, me, peer);
            if (o->state == OP_WAITING) {
                /* in program order per peer: an earlier send to the same peer posts first */
                if (o->msg != sh->sent[peer] ||
                    o->msg - __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE) >= SHR_RING) {
                    (*left)++;
                    continue;
                }
                ring_ent_t *e = &ring->e[o->msg % SHR_RING];
                memset(&e->ref, 0, sizeof e->ref);
                if (o->bytes && !mpccl_shr_export_ref(sh, o->src, &e->ref))
                    return mpccl_fail(MPCCL_ERR_CUDA, "ncclSend: rank %d cannot share its buffer %p with rank %d",
                                      me, o->src, peer);
                e->bytes = o->bytes;
                e->status = 0;
                sh->sent[peer]++;
                __atomic_store_n(&ring->head, o->msg + 1, __ATOMIC_RELEASE);
                o->state = OP_POSTED;
                *progress = 1;
            }
            if (__atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE) > o->msg) {
                int32_t status = ring->e[o->msg % SHR_RING].status;
                o->state = OP_DONE;
                *progress = 1;
                if (status != 0)
                    return mpccl_fail(MPCCL_ERR_USAGE, "ncclSend: rank %d sent %zu bytes to rank %d, whose matching "
                                      "ncclRecv expects %lld bytes", me, o->bytes, peer, (long long)status - 1);
            } else {
                (*left)++;
            }
            continue;
        }
        /* receive: the peer's next message on its ring to us */
        mpccl_shr_ring_t *ring = mpccl_shr_ring(sh, peer, me);
        if (o->state == OP_WAITING) {
            if (o->msg != sh->recvd[peer] || __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE) <= o->msg) {
                (*left)++;
                continue;
            }
            ring_ent_t *e = &ring->e[o->msg % SHR_RING];
            sh->recvd[peer]++;
            if (e->bytes != o->bytes) {
                e->status = (int32_t)(o->bytes + 1 > 0x7fffffff ? 0x7fffffff : o->bytes + 1);
                __atomic_store_n(&ring->tail, o->msg + 1, __ATOMIC_RELEASE);
                o->state = OP_DONE;
                return mpccl_fail(MPCCL_ERR_USAGE, "ncclRecv: rank %d expects %zu bytes from rank %d, which sent "
                                  "%llu", me, o->bytes, peer, (unsigned long long)e->bytes);
            }
            if (o->bytes) {
                char *src = NULL;
                MPCCL_CHECK(mpccl_shr_import_ref(sh, peer, &e->ref, &src));
                MPCCL_CUDA_CHECK(cudaMemcpyAsync(o->call->task.out, src, o->bytes, cudaMemcpyDefault,
                                                 (cudaStream_t)o->call->stream));
            }
            o->state = OP_COPYING;
            *progress = 1;
        }
        /* copying: acknowledged once the copy finished (the sender may then reuse its buffer) */
        cudaError_t q = cudaStreamQuery((cudaStream_t)o->call->stream);
        if (q == cudaErrorNotReady) {
            (*left)++;
            continue;
        }
        if (q != cudaSuccess) return mpccl_cuda_error(q, "ncclRecv: the copy out of the sender's buffer");
        __atomic_store_n(&ring->tail, o->msg + 1, __ATOMIC_RELEASE);
        o->state = OP_DONE;
        *progress = 1;
    }
    return MPCCL_OK;
}

mpccl_status_t mpccl_gpu_shared_p2p(mpccl_gpu_shared_t *sh, mpccl_call_t **calls, int n)
{
    p2p_op_t *ops = calloc((size_t)n, sizeof(*ops));
    if (!ops) return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclGroupEnd: out of memory");
    mpccl_status_t st = MPCCL_OK;
    /* each message's number on its ring, in program order per peer */
    uint64_t *next_send = calloc((size_t)sh->nranks * 2, sizeof(uint64_t)), *next_recv = next_send + sh->nranks;
    if (!next_send) {
        free(ops);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclGroupEnd: out of memory");
    }
    for (int i = 0; i < n; i++) {
        int peer = calls[i]->desc.root;
        ops[i].call = calls[i];
        ops[i].send = calls[i]->desc.coll == MPCCL_COLL_SEND;
        ops[i].bytes = call_bytes(calls[i]);
        ops[i].msg = ops[i].send ? sh->sent[peer] + next_send[peer]++ : sh->recvd[peer] + next_recv[peer]++;
    }
    free(next_send);
    st = stage_sends(sh, ops, n);
    /* Every send's buffer is final (and every receive's free) once the streams drained. */
    for (int i = 0; i < n && st == MPCCL_OK; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = calls[j]->stream == calls[i]->stream;
        if (!seen) {
            cudaError_t e = cudaStreamSynchronize((cudaStream_t)calls[i]->stream);
            if (e != cudaSuccess) st = mpccl_cuda_error(e, "cudaStreamSynchronize before a send/receive");
        }
    }
    mpccl_shr_waiter_t w = {0, 0, 0};
    while (st == MPCCL_OK) {
        int left = 0, progress = 0;
        st = pass(sh, ops, n, &left, &progress);
        if (st != MPCCL_OK || left == 0) break;
        if (progress) w.n = 0, w.start = 0;
        else st = mpccl_shr_idle(sh, &w, n == 1 ? (ops[0].send ? "ncclSend" : "ncclRecv") : "ncclGroupEnd",
                                 "waiting for a peer's matching send or receive");
    }
    free(ops);
    return st;
}
#endif /* MPCCL_HAVE_CUDA */
