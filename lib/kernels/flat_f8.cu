/* Flat kernels for ncclFloat8e4m3 and ncclFloat8e5m2 (lib/kernels/flat_impl.cuh). */
#include "kernels/flat_impl.cuh"

MPCCL_FLAT_INSTANTIATE(ncclFloat8e4m3)
MPCCL_FLAT_INSTANTIATE(ncclFloat8e5m2)
