/* Posting the proxy's work from eager launches and captured graphs
 * (gpu_proxy_work.h). */
#include <stdlib.h>
#include "cuda_rt.h"
#include "gpu_proxy_work.h"

struct mpccl_proxy_post_arg {
    mpccl_proxy_comm_t *pc;
    int kind;
    struct mpccl_proxy_post_arg *next;
};

/* A host node: runs on CUDA's callback thread, must not call CUDA. */
static void CUDART_CB post_host_node(void *p)
{
    const mpccl_proxy_post_arg_t *a = p;
    mpccl_proxy_post(a->pc, a->kind, 1);
}

static mpccl_status_t post_arg(mpccl_proxy_work_t *w, int kind, mpccl_proxy_post_arg_t **out)
{
    for (mpccl_proxy_post_arg_t *a = w->args; a; a = a->next)
        if (a->pc == w->pc && a->kind == kind) {
            *out = a;
            return MPCCL_OK;
        }
    mpccl_proxy_post_arg_t *a = calloc(1, sizeof(*a));
    if (a == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a graph's proxy node");
    a->pc = w->pc;
    a->kind = kind;
    a->next = w->args;
    w->args = a;
    *out = a;
    return MPCCL_OK;
}

/* Capture: fork a branch off stream and put the posting host node on it. */
static mpccl_status_t capture_post(mpccl_proxy_work_t *w, cudaStream_t stream, int kind)
{
    mpccl_proxy_post_arg_t *a = NULL;
    MPCCL_CHECK(post_arg(w, kind, &a));
    if (w->side == NULL) {
        /* Creating a stream is not allowed while a global-mode capture runs. */
        enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
        cudaThreadExchangeStreamCaptureMode(&m);
        cudaError_t e = cudaStreamCreateWithFlags(&w->side, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&w->fork, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&w->join, cudaEventDisableTiming);
        cudaThreadExchangeStreamCaptureMode(&m);
        if (e != cudaSuccess) {
            if (w->side) cudaStreamDestroy(w->side);
            w->side = NULL;
            return mpccl_cuda_error(e, "creating the stream of a graph's proxy node");
        }
    }
    MPCCL_CUDA_CHECK(cudaEventRecord(w->fork, stream));
    MPCCL_CUDA_CHECK(cudaStreamWaitEvent(w->side, w->fork, 0));
    MPCCL_CUDA_CHECK(cudaLaunchHostFunc(w->side, post_host_node, a));
    MPCCL_CUDA_CHECK(cudaEventRecord(w->join, w->side));
    return MPCCL_OK;
}

mpccl_status_t mpccl_proxy_work_init(mpccl_proxy_work_t *w, mpccl_proxy_comm_t *pc)
{
    size_t bytes = MPCCL_PROXY_WORK_KINDS * sizeof(uint32_t);
    MPCCL_CUDA_CHECK(cudaMalloc((void **)&w->counts, bytes));
    cudaError_t e = cudaMemset(w->counts, 0, bytes); /* synchronous: before any launch */
    if (e != cudaSuccess) {
        cudaFree(w->counts);
        w->counts = NULL;
        return mpccl_cuda_error(e, "cudaMemset (the proxy's launch counts)");
    }
    w->pc = pc;
    return MPCCL_OK;
}

mpccl_status_t mpccl_proxy_work_begin(mpccl_proxy_work_t *w, cudaStream_t stream, int kind,
                                      mpccl_proxy_work_args_t *a, mpccl_proxy_work_token_t *tok)
{
    tok->capturing = 0;
    tok->kind = kind;
    a->count = a->done = NULL;
    if (w == NULL || w->pc == NULL) return MPCCL_OK;
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    MPCCL_CUDA_CHECK(cudaStreamIsCapturing(stream, &cs));
    if (cs == cudaStreamCaptureStatusActive) {
        MPCCL_CHECK(capture_post(w, stream, kind));
        tok->capturing = 1;
    } else {
        mpccl_proxy_post(w->pc, kind, 1);
    }
    a->count = w->counts + kind;
    a->done = mpccl_proxy_done_counter(w->pc, kind, NULL);
    return MPCCL_OK;
}

mpccl_status_t mpccl_proxy_work_end(mpccl_proxy_work_t *w, cudaStream_t stream, const mpccl_proxy_work_token_t *tok,
                                    mpccl_status_t launched)
{
    if (w == NULL || w->pc == NULL) return MPCCL_OK;
    if (tok->capturing) MPCCL_CUDA_CHECK(cudaStreamWaitEvent(stream, w->join, 0));
    /* No kernel will count this launch done: take it back. */
    else if (launched != MPCCL_OK) mpccl_proxy_post(w->pc, tok->kind, 0u - 1u);
    return MPCCL_OK;
}

void mpccl_proxy_work_fini(mpccl_proxy_work_t *w, int aborting)
{
    if (w->side) {
        cudaEventDestroy(w->fork);
        cudaEventDestroy(w->join);
        cudaStreamDestroy(w->side);
        w->side = NULL;
    }
    while (w->args) {
        mpccl_proxy_post_arg_t *next = w->args->next;
        free(w->args);
        w->args = next;
    }
    if (w->counts && !aborting) cudaFree(w->counts);
    w->counts = NULL;
    w->pc = NULL;
}
