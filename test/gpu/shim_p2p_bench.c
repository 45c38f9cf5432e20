/* Point-to-point on device buffers between ranks 0 and 1, one row per size:
 *
 *   (a) one-way latency of MPI_Send/MPI_Recv on device buffers (ping-pong,
 *       half the round trip);
 *   (b) the same exchange staged by hand, the way applications do it without a
 *       CUDA-aware MPI: cudaMemcpy to a malloc'd host buffer (cudaMallocHost
 *       with --staging-pinned), MPI_Send, MPI_Recv, cudaMemcpy back;
 *   (c) bandwidth of windows of MPI_Isend/MPI_Irecv on device buffers (the OSU
 *       bandwidth pattern: W messages in flight, then a short acknowledgement);
 *   (d) a cudaMemcpy of the same bytes inside one process along the path the
 *       data physically takes (the same GPU, or the peer GPU of rank 1 when it
 *       is another device of this node): the reference the copy engines give.
 *
 * and the ratios (a)/(b) (below 1: faster than staging by hand) and (c)/(d)
 * (the fraction of the physical path's bandwidth).
 *
 * It is a plain MPI + CUDA runtime program.  With libmpccl_shim.so preloaded
 * the MPI calls on device buffers go through mpccl; without it they reach the
 * MPI library directly, which only a CUDA-aware MPI survives.
 *
 *   shim_p2p_bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
 *                  [-W WINDOW] [--staging-pinned] [--ref auto|local]
 *                  [--no-check] [--csv FILE]
 *
 * Sizes take K/M/G suffixes (powers of 1024); default 8 .. 256M, factor 2.
 * Every size's data is checked once, in an untimed exchange before the timed
 * ones (sender's pattern compared byte for byte at the receiver); the exit
 * status is 1 when any check failed.  Ranks beyond 1 only wait.  Each rank uses
 * device (local rank % device count), so ranks may share one GPU. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_PP 11
#define TAG_BW 12
#define TAG_ACK 13

static int rank, nranks;

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "[rank %d] %s:%d: %s: %s\n", rank, __FILE__, __LINE__, #call,          \
                    cudaGetErrorString(e_));                                                       \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                          \
        }                                                                                          \
    } while (0)
#define MPI_OK(call)                                                                               \
    do {                                                                                           \
        int e_ = (call);                                                                           \
        if (e_ != MPI_SUCCESS) {                                                                   \
            fprintf(stderr, "[rank %d] %s:%d: %s returned %d\n", rank, __FILE__, __LINE__, #call,  \
                    e_);                                                                           \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                          \
        }                                                                                          \
    } while (0)

struct opts {
    size_t min_bytes, max_bytes;
    double factor;
    int iters, warmup, window;
    int pinned, check, ref_local;
    const char *csv;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: shim_p2p_bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-W WINDOW]\n"
               "                      [--staging-pinned] [--ref auto|local] [--no-check] [--csv FILE]\n"
               "  sizes in bytes with K/M/G suffixes (default -b 8 -e 256M -f 2); -n/-w are the\n"
               "  counts for small sizes (default 1000/100), scaled down above 1 MB; -W messages\n"
               "  per bandwidth window (default 64).  Run with 2 or more ranks (only 0 and 1 work).\n");
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; end++; break;
    case 'm': case 'M': v *= 1024.0 * 1024.0; end++; break;
    case 'g': case 'G': v *= 1024.0 * 1024.0 * 1024.0; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0' || v > 1e15) return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    o->min_bytes = 8;
    o->max_bytes = (size_t)256 << 20;
    o->factor = 2.0;
    o->iters = 1000;
    o->warmup = 100;
    o->window = 64;
    o->pinned = 0;
    o->check = 1;
    o->ref_local = 0;
    o->csv = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "-b") && v) {
            if (parse_size(v, &o->min_bytes)) return -1;
        } else if (!strcmp(a, "-e") && v) {
            if (parse_size(v, &o->max_bytes)) return -1;
        } else if (!strcmp(a, "-f") && v) {
            o->factor = atof(v);
        } else if (!strcmp(a, "-n") && v) {
            o->iters = atoi(v);
        } else if (!strcmp(a, "-w") && v) {
            o->warmup = atoi(v);
        } else if (!strcmp(a, "-W") && v) {
            o->window = atoi(v);
        } else if (!strcmp(a, "--csv") && v) {
            o->csv = v;
        } else if (!strcmp(a, "--ref") && v) {
            if (!strcmp(v, "local")) o->ref_local = 1;
            else if (!strcmp(v, "auto")) o->ref_local = 0;
            else return -1;
        } else {
            takes = 0;
            if (!strcmp(a, "--staging-pinned")) o->pinned = 1;
            else if (!strcmp(a, "--no-check")) o->check = 0;
            else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
            else return -1;
        }
        i += takes;
    }
    if (o->min_bytes < 1 || o->max_bytes < o->min_bytes || o->factor <= 1.0 || o->iters < 1 ||
        o->warmup < 0 || o->window < 1)
        return -1;
    /* MPI counts are ints: every message must fit one */
    if (o->max_bytes > (size_t)2147483647) {
        if (rank == 0) fprintf(stderr, "shim_p2p_bench: -e is at most 2G-1 (an int count of bytes)\n");
        return -1;
    }
    return 0;
}

