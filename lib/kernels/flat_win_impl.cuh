/* Window collectives (flat.h, mpccl_flat_win_args_t), the device code.  The
 * buffers lie in symmetric windows, so a kernel reaches the peers' inputs and
 * outputs themselves: nothing goes through the region, each byte crosses
 * NVLink once and nobody copies it out afterwards.
 *
 * Per CTA g (every rank runs the same grid, CTA g of every rank handles part g
 * of every block):
 *   enter  raise flag (me -> each peer) to 2k+1 and wait for the peers' 2k+1:
 *          a peer's kernel has started, so whatever its stream did before the
 *          call (producing its input, reading its old output) is finished
 *   work   one combine() over remote pointers: pull the sources, reduce, store
 *          to the destinations (stores to peers are posted)
 *   done   system fence, raise the flags to 2k+2, wait for the peers' 2k+2:
 *          nobody reads my input or writes my output after my kernel ends
 * Registered buffers (a.exchange) lie at a different address on every rank,
 * known to the peers only once the call runs: before raising its 2k+1 flag
 * for peer j, the thread that raises it stores "my input and output as you
 * see them" in j's barrier area; after the wait, every rank reads its peers'
 * from its own.  The fence before the flag orders the pointers before it.
 * k counts the calls CTA index g has run on this communicator (the epoch word
 * in my barrier area); it is equal on every rank because every rank launches
 * the same grid for a call.  A peer is at most one call ahead (it waits for my
 * 2k+3 before its 2k+4), so flags compare with >=.
 * Calls moved by the copy engines run the two barriers as kernels of their
 * own (modes WIN_ENTER and WIN_EXIT, CTA 0 only) with the copies between.
 *
 * Included by flat_impl.cuh after its helpers (combine, shared_ptrs). */
#ifndef MPCCL_FLAT_WIN_IMPL_CUH
#define MPCCL_FLAT_WIN_IMPL_CUH

