/* Flat kernels for ncclInt64 and ncclUint64 (lib/kernels/flat_impl.cuh). */
#include "kernels/flat_impl.cuh"

MPCCL_FLAT_INSTANTIATE(ncclInt64)
MPCCL_FLAT_INSTANTIATE(ncclUint64)
MPCCL_FLAT_INSTANTIATE_MOVE(ncclUint64, 8)
