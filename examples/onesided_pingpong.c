/* Ping-pong between ranks 0 and 1: ncclPutSignal + ncclWaitSignal on a window
 * next to ncclSend/ncclRecv, same buffers, same run.  Prints the half round
 * trip and the bandwidth it implies per size.  Other ranks only take part in
 * the collective window registration.  -c PATH adds another NCCL's
 * ncclSend/ncclRecv (say NVIDIA's libnccl.so.2, loaded privately as
 * mpccl-perf --compare does) on the same buffers and stream.  -s puts from a
 * buffer registered as a window too (between nodes, GPU-direct puts then
 * leave from it without a copy).
 *
 *   mpirun -np 2 ./onesided_pingpong [-b MIN] [-e MAX] [-n ITERS] [-w WARMUP] [-c PATH] [-s]
 *
 * On GPU communicators every iteration is enqueued on the stream (the two
 * ranks meet through device-side signals) and the stream is synchronised once
 * per size; on host communicators each call completes before returning.  The
 * first exchange of each size is checked byte for byte. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpccl_mpi.h"
#include "nccl.h"
#include "perf_lib.h"
#include "perf_mem.h"

#if defined(__has_include) && !defined(MPCCL_NO_CUDA)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define PP_CUDA 1
#endif
#endif

#define CHECK_NCCL(call)                                                                                   \
    do {                                                                                                   \
        ncclResult_t r_ = (call);                                                                          \
        if (r_ != ncclSuccess) {                                                                           \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_), \
                    ncclGetLastError(NULL));                                                               \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                  \
        }                                                                                                  \
    } while (0)

static ncclComm_t comm;
static perf_mem_t mem;
static int rank;
static perf_nccl_t other; /* -c: the other library */
static ncclComm_t other_comm;

/* Rounds: mpccl put/signal, mpccl send/recv, the other library's send/recv. */
enum { PUTSIG = 0, SENDRECV = 1, OTHER_SENDRECV = 2 };

#define CHECK_OTHER(call)                                                                                  \
    do {                                                                                                   \
        ncclResult_t r_ = (call);                                                                          \
        if (r_ != ncclSuccess) {                                                                           \
            fprintf(stderr, "%s:%d: %s failed in %s: %s\n", __FILE__, __LINE__, #call, other.path,           \
                    other.GetErrorString(r_));                                                             \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                  \
        }                                                                                                  \
    } while (0)

/* Window memory: 4096-aligned host memory, or cudaMalloc (2 MiB granularity). */
static void *win_alloc(size_t bytes)
{
    void *p = NULL;
#ifdef PP_CUDA
    if (mem.gpu) return cudaMalloc(&p, bytes < (2u << 20) ? (2u << 20) : bytes) == cudaSuccess ? p : NULL;
#endif
    return posix_memalign(&p, NCCL_WIN_REQUIRED_ALIGNMENT, bytes) == 0 ? p : NULL;
}

static void win_free(void *p)
{
#ifdef PP_CUDA
    if (mem.gpu) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

/* One round trip of size bytes: rank 0 puts and waits, rank 1 waits and puts. */
static void putsig_round(void *src, size_t bytes, ncclWindow_t win)
{
    int peer = 1 - rank;
    ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = peer, .sigIdx = 0, .ctx = 0};
    if (rank == 1) CHECK_NCCL(ncclWaitSignal(1, &d, comm, mem.stream));
    CHECK_NCCL(ncclPutSignal(src, bytes, ncclUint8, peer, win, 0, 0, 0, 0, comm, mem.stream));
    if (rank == 0) CHECK_NCCL(ncclWaitSignal(1, &d, comm, mem.stream));
}

static void sendrecv_round(void *src, void *dst, size_t bytes)
{
    int peer = 1 - rank;
    if (rank == 1) CHECK_NCCL(ncclRecv(dst, bytes, ncclUint8, peer, comm, mem.stream));
    CHECK_NCCL(ncclSend(src, bytes, ncclUint8, peer, comm, mem.stream));
    if (rank == 0) CHECK_NCCL(ncclRecv(dst, bytes, ncclUint8, peer, comm, mem.stream));
}

static void other_sendrecv_round(void *src, void *dst, size_t bytes)
{
    int peer = 1 - rank;
    if (rank == 1) CHECK_OTHER(other.Recv(dst, bytes, ncclUint8, peer, other_comm, mem.stream));
    CHECK_OTHER(other.Send(src, bytes, ncclUint8, peer, other_comm, mem.stream));
    if (rank == 0) CHECK_OTHER(other.Recv(dst, bytes, ncclUint8, peer, other_comm, mem.stream));
}

static void round_of(int kind, void *src, void *dst, size_t bytes, ncclWindow_t win)
{
    if (kind == PUTSIG) putsig_round(src, bytes, win);
    else if (kind == SENDRECV) sendrecv_round(src, dst, bytes);
    else other_sendrecv_round(src, dst, bytes);
}

/* Seconds per round trip over iters rounds (after warmup). */
static double time_rounds(int kind, void *src, void *dst, size_t bytes, ncclWindow_t win, int iters, int warmup)
{
    double t0 = 0;
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) {
            perf_mem_sync(&mem);
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        round_of(kind, src, dst, bytes, win);
    }
    perf_mem_sync(&mem);
    return (MPI_Wtime() - t0) / iters;
}

