/* The kernel of examples/device_allreduce.c: an allreduce (sum of floats)
 * written with the NCCL device API over two symmetric windows.  Every CTA
 * owns a share of the elements; each thread reads its elements from every LSA
 * member's send window, adds them, and stores the sum into every member's
 * receive window.  One LSA barrier per CTA before (peers' inputs are ready)
 * and after (all stores into this rank's output have landed). */
#include "nccl_device.h"

__global__ void lsa_allreduce_sum(ncclWindow_t send, ncclWindow_t recv, size_t count, ncclDevComm comm)
{
    ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), comm, ncclTeamLsa(comm), comm.lsaBarrier, blockIdx.x};
    bar.sync(ncclCoopCta(), cuda::memory_order_acquire);

    const int n = comm.lsaSize;
    /* Interleave the ranks so each element is reduced by exactly one thread
     * of one rank. */
    size_t first = threadIdx.x + (size_t)blockDim.x * (comm.lsaRank + (size_t)blockIdx.x * n);
    size_t step = (size_t)blockDim.x * gridDim.x * n;
    for (size_t i = first; i < count; i += step) {
        float v = 0.0f;
        for (int p = 0; p < n; p++) v += ((const float *)ncclGetLsaPointer(send, 0, p))[i];
        for (int p = 0; p < n; p++) ((float *)ncclGetLsaPointer(recv, 0, p))[i] = v;
    }

    bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

extern "C" cudaError_t launch_lsa_allreduce_sum(ncclWindow_t send, ncclWindow_t recv, size_t count,
                                                const ncclDevComm *comm, int ctas, cudaStream_t stream)
{
    lsa_allreduce_sum<<<ctas, 512, 0, stream>>>(send, recv, count, *comm);
    return cudaGetLastError();
}
