/* mpccl-floor: what two GPUs joined by NVLink can do at best, measured with no
 * communication library at all -- the floors that mpccl's and NCCL's times are
 * read against (doc/PERFORMANCE.md).
 *
 *   mpccl-floor [-s BYTES] [-n ITERS]
 *
 * One process drives devices 0 and 1 (peer access on).  It prints:
 *   launch     an empty kernel, back to back on one stream: eagerly, and as
 *              nodes of a captured CUDA graph (what any one-launch call costs)
 *   exchange   both GPUs at once: a kernel stores a flag into the other GPU's
 *              memory and waits for the other's flag in its own (one NVLink
 *              crossing each way, the least a collective's launch can do)
 *   copy       BYTES moved between the GPUs: by the copy engines
 *              (cudaMemcpyPeerAsync) and by SM stores into the peer (push) or
 *              loads from it (pull), one direction and both at once, over a
 *              range of CTA counts
 * Every wait in a kernel gives up after 2 s, so a broken link cannot hang it.
 * Exits 77 where fewer than two GPUs with peer access are visible. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CK(x)                                                                                            \
    do {                                                                                                 \
        cudaError_t e_ = (x);                                                                            \
        if (e_ != cudaSuccess) {                                                                         \
            fprintf(stderr, "mpccl-floor: %s failed at line %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                                     \
        }                                                                                                \
    } while (0)

static __device__ unsigned long long gtimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void empty_kernel() {}

/* Store seq into the peer's flag, then wait for the peer's seq in ours. */
__global__ void exchange_kernel(volatile uint32_t *peer_flag, volatile uint32_t *my_flag, uint32_t *seqp,
                                uint32_t *timed_out)
{
    if (threadIdx.x != 0) return;
    uint32_t seq = *seqp + 1;
    *seqp = seq;
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(peer_flag), "r"(seq) : "memory");
    unsigned long long t0 = 0;
    for (uint32_t spins = 0;; spins++) {
        uint32_t v;
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(my_flag) : "memory");
        if ((int32_t)(v - seq) >= 0) break;
        if ((spins & 1023u) == 1023u) {
            unsigned long long now = gtimer();
            if (!t0) t0 = now;
            else if (now - t0 > 2000000000ull) {
                *timed_out = 1;
                break;
            }
        }
    }
}

/* 16-byte vectors from src to dst; either may be the peer's memory. */
__global__ void copy_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n16)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2 * stride] = c;
        dst[i + 3 * stride] = d;
    }
    for (; i < n16; i += stride) dst[i] = src[i];
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void sync_both(void)
{
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceSynchronize());
    }
}

static void launch_floor(int iters)
{
    CK(cudaSetDevice(0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 100; i++) empty_kernel<<<1, 32, 0, s>>>();
    CK(cudaStreamSynchronize(s));
    double t0 = now_us();
    for (int i = 0; i < iters; i++) empty_kernel<<<1, 32, 0, s>>>();
    CK(cudaStreamSynchronize(s));
    double eager = (now_us() - t0) / iters;
    const int per = 20;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per; i++) empty_kernel<<<1, 32, 0, s>>>();
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    int reps = iters / per + 1;
    t0 = now_us();
    for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    double graph = (now_us() - t0) / (reps * per);
    printf("launch     empty kernel, back to back: eager %.2f us, in a graph of %d %.2f us\n", eager, per, graph);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
}

static void exchange_floor(int iters)
{
    uint32_t *flag[2], *seq[2], *timed_out[2];
    cudaStream_t s[2];
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaMalloc(&flag[d], 256));
        CK(cudaMemset(flag[d], 0, 256));
        CK(cudaMalloc(&seq[d], 4));
        CK(cudaMemset(seq[d], 0, 4));
        CK(cudaMalloc(&timed_out[d], 4));
        CK(cudaMemset(timed_out[d], 0, 4));
        CK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
    }
    sync_both();
    auto one = [&](int d) {
        CK(cudaSetDevice(d));
        exchange_kernel<<<1, 32, 0, s[d]>>>(flag[1 - d], flag[d], seq[d], timed_out[d]);
    };
    for (int i = 0; i < 100; i++) {
        one(0);
        one(1);
    }
    sync_both();
    double t0 = now_us();
    for (int i = 0; i < iters; i++) {
        one(0);
        one(1);
    }
    sync_both();
    double eager = (now_us() - t0) / iters;
    const int per = 20;
    cudaGraphExec_t ge[2];
    for (int d = 0; d < 2; d++) {
        cudaGraph_t g;
        CK(cudaSetDevice(d));
        CK(cudaStreamBeginCapture(s[d], cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < per; i++) one(d);
        CK(cudaStreamEndCapture(s[d], &g));
        CK(cudaGraphInstantiate(&ge[d], g, 0));
        CK(cudaGraphDestroy(g));
    }
    int reps = iters / per + 1;
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaGraphLaunch(ge[d], s[d]));
    }
    sync_both();
    t0 = now_us();
    for (int r = 0; r < reps; r++)
        for (int d = 0; d < 2; d++) {
            CK(cudaSetDevice(d));
            CK(cudaGraphLaunch(ge[d], s[d]));
        }
    sync_both();
    double graph = (now_us() - t0) / (reps * per);
    uint32_t bad[2] = {0, 0};
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaMemcpy(&bad[d], timed_out[d], 4, cudaMemcpyDeviceToHost));
        CK(cudaGraphExecDestroy(ge[d]));
        CK(cudaStreamDestroy(s[d]));
        CK(cudaFree(flag[d]));
        CK(cudaFree(seq[d]));
        CK(cudaFree(timed_out[d]));
    }
    printf("exchange   flag to the peer, wait for its flag (one kernel per GPU per round): eager %.2f us, "
           "in a graph of %d %.2f us%s\n",
           eager, per, graph, bad[0] || bad[1] ? "  (A WAIT TIMED OUT: numbers invalid)" : "");
}