namespace {

/* Every rank's input and output for this call, as this device sees them. */
struct win_ptrs {
    char *in[MPCCL_FLAT_MAX_RANKS], *out[MPCCL_FLAT_MAX_RANKS];
};

template <int DT, int OP> struct flat_win {
    typedef typename ty<DT>::T T;
    const mpccl_flat_win_args_t &a;
    shared_ptrs &sh;
    win_ptrs &p;
    int N, me, g, G;

    __device__ volatile uint32_t *flag(int r, int src) const
    {
        return (volatile uint32_t *)a.bar[r] + (uint64_t)src * MPCCL_FLAT_MAX_CTAS + g;
    }
    __device__ uint32_t *epoch() const { return a.bar[me] + (uint64_t)N * MPCCL_FLAT_MAX_CTAS + g; }
    /* Rank r's slot for src's pointers (registered calls). */
    __device__ volatile uint64_t *ptr_slot(int r, int src) const
    {
        return (volatile uint64_t *)((char *)a.bar[r] + mpccl_flat_win_ptrs_off(N)) +
               ((uint64_t)src * MPCCL_FLAT_MAX_CTAS + g) * 2;
    }

    /* Before barrier(2k+1): by the thread that raises the flag for peer j. */
    __device__ void publish_ptrs() const
    {
        for (int j = threadIdx.x; j < N; j += blockDim.x)
            if (j != me) {
                volatile uint64_t *s = ptr_slot(j, me);
                s[0] = (uint64_t)(uintptr_t)a.in[j];
                s[1] = (uint64_t)(uintptr_t)a.out[j];
            }
    }

    /* After barrier(2k+1): everyone's buffers into p. */
    __device__ void collect_ptrs() const
    {
        for (int j = threadIdx.x; j < N; j += blockDim.x) {
            if (j == me || !a.exchange) {
                p.in[j] = a.in[j];
                p.out[j] = a.out[j];
            } else {
                volatile uint64_t *s = ptr_slot(me, j);
                p.in[j] = (char *)(uintptr_t)s[0];
                p.out[j] = (char *)(uintptr_t)s[1];
            }
        }
        __syncthreads();
    }

    /* The abort report's mode: a barrier kernel names the collective it
     * surrounds, past the modes (gpu_abort_word.c decodes it). */
    __device__ int why_sub() const
    {
        return a.mode < MPCCL_FLAT_NUM_MODES ? a.mode : MPCCL_FLAT_NUM_MODES + a.moved;
    }

    __device__ void barrier(uint32_t v) const
    {
        __syncthreads();
        for (int j = threadIdx.x; j < N; j += blockDim.x)
            if (j != me) {
                __threadfence_system();
                *flag(j, me) = v;
            }
        for (int j = threadIdx.x; j < N; j += blockDim.x)
            if (j != me) {
                volatile uint32_t *f = flag(me, j);
                mpccl_abort_wait w{};
                while ((int32_t)(vload(f) - v) < 0)
                    if (mpccl_abort_poll(a.ab, w,
                                         mpccl_abort_why{MPCCL_ABORT_OP_FLAT_WIN, why_sub(), j, a.dtype, a.count, v, f}))
                        break;
                __threadfence();
            }
        __syncthreads();
    }

    /* Part g of a block of len elements: *lo is its first element. */
    __device__ uint64_t part(uint64_t len, uint64_t *lo) const
    {
        uint64_t o = (uint64_t)g * a.sub;
        *lo = o;
        if (len <= o) return 0;
        return len - o < a.sub ? len - o : a.sub;
    }
    __device__ static char *at(char *p, uint64_t elem) { return p + elem * sizeof(T); }

    /* One combine with the pointers thread 0 set (barriers around it). */
    __device__ void run(int nd, int ns, uint64_t n) const
    {
        __syncthreads();
        combine<DT, OP>(sh.d, nd, sh.s, ns, n, a.divisor);
        __syncthreads();
    }

    __device__ void work() const
    {
        uint64_t o, n;
        const bool t0 = threadIdx.x == 0;
        switch (a.mode) {
        case MPCCL_FLAT_ALLREDUCE_2: {
            /* rank r reduces block r from everyone and stores it to everyone */
            const uint64_t V = 16 / sizeof(T);
            uint64_t L = ((a.count + N - 1) / N + V - 1) / V * V;
            uint64_t b0 = (uint64_t)me * L < a.count ? (uint64_t)me * L : a.count;
            uint64_t b1 = b0 + L < a.count ? b0 + L : a.count;
            n = part(b1 - b0, &o);
            if (n == 0) return;
            if (t0)
                for (int r = 0; r < N; r++) {
                    sh.s[r] = at(p.in[r], b0 + o);
                    sh.d[r] = at(p.out[r], b0 + o);
                }
            run(N, N, n);
            return;
        }
        case MPCCL_FLAT_REDUCESCATTER:
            n = part(a.count, &o);
            if (n == 0) return;
            if (t0) {
                for (int r = 0; r < N; r++) sh.s[r] = at(p.in[r], (uint64_t)me * a.count + o);
                sh.d[0] = at(p.out[me], o);
            }
            run(1, N, n);
            return;
        case MPCCL_FLAT_ALLGATHER:
            n = part(a.count, &o);
            if (n == 0) return;
            if (t0) {
                for (int r = 0; r < N; r++) sh.d[r] = at(p.out[r], (uint64_t)me * a.count + o);
                sh.s[0] = at(p.in[me], o);
            }
            run(N, 1, n);
            return;
        case MPCCL_FLAT_ALLTOALL:
            n = part(a.count, &o);
            if (n == 0) return;
            /* CTAs start at different peers, so every link is busy at once */
            for (int k = 1; k <= N; k++) {
                int j = (me + g + k) % N;
                if (t0) {
                    sh.d[0] = at(p.out[j], (uint64_t)me * a.count + o);
                    sh.s[0] = at(p.in[me], (uint64_t)j * a.count + o);
                }
                run(1, 1, n);
            }
            return;
        case MPCCL_FLAT_BROADCAST:
            n = part(a.count, &o);
            if (n == 0 || me != a.root) return;
            if (t0) {
                for (int r = 0; r < N; r++) sh.d[r] = at(p.out[r], o);
                sh.s[0] = at(p.in[me], o);
            }
            run(N, 1, n);
            return;
        case MPCCL_FLAT_REDUCE:
            n = part(a.count, &o);
            if (n == 0 || me != a.root) return;
            if (t0) {
                for (int r = 0; r < N; r++) sh.s[r] = at(p.in[r], o);
                sh.d[0] = at(p.out[me], o);
            }
            run(1, N, n);
            return;
        default: return;
        }
    }

    __device__ void body() const
    {
        if (threadIdx.x == 0) {
            sh.epoch = *epoch();
            mpccl_abort_begin();
        }
        __syncthreads();
        uint32_t e = sh.epoch;
        if (a.mode == MPCCL_FLAT_WIN_ENTER) { /* copies by the copy engines follow */
            barrier(e + 1u);
            return;
        }
        if (a.mode == MPCCL_FLAT_WIN_EXIT) {
            barrier(e + 2u);
            if (threadIdx.x == 0) *epoch() = e + 2u;
            return;
        }
        if (a.exchange) publish_ptrs();
        barrier(e + 1u);
        /* aborted: the exchanged pointers may be garbage, touch nothing */
        if (mpccl_aborted()) return;
        collect_ptrs();
        work();
        barrier(e + 2u);
        if (threadIdx.x == 0) *epoch() = e + 2u;
    }
};

template <int DT> __global__ void __launch_bounds__(MPCCL_FLAT_THREADS) flat_win_kernel(mpccl_flat_win_args_t a)
{
    __shared__ shared_ptrs sh;
    __shared__ win_ptrs p;
    int N = a.nranks, me = a.rank, g = (int)blockIdx.x, G = (int)gridDim.x;
    switch (a.op) {
    case OP_SUM: flat_win<DT, OP_SUM>{a, sh, p, N, me, g, G}.body(); break;
    case OP_PROD: flat_win<DT, OP_PROD>{a, sh, p, N, me, g, G}.body(); break;
    case OP_MAX: flat_win<DT, OP_MAX>{a, sh, p, N, me, g, G}.body(); break;
    default: flat_win<DT, OP_MIN>{a, sh, p, N, me, g, G}.body(); break;
    }
}

template <int DT> cudaError_t launch_win_dt(const mpccl_flat_win_args_t *a, uint32_t nctas, cudaStream_t stream)
{
    flat_win_kernel<DT><<<nctas, MPCCL_FLAT_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

} // namespace

#endif
