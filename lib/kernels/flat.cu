/* Flat kernels: the launch, dispatched by datatype to the flat_*.cu units
 * (the device code is lib/kernels/flat_impl.cuh). */
#include <stdint.h>

#include <cuda_runtime.h>

#include "nccl.h"
extern "C" {
#include "util/datatype.h"
#include "util/status.h"
}
#include "kernels/flat.h"

#define MPCCL_FLAT_TYPES(X) X(ncclInt8) X(ncclUint8) X(ncclInt32) X(ncclUint32) X(ncclInt64) X(ncclUint64) X(ncclFloat16) X(ncclBfloat16) X(ncclFloat32) X(ncclFloat64) X(ncclFloat8e4m3) X(ncclFloat8e5m2)

#define X(DT)                                                                                                   \
    extern "C" cudaError_t mpccl_flat_launch_##DT(const mpccl_flat_args_t *a, uint32_t nctas, uint32_t nt,     \
                                                  cudaStream_t s);                                              \
    extern "C" cudaError_t mpccl_flat_win_launch_##DT(const mpccl_flat_win_args_t *a, uint32_t nctas,           \
                                                      cudaStream_t s);                                          \
    extern "C" cudaError_t mpccl_flat_load_##DT(void);
MPCCL_FLAT_TYPES(X)
#undef X

/* The move kernel (alltoall and allgather with copy CTAs), by element size in bytes. */
#define MPCCL_FLAT_MOVE_SIZES(X) X(1) X(2) X(4) X(8)
#define X(B)                                                                                                    \
    extern "C" cudaError_t mpccl_flat_move_launch_##B(const mpccl_flat_args_t *a, uint32_t nctas, cudaStream_t s); \
    extern "C" cudaError_t mpccl_flat_move_load_##B(void);
MPCCL_FLAT_MOVE_SIZES(X)
#undef X

/* The status of a kernel launch (e) of datatype dtype. */
static mpccl_status_t launched(cudaError_t e, const char *kernel, int dtype)
{
    if (e != cudaSuccess)
        return mpccl_fail(MPCCL_ERR_CUDA, "launching the %s (datatype %d) failed: %s", kernel, dtype,
                          cudaGetErrorString(e));
    return MPCCL_OK;
}

/* A local copy on SMs: 16-byte words when both ends and the length allow,
 * else bytes (only tiny or odd calls, forced in tests, get there). */
__global__ void __launch_bounds__(MPCCL_FLAT_THREADS) flat_copy_kernel(char *dst, const char *src, uint64_t bytes)
{
    uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x, T = (uint64_t)gridDim.x * blockDim.x;
    if ((((uintptr_t)dst | (uintptr_t)src | bytes) & 15) == 0) {
        const uint4 *s = (const uint4 *)src;
        uint4 *d = (uint4 *)dst;
        for (uint64_t i = t; i < bytes / 16; i += T) d[i] = s[i];
    } else {
        for (uint64_t i = t; i < bytes; i += T) dst[i] = src[i];
    }
}

extern "C" mpccl_status_t mpccl_flat_copy_launch(void *dst, const void *src, uint64_t bytes, uint32_t nctas,
                                                 cudaStream_t stream)
{
    if (nctas < 1 || nctas > MPCCL_FLAT_MAX_CTAS)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "flat copy launch with %u CTAs", nctas);
    flat_copy_kernel<<<nctas, MPCCL_FLAT_THREADS, 0, stream>>>((char *)dst, (const char *)src, bytes);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return mpccl_fail(MPCCL_ERR_CUDA, "launching the flat copy kernel (%llu bytes) failed: %s",
                          (unsigned long long)bytes, cudaGetErrorString(e));
    return MPCCL_OK;
}

extern "C" mpccl_status_t mpccl_flat_load(void)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, flat_copy_kernel);
#define X(DT)                                                                                                   \
    if (e == cudaSuccess) e = mpccl_flat_load_##DT();
    MPCCL_FLAT_TYPES(X)
#undef X
#define X(B)                                                                                                    \
    if (e == cudaSuccess) e = mpccl_flat_move_load_##B();
    MPCCL_FLAT_MOVE_SIZES(X)
#undef X
    if (e != cudaSuccess) return mpccl_fail(MPCCL_ERR_CUDA, "loading the flat kernels: %s", cudaGetErrorString(e));
    return MPCCL_OK;
}

