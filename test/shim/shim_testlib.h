/* What the shim's C test programs share (test_shim, test_shim_p2p,
 * test_shim_net): failure reports, buffers on the host or the device filled
 * and read through host copies, deterministic data, picking the GPU.  They
 * are plain MPI programs: none links mpccl. */
#ifndef TEST_SHIM_TESTLIB_H
#define TEST_SHIM_TESTLIB_H
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* MPCCL_NO_CUDA: built without CUDA even where CUDA headers exist. */
#if defined(__has_include) && !defined(MPCCL_NO_CUDA)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define HAVE_CUDA_RT 1
#endif
#endif

extern int use_gpu, failures, world_rank;
extern unsigned long long seed; /* MPCCL_TEST_SEED */

/* Names the test in progress in each failure line; NULL: nothing. */
extern const char *(*fail_context)(void);
void fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define FAIL(...) fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define MPI_OK(call)                                                \
    do {                                                            \
        int rc_ = (call);                                           \
        if (rc_ != MPI_SUCCESS) FAIL("%s returned %d", #call, rc_); \
    } while (0)

/* dev: device memory (cudaMalloc) or host memory.  Out of memory aborts. */
void *dbuf(size_t bytes, int dev);
void dfree(void *p, int dev);
void put(void *d, const void *h, size_t bytes, int dev); /* host h -> d */
void get(void *h, const void *d, size_t bytes, int dev); /* d -> host h */

uint64_t mix(uint64_t x);
uint64_t h4(uint64_t a, uint64_t b, uint64_t c, uint64_t d); /* mixed with seed */

/* Reads MPCCL_TEST_SEED.  With use_gpu, makes GPU world_rank % count current;
 * 77 (the rank says SKIP) when there is no CUDA build or no GPU, else 0. */
int shim_test_setup(void);

#endif
