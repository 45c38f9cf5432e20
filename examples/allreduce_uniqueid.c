/* Creating a communicator the NCCL way (as nccl-tests and PyTorch do): rank 0 makes
 * a unique id, MPI broadcasts it, every rank calls ncclCommInitRank.  Only
 * nccl.h is needed: the same code runs on NVIDIA's NCCL.
 *
 *   mpicc allreduce_uniqueid.c -o allreduce_uniqueid -lmpccl
 *   mpirun -np 4 ./allreduce_uniqueid
 *
 * The id holds rank 0's address: ranks connect to it over TCP
 * (MPCCL_SOCKET_IFNAME / NCCL_SOCKET_IFNAME pick the interface). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl.h"

/* MPCCL_NO_CUDA: built without CUDA even where CUDA headers exist. */
#if defined(__has_include) && !defined(MPCCL_NO_CUDA)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define USE_CUDA 1
#endif
#endif

#define COUNT 100000

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
    double *host, *buf;
    ncclUniqueId id;
    ncclComm_t comm;
    cudaStream_t stream = NULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

#ifdef USE_CUDA
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

    if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));

    host = malloc(COUNT * sizeof(double));
    if (host == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < COUNT; i++) host[i] = rank * 0.5 + i;
    buf = host;
#ifdef USE_CUDA
    if (gpu) {
        cudaStreamCreate(&stream);
        cudaMalloc((void **)&buf, COUNT * sizeof(double));
        cudaMemcpy(buf, host, COUNT * sizeof(double), cudaMemcpyHostToDevice);
    }
#endif

    CHECK_NCCL(ncclAllReduce(buf, buf, COUNT, ncclDouble, ncclSum, comm, stream));

#ifdef USE_CUDA
    if (gpu) {
        cudaStreamSynchronize(stream);
        cudaMemcpy(host, buf, COUNT * sizeof(double), cudaMemcpyDeviceToHost);
        cudaFree(buf);
        cudaStreamDestroy(stream);
    }
#endif

    /* sum over r of (r/2 + i) = n(n-1)/4 + n*i, exact in double */
    for (int i = 0; i < COUNT; i++)
        if (host[i] != nranks * (nranks - 1) * 0.25 + (double)nranks * i) wrong++;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("allreduce of %d doubles over %d ranks (unique id, %s buffers): %s\n", COUNT, nranks,
               gpu ? "GPU" : "host", all_wrong ? "WRONG" : "OK");

    free(host);
    CHECK_NCCL(ncclCommDestroy(comm));
    MPI_Finalize();
    return all_wrong != 0;
}
