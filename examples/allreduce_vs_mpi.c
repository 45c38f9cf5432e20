/* Host allreduce, mpccl against MPI, in one run: for each size, the same float
 * sum with ncclAllReduce on host buffers and with MPI_Allreduce, timed alike
 * (average of several calls after warm-up, the slowest rank's time).
 *
 *   mpirun -np 4 examples/allreduce_vs_mpi [MIN_MB MAX_MB]
 *
 * Prints one line per size: bytes, mpccl us, MPI us, ratio mpccl / MPI. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "mpccl_mpi.h"
#include "nccl.h"

static double time_calls(int use_mpi, ncclComm_t comm, float *buf, size_t count, int iters)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (use_mpi) MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, NULL) != ncclSuccess) {
            fprintf(stderr, "ncclAllReduce: %s\n", ncclGetLastError(comm));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    double dt = (MPI_Wtime() - t0) / iters, worst;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst * 1e6;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    size_t min_mb = argc > 1 ? (size_t)atol(argv[1]) : 1, max_mb = argc > 2 ? (size_t)atol(argv[2]) : 32;
    ncclComm_t comm;
    if (mpcclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) != ncclSuccess) {
        fprintf(stderr, "mpcclCommInitMPI: %s\n", ncclGetLastError(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    float *buf = malloc(max_mb << 20);
    for (size_t i = 0; i < (max_mb << 20) / sizeof(float); i++) buf[i] = 1.0f / (float)(i % 7 + 1);
    if (rank == 0) printf("%12s %12s %12s %8s\n", "bytes", "mpccl_us", "mpi_us", "ratio");
    for (size_t mb = min_mb; mb <= max_mb; mb *= 2) {
        size_t count = (mb << 20) / sizeof(float);
        int iters = mb <= 4 ? 20 : mb <= 16 ? 10 : 5;
        time_calls(0, comm, buf, count, 2); /* warm-up both */
        time_calls(1, comm, buf, count, 2);
        /* Alternate, keep the best of three rounds of each. */
        double best_n = 1e30, best_m = 1e30;
        for (int round = 0; round < 3; round++) {
            double n = time_calls(0, comm, buf, count, iters), m = time_calls(1, comm, buf, count, iters);
            best_n = n < best_n ? n : best_n;
            best_m = m < best_m ? m : best_m;
        }
        if (rank == 0) printf("%12zu %12.1f %12.1f %8.2f\n", mb << 20, best_n, best_m, best_n / best_m);
    }
    ncclCommDestroy(comm);
    free(buf);
    MPI_Finalize();
    return 0;
}
