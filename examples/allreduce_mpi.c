/* The smallest mpccl program: an MPI job sums a float buffer across its ranks.
 *
 *   mpicc allreduce_mpi.c -o allreduce_mpi -lmpccl     (add -I/-L for mpccl's prefix)
 *   mpirun -np 4 ./allreduce_mpi
 *
 * Each rank creates its communicator from MPI_COMM_WORLD with mpcclCommInitMPI.
 * With the CUDA runtime available and a GPU present the buffers live on the GPU
 * (one GPU per rank, round robin over the node's GPUs); otherwise on the host. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "mpccl_mpi.h"
#include "nccl.h"

/* MPCCL_NO_CUDA: built without CUDA even where CUDA headers exist. */
#if defined(__has_include) && !defined(MPCCL_NO_CUDA)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define USE_CUDA 1
#endif
#endif

#define COUNT (1 << 20)

#define CHECK_NCCL(call)                                                                          \
    do {                                                                                          \
        ncclResult_t r_ = (call);                                                                 \
        if (r_ != ncclSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                  \
                    ncclGetErrorString(r_));                                                      \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
        }                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    int rank, nranks, gpu = 0, wrong = 0, all_wrong;
    float *host, *buf;
    ncclComm_t comm;
    cudaStream_t stream = NULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

#ifdef USE_CUDA
    /* The communicator uses the device that is current when it is created. */
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) {
        MPI_Comm node;
        int local;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
        cudaSetDevice(local % ndev);
        gpu = 1;
    }
#endif

    CHECK_NCCL(mpcclCommInitMPI(&comm, MPI_COMM_WORLD, NULL));

    host = malloc(COUNT * sizeof(float));
    if (host == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < COUNT; i++) host[i] = (float)(rank + i % 7); /* small integers: exact sums */
    buf = host;
#ifdef USE_CUDA
    if (gpu) {
        cudaStreamCreate(&stream);
        cudaMalloc((void **)&buf, COUNT * sizeof(float));
        cudaMemcpy(buf, host, COUNT * sizeof(float), cudaMemcpyHostToDevice);
    }
#endif

    /* In place: buf becomes the sum over all ranks. */
    CHECK_NCCL(ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, stream));

#ifdef USE_CUDA
    if (gpu) {
        cudaStreamSynchronize(stream); /* the call only enqueues the work on a GPU */
        cudaMemcpy(host, buf, COUNT * sizeof(float), cudaMemcpyDeviceToHost);
        cudaFree(buf);
        cudaStreamDestroy(stream);
    }
#endif

    /* sum over r of (r + i % 7) = n(n-1)/2 + n * (i % 7) */
    for (int i = 0; i < COUNT; i++)
        if (host[i] != (float)(nranks * (nranks - 1) / 2 + nranks * (i % 7))) wrong++;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("allreduce of %d floats over %d ranks (%s buffers): %s\n", COUNT, nranks,
               gpu ? "GPU" : "host", all_wrong ? "WRONG" : "OK");

    free(host);
    CHECK_NCCL(ncclCommDestroy(comm));
    MPI_Finalize();
    return all_wrong != 0;
}
