/* The shared-device path's kernel (lib/kernels/shared_dev.h): one launch by
 * the leader moves and reduces every rank's data; the CTAs count themselves
 * out and the last one writes the done word the followers' hosts wait for. */
extern "C" {
#include "util/status.h"
}
#include "kernels/elementwise.cuh"
#include "kernels/shared_dev.h"

using namespace mpccl_ew;

namespace {

const int SHR_THREADS = 512;

template <int DT, int OP> __device__ void reduce_range_n(const mpccl_shr_args_t &a, const mpccl_shr_group_t &g,
                                                         uint64_t lo, uint64_t n, typename ty<DT>::T *d0)
{
    typedef typename ty<DT>::T T;
    typedef typename ty<DT>::S S;
    const int nsrc = g.src_sel == MPCCL_SHR_ALL ? a.nranks : 1;
    const int first = g.src_sel == MPCCL_SHR_ALL ? 0 : g.src_sel;
    const typename ty<DT>::D dv = ty<DT>::divisor(a.divisor ? a.divisor : 1);
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) {
        T acc = T();
        for (int j = 0; j < nsrc; j++) {
            const T *s = (const T *)a.src[first + j] + g.src_off + lo;
            T v = ld1(s + i);
            if (a.scaled) {
                S sc = ty<DT>::scalar((const unsigned char *)&a.scalar[first + j]);
                v = ty<DT>::scale(v, sc);
            }
            acc = j == 0 ? v : binop<DT, OP>::apply(acc, v);
        }
        if (a.divisor) acc = ty<DT>::div(acc, dv);
        d0[i] = acc;
    }
}

/* Elements [lo, lo + n) of group g. */
template <int DT, int OP> __device__ void run_range(const mpccl_shr_args_t &a, const mpccl_shr_group_t &g, uint64_t lo,
                                                    uint64_t n)
{
    typedef typename ty<DT>::T T;
    const int ndst = g.dst_sel == MPCCL_SHR_ALL ? a.nranks : 1;
    const int dfirst = g.dst_sel == MPCCL_SHR_ALL ? 0 : g.dst_sel;
    const bool plain = g.src_sel != MPCCL_SHR_ALL && !a.scaled && !a.divisor;
    if (plain) { /* a copy: every destination straight from the source */
        const T *s = (const T *)a.src[g.src_sel] + g.src_off + lo;
        for (int k = 0; k < ndst; k++) copy_range<T>((T *)a.dst[dfirst + k] + g.dst_off + lo, s, n);
        return;
    }
    /* Reduced into the first destination, which the others then copy: a
     * destination may be its rank's own source (in place), so every source is
     * read before any other destination is written. */
    T *d0 = (T *)a.dst[dfirst] + g.dst_off + lo;
    reduce_range_n<DT, OP>(a, g, lo, n, d0);
    if (ndst > 1) {
        __syncthreads();
        for (int k = 1; k < ndst; k++) copy_range<T>((T *)a.dst[dfirst + k] + g.dst_off + lo, d0, n);
    }
}

template <int DT, int OP> __global__ void __launch_bounds__(SHR_THREADS) shr_kernel(const mpccl_shr_args_t a)
{
    uint32_t gi = 0;
    for (uint32_t u = blockIdx.x; u < a.nunits; u += gridDim.x) {
        while (gi + 1 < a.ngroups && a.g[gi + 1].unit0 <= u) gi++;
        const mpccl_shr_group_t &g = a.g[gi];
        uint64_t lo = (uint64_t)(u - g.unit0) * a.unit_elems;
        uint64_t n = g.count - lo < a.unit_elems ? g.count - lo : a.unit_elems;
        run_range<DT, OP>(a, g, lo, n);
        __syncthreads(); /* the next unit may copy from this one's first destination */
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned prev = atomicAdd(a.counter, 1u);
        if (prev == gridDim.x - 1) {
            *a.counter = 0;
            __threadfence_system();
            if (a.done) *a.done = a.seq;
            __threadfence_system();
        }
    }
}

typedef void (*shr_fn_t)(const mpccl_shr_args_t);

template <int DT> shr_fn_t shr_pick_op(int op)
{
    switch (op) {
    case OP_SUM: return shr_kernel<DT, OP_SUM>;
    case OP_PROD: return shr_kernel<DT, OP_PROD>;
    case OP_MAX: return shr_kernel<DT, OP_MAX>;
    default: return shr_kernel<DT, OP_MIN>;
    }
}

shr_fn_t shr_pick(int dtype, int op)
{
    switch (dtype) {
    case ncclInt8: return shr_pick_op<ncclInt8>(op);
    case ncclUint8: return shr_pick_op<ncclUint8>(op);
    case ncclInt32: return shr_pick_op<ncclInt32>(op);
    case ncclUint32: return shr_pick_op<ncclUint32>(op);
    case ncclInt64: return shr_pick_op<ncclInt64>(op);
    case ncclUint64: return shr_pick_op<ncclUint64>(op);
    case ncclFloat16: return shr_pick_op<ncclFloat16>(op);
    case ncclFloat32: return shr_pick_op<ncclFloat32>(op);
    case ncclFloat64: return shr_pick_op<ncclFloat64>(op);
    case ncclBfloat16: return shr_pick_op<ncclBfloat16>(op);
    case ncclFloat8e4m3: return shr_pick_op<ncclFloat8e4m3>(op);
    case ncclFloat8e5m2: return shr_pick_op<ncclFloat8e5m2>(op);
    default: return NULL;
    }
}

} // namespace

extern "C" mpccl_status_t mpccl_shr_launch(const mpccl_shr_args_t *a, uint32_t nctas, cudaStream_t stream)
{
    shr_fn_t fn = shr_pick(a->dtype, a->op);
    if (!fn) return mpccl_fail(MPCCL_ERR_USAGE, "shared-device kernel: no datatype %d", a->dtype);
    if (nctas == 0) nctas = 1;
    fn<<<nctas, SHR_THREADS, 0, stream>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return mpccl_fail(MPCCL_ERR_CUDA, "shared-device kernel launch (%u CTAs): %s", nctas, cudaGetErrorString(e));
    return MPCCL_OK;
}

extern "C" mpccl_status_t mpccl_shr_load(void)
{
    for (int dt = 0; dt < ncclNumTypes; dt++) {
        for (int op = 0; op < 4; op++) {
            cudaFuncAttributes attr;
            cudaError_t e = cudaFuncGetAttributes(&attr, shr_pick(dt, op));
            if (e != cudaSuccess)
                return mpccl_fail(MPCCL_ERR_CUDA, "loading the shared-device kernel (datatype %d, op %d): %s", dt, op,
                                  cudaGetErrorString(e));
        }
    }
    return MPCCL_OK;
}
