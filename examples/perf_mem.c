/* Buffers on the communicator's GPU or on the host: see perf_mem.h. */
#include "perf_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MPCCL_NO_CUDA: built without CUDA even where CUDA headers exist. */
#if defined(__has_include) && !defined(MPCCL_NO_CUDA)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define PERF_CUDA 1
#endif
#endif

int perf_mem_select_device(int local_rank)
{
#ifdef PERF_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) return -1;
    if (cudaSetDevice(local_rank % n) != cudaSuccess) return -1;
    return local_rank % n;
#else
    (void)local_rank;
    return -1;
#endif
}

int perf_mem_init(perf_mem_t *m, ncclComm_t comm)
{
    int dev = -1;
    memset(m, 0, sizeof(*m));
    if (ncclCommCuDevice(comm, &dev) != ncclSuccess) return -1;
#ifdef PERF_CUDA
    if (dev >= 0) {
        if (cudaSetDevice(dev) != cudaSuccess || cudaStreamCreate(&m->stream) != cudaSuccess) return -1;
        m->gpu = 1;
    }
#endif
    return 0;
}

void perf_mem_fini(perf_mem_t *m)
{
#ifdef PERF_CUDA
    if (m->gpu) cudaStreamDestroy(m->stream);
#endif
    memset(m, 0, sizeof(*m));
}

void *perf_mem_alloc(perf_mem_t *m, size_t bytes)
{
    void *p = NULL;
    if (bytes == 0) bytes = 1;
#ifdef PERF_CUDA
    if (m->gpu) return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
#else
    (void)m;
#endif
    /* 64: room for any element and a cache line, like cudaMalloc's 256 alignment */
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    return p;
}

void perf_mem_free(perf_mem_t *m, void *p)
{
#ifdef PERF_CUDA
    if (m->gpu) {
        cudaFree(p);
        return;
    }
#else
    (void)m;
#endif
    free(p);
}

int perf_mem_put(perf_mem_t *m, void *dst, const void *host, size_t bytes)
{
    if (bytes == 0) return 0;
#ifdef PERF_CUDA
    if (m->gpu) return cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess;
#else
    (void)m;
#endif
    memmove(dst, host, bytes);
    return 0;
}

int perf_mem_get(perf_mem_t *m, void *host, const void *src, size_t bytes)
{
    if (bytes == 0) return 0;
#ifdef PERF_CUDA
    if (m->gpu) return cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost) != cudaSuccess;
#else
    (void)m;
#endif
    memmove(host, src, bytes);
    return 0;
}

int perf_mem_sync(perf_mem_t *m)
{
#ifdef PERF_CUDA
    if (m->gpu) return cudaStreamSynchronize(m->stream) != cudaSuccess;
#else
    (void)m;
#endif
    return 0;
}

int perf_mem_capture_begin(perf_mem_t *m)
{
#ifdef PERF_CUDA
    if (m->gpu) return cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess;
#else
    (void)m;
#endif
    return -1;
}

void *perf_mem_capture_end(perf_mem_t *m)
{
#ifdef PERF_CUDA
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    if (!m->gpu || cudaStreamEndCapture(m->stream, &g) != cudaSuccess) return NULL;
    cudaError_t e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    return e == cudaSuccess ? (void *)x : NULL;
#else
    (void)m;
    return NULL;
#endif
}

int perf_mem_graph_launch(perf_mem_t *m, void *graph)
{
#ifdef PERF_CUDA
    return cudaGraphLaunch((cudaGraphExec_t)graph, m->stream) != cudaSuccess;
#else
    (void)m;
    (void)graph;
    return -1;
#endif
}

void perf_mem_graph_free(void *graph)
{
#ifdef PERF_CUDA
    if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
#else
    (void)graph;
#endif
}