/* GB/s of one copy kind; dirs 1: device 0 -> 1 only, 2: both at once. */
static double copy_run(int kind, int dirs, int ctas, size_t bytes, char *buf[2][2], int reps)
{
    cudaStream_t s[2];
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
    }
    /* buf[d][0]: source on device d, buf[d][1]: destination on device d */
    auto issue = [&](int d) {
        int p = 1 - d;
        CK(cudaSetDevice(d));
        if (kind == 0) CK(cudaMemcpyPeerAsync(buf[p][1], p, buf[d][0], d, bytes, s[d]));
        else if (kind == 1) copy_kernel<<<ctas, 512, 0, s[d]>>>((const uint4 *)buf[d][0], (uint4 *)buf[p][1], bytes / 16);
        else copy_kernel<<<ctas, 512, 0, s[d]>>>((const uint4 *)buf[p][0], (uint4 *)buf[d][1], bytes / 16);
    };
    for (int d = 0; d < dirs; d++) issue(d);
    sync_both();
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_us();
        for (int d = 0; d < dirs; d++) issue(d);
        sync_both();
        double gbs = bytes / ((now_us() - t0) * 1e3);
        if (gbs > best) best = gbs;
    }
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaStreamDestroy(s[d]));
    }
    return best;
}

static void copy_floor(size_t bytes)
{
    char *buf[2][2];
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        for (int k = 0; k < 2; k++) {
            CK(cudaMalloc(&buf[d][k], bytes));
            CK(cudaMemset(buf[d][k], d + k, bytes));
        }
    }
    sync_both();
    printf("copy       %zu bytes per direction, GB/s per direction (best of 5):\n", bytes);
    printf("           copy engines: one direction %.1f, both at once %.1f\n", copy_run(0, 1, 0, bytes, buf, 5),
           copy_run(0, 2, 0, bytes, buf, 5));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int ctas[] = {8, 16, 32, 64, 96, 128, sms, 2 * sms};
    for (unsigned i = 0; i < sizeof(ctas) / sizeof(ctas[0]); i++)
        printf("           %4d CTAs x 512: push one way %.1f, both %.1f; pull one way %.1f, both %.1f\n", ctas[i],
               copy_run(1, 1, ctas[i], bytes, buf, 5), copy_run(1, 2, ctas[i], bytes, buf, 5),
               copy_run(2, 1, ctas[i], bytes, buf, 5), copy_run(2, 2, ctas[i], bytes, buf, 5));
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaFree(buf[d][0]));
        CK(cudaFree(buf[d][1]));
    }
}

int main(int argc, char **argv)
{
    size_t bytes = (size_t)1 << 30;
    int iters = 2000, opt;
    while ((opt = getopt(argc, argv, "s:n:")) != -1) {
        if (opt == 's') bytes = (size_t)strtoull(optarg, NULL, 0) / 16 * 16;
        else if (opt == 'n') iters = atoi(optarg);
        else {
            fprintf(stderr, "usage: mpccl-floor [-s BYTES] [-n ITERS]\n");
            return 2;
        }
    }
    int n = 0, can01 = 0, can10 = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("SKIP: mpccl-floor needs two GPUs (%d visible)\n", n);
        return 77;
    }
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    if (!can01 || !can10) {
        printf("SKIP: GPUs 0 and 1 have no peer access\n");
        return 77;
    }
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    }
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("mpccl-floor: 2 x %s, %d SMs\n", p.name, p.multiProcessorCount);
    launch_floor(iters);
    exchange_floor(iters);
    copy_floor(bytes);
    return 0;
}
