/* Flat kernels for ncclInt32 and ncclUint32 (lib/kernels/flat_impl.cuh). */
#include "kernels/flat_impl.cuh"

MPCCL_FLAT_INSTANTIATE(ncclInt32)
MPCCL_FLAT_INSTANTIATE(ncclUint32)
MPCCL_FLAT_INSTANTIATE_MOVE(ncclUint32, 4)