/* Timed counts for a size: the full counts up to 1 MB, then about the same
 * number of bytes as 1 MB's, at least 2 (a 1 GB ping-pong staged through
 * pageable memory takes most of a second per round trip). */
static int scaled(int n, size_t bytes, int floor_n)
{
    const size_t knee = (size_t)1 << 20;
    if (bytes <= knee) return n;
    double s = (double)n * (double)knee / (double)bytes;
    return s < floor_n ? floor_n : (int)s;
}

/* The pattern a sender writes: byte i of stream `seed` is byte i % 8 of word
 * i / 8, little end first (words are stored whole where they fit).  Every
 * size and test has its own seed, so a receive that left stale data fails. */
static inline uint64_t pattern_word(uint64_t seed, size_t j)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ULL + (uint64_t)j;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint8_t pattern_byte(uint64_t seed, size_t i)
{
    return (uint8_t)(pattern_word(seed, i >> 3) >> (8 * (i & 7)));
}

static void fill_pattern(uint8_t *host, size_t n, uint64_t seed)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = pattern_word(seed, i >> 3);
        for (int k = 0; k < 8; k++) host[i + k] = (uint8_t)(w >> (8 * k));
    }
    for (; i < n; i++) host[i] = pattern_byte(seed, i);
}

/* Compares n bytes (copied from the device into host) with the pattern;
 * prints the first mismatch and returns the number of wrong bytes. */
static size_t check_pattern(const char *what, size_t bytes, const uint8_t *host, size_t n, uint64_t seed,
                            size_t slice)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = pattern_word(seed, i >> 3);
        size_t m = n - i < 8 ? n - i : 8;
        for (size_t k = 0; k < m; k++) {
            if (host[i + k] != (uint8_t)(w >> (8 * k)) && bad++ == 0) first = i + k;
        }
    }
    if (bad)
        fprintf(stderr,
                "[rank %d] CHECK FAILED %s, %zu bytes, message %zu: %zu wrong bytes, first at offset %zu "
                "(expected 0x%02x, got 0x%02x)\n",
                rank, what, bytes, slice, bad, first, pattern_byte(seed, first), host[first]);
    return bad;
}

static uint64_t seed_for(int test, int sender, int size_index)
{
    return ((uint64_t)test << 40) ^ ((uint64_t)sender << 32) ^ (uint64_t)(size_index + 1) ^ 0x5EED;
}

/* Sender side: pattern into the device buffer through the staging buffer. */
static void put_pattern(void *dev, uint8_t *stage, size_t bytes, uint64_t seed)
{
    fill_pattern(stage, bytes, seed);
    CUDA_OK(cudaMemcpy(dev, stage, bytes, cudaMemcpyHostToDevice));
}

