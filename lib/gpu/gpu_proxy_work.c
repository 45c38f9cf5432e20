/* Posting the proxy's work from eager launches and captured graphs
 * (gpu_proxy_work.h). */
#include <stdlib.h>
#include "cuda/cuda_rt.h"
#include "gpu/gpu_proxy_work.h"

/* One per captured graph (per capture sequence): what the graph's launches
 * post, posted together by one host node at every replay: launches of the
 * kinds that count themselves done, and the engine launches' pieces per
 * channel (summed, sorted by rank and CTA).  Owned by the graph (a CUDA user
 * object), freed when the graph is. */
struct mpccl_proxy_post_arg {
    mpccl_proxy_comm_t *pc;
    uint32_t launches[MPCCL_PROXY_WORK_KINDS];
    mpccl_proxy_due_t *due;
    uint32_t ndue;
};

/* A host node: runs on CUDA's callback thread, must not call CUDA. */
static void CUDART_CB post_host_node(void *p)
{
    const mpccl_proxy_post_arg_t *a = p;
    for (int k = 0; k < MPCCL_PROXY_WORK_KINDS; k++)
        if (a->launches[k]) mpccl_proxy_post(a->pc, k, a->launches[k], MPCCL_PROXY_ALL_CTAS);
    mpccl_proxy_post_pieces(a->pc, a->due, a->ndue, 1);
}

static void CUDART_CB free_post_arg(void *p)
{
    mpccl_proxy_post_arg_t *a = p;
    free(a->due);
    free(a);
}

static int due_before(const mpccl_proxy_due_t *x, const mpccl_proxy_due_t *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->chan < y->chan);
}

/* Adds a launch's pieces (sorted as the plan gives them) to the graph's. */
static mpccl_status_t add_due(mpccl_proxy_post_arg_t *a, const mpccl_proxy_due_t *d, uint32_t n)
{
    if (n == 0) return MPCCL_OK;
    mpccl_proxy_due_t *m = malloc(((size_t)a->ndue + n) * sizeof(*m));
    if (m == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a graph's proxy piece counts");
    uint32_t i = 0, j = 0, k = 0;
    while (i < a->ndue || j < n) {
        if (j == n || (i < a->ndue && due_before(&a->due[i], &d[j]))) m[k++] = a->due[i++];
        else if (i == a->ndue || due_before(&d[j], &a->due[i])) m[k++] = d[j++];
        else {
            m[k] = a->due[i++];
            m[k].tx += d[j].tx;
            m[k].rx += d[j].rx;
            m[k].whole_tx += d[j].whole_tx;
            m[k++].whole_rx += d[j++].whole_rx;
        }
    }
    free(a->due);
    a->due = m;
    a->ndue = k;
    return MPCCL_OK;
}

/* Capture: the first launch of this comm in a capture sequence adds the
 * posting host node to the graph as a node of its own, with no dependencies
 * and nothing depending on it (CUDA allows adding nodes to a graph being
 * captured): it runs when a replay starts, beside the kernels, and no kernel
 * waits for it.  Later launches in the same capture only add to its count,
 * so a graph of many collectives costs one host node per replay. */
static mpccl_status_t capture_post(mpccl_proxy_work_t *w, cudaStream_t stream, int kind,
                                   const mpccl_proxy_due_t *due, uint32_t ndue)
{
    enum cudaStreamCaptureStatus cs;
    unsigned long long id = 0;
    cudaGraph_t graph = NULL;
    MPCCL_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &cs, &id, &graph, NULL, NULL, NULL));
    if (w->cap_arg && w->cap_id == id) {
        if (kind == MPCCL_PROXY_WORK_ENGINE) return add_due(w->cap_arg, due, ndue);
        w->cap_arg->launches[kind]++;
        return MPCCL_OK;
    }
    mpccl_proxy_post_arg_t *a = calloc(1, sizeof(*a));
    if (a == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a graph's proxy node");
    a->pc = w->pc;
    if (kind == MPCCL_PROXY_WORK_ENGINE) {
        mpccl_status_t st = add_due(a, due, ndue);
        if (st != MPCCL_OK) {
            free(a);
            return st;
        }
    } else {
        a->launches[kind] = 1;
    }
    cudaUserObject_t obj;
    cudaError_t e = cudaUserObjectCreate(&obj, a, free_post_arg, 1, cudaUserObjectNoDestructorSync);
    if (e != cudaSuccess) {
        free_post_arg(a);
        return mpccl_cuda_error(e, "cudaUserObjectCreate (a graph's proxy node)");
    }
    MPCCL_CUDA_CHECK(cudaGraphRetainUserObject(graph, obj, 1, cudaGraphUserObjectMove));
    struct cudaHostNodeParams hp = {post_host_node, a};
    cudaGraphNode_t node;
    MPCCL_CUDA_CHECK(cudaGraphAddHostNode(&node, graph, NULL, 0, &hp));
    w->cap_id = id;
    w->cap_arg = a;
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
                                      const mpccl_proxy_due_t *due, uint32_t ndue, mpccl_proxy_work_args_t *a,
                                      mpccl_proxy_work_token_t *tok)
{
    tok->capturing = 0;
    tok->kind = kind;
    tok->due = due;
    tok->ndue = ndue;
    a->count = a->done = NULL;
    if (w == NULL || w->pc == NULL) return MPCCL_OK;
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    MPCCL_CUDA_CHECK(cudaStreamIsCapturing(stream, &cs));
    if (cs == cudaStreamCaptureStatusActive) {
        MPCCL_CHECK(capture_post(w, stream, kind, due, ndue));
        tok->capturing = 1;
    } else if (kind == MPCCL_PROXY_WORK_ENGINE) {
        mpccl_proxy_post_pieces(w->pc, due, ndue, 1);
    } else {
        mpccl_proxy_post(w->pc, kind, 1, 0); /* lane 0 alone serves the one-sided channel */
    }
    if (kind == MPCCL_PROXY_WORK_ENGINE) return MPCCL_OK; /* the kernel signals nothing */
    a->count = w->counts + kind;
    a->done = mpccl_proxy_done_counter(w->pc, kind, NULL);
    return MPCCL_OK;
}

mpccl_status_t mpccl_proxy_work_end(mpccl_proxy_work_t *w, cudaStream_t stream, const mpccl_proxy_work_token_t *tok,
                                    mpccl_status_t launched)
{
    if (w == NULL || w->pc == NULL) return MPCCL_OK;
    /* No kernel will move these pieces or count this launch done: take it
     * back (a failed capture is discarded as a whole). */
    if (tok->capturing || launched == MPCCL_OK) return MPCCL_OK;
    if (tok->kind == MPCCL_PROXY_WORK_ENGINE) mpccl_proxy_post_pieces(w->pc, tok->due, tok->ndue, -1);
    else mpccl_proxy_post(w->pc, tok->kind, 0u - 1u, 0);
    return MPCCL_OK;
}

void mpccl_proxy_work_fini(mpccl_proxy_work_t *w, int aborting)
{
    w->cap_arg = NULL;
    if (w->counts && !aborting) cudaFree(w->counts);
    w->counts = NULL;
    w->pc = NULL;
}
