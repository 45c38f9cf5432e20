/* An allreduce written with the NCCL device API (nccl_device.h): the data
 * moves inside a CUDA kernel (examples/device_allreduce_kernel.cu) that loads
 * and stores the GPUs of the node directly through symmetric windows, with
 * LSA barriers for synchronisation; the library only sets things up.
 *
 *   mpirun -np 2 ./device_allreduce [count...]
 *
 * One process per GPU of one node.  For each count it checks the result
 * against the exact sum, repeats the kernel (the barriers are reused kernel
 * after kernel) and prints the time per call next to ncclAllReduce's on the
 * same buffers.  Exits non-zero on a wrong result. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "mpccl_mpi.h"
#include "nccl.h"
#include "nccl_device.h"

#define CTAS 16

cudaError_t launch_lsa_allreduce_sum(ncclWindow_t send, ncclWindow_t recv, size_t count, const ncclDevComm_t *comm,
                                     int ctas, cudaStream_t stream);

#define CHECK(what, ok)                                                                  \
    do {                                                                                 \
        if (!(ok)) {                                                                     \
            fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__, what,         \
                    ncclGetLastError(NULL));                                             \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                \
        }                                                                                \
    } while (0)

static double time_us(int iters, cudaStream_t s, cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    return 1000.0 * ms / iters;
}

int main(int argc, char **argv)
{
    int rank, nranks, ndev = 0, local, wrong = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        if (rank == 0) printf("device_allreduce: SKIP: no GPU\n");
        MPI_Finalize();
        return 77;
    }
    cudaSetDevice(local % ndev);

    ncclComm_t comm;
    CHECK("mpcclCommInitMPI", mpcclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
    ncclCommProperties_t props = NCCL_COMM_PROPERTIES_INITIALIZER;
    CHECK("ncclCommQueryProperties", ncclCommQueryProperties(comm, &props) == ncclSuccess);
    if (!props.deviceApiSupport || ncclTeamLsa(comm).nRanks != nranks) {
        if (rank == 0)
            printf("device_allreduce: SKIP: needs every rank in one LSA team (P2P between all GPUs); "
                   "LSA team has %d of %d ranks\n", ncclTeamLsa(comm).nRanks, nranks);
        ncclCommDestroy(comm);
        MPI_Finalize();
        return 77;
    }

    size_t counts[16] = {1, 7, 1021, 65536, (1u << 20) + 3, 16u << 20};
    int ncounts = 6;
    if (argc > 1) {
        ncounts = 0;
        for (int i = 1; i < argc && ncounts < 16; i++) counts[ncounts++] = strtoull(argv[i], NULL, 0);
    }
    size_t max = 1;
    for (int i = 0; i < ncounts; i++) max = counts[i] > max ? counts[i] : max;

    /* Symmetric memory: ncclMemAlloc buffers registered as windows on every rank. */
    float *send, *recv;
    ncclWindow_t send_win, recv_win;
    CHECK("ncclMemAlloc", ncclMemAlloc((void **)&send, max * sizeof(float)) == ncclSuccess);
    CHECK("ncclMemAlloc", ncclMemAlloc((void **)&recv, max * sizeof(float)) == ncclSuccess);
    CHECK("ncclCommWindowRegister", ncclCommWindowRegister(comm, send, max * sizeof(float), &send_win,
                                                           NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
    CHECK("ncclCommWindowRegister", ncclCommWindowRegister(comm, recv, max * sizeof(float), &recv_win,
                                                           NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
    ncclDevCommRequirements_t reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    reqs.lsaBarrierCount = CTAS; /* one barrier per CTA */
    ncclDevComm_t dev;
    CHECK("ncclDevCommCreate", ncclDevCommCreate(comm, &reqs, &dev) == ncclSuccess);

    float *host = malloc(max * sizeof(float));
    cudaStream_t s;
    cudaEvent_t a, b;
    cudaStreamCreate(&s);
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    if (rank == 0) printf("%12s %12s %14s %14s %6s\n", "count", "bytes", "device API us", "ncclAllReduce us", "check");
    for (int c = 0; c < ncounts; c++) {
        size_t n = counts[c];
        for (size_t i = 0; i < n; i++) host[i] = (float)((rank + 1) * (int)(i % 13)); /* small integers: exact */
        cudaMemcpy(send, host, n * sizeof(float), cudaMemcpyHostToDevice);
        cudaMemset(recv, 0xff, n * sizeof(float));
        /* The same kernel twice: the second run reuses the barriers' epochs. */
        for (int rep = 0; rep < 2; rep++)
            CHECK("kernel launch", launch_lsa_allreduce_sum(send_win, recv_win, n, &dev, CTAS, s) == cudaSuccess);
        CHECK("kernel", cudaStreamSynchronize(s) == cudaSuccess);
        cudaMemcpy(host, recv, n * sizeof(float), cudaMemcpyDeviceToHost);
        size_t bad = 0;
        float ranks_sum = (float)(nranks * (nranks + 1) / 2);
        for (size_t i = 0; i < n; i++)
            if (host[i] != ranks_sum * (float)(i % 13)) bad++;
        wrong += bad != 0;

        int iters = n < (1u << 20) ? 200 : 20;
        launch_lsa_allreduce_sum(send_win, recv_win, n, &dev, CTAS, s);
        cudaEventRecord(a, s);
        for (int i = 0; i < iters; i++) launch_lsa_allreduce_sum(send_win, recv_win, n, &dev, CTAS, s);
        double dev_us = time_us(iters, s, a, b);
        ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, s);
        cudaEventRecord(a, s);
        for (int i = 0; i < iters; i++) ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, s);
        double nccl_us = time_us(iters, s, a, b);
        if (rank == 0)
            printf("%12zu %12zu %14.2f %14.2f %6s\n", n, n * sizeof(float), dev_us, nccl_us, bad ? "WRONG" : "ok");
        if (bad) fprintf(stderr, "rank %d: count %zu: %zu wrong elements\n", rank, n, bad);
    }

    CHECK("ncclDevCommDestroy", ncclDevCommDestroy(comm, &dev) == ncclSuccess);
    ncclCommWindowDeregister(comm, send_win);
    ncclCommWindowDeregister(comm, recv_win);
    ncclMemFree(send);
    ncclMemFree(recv);
    ncclCommDestroy(comm);
    free(host);
    int all = 0;
    MPI_Allreduce(&wrong, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return all ? 1 : 0;
}
