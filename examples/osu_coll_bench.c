/* OSU-style latency/bandwidth benchmark of MPI collectives on GPU buffers, the
 * three ways doc/PERFORMANCE.md and doc/SHIM.md compare:
 *
 *   -m staged   the application stages by hand: cudaMemcpy to host, MPI on host
 *               memory, cudaMemcpy back (what codes do with a non-CUDA-aware MPI)
 *   -m mpi      MPI called on the device buffers directly: run it with
 *               LD_PRELOAD=libmpccl_shim.so (a non-CUDA-aware MPI crashes otherwise)
 *   -m mpccl    the same collective through mpccl's API (mpcclCommInitMPI), each
 *               call followed by cudaStreamSynchronize, like the shim completes it
 *
 *   mpirun -np 4 [-x LD_PRELOAD=.libs/libmpccl_shim.so] osu_coll_bench -m mpi -c allreduce -b 8 -e 1G
 *
 * Options: -c allreduce|reduce|bcast|allgather|reduce_scatter|alltoall (default
 * allreduce), -b/-e min/max bytes (default 8 / 64M), -f factor (2), -n iterations
 * (100; 20 above 16 MB), -w warm-up (10), --host (host buffers: runs without a
 * GPU, e.g. to measure the shim's agreement step).  Prints per size the average,
 * min and max latency over ranks in microseconds and the bus bandwidth (GB/s,
 * nccl-tests' definition).  The first iteration of each size is checked. */
#include <mpccl_mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MPCCL_NO_CUDA: built without CUDA even where CUDA headers exist. */
#if defined(__has_include) && !defined(MPCCL_NO_CUDA)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define HAVE_CUDA_RT 1
#endif
#endif

enum { C_ALLREDUCE, C_REDUCE, C_BCAST, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL };
static const char *const coll_names[] = {"allreduce", "reduce", "bcast", "allgather", "reduce_scatter", "alltoall"};
enum { M_STAGED, M_MPI, M_MPCCL };
static const char *const mode_names[] = {"staged", "mpi", "mpccl"};

static int on_gpu = 1, me, np;

