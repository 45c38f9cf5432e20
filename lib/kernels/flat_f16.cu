/* Flat kernels for ncclFloat16 and ncclBfloat16 (lib/kernels/flat_impl.cuh). */
#include "kernels/flat_impl.cuh"

MPCCL_FLAT_INSTANTIATE(ncclFloat16)
MPCCL_FLAT_INSTANTIATE(ncclBfloat16)
MPCCL_FLAT_INSTANTIATE_MOVE(ncclFloat16, 2)
