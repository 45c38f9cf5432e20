/* Flat kernels for ncclInt8 and ncclUint8 (lib/kernels/flat_impl.cuh). */
#include "kernels/flat_impl.cuh"

MPCCL_FLAT_INSTANTIATE(ncclInt8)
MPCCL_FLAT_INSTANTIATE(ncclUint8)
MPCCL_FLAT_INSTANTIATE_MOVE(ncclUint8, 1)