extern "C" mpccl_status_t mpccl_flat_win_launch(const mpccl_flat_win_args_t *a, uint32_t nctas, cudaStream_t stream)
{
    int m = a->mode;
    bool mode_ok = m == MPCCL_FLAT_ALLREDUCE_2 || m == MPCCL_FLAT_REDUCESCATTER || m == MPCCL_FLAT_ALLGATHER ||
                   m == MPCCL_FLAT_ALLTOALL || m == MPCCL_FLAT_BROADCAST || m == MPCCL_FLAT_REDUCE ||
                   m == MPCCL_FLAT_WIN_ENTER || m == MPCCL_FLAT_WIN_EXIT;
    if (nctas < 1 || nctas > MPCCL_FLAT_MAX_CTAS || a->nranks < 2 || a->nranks > MPCCL_FLAT_MAX_RANKS || !mode_ok ||
        (unsigned)a->op > 3 || a->sub == 0)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "flat window launch: %u CTAs, %d ranks, mode %d, op %d, %llu elements per CTA",
                          nctas, a->nranks, m, a->op, (unsigned long long)a->sub);
    cudaError_t e;
    switch (a->dtype) {
#define X(DT)                                                                        \
    case DT: e = mpccl_flat_win_launch_##DT(a, nctas, stream); break;
        MPCCL_FLAT_TYPES(X)
#undef X
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "flat window launch with datatype %d", a->dtype);
    }
    return launched(e, "flat window kernel", a->dtype);
}

/* An alltoall or allgather with copy CTAs on the move kernel: up to
 * self_ctas CTAs more than a plain launch, beside a full grid on the peers'
 * blocks. */
static mpccl_status_t move_launch(const mpccl_flat_args_t *a, uint32_t nctas, cudaStream_t stream)
{
    cudaError_t e;
    switch (mpccl_dtype_size((ncclDataType_t)a->dtype)) {
#define X(B)                                                                         \
    case B: e = mpccl_flat_move_launch_##B(a, nctas, stream); break;
        MPCCL_FLAT_MOVE_SIZES(X)
#undef X
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "flat move launch with datatype %d", a->dtype);
    }
    return launched(e, "flat move kernel", a->dtype);
}

/* Whether a launch's shape is one the host may ask for: copy CTAs only for a
 * non-LL alltoall or allgather (the move kernel), fewer threads only for LL. */
static bool launch_ok(const mpccl_flat_args_t *a, uint32_t nctas, uint32_t nthreads)
{
    const int32_t k = a->self_ctas;
    bool move = a->mode == MPCCL_FLAT_ALLTOALL || a->mode == MPCCL_FLAT_ALLGATHER;
    bool copy_ok = k == 0 || (k > 0 && k <= MPCCL_FLAT_MAX_CTAS / 2 && move && !a->ll_bytes);
    bool threads_ok = nthreads >= 32 && nthreads <= MPCCL_FLAT_THREADS && nthreads % 32 == 0 &&
                      (a->ll_bytes || nthreads == MPCCL_FLAT_THREADS);
    return copy_ok && threads_ok && nctas > (uint32_t)k && nctas <= MPCCL_FLAT_MAX_CTAS + (uint32_t)k &&
           a->nranks >= 2 && a->nranks <= MPCCL_FLAT_MAX_RANKS && (unsigned)a->mode < MPCCL_FLAT_NUM_MODES &&
           (unsigned)a->op <= 3 && a->sub_elems != 0;
}

extern "C" mpccl_status_t mpccl_flat_launch(const mpccl_flat_args_t *a, uint32_t nctas, uint32_t nthreads,
                                            cudaStream_t stream)
{
    if (!launch_ok(a, nctas, nthreads))
        return mpccl_fail(MPCCL_ERR_INTERNAL,
                          "flat launch: %u CTAs (%d copying the own block) of %u threads, %d ranks, mode %d, op %d, "
                          "%u elements per CTA",
                          nctas, a->self_ctas, nthreads, a->nranks, a->mode, a->op, a->sub_elems);
    if (a->self_ctas > 0) return move_launch(a, nctas, stream);
    cudaError_t e;
    switch (a->dtype) {
#define X(DT)                                                                        \
    case DT: e = mpccl_flat_launch_##DT(a, nctas, nthreads, stream); break;
        MPCCL_FLAT_TYPES(X)
#undef X
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "flat launch with datatype %d", a->dtype);
    }
    return launched(e, "flat kernel", a->dtype);
}