/* Receiver side: the device buffer back into the staging buffer, checked. */
static size_t get_check(const char *what, const void *dev, uint8_t *stage, size_t bytes, uint64_t seed,
                        size_t slice)
{
    CUDA_OK(cudaMemcpy(stage, dev, bytes, cudaMemcpyDeviceToHost));
    return check_pattern(what, bytes, stage, bytes, seed, slice);
}

/* (a): ping-pong on device buffers; returns the one-way time in seconds. */
static double pingpong_device(MPI_Comm pair, void *sbuf, void *rbuf, size_t bytes, int warmup, int iters)
{
    int peer = 1 - rank, count = (int)bytes;
    double t0 = 0;
    MPI_OK(MPI_Barrier(pair));
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_OK(MPI_Send(sbuf, count, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD));
            MPI_OK(MPI_Recv(rbuf, count, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            MPI_OK(MPI_Recv(rbuf, count, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            MPI_OK(MPI_Send(sbuf, count, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD));
        }
    }
    return (MPI_Wtime() - t0) / (2.0 * iters);
}

/* (b): the same through a host buffer, staged by hand. */
static void staged_send(const void *sbuf, uint8_t *host, size_t bytes, int peer)
{
    CUDA_OK(cudaMemcpy(host, sbuf, bytes, cudaMemcpyDeviceToHost));
    MPI_OK(MPI_Send(host, (int)bytes, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD));
}

static void staged_recv(void *rbuf, uint8_t *host, size_t bytes, int peer)
{
    MPI_OK(MPI_Recv(host, (int)bytes, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CUDA_OK(cudaMemcpy(rbuf, host, bytes, cudaMemcpyHostToDevice));
}

static double pingpong_staged(MPI_Comm pair, void *sbuf, void *rbuf, uint8_t *host, size_t bytes, int warmup,
                              int iters)
{
    int peer = 1 - rank;
    double t0 = 0;
    MPI_OK(MPI_Barrier(pair));
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) t0 = MPI_Wtime();
        if (rank == 0) {
            staged_send(sbuf, host, bytes, peer);
            staged_recv(rbuf, host, bytes, peer);
        } else {
            staged_recv(rbuf, host, bytes, peer);
            staged_send(sbuf, host, bytes, peer);
        }
    }
    return (MPI_Wtime() - t0) / (2.0 * iters);
}

/* (c): windows of `win` messages from rank 0 to rank 1, each received into its
 * own slice of rwin (receive buffers of pending receives must not overlap);
 * the send buffer is shared, which MPI allows.  Returns seconds per byte moved
 * in the timed windows. */
static double window_bw(MPI_Comm pair, void *sbuf, uint8_t *rwin, size_t bytes, int win, int warmup, int nwin,
                        MPI_Request *reqs)
{
    int count = (int)bytes, ack = 0;
    double t0 = 0;
    MPI_OK(MPI_Barrier(pair));
    for (int w = 0; w < warmup + nwin; w++) {
        if (w == warmup) t0 = MPI_Wtime();
        if (rank == 0) {
            for (int j = 0; j < win; j++)
                MPI_OK(MPI_Isend(sbuf, count, MPI_BYTE, 1, TAG_BW, MPI_COMM_WORLD, &reqs[j]));
            MPI_OK(MPI_Waitall(win, reqs, MPI_STATUSES_IGNORE));
            MPI_OK(MPI_Recv(&ack, 1, MPI_INT, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            for (int j = 0; j < win; j++)
                MPI_OK(MPI_Irecv(rwin + (size_t)j * bytes, count, MPI_BYTE, 0, TAG_BW, MPI_COMM_WORLD, &reqs[j]));
            MPI_OK(MPI_Waitall(win, reqs, MPI_STATUSES_IGNORE));
            MPI_OK(MPI_Send(&ack, 1, MPI_INT, 0, TAG_ACK, MPI_COMM_WORLD));
        }
    }
    double t = MPI_Wtime() - t0;
    return t / ((double)nwin * win * (double)bytes);
}

/* (d): copies of `bytes` from src to dst (another device's memory for the
 * peer path); seconds per copy, timed with events on the legacy stream. */
static double ref_copy(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, int warmup, int iters)
{
    cudaEvent_t a, b;
    float ms = 0;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) CUDA_OK(cudaEventRecord(a, 0));
        if (dst_dev == src_dev)
            CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
        else
            CUDA_OK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, 0));
    }
    CUDA_OK(cudaEventRecord(b, 0));
    CUDA_OK(cudaEventSynchronize(b));
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    CUDA_OK(cudaEventDestroy(a));
    CUDA_OK(cudaEventDestroy(b));
    return (double)ms * 1e-3 / iters;
}

