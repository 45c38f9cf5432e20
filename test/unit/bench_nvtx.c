/* The cost of the NVTX range every API call on a GPU communicator carries
 * (lib/api/api_nvtx.h), timed as ncclAllReduce uses it.  Without a tool
 * attached (what every program pays) it prints ns per call, then the cost with
 * the message formatted (forced on: what a recording tool adds at least), and
 * fails above 50 ns per call.  With a tool attached (NVTX_INJECTION64_PATH) it
 * prints that cost; test/unit/nvtx-ranges.sh runs it so under a recording tool
 * to check the ranges' messages.  Usage: bench_nvtx [calls] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "api/api_nvtx.h"

static struct ncclComm gpu_comm, host_comm; /* as far as the range looks */
static volatile size_t sink;

/* One API call's range and nothing else. */
__attribute__((noinline)) static void one_call(ncclComm_t comm, size_t count)
{
    MPCCL_NVTX_COLL_OP("ncclAllReduce", count, ncclFloat32, ncclSum);
    sink += count;
}

__attribute__((noinline)) static void bare_call(ncclComm_t comm, size_t count)
{
    (void)comm;
    sink += count;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Best of 5 runs of n calls on the GPU communicator, in ns per call. */
static double time_calls(void (*fn)(ncclComm_t, size_t), size_t n)
{
    double best = 1e30;
    for (int run = 0; run < 5; run++) {
        double t0 = now_ns();
        for (size_t i = 0; i < n; i++) fn(&gpu_comm, i);
        double t = (now_ns() - t0) / (double)n;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 2000000;
    gpu_comm.magic = host_comm.magic = MPCCL_COMM_MAGIC;
    gpu_comm.cuda_dev = 0;
    gpu_comm.id = 0x1234abcd5678ef90ULL;
    host_comm.cuda_dev = -1; /* host communicators get no range */
    host_comm.id = 0x1111;
    one_call(&host_comm, 1);
    one_call(&gpu_comm, 42); /* the first: decides whether ranges are on */

    double bare = time_calls(bare_call, n);
    double with = time_calls(one_call, n);
#ifdef MPCCL_HAVE_CUDA
    if (mpccl_nvtx_state == 2) {
        printf("bench_nvtx: %zu calls with a tool attached: the range costs %.2f ns per call\n", n, with - bare);
        return 0;
    }
#endif
    printf("bench_nvtx: %zu calls; empty call %.2f ns, with the range (no tool attached) %.2f ns: the range costs "
           "%.2f ns per call\n", n, bare, with, with - bare);
#ifdef MPCCL_HAVE_CUDA
    /* As if a tool were attached: the message is formatted and handed to NVTX
     * (which does nothing without one; not when a tool is there but turned off). */
    if (!getenv("NVTX_INJECTION64_PATH")) {
        int state = mpccl_nvtx_state;
        mpccl_nvtx_state = 2;
        double on = time_calls(one_call, n / 10 + 1);
        mpccl_nvtx_state = state;
        printf("bench_nvtx: forced on (message formatted per call, no tool): %.2f ns per call\n", on - bare);
    }
#else
    printf("bench_nvtx: built without CUDA: the ranges are compiled away\n");
#endif
    if (with - bare > 50.0) {
        fprintf(stderr, "bench_nvtx: FAIL: the range costs %.2f ns per call with no tool attached (limit 50 ns)\n",
                with - bare);
        return 1;
    }
    return 0;
}
