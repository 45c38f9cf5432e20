/* Check mode through the shim (plain MPI, libmpccl_shim.so preloaded with
 * MPCCL_SHIM_HOST=1 and MPCCL_CHECK_MODE=1; test/shim/shim-hang.sh): the last
 * rank calls MPI_Bcast where the others call MPI_Allreduce.  Routed through
 * mpccl, every rank's call returns an error (the communicator's handler is
 * MPI_ERRORS_RETURN) within 1 s instead of moving data; mpccl's message
 * (checked by the script in the log) names the MPI rank and the operation.
 * Afterwards a matched MPI_Allreduce gives the exact sum.  Exits 0 on pass. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define COUNT 1024

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    unsigned seed = (unsigned)time(NULL);
    MPI_Bcast(&seed, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD); /* no buffer the shim routes: a scalar on the stack */
    if (rank == 0) printf("test_shim_check: %d ranks, seed %u\n", size, seed);
    int *in = malloc(COUNT * sizeof(int)), *out = malloc(COUNT * sizeof(int));
    for (int i = 0; i < COUNT; i++) in[i] = (int)((seed + (unsigned)i) % 1000u) + rank;
    /* A matched call first: the route works. */
    int rc = MPI_Allreduce(in, out, COUNT, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < COUNT && rc == MPI_SUCCESS && !bad; i++)
        if (out[i] != (int)((seed + (unsigned)i) % 1000u) * size + size * (size - 1) / 2) bad = 1;
    if (rc != MPI_SUCCESS || bad) fprintf(stderr, "rank %d: the matched allreduce failed (rc %d, bad %d)\n", rank, rc, bad);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    rc = rank == size - 1 ? MPI_Bcast(out, COUNT, MPI_INT, 0, MPI_COMM_WORLD)
                          : MPI_Allreduce(in, out, COUNT, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    double took = now_s() - t0;
    if (rc == MPI_SUCCESS) {
        fprintf(stderr, "rank %d: the mismatched call returned MPI_SUCCESS\n", rank);
        bad = 1;
    }
    if (took > 1.0) {
        fprintf(stderr, "rank %d: the mismatched call took %.2f s, expected under 1 s\n", rank, took);
        bad = 1;
    }
    printf("rank %d: mismatched call returned %d after %.3f s\n", rank, rc, took);
    rc = MPI_Allreduce(in, out, COUNT, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < COUNT && rc == MPI_SUCCESS; i++)
        if (out[i] != (int)((seed + (unsigned)i) % 1000u) * size + size * (size - 1) / 2) {
            fprintf(stderr, "rank %d: after the mismatch, element %d is %d\n", rank, i, out[i]);
            bad = 1;
            break;
        }
    if (rc != MPI_SUCCESS) bad = 1;
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("test_shim_check: %s\n", any ? "FAIL" : "pass");
    free(in);
    free(out);
    MPI_Finalize();
    return any ? 1 : 0;
}