static void die(const char *msg)
{
    if (me == 0) fprintf(stderr, "osu_coll_bench: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void *xalloc(size_t bytes)
{
    void *p = NULL;
#ifdef HAVE_CUDA_RT
    if (on_gpu) {
        if (cudaMalloc(&p, bytes) != cudaSuccess) die("cudaMalloc failed");
        return p;
    }
#endif
    if ((p = malloc(bytes)) == NULL) die("out of memory");
    return p;
}

static void *xhost(size_t bytes)
{
    void *p = NULL;
#ifdef HAVE_CUDA_RT
    if (on_gpu) {
        if (cudaMallocHost(&p, bytes) != cudaSuccess) die("cudaMallocHost failed");
        return p;
    }
#endif
    if ((p = malloc(bytes)) == NULL) die("out of memory");
    return p;
}

static void xcopy(void *dst, const void *src, size_t bytes)
{
#ifdef HAVE_CUDA_RT
    if (on_gpu) {
        if (cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) != cudaSuccess) die("cudaMemcpy failed");
        return;
    }
#endif
    memcpy(dst, src, bytes);
}

/* Bytes of the send and receive buffers for a collective of `size` bytes
 * (nccl-tests' convention: size is the larger buffer). */
static void buf_sizes(int coll, size_t size, size_t *sb, size_t *rb)
{
    *sb = *rb = size;
    if (coll == C_ALLGATHER) *sb = size / (size_t)np;
    if (coll == C_REDUCE_SCATTER) *rb = size / (size_t)np;
}

static double busbw_factor(int coll)
{
    double n = np;
    switch (coll) {
    case C_ALLREDUCE: return 2 * (n - 1) / n;
    case C_ALLGATHER: case C_REDUCE_SCATTER: case C_ALLTOALL: return (n - 1) / n;
    default: return 1;
    }
}

/* One collective on float elements; s/r are what MPI or mpccl gets. */
static int mpi_call(int coll, void *s, void *r, size_t size)
{
    int cnt = (int)(size / sizeof(float)), per = cnt / np;
    switch (coll) {
    case C_ALLREDUCE: return MPI_Allreduce(s, r, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case C_REDUCE: return MPI_Reduce(s, r, cnt, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    case C_BCAST: return MPI_Bcast(r, cnt, MPI_FLOAT, 0, MPI_COMM_WORLD);
    case C_ALLGATHER: return MPI_Allgather(s, per, MPI_FLOAT, r, per, MPI_FLOAT, MPI_COMM_WORLD);
    case C_REDUCE_SCATTER: return MPI_Reduce_scatter_block(s, r, per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    default: return MPI_Alltoall(s, per, MPI_FLOAT, r, per, MPI_FLOAT, MPI_COMM_WORLD);
    }
}

static ncclResult_t nccl_call(int coll, void *s, void *r, size_t size, ncclComm_t comm, void *stream)
{
    size_t cnt = size / sizeof(float), per = cnt / (size_t)np;
    ncclResult_t res;
    switch (coll) {
    case C_ALLREDUCE: res = ncclAllReduce(s, r, cnt, ncclFloat, ncclSum, comm, stream); break;
    case C_REDUCE: res = ncclReduce(s, r, cnt, ncclFloat, ncclSum, 0, comm, stream); break;
    case C_BCAST: res = ncclBroadcast(r, r, cnt, ncclFloat, 0, comm, stream); break;
    case C_ALLGATHER: res = ncclAllGather(s, r, per, ncclFloat, comm, stream); break;
    case C_REDUCE_SCATTER: res = ncclReduceScatter(s, r, per, ncclFloat, ncclSum, comm, stream); break;
    default: res = ncclAlltoAll(s, r, per, ncclFloat, comm, stream); break;
    }
#ifdef HAVE_CUDA_RT
    if (res == ncclSuccess && stream && cudaStreamSynchronize(stream) != cudaSuccess) res = ncclUnhandledCudaError;
#endif
    return res;
}

/* One timed operation in the chosen mode; hs/hr are host staging buffers. */
static void run_once(int mode, int coll, void *s, void *r, void *hs, void *hr, size_t sb, size_t rb, size_t size,
                     ncclComm_t comm, void *stream)
{
    if (mode == M_MPCCL) {
        if (nccl_call(coll, s, r, size, comm, stream) != ncclSuccess) die(ncclGetLastError(comm));
    } else if (mode == M_MPI) {
        if (mpi_call(coll, s, r, size) != MPI_SUCCESS) die("MPI call failed");
    } else {
        xcopy(hs, s, sb);
        if (coll == C_BCAST) xcopy(hr, r, rb);
        if (mpi_call(coll, hs, hr, size) != MPI_SUCCESS) die("MPI call failed");
        if (coll != C_REDUCE || me == 0) xcopy(r, hr, rb);
    }
}

/* Rank r's element i is r + 1 + i % 7: small integers, exact in float sums. */
static int check(int coll, void *r, size_t rb, size_t size)
{
    size_t n = rb / sizeof(float), per = size / sizeof(float) / (size_t)np;
    int bad = 0;
    if (coll == C_REDUCE && me != 0) return 0;
    float *h = malloc(rb + sizeof(float));
    xcopy(h, r, rb);
    for (size_t i = 0; i < n && !bad; i++) {
        double want;
        double ranksum = (double)np * (np + 1) / 2;
        switch (coll) {
        case C_ALLREDUCE: case C_REDUCE: want = ranksum + (double)np * (double)(i % 7); break;
        case C_REDUCE_SCATTER: want = ranksum + (double)np * (double)((me * per + i) % 7); break;
        case C_BCAST: want = 1 + (double)(i % 7); break;
        case C_ALLGATHER: want = (double)(i / per) + 1 + (double)(i % per % 7); break;
        default: want = (double)(i / per) + 1 + (double)((me * per + i % per) % 7); break;
        }
        bad = h[i] != (float)want;
    }
    free(h);
    return bad;
}

static void fill(void *s, void *r, size_t sb, size_t rb)
{
    size_t big = sb > rb ? sb : rb;
    float *h = malloc(big + sizeof(float));
    for (size_t i = 0; i < big / sizeof(float); i++) h[i] = (float)(me + 1 + (int)(i % 7));
    xcopy(s, h, sb);
    xcopy(r, h, rb); /* bcast: the root's buffer is its input */
    free(h);
}

int main(int argc, char **argv)
{
    int coll = C_ALLREDUCE, mode = M_MPI, iters = 100, warm = 10, bad_total = 0;
    size_t minb = 8, maxb = 64u << 20, factor = 2;
    ncclComm_t comm = NULL;
    void *stream = NULL;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--host")) { on_gpu = 0; continue; }
        if (v == NULL) die("option without a value");
        i++;
        if (!strcmp(a, "-c")) {
            coll = -1;
            for (int c = 0; c < 6; c++) if (!strcmp(v, coll_names[c])) coll = c;
            if (coll < 0) die("-c: allreduce, reduce, bcast, allgather, reduce_scatter or alltoall");
        } else if (!strcmp(a, "-m")) {
            mode = -1;
            for (int m = 0; m < 3; m++) if (!strcmp(v, mode_names[m])) mode = m;
            if (mode < 0) die("-m: staged, mpi or mpccl");
        } else if (!strcmp(a, "-b") || !strcmp(a, "-e")) {
            char *end;
            size_t x = strtoull(v, &end, 10);
            x <<= (*end == 'K' || *end == 'k') ? 10 : (*end == 'M' || *end == 'm') ? 20 : (*end == 'G' || *end == 'g') ? 30 : 0;
            *(a[1] == 'b' ? &minb : &maxb) = x;
        } else if (!strcmp(a, "-f")) factor = strtoull(v, NULL, 10);
        else if (!strcmp(a, "-n")) iters = atoi(v);
        else if (!strcmp(a, "-w")) warm = atoi(v);
        else die("usage: osu_coll_bench [-c coll] [-m staged|mpi|mpccl] [-b min] [-e max] [-f f] [-n it] [-w warm] [--host]");
    }
    if (factor < 2 || iters < 1 || warm < 0 || minb < 1) die("bad -f/-n/-w/-b");
#ifdef HAVE_CUDA_RT
    int ndev = 0;
    if (on_gpu && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)) die("no GPU: use --host");
    if (on_gpu) cudaSetDevice(me % ndev);
#else
    if (on_gpu) die("built without CUDA: use --host");
#endif
    if (mode == M_MPCCL) {
        if (mpcclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) != ncclSuccess) die("mpcclCommInitMPI failed");
#ifdef HAVE_CUDA_RT
        cudaStream_t s;
        if (on_gpu && cudaStreamCreate(&s) == cudaSuccess) stream = s;
#endif
    }
    if (me == 0) {
        printf("# osu_coll_bench %s, mode %s, %d ranks, %s buffers, float elements\n", coll_names[coll],
               mode_names[mode], np, on_gpu ? "device" : "host");
        printf("# %12s %12s %12s %12s %12s\n", "size(B)", "avg(us)", "min(us)", "max(us)", "busbw(GB/s)");
    }
    size_t unit = sizeof(float) * (size_t)np;
    size_t top = (maxb + unit - 1) / unit * unit, sbmax, rbmax;
    buf_sizes(coll, top, &sbmax, &rbmax);
    void *s = xalloc(sbmax), *r = xalloc(rbmax), *hs = NULL, *hr = NULL;
    if (mode == M_STAGED) hs = xhost(sbmax), hr = xhost(rbmax);
    for (size_t want = minb; want <= maxb; want *= factor) {
        size_t size = (want + unit - 1) / unit * unit, sb, rb;
        buf_sizes(coll, size, &sb, &rb);
        int n = size > (16u << 20) && iters > 20 ? 20 : iters;
        fill(s, r, sb, rb);
        run_once(mode, coll, s, r, hs, hr, sb, rb, size, comm, stream);
        int bad = check(coll, r, rb, size);
        bad_total += bad;
        for (int i = 0; i < warm; i++) run_once(mode, coll, s, r, hs, hr, sb, rb, size, comm, stream);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < n; i++) run_once(mode, coll, s, r, hs, hr, sb, rb, size, comm, stream);
        double us = (MPI_Wtime() - t0) * 1e6 / n, sum, mn, mx;
        MPI_Reduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(&us, &mn, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&us, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (me == 0)
            printf("  %12zu %12.2f %12.2f %12.2f %12.3f%s\n", size, sum / np, mn, mx,
                   (double)size / (mx * 1e-6) / 1e9 * busbw_factor(coll), bad ? "  WRONG RESULT" : "");
    }
    int all = 0;
    MPI_Allreduce(&bad_total, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0 && all) printf("# %d wrong results\n", all);
    if (comm) ncclCommDestroy(comm);
#ifdef HAVE_CUDA_RT
    if (stream) cudaStreamDestroy(stream);
    if (on_gpu) {
        cudaFree(s), cudaFree(r);
        if (hs) cudaFreeHost(hs), cudaFreeHost(hr);
    } else
#endif
    {
        free(s), free(r), free(hs), free(hr);
    }
    MPI_Finalize();
    return all ? 1 : 0;
}
