/* Buffers for mpccl-perf and the MPI tests: device memory when the communicator
 * runs on a CUDA device and this program was built with the CUDA runtime headers,
 * host memory otherwise.  Public API only. */
#ifndef PERF_MEM_H
#define PERF_MEM_H

#include <stddef.h>
#include "nccl.h"

typedef struct perf_mem {
    int gpu;             /* 1: buffers are cudaMalloc'ed on the communicator's device */
    cudaStream_t stream; /* NULL on host communicators */
} perf_mem_t;

/* Before creating a communicator: selects GPU local_rank % count when there is
 * one; returns the device or -1 (host). */
int perf_mem_select_device(int local_rank);
/* Picks the memory kind from ncclCommCuDevice(comm).  0 on success. */
int perf_mem_init(perf_mem_t *m, ncclComm_t comm);
void perf_mem_fini(perf_mem_t *m);
/* At least one byte, aligned for any datatype; NULL on failure. */
void *perf_mem_alloc(perf_mem_t *m, size_t bytes);
void perf_mem_free(perf_mem_t *m, void *p);
/* Copies between a buffer of ours and host memory; 0 on success. */
int perf_mem_put(perf_mem_t *m, void *dst, const void *host, size_t bytes);
int perf_mem_get(perf_mem_t *m, void *host, const void *src, size_t bytes);
/* Waits until everything issued on m->stream has completed; 0 on success. */
int perf_mem_sync(perf_mem_t *m);
/* CUDA graphs of the calls issued on m->stream (GPU buffers only): begin a
 * capture (0 on success), end it and instantiate (NULL on failure), launch on
 * m->stream (0 on success), free. */
int perf_mem_capture_begin(perf_mem_t *m);
void *perf_mem_capture_end(perf_mem_t *m);
int perf_mem_graph_launch(perf_mem_t *m, void *graph);
void perf_mem_graph_free(void *graph);

#endif
