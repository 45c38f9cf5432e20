/* The cost of the NVTX range every API call on a GPU communicator carries
 * (lib/api/api_nvtx.h), timed as ncclAllReduce uses it: with no tool attached
 * (what every program pays) and, forced on, with its message formatted (what a
 * recording tool adds).  Prints ns per call; fails when the first exceeds
 * 50 ns.  Usage: bench_nvtx [calls] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_nvtx.h"

static struct ncclComm fake; /* a GPU communicator, as far as the range looks */
static ncclComm_t comm = &fake;
static volatile size_t sink;

/* One API call's range and nothing else. */
__attribute__((noinline)) static void one_call(size_t count)
{
    MPCCL_NVTX_COLL_OP("ncclAllReduce", count, ncclFloat32, ncclSum);
    sink += count;
}

__attribute__((noinline)) static void bare_call(size_t count)
{
    sink += count;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Best of 5 runs of n calls, in ns per call. */
static double time_calls(void (*fn)(size_t), size_t n)
{
    double best = 1e30;
    for (int run = 0; run < 5; run++) {
        double t0 = now_ns();
        for (size_t i = 0; i < n; i++) fn(i);
        double t = (now_ns() - t0) / (double)n;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 2000000;
    fake.magic = MPCCL_COMM_MAGIC;
    fake.cuda_dev = 0;
    fake.id = 0x1234abcd5678ef90ULL;
    if (getenv("NVTX_INJECTION64_PATH")) printf("note: NVTX_INJECTION64_PATH is set: a tool is attached\n");

    double bare = time_calls(bare_call, n);
    double off = time_calls(one_call, n);
    printf("bench_nvtx: %zu calls; empty call %.2f ns, with the range (no tool attached) %.2f ns: the range costs "
           "%.2f ns per call\n", n, bare, off, off - bare);
#ifdef MPCCL_HAVE_CUDA
    int state = mpccl_nvtx_state;
    if (state != 2) {
        /* As if a tool were attached: the message is formatted and handed to NVTX
         * (a no-op without a tool). */
        mpccl_nvtx_state = 2;
        double on = time_calls(one_call, n / 10 + 1);
        mpccl_nvtx_state = state;
        printf("bench_nvtx: forced on (message formatted per call) %.2f ns per call\n", on - bare);
    }
#else
    printf("bench_nvtx: built without CUDA: ranges are compiled away\n");
#endif
    if (off - bare > 50.0) {
        fprintf(stderr, "bench_nvtx: FAIL: the range costs %.2f ns per call with no tool attached (limit 50 ns)\n",
                off - bare);
        return 1;
    }
    return 0;
}
