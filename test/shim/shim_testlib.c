/* What the shim's C test programs share (shim_testlib.h). */
#define _GNU_SOURCE
#include "shim_testlib.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int use_gpu, failures, world_rank;
unsigned long long seed = 20261121ULL;
const char *(*fail_context)(void);

void fail_at(const char *file, int line, const char *fmt, ...)
{
    if (failures++ >= 30) return; /* the first ones say what went wrong */
    const char *ctx = fail_context ? fail_context() : NULL;
    fprintf(stderr, "[rank %d] FAIL %s:%d%s%s%s: ", world_rank, file, line, ctx ? " [" : "", ctx ? ctx : "",
            ctx ? "]" : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void *dbuf(size_t bytes, int dev)
{
    void *p = NULL;
    if (bytes == 0) bytes = 1;
#ifdef HAVE_CUDA_RT
    if (dev) {
        if (cudaMalloc(&p, bytes) != cudaSuccess) p = NULL;
    } else
#endif
        p = malloc(bytes);
    if (p == NULL) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

void dfree(void *p, int dev)
{
#ifdef HAVE_CUDA_RT
    if (dev) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

void put(void *d, const void *h, size_t bytes, int dev)
{
#ifdef HAVE_CUDA_RT
    if (dev) {
        if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) FAIL("cudaMemcpy to the device");
        return;
    }
#endif
    memcpy(d, h, bytes);
}

void get(void *h, const void *d, size_t bytes, int dev)
{
#ifdef HAVE_CUDA_RT
    if (dev) {
        if (bytes && cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) FAIL("cudaMemcpy from the device");
        return;
    }
#endif
    memcpy(h, d, bytes);
}

uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t h4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix(seed ^ mix(a ^ mix(b ^ mix(c ^ mix(d)))));
}

int shim_test_setup(void)
{
    if (getenv("MPCCL_TEST_SEED")) seed = strtoull(getenv("MPCCL_TEST_SEED"), NULL, 0);
    if (!use_gpu) return 0;
    int ndev = 0;
#ifdef HAVE_CUDA_RT
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
    if (ndev > 0) cudaSetDevice(world_rank % ndev);
#endif
    if (ndev > 0) return 0;
    if (world_rank == 0) printf("SKIP: --gpu needs a CUDA build and a GPU\n");
    return 77;
}