/* The first exchange of a size moves the peer's pattern into dst. */
static int check_once(int kind, unsigned char *src, unsigned char *dst, size_t bytes, ncclWindow_t win)
{
    unsigned char *h = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) h[i] = (unsigned char)(rank * 131 + kind * 7 + i * 13 + bytes);
    perf_mem_put(&mem, src, h, bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    round_of(kind, src, dst, bytes, win);
    perf_mem_sync(&mem);
    perf_mem_get(&mem, h, dst, bytes);
    int bad = 0;
    for (size_t i = 0; i < bytes && !bad; i++)
        bad = h[i] != (unsigned char)((1 - rank) * 131 + kind * 7 + i * 13 + bytes);
    free(h);
    MPI_Barrier(MPI_COMM_WORLD);
    return bad;
}

/* 64, 4K, 1M, 2G */
static size_t parse_size(const char *s)
{
    char *end;
    size_t v = strtoull(s, &end, 0);
    switch (*end) {
    case 'k': case 'K': return v << 10;
    case 'm': case 'M': return v << 20;
    case 'g': case 'G': return v << 30;
    default: return v;
    }
}

/* -c: the other library's communicator over the same ranks. */
static void open_other(const char *path)
{
    char err[700];
    if (perf_lib_open(&other, path, err, sizeof(err)) || !other.Send || !other.Recv) {
        if (rank == 0) fprintf(stderr, "onesided_pingpong -c %s: %s\n", path, err[0] ? err : "no ncclSend/ncclRecv");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (!perf_lib_distinct(&other)) {
        if (rank == 0) fprintf(stderr, "onesided_pingpong -c %s: the loader returned mpccl itself\n", path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    ncclUniqueId id;
    int nranks;
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (rank == 0) CHECK_OTHER(other.GetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    CHECK_OTHER(other.CommInitRank(&other_comm, nranks, id, rank));
}

int main(int argc, char **argv)
{
    size_t minb = 8, maxb = 4 << 20;
    int iters = 100, warmup = 10, opt, nranks, wrong = 0;
    const char *compare = NULL;
    MPI_Init(&argc, &argv);
    int src_win = 0;
    while ((opt = getopt(argc, argv, "b:e:n:w:c:s")) != -1) {
        switch (opt) {
        case 'b': minb = parse_size(optarg); break;
        case 'e': maxb = parse_size(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'c': compare = optarg; break;
        case 's': src_win = 1; break;
        default:
            fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-n ITERS] [-w WARMUP] [-c OTHER_LIBNCCL] [-s]\n", argv[0]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (minb == 0 || minb > maxb || iters < 1 || warmup < 0) {
        if (rank == 0) fprintf(stderr, "onesided_pingpong: need 0 < MIN <= MAX and ITERS >= 1\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (nranks < 2) {
        if (rank == 0) printf("onesided_pingpong needs 2 ranks or more\n");
        MPI_Finalize();
        return 0;
    }
    MPI_Comm node;
    int local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    perf_mem_select_device(local);
    CHECK_NCCL(mpcclCommInitMPI(&comm, MPI_COMM_WORLD, NULL));
    if (perf_mem_init(&mem, comm)) MPI_Abort(MPI_COMM_WORLD, 1);
    if (compare) open_other(compare);
    unsigned char *wbuf = win_alloc(maxb), *dst = perf_mem_alloc(&mem, maxb);
    unsigned char *src = src_win ? win_alloc(maxb) : perf_mem_alloc(&mem, maxb);
    if (!wbuf || !src || !dst) MPI_Abort(MPI_COMM_WORLD, 1);
    ncclWindow_t win, swin = NULL;
    CHECK_NCCL(ncclCommWindowRegister(comm, wbuf, maxb, &win, NCCL_WIN_DEFAULT));
    if (src_win) CHECK_NCCL(ncclCommWindowRegister(comm, src, maxb, &swin, NCCL_WIN_DEFAULT));
    int kinds = compare ? 3 : 2;
    if (rank == 0) {
        printf("# ranks 0 <-> 1, %s memory, %d iterations%s%s%s\n", mem.gpu ? "GPU" : "host", iters,
               src_win ? ", puts from a window" : "", compare ? "; other: " : "", compare ? other.path : "");
        printf("# %12s %14s %12s %14s %12s", "bytes", "putsig_us", "putsig_GB/s", "sendrecv_us", "sendrecv_GB/s");
        if (compare) printf(" %14s %12s", "other_sr_us", "other_GB/s");
        printf("\n");
    }
    for (size_t b = minb; b <= maxb; b *= 2) {
        double t[3] = {0, 0, 0};
        for (int k = 0; k < kinds; k++) {
            if (rank < 2) {
                wrong |= check_once(k, src, k == PUTSIG ? wbuf : dst, b, win);
            } else {
                MPI_Barrier(MPI_COMM_WORLD);
                MPI_Barrier(MPI_COMM_WORLD);
            }
        }
        for (int k = 0; k < kinds; k++) {
            if (rank < 2) t[k] = time_rounds(k, src, dst, b, win, iters, warmup) / 2;
            else MPI_Barrier(MPI_COMM_WORLD);
        }
        if (rank == 0) {
            printf("  %12zu", b);
            for (int k = 0; k < kinds; k++) printf(" %14.2f %12.3f", t[k] * 1e6, b / t[k] / 1e9);
            printf("\n");
        }
        if (b == maxb) break;
    }
    int all_wrong = 0;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (rank == 0) printf("# check: %s\n", all_wrong ? "WRONG DATA" : "ok");
    CHECK_NCCL(ncclCommWindowDeregister(comm, win));
    win_free(wbuf);
    if (src_win) {
        CHECK_NCCL(ncclCommWindowDeregister(comm, swin));
        win_free(src);
    } else {
        perf_mem_free(&mem, src);
    }
    perf_mem_free(&mem, dst);
    if (compare) CHECK_OTHER(other.CommDestroy(other_comm));
    perf_mem_fini(&mem);
    CHECK_NCCL(ncclCommDestroy(comm));
    MPI_Finalize();
    return all_wrong ? 1 : 0;
}
