/* A 2-D Jacobi sweep with halo exchange on device buffers, checked against the
 * same sweep computed by one process on the host.
 *
 * The NY x NX field is split by rows over the ranks (the first NY % size ranks
 * get one row more); each rank keeps its rows between two ghost rows in device
 * memory.  Each iteration exchanges the rows next to the neighbours' and
 * applies the 4-point average to every point off the field's edges (the edges
 * stay fixed).  Two forms of the exchange:
 *
 *   --blocking  MPI_Sendrecv of the top and bottom rows, then the kernel;
 *   --overlap   MPI_Irecv/MPI_Isend of the ghost rows, the interior rows
 *               computed on a stream meanwhile, MPI_Waitall, then the two
 *               rows next to the ghosts.
 *
 * Without either option both run, one after the other.  Each form first runs
 * -w warm-up iterations, then starts again from the initial field for the -n
 * timed ones; the result is gathered to rank 0 (on host copies) and compared
 * with the host's.  The kernel and the host do the same float operations in
 * the same order without contraction (__fadd_rn/__fmul_rn), so the results
 * are equal bit for bit; --tol allows a difference anyway.
 *
 *   shim_halo [--blocking] [--overlap] [-x NX] [-y NY] [-n ITERS] [-w WARMUP] [--tol T]
 *
 * Exit status: 0 pass, 1 mismatch or error, 77 no usable GPU.  Plain MPI +
 * CUDA: the device buffers go to MPI, so it needs libmpccl_shim.so preloaded
 * or a CUDA-aware MPI.  Works with any number of ranks up to NY, 1 included. */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <cuda_runtime.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define TAG_UP 21   /* a row sent to the rank above (lands in its bottom ghost) */
#define TAG_DOWN 22 /* a row sent to the rank below (lands in its top ghost) */

/* Initial value of global point (g, c): 16-bit fractions, exact in float. */
static float init_value(int g, int c)
{
    uint32_t h = (uint32_t)g * 2654435761u ^ (uint32_t)c * 40503u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (float)(h & 0xffffu) / 65536.0f;
}

/* One Jacobi step for local rows [lo, hi] (1-based between the ghosts) of a
 * rank whose first row is global row g0.  Edge points are copied. */
__global__ void jacobi_rows(const float *__restrict__ cur, float *__restrict__ nxt, int nx, int ny, int g0, int lo,
                            int hi)
{
    long long total = (long long)(hi - lo + 1) * nx;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total;
         k += (long long)gridDim.x * blockDim.x) {
        int i = lo + (int)(k / nx), c = (int)(k % nx), g = g0 + i - 1;
        size_t at = (size_t)i * nx + c;
        if (g == 0 || g == ny - 1 || c == 0 || c == nx - 1) {
            nxt[at] = cur[at];
        } else {
            float v = __fadd_rn(__fadd_rn(cur[at - nx], cur[at + nx]), __fadd_rn(cur[at - 1], cur[at + 1]));
            nxt[at] = __fmul_rn(0.25f, v);
        }
    }
}

/* The host's step over the whole field (same operations, same order). */
static void host_step(const float *cur, float *nxt, int nx, int ny)
{
    for (int g = 0; g < ny; g++)
        for (int c = 0; c < nx; c++) {
            size_t at = (size_t)g * nx + c;
            if (g == 0 || g == ny - 1 || c == 0 || c == nx - 1) {
                nxt[at] = cur[at];
            } else {
                volatile float a = cur[at - nx] + cur[at + nx];
                volatile float b = cur[at - 1] + cur[at + 1];
                volatile float s = a + b;
                nxt[at] = 0.25f * s;
            }
        }
}

static void launch(cudaStream_t s, const float *cur, float *nxt, int nx, int ny, int g0, int lo, int hi)
{
    if (hi < lo) return;
    long long total = (long long)(hi - lo + 1) * nx;
    long long blocks = (total + 255) / 256;
    if (blocks > 65535) blocks = 65535;
    jacobi_rows<<<(unsigned)blocks, 256, 0, s>>>(cur, nxt, nx, ny, g0, lo, hi);
    CUDA_OK(cudaGetLastError());
}

struct field {
    int nx, ny, n, g0, up, down;
    float *d[2]; /* (n + 2) x nx each: ghost, n rows, ghost */
    float *host; /* the initial local rows with ghosts, kept for restarts */
    cudaStream_t stream;
};

