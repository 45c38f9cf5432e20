/* Flat kernels for ncclFloat32 and ncclFloat64 (lib/kernels/flat_impl.cuh). */
#include "kernels/flat_impl.cuh"

MPCCL_FLAT_INSTANTIATE(ncclFloat32)
MPCCL_FLAT_INSTANTIATE(ncclFloat64)