static const char *mps_state(int dev)
{
    int v = 0;
    /* cudaDevAttrMpsEnabled (133) by name in the CUDA 13 headers, by number in
     * older ones; a runtime that does not know it fails the call: "unknown" */
#if CUDART_VERSION >= 13000
    cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrMpsEnabled, dev);
#else
    cudaError_t e = cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)133, dev);
#endif
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return "unknown";
    }
    return v ? "active" : "not active";
}

struct devinfo {
    int dev;
    char name[256];
    char bus[32];
    char host[MPI_MAX_PROCESSOR_NAME];
};

int main(int argc, char **argv)
{
    struct opts o;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    int pr = parse_args(argc, argv, &o);
    if (pr != 0) {
        if (rank == 0) usage(pr > 0 ? stdout : stderr);
        MPI_Finalize();
        return pr > 0 ? 0 : 1;
    }
    if (nranks < 2) {
        if (rank == 0) fprintf(stderr, "shim_p2p_bench: needs at least 2 ranks (mpirun -np 2)\n");
        MPI_Finalize();
        return 1;
    }

    /* device: local rank modulo the devices this process sees */
    MPI_Comm local;
    int lrank = 0, ndev = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_free(&local);
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    int have = ce == cudaSuccess && ndev > 0, all_have = 0;
    MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_have) {
        if (rank == 0) printf("SKIP: no usable CUDA device on every rank (%s)\n", cudaGetErrorString(ce));
        MPI_Finalize();
        return 77;
    }
    struct devinfo me, peerinfo;
    memset(&me, 0, sizeof(me));
    me.dev = lrank % ndev;
    CUDA_OK(cudaSetDevice(me.dev));
    CUDA_OK(cudaFree(NULL)); /* the context, before anything is timed */
    {
        struct cudaDeviceProp prop;
        CUDA_OK(cudaGetDeviceProperties(&prop, me.dev));
        snprintf(me.name, sizeof(me.name), "%s", prop.name);
        CUDA_OK(cudaDeviceGetPCIBusId(me.bus, (int)sizeof(me.bus), me.dev));
        int len = 0;
        MPI_Get_processor_name(me.host, &len);
    }

    MPI_Comm pair;
    MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair);
    int errors = 0;
    if (rank >= 2) goto done;

    /* what rank 1 runs on, for the header and the reference path */
    if (rank == 0) {
        MPI_OK(MPI_Recv(&peerinfo, (int)sizeof(peerinfo), MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else {
        MPI_OK(MPI_Send(&me, (int)sizeof(me), MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD));
    }

    /* reference path: rank 1's device seen from rank 0's process, where it is
     * another GPU of the same node and is visible here */
    int ref_dev = me.dev;
    const char *ref_what = "same GPU (device to device)";
    if (rank == 0 && !o.ref_local && strcmp(peerinfo.host, me.host) == 0 && strcmp(peerinfo.bus, me.bus) != 0) {
        int d = -1;
        if (cudaDeviceGetByPCIBusId(&d, peerinfo.bus) == cudaSuccess && d != me.dev) {
            int can = 0;
            CUDA_OK(cudaDeviceCanAccessPeer(&can, me.dev, d));
            if (can) {
                cudaError_t pe = cudaDeviceEnablePeerAccess(d, 0);
                if (pe == cudaSuccess || pe == cudaErrorPeerAccessAlreadyEnabled) {
                    ref_dev = d;
                    ref_what = "peer GPU (device to rank 1's device)";
                }
            }
            if (ref_dev == me.dev) ref_what = "same GPU (no peer access to rank 1's device)";
        } else {
            ref_what = "same GPU (rank 1's device not visible here)";
        }
        (void)cudaGetLastError();
    } else if (rank == 0 && strcmp(peerinfo.host, me.host) != 0) {
        ref_what = "same GPU (rank 1 is on another node)";
    }

    /* buffers: the ping-pong pair, rank 1's bandwidth window (capped at 1 GB
     * or one message), the staging buffer (also the check buffer) */
    size_t maxb = o.max_bytes;
    size_t wincap = (size_t)1 << 30;
    if (wincap < maxb) wincap = maxb;
    size_t winbytes = (size_t)o.window * maxb < wincap ? (size_t)o.window * maxb : wincap;
    void *sbuf = NULL, *rbuf = NULL, *refdst = NULL;
    uint8_t *rwin = NULL, *stage = NULL;
    CUDA_OK(cudaMalloc(&sbuf, maxb));
    CUDA_OK(cudaMalloc(&rbuf, maxb));
    if (rank == 1) CUDA_OK(cudaMalloc((void **)&rwin, winbytes));
    if (rank == 0 && ref_dev != me.dev) {
        CUDA_OK(cudaSetDevice(ref_dev));
        CUDA_OK(cudaMalloc(&refdst, maxb));
        CUDA_OK(cudaSetDevice(me.dev));
    }
    if (o.pinned)
        CUDA_OK(cudaMallocHost((void **)&stage, maxb));
    else
        stage = malloc(maxb);
    MPI_Request *reqs = calloc((size_t)o.window, sizeof(*reqs));
    if (stage == NULL || reqs == NULL) {
        fprintf(stderr, "[rank %d] out of host memory (%zu bytes)\n", rank, maxb);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(stage, 0, maxb); /* pages touched before any timing */

    FILE *csv = NULL;
    if (rank == 0) {
        const char *pre = getenv("LD_PRELOAD");
        int shim = dlsym(RTLD_DEFAULT, "mpcclShimCount") != NULL;
        printf("# shim_p2p_bench:");
        for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
        printf("\n# ranks %d; rank 0: %s device %d %s (%s); rank 1: %s device %d %s (%s)\n", nranks, me.host,
               me.dev, me.name, me.bus, peerinfo.host, peerinfo.dev, peerinfo.name, peerinfo.bus);
        printf("# GPU: %s; MPS: %s\n", me.name, mps_state(me.dev));
        printf("# libmpccl_shim.so: %s%s\n", shim ? "loaded" : "not loaded",
               shim ? "" : " (device pointers go to the MPI library itself: it must be CUDA-aware)");
        if (pre && *pre) printf("# LD_PRELOAD=%s\n", pre);
        printf("# hand staging through %s host memory; bandwidth windows of up to %d messages; "
               "reference: %s\n",
               o.pinned ? "pinned (cudaMallocHost)" : "pageable (malloc)", o.window, ref_what);
        printf("# lat: one-way latency in us (half a ping-pong); ratio a/b below 1: faster than hand staging\n"
               "# bw: GB/s = 1e9 bytes/s; ratio c/d: fraction of the reference copy's bandwidth\n");
        printf("#%11s %6s %12s %12s %8s %5s %10s %12s %10s %8s %6s\n", "bytes", "iters", "(a)mpi_us",
               "(b)staged_us", "a/b", "win", "(c)GB/s", "(d)copy_us", "(d)GB/s", "c/d", "errors");
        fflush(stdout);
        if (o.csv) {
            csv = fopen(o.csv, "w");
            if (!csv) {
                perror(o.csv);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            fprintf(csv, "bytes,iters,mpi_lat_us,staged_lat_us,lat_ratio,window,windows,mpi_bw_gbs,"
                         "ref_copy_us,ref_bw_gbs,bw_ratio,errors,staging,reference\n");
        }
    }

    int idx = 0;
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; idx++) {
        int iters = scaled(o.iters, bytes, 2);
        int warm = scaled(o.warmup, bytes, 1);
        int win = winbytes / bytes < (size_t)o.window ? (int)(winbytes / bytes) : o.window;
        /* a quarter of the latency loop's count in windows, scaled by the
         * window's bytes, at least 4 */
        int nwin = scaled(o.iters, bytes * (size_t)win, 16) / 4;
        int wwin = nwin / 10 < 1 ? 1 : nwin / 10;
        size_t bad = 0;
        int peer = 1 - rank;

        /* checked exchanges, untimed: device ping-pong, hand staging, one window */
        if (o.check) {
            uint64_t mine = seed_for(1, rank, idx), theirs = seed_for(1, peer, idx);
            put_pattern(sbuf, stage, bytes, mine);
            CUDA_OK(cudaMemset(rbuf, 0xEE, bytes));
            MPI_OK(MPI_Barrier(pair));
            if (rank == 0) {
                MPI_OK(MPI_Send(sbuf, (int)bytes, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD));
                MPI_OK(MPI_Recv(rbuf, (int)bytes, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            } else {
                MPI_Status st;
                int got = -1;
                MPI_OK(MPI_Recv(rbuf, (int)bytes, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD, &st));
                MPI_OK(MPI_Get_count(&st, MPI_BYTE, &got));
                if (got != (int)bytes || st.MPI_SOURCE != peer || st.MPI_TAG != TAG_PP) {
                    fprintf(stderr, "[rank %d] CHECK FAILED MPI_Recv status: count %d source %d tag %d "
                                    "(expected %zu, %d, %d)\n", rank, got, st.MPI_SOURCE, st.MPI_TAG, bytes,
                            peer, TAG_PP);
                    bad++;
                }
                MPI_OK(MPI_Send(sbuf, (int)bytes, MPI_BYTE, peer, TAG_PP, MPI_COMM_WORLD));
            }
            bad += get_check("MPI_Send/MPI_Recv", rbuf, stage, bytes, theirs, 0);

            mine = seed_for(2, rank, idx);
            theirs = seed_for(2, peer, idx);
            put_pattern(sbuf, stage, bytes, mine);
            CUDA_OK(cudaMemset(rbuf, 0xEE, bytes));
            MPI_OK(MPI_Barrier(pair));
            if (rank == 0) {
                staged_send(sbuf, stage, bytes, peer);
                staged_recv(rbuf, stage, bytes, peer);
            } else {
                staged_recv(rbuf, stage, bytes, peer);
                staged_send(sbuf, stage, bytes, peer);
            }
            bad += get_check("hand staging", rbuf, stage, bytes, theirs, 0);

            uint64_t s0 = seed_for(3, 0, idx);
            if (rank == 0) put_pattern(sbuf, stage, bytes, s0);
            if (rank == 1) CUDA_OK(cudaMemset(rwin, 0xEE, (size_t)win * bytes));
            MPI_OK(MPI_Barrier(pair));
            (void)window_bw(pair, sbuf, rwin, bytes, win, 0, 1, reqs);
            if (rank == 1)
                for (int j = 0; j < win; j++)
                    bad += get_check("MPI_Isend/MPI_Irecv window", rwin + (size_t)j * bytes, stage, bytes, s0,
                                     (size_t)j);
        }

        double lat_a = pingpong_device(pair, sbuf, rbuf, bytes, warm, iters);
        double lat_b = pingpong_staged(pair, sbuf, rbuf, stage, bytes, warm, iters);
        double spb = window_bw(pair, sbuf, rwin, bytes, win, wwin, nwin, reqs);
        double tref = 0;
        MPI_OK(MPI_Barrier(pair));
        if (rank == 0)
            tref = ref_copy(refdst ? refdst : rbuf, ref_dev, sbuf, me.dev, bytes, warm, iters);
        MPI_OK(MPI_Barrier(pair));

        /* rank 0 reports rank 1's checks too; the slower side's times (rank
         * 1's clock sees the whole window, rank 0's the ack as well) */
        int bad_i = bad > 0x7fffffff ? 0x7fffffff : (int)bad, bad_all = 0;
        double t[3] = {lat_a, lat_b, spb}, tmax[3];
        MPI_OK(MPI_Allreduce(&bad_i, &bad_all, 1, MPI_INT, MPI_MAX, pair));
        MPI_OK(MPI_Allreduce(t, tmax, 3, MPI_DOUBLE, MPI_MAX, pair));
        if (bad_all) errors++;
        if (rank == 0) {
            double bw_c = 1e-9 / tmax[2], bw_d = (double)bytes / tref * 1e-9;
            printf("%12zu %6d %12.2f %12.2f %8.3f %5d %10.2f %12.2f %10.2f %8.3f %6s\n", bytes, iters,
                   tmax[0] * 1e6, tmax[1] * 1e6, tmax[0] / tmax[1], win, bw_c, tref * 1e6, bw_d, bw_c / bw_d,
                   bad_all ? "FAIL" : (o.check ? "0" : "-"));
            fflush(stdout);
            if (csv)
                fprintf(csv, "%zu,%d,%.3f,%.3f,%.4f,%d,%d,%.3f,%.3f,%.3f,%.4f,%d,%s,%s\n", bytes, iters,
                        tmax[0] * 1e6, tmax[1] * 1e6, tmax[0] / tmax[1], win, nwin, bw_c, tref * 1e6, bw_d,
                        bw_c / bw_d, bad_all, o.pinned ? "pinned" : "pageable", ref_dev == me.dev ? "same" : "peer");
        }
        double next = (double)bytes * o.factor;
        if ((size_t)next <= bytes) next = (double)bytes + 1; /* a factor near 1 still moves on */
        if (next > (double)o.max_bytes) break;
        bytes = (size_t)next;
    }

    if (csv) fclose(csv);
    /* which routes the shim's point-to-point took (between hosts: ucx, or
     * staged with MPCCL_SHIM_NET=mpi), rank 0's sends and rank 1's receives */
    long long (*count)(const char *, const char *) =
        (long long (*)(const char *, const char *))(uintptr_t)dlsym(RTLD_DEFAULT, "mpcclShimCount");
    static const char *const routes[] = {"ucx", "mpccl", "staged", "mpi"};
    long long mine[4] = {0, 0, 0, 0}, theirs[4] = {0, 0, 0, 0};
    for (int r = 0; r < 4 && count; r++) {
        long long v = count(rank == 0 ? "send" : "recv", routes[r]);
        mine[r] = v < 0 ? 0 : v; /* an older shim knows no "ucx" */
    }
    if (rank == 0) MPI_OK(MPI_Recv(theirs, 4, MPI_LONG_LONG, 1, TAG_ACK, pair, MPI_STATUS_IGNORE));
    if (rank == 1) MPI_OK(MPI_Send(mine, 4, MPI_LONG_LONG, 0, TAG_ACK, pair));
    if (rank == 0 && count)
        printf("# shim routes: rank 0 sends ucx %lld, mpccl %lld, staged %lld, mpi %lld; "
               "rank 1 receives ucx %lld, mpccl %lld, staged %lld, mpi %lld\n",
               mine[0], mine[1], mine[2], mine[3], theirs[0], theirs[1], theirs[2], theirs[3]);
    if (rank == 0) {
        if (errors)
            printf("# FAILED: data mismatches at %d size(s) (details on stderr)\n", errors);
        else
            printf("# %s\n", o.check ? "all data checks passed" : "data not checked (--no-check)");
    }
    cudaFree(sbuf);
    cudaFree(rbuf);
    if (rwin) cudaFree(rwin);
    if (refdst) cudaFree(refdst);
    if (o.pinned)
        cudaFreeHost(stage);
    else
        free(stage);
    free(reqs);
    MPI_Comm_free(&pair);
done:
    MPI_Finalize();
    return errors ? 1 : 0;
}