static void field_reset(struct field *f)
{
    size_t bytes = (size_t)(f->n + 2) * f->nx * sizeof(float);
    CUDA_OK(cudaMemcpy(f->d[0], f->host, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(f->d[1], f->host, bytes, cudaMemcpyHostToDevice));
}

/* Runs `iters` steps; returns the index of the buffer holding the result. */
static int run_steps(struct field *f, int overlap, int iters)
{
    int nx = f->nx, n = f->n, c = 0;
    for (int it = 0; it < iters; it++) {
        float *cur = f->d[c], *nxt = f->d[1 - c];
        /* the previous step wrote `cur`: finished before MPI reads it */
        CUDA_OK(cudaStreamSynchronize(f->stream));
        if (!overlap) {
            MPI_OK(MPI_Sendrecv(cur + (size_t)nx, nx, MPI_FLOAT, f->up, TAG_UP, cur + (size_t)(n + 1) * nx, nx,
                                MPI_FLOAT, f->down, TAG_UP, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            MPI_OK(MPI_Sendrecv(cur + (size_t)n * nx, nx, MPI_FLOAT, f->down, TAG_DOWN, cur, nx, MPI_FLOAT, f->up,
                                TAG_DOWN, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            launch(f->stream, cur, nxt, nx, f->ny, f->g0, 1, n);
        } else {
            MPI_Request rq[4];
            MPI_OK(MPI_Irecv(cur, nx, MPI_FLOAT, f->up, TAG_DOWN, MPI_COMM_WORLD, &rq[0]));
            MPI_OK(MPI_Irecv(cur + (size_t)(n + 1) * nx, nx, MPI_FLOAT, f->down, TAG_UP, MPI_COMM_WORLD, &rq[1]));
            MPI_OK(MPI_Isend(cur + (size_t)nx, nx, MPI_FLOAT, f->up, TAG_UP, MPI_COMM_WORLD, &rq[2]));
            MPI_OK(MPI_Isend(cur + (size_t)n * nx, nx, MPI_FLOAT, f->down, TAG_DOWN, MPI_COMM_WORLD, &rq[3]));
            /* rows 2..n-1 read no ghost row: they run while the rows travel */
            launch(f->stream, cur, nxt, nx, f->ny, f->g0, 2, n - 1);
            MPI_OK(MPI_Waitall(4, rq, MPI_STATUSES_IGNORE));
            launch(f->stream, cur, nxt, nx, f->ny, f->g0, 1, 1);
            if (n > 1) launch(f->stream, cur, nxt, nx, f->ny, f->g0, n, n);
        }
        c = 1 - c;
    }
    CUDA_OK(cudaStreamSynchronize(f->stream));
    return c;
}

static const char *mps_state(int dev)
{
    int v = 0;
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

static void usage(FILE *out)
{
    fprintf(out, "usage: shim_halo [--blocking] [--overlap] [-x NX] [-y NY] [-n ITERS] [-w WARMUP] [--tol T]\n"
                 "  NX columns, NY rows (default 2048 x 2048), ITERS timed steps (default 100),\n"
                 "  WARMUP untimed steps first (default 5); both forms when neither is named\n");
}

int main(int argc, char **argv)
{
    int nx = 2048, ny = 2048, iters = 100, warmup = 5, want_blocking = 0, want_overlap = 0, bad_args = 0;
    double tol = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--blocking")) want_blocking = 1;
        else if (!strcmp(a, "--overlap")) want_overlap = 1;
        else if (!strcmp(a, "-x") && v) nx = atoi(argv[++i]);
        else if (!strcmp(a, "-y") && v) ny = atoi(argv[++i]);
        else if (!strcmp(a, "-n") && v) iters = atoi(argv[++i]);
        else if (!strcmp(a, "-w") && v) warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--tol") && v) tol = atof(argv[++i]);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) bad_args = -1;
        else bad_args = 1;
    }
    if (!bad_args && (nx < 1 || ny < nranks || iters < 0 || warmup < 0 || tol < 0 ||
                      (long long)nx * ny > 2147483647LL)) {
        if (rank == 0) fprintf(stderr, "shim_halo: need NX >= 1, NY >= ranks, NX*NY < 2^31, ITERS/WARMUP >= 0\n");
        bad_args = 1;
    }
    if (bad_args) {
        if (rank == 0) usage(bad_args < 0 ? stdout : stderr);
        MPI_Finalize();
        return bad_args < 0 ? 0 : 1;
    }
    if (!want_blocking && !want_overlap) want_blocking = want_overlap = 1;

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
    int dev = lrank % ndev;
    CUDA_OK(cudaSetDevice(dev));

    struct field f;
    memset(&f, 0, sizeof(f));
    f.nx = nx;
    f.ny = ny;
    f.n = ny / nranks + (rank < ny % nranks);
    f.g0 = rank * (ny / nranks) + (rank < ny % nranks ? rank : ny % nranks);
    f.up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    f.down = rank < nranks - 1 ? rank + 1 : MPI_PROC_NULL;
    size_t lbytes = (size_t)(f.n + 2) * nx * sizeof(float);
    CUDA_OK(cudaMalloc((void **)&f.d[0], lbytes));
    CUDA_OK(cudaMalloc((void **)&f.d[1], lbytes));
    CUDA_OK(cudaStreamCreateWithFlags(&f.stream, cudaStreamNonBlocking));
    f.host = (float *)malloc(lbytes);
    float *mine = (float *)malloc((size_t)f.n * nx * sizeof(float));
    if (!f.host || !mine) {
        fprintf(stderr, "[rank %d] out of host memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* ghosts start as NaN: a ghost row that the exchange should have filled
     * and did not spreads NaN into the result, which the check catches */
    for (int i = 0; i < f.n + 2; i++)
        for (int c = 0; c < nx; c++)
            f.host[(size_t)i * nx + c] = (i == 0 || i == f.n + 1) ? nanf("") : init_value(f.g0 + i - 1, c);

    /* rank 0: counts and offsets of the gather, the host's sweep */
    int *counts = NULL, *displs = NULL;
    float *full = NULL, *ref[2] = {NULL, NULL};
    int ref_at = 0;
    if (rank == 0) {
        struct cudaDeviceProp prop;
        CUDA_OK(cudaGetDeviceProperties(&prop, dev));
        printf("# shim_halo:");
        for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
        printf("\n# %d rank(s), %d device(s) visible, rank 0 on device %d: %s; MPS: %s\n", nranks, ndev, dev,
               prop.name, mps_state(dev));
        printf("# field %d rows x %d columns, %d to %d rows per rank; %d warm-up + %d timed steps; %s\n", ny, nx,
               ny / nranks, ny / nranks + (ny % nranks != 0), warmup, iters,
               tol > 0 ? "tolerance given" : "result must be exact");
        fflush(stdout);
        counts = (int *)malloc(nranks * sizeof(int));
        displs = (int *)malloc(nranks * sizeof(int));
        full = (float *)malloc((size_t)nx * ny * sizeof(float));
        ref[0] = (float *)malloc((size_t)nx * ny * sizeof(float));
        ref[1] = (float *)malloc((size_t)nx * ny * sizeof(float));
        if (!counts || !displs || !full || !ref[0] || !ref[1]) {
            fprintf(stderr, "[rank 0] out of host memory for the reference\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        for (int r = 0, off = 0; r < nranks; r++) {
            int rows = ny / nranks + (r < ny % nranks);
            counts[r] = rows * nx;
            displs[r] = off;
            off += rows * nx;
        }
        for (int g = 0; g < ny; g++)
            for (int c = 0; c < nx; c++) ref[0][(size_t)g * nx + c] = init_value(g, c);
        for (int it = 0; it < iters; it++) {
            host_step(ref[ref_at], ref[1 - ref_at], nx, ny);
            ref_at = 1 - ref_at;
        }
    }

    int failed = 0;
    for (int form = 0; form < 2; form++) {
        if ((form == 0 && !want_blocking) || (form == 1 && !want_overlap)) continue;
        const char *name = form ? "overlap" : "blocking";
        field_reset(&f);
        if (warmup > 0) {
            MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
            run_steps(&f, form, warmup);
            field_reset(&f);
        }
        MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = MPI_Wtime();
        int at = run_steps(&f, form, iters);
        double t = MPI_Wtime() - t0, tmax = 0;
        MPI_OK(MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));

        CUDA_OK(cudaMemcpy(mine, f.d[at] + nx, (size_t)f.n * nx * sizeof(float), cudaMemcpyDeviceToHost));
        MPI_OK(MPI_Gatherv(mine, f.n * nx, MPI_FLOAT, full, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD));
        int bad = 0;
        if (rank == 0) {
            long long wrong = 0, first = -1;
            double maxdiff = 0;
            const float *r = ref[ref_at];
            for (long long k = 0; k < (long long)nx * ny; k++) {
                double d = fabs((double)full[k] - (double)r[k]);
                int ok = tol > 0 ? d <= tol : memcmp(&full[k], &r[k], sizeof(float)) == 0;
                if (!ok || d != d) {
                    if (wrong++ == 0) first = k;
                    if (d > maxdiff || d != d) maxdiff = d;
                }
            }
            printf("%-9s %3d ranks  %8.2f us/step  (%d steps in %.4f s, slowest rank)  check: ", name, nranks,
                   iters ? tmax * 1e6 / iters : 0.0, iters, tmax);
            if (wrong) {
                printf("FAIL: %lld of %lld points differ, max |diff| %g; first at row %lld column %lld "
                       "(got %.9g, expected %.9g)\n",
                       wrong, (long long)nx * ny, maxdiff, first / nx, first % nx, (double)full[first],
                       (double)r[first]);
                bad = 1;
            } else {
                printf("PASS (%s)\n", tol > 0 ? "within tolerance" : "bit for bit");
            }
            fflush(stdout);
        }
        MPI_OK(MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
        failed |= bad;
    }

    CUDA_OK(cudaStreamDestroy(f.stream));
    CUDA_OK(cudaFree(f.d[0]));
    CUDA_OK(cudaFree(f.d[1]));
    free(f.host);
    free(mine);
    if (rank == 0) {
        free(counts);
        free(displs);
        free(full);
        free(ref[0]);
        free(ref[1]);
        printf("# %s\n", failed ? "FAILED" : "passed");
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}
