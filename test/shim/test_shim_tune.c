/* MPCCL_SHIM_MIN_BYTES=auto (mpi-shim/shim_tune.c), on host buffers that the
 * shim treats as device buffers (MPCCL_SHIM_HOST=1): the first calls of a size
 * class try both routes, then every call of the class takes one route, on
 * every rank alike, and the results stay right throughout.  With a number
 * (--fixed) nothing is staged.  The route counters come from mpcclShimCount
 * (found with dlsym, so the program also runs without the shim: exit 77). */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef long long (*count_fn_t)(const char *, const char *);

static int check_sums(const double *v, int n, int size, int round)
{
    for (int i = 0; i < n; i++) {
        double want = (double)size * (size - 1) / 2 + (double)size * (i + round);
        if (v[i] != want) return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, bad = 0, fixed = argc > 1 && !strcmp(argv[1], "--fixed");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    count_fn_t count = (count_fn_t)dlsym(RTLD_DEFAULT, "mpcclShimCount");
    if (!count) {
        if (rank == 0) printf("SKIP: the shim is not loaded\n");
        MPI_Finalize();
        return 77;
    }
    const int sizes[] = {1, 1000, 100000};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        int n = sizes[k];
        double *v = malloc(sizeof(double) * (size_t)n);
        long long m0 = count("allreduce", "mpccl"), s0 = count("allreduce", "staged");
        long long m_trials = 0, s_trials = 0;
        for (int round = 0; round < 20; round++) {
            for (int i = 0; i < n; i++) v[i] = rank + i + round;
            MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            bad |= check_sums(v, n, size, round);
            if (round == 9) m_trials = count("allreduce", "mpccl") - m0, s_trials = count("allreduce", "staged") - s0;
        }
        long long m_after = count("allreduce", "mpccl") - m0 - m_trials;
        long long s_after = count("allreduce", "staged") - s0 - s_trials;
        if (fixed ? (s_trials || s_after || m_trials + m_after != 20)
                  : (!m_trials || !s_trials || (m_after && s_after) || m_after + s_after != 10)) {
            fprintf(stderr, "[rank %d] %d doubles: first 10 calls %lld mpccl / %lld staged, last 10 %lld / %lld\n",
                    rank, n, m_trials, s_trials, m_after, s_after);
            bad = 1;
        }
        /* every rank took the same route for the last calls */
        long long mine = m_after, lo, hi;
        MPI_Allreduce(&mine, &lo, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&mine, &hi, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
        if (lo != hi) {
            if (rank == 0) fprintf(stderr, "%d doubles: the ranks chose different routes\n", n);
            bad = 1;
        }
        free(v);
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("test_shim_tune%s: %s\n", fixed ? " --fixed" : "", any ? "FAIL" : "ok");
    MPI_Finalize();
    return any ? 1 : 0;
}
