/* Flat kernels (flat.h), the device code: every rank stores into its peers' regions, one flag per
 * peer and chunk, and finishes locally.
 *
 * Per CTA g and chunk c (seq = chunks completed before this launch + c + 1,
 * parity p = seq & 1):
 *   push    store my sub-part g of each destination's block into
 *           region[dst][p][me] at g * stride
 *   signal  __syncthreads, then one thread per peer: system fence, flag = seq
 *   wait    one thread per peer polls my flag of that peer until it reaches seq
 *   consume read the sources' sub-parts from my region (mine from the input),
 *           reduce or copy into the output
 * Two-shot allreduce adds a second push / signal / wait / consume (the reduced
 * slice to everyone, into the slice's second half).
 *
 * Why two parities suffice: a peer stores chunk seq + 2 into the parity I read
 * at seq only after it saw my flag of seq + 1, which I raise after consuming
 * seq (program order and the bar.sync + fence of signal).  Across launches the
 * chunk counter continues, and launches of one communicator are ordered.
 * Every mode exchanges flags with every peer, even a rank with nothing to
 * send (broadcast's non-roots), so no rank runs ahead of another.
 *
 * Results are identical on every rank: reductions run in rank order 0..N-1
 * wherever they run. */
#ifndef MPCCL_FLAT_IMPL_CUH
#define MPCCL_FLAT_IMPL_CUH
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime.h>

#include "nccl.h"
extern "C" {
#include "util/status.h"
}
#include "kernels/abort.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/flat.h"

namespace {

using namespace mpccl_ew;

enum { UNROLL = 4 };

__device__ __forceinline__ uint32_t vload(const volatile uint32_t *p) { return *p; }

/* dsts[0..nd)[i] = op over srcs[0..ns)[i] (in source order), divided by
 * divisor when it is non-zero (integer average), for i < n elements.  Sources
 * and destinations are in shared memory (set by thread 0 before a barrier). */
template <int DT, int OP> __device__ void combine(char *const *dsts, int nd, const char *const *srcs, int ns,
                                                  uint64_t n, uint64_t divisor)
{
    typedef typename ty<DT>::T T;
    const int V = 16 / sizeof(T);
    const uint64_t tid = threadIdx.x, nt = blockDim.x;
    if (n == 0) return;
    /* Vectors when every pointer has the same misalignment, a whole number of
     * elements; a scalar head brings them to 16 bytes. */
    uintptr_t m = (uintptr_t)dsts[0] & 15;
    bool same = m % sizeof(T) == 0;
    for (int d = 1; d < nd; d++) same = same && ((uintptr_t)dsts[d] & 15) == m;
    for (int s = 0; s < ns; s++) same = same && ((uintptr_t)srcs[s] & 15) == m;
    uint64_t h = same ? ((16 - m) & 15) / sizeof(T) : n;
    if (h > n) h = n;
    typename ty<DT>::D dv = ty<DT>::divisor(divisor);
    for (uint64_t i = tid; i < h; i += nt) {
        T acc = ld1((const T *)srcs[0] + i);
        for (int s = 1; s < ns; s++) acc = binop<DT, OP>::apply(acc, ld1((const T *)srcs[s] + i));
        if (divisor) acc = ty<DT>::div(acc, dv);
        for (int d = 0; d < nd; d++) ((T *)dsts[d])[i] = acc;
    }
    uint64_t nv = (n - h) / V, hb = h * sizeof(T);
    for (uint64_t v0 = tid; v0 < nv; v0 += (uint64_t)UNROLL * nt) {
        uint4 acc[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            uint64_t v = v0 + u * nt;
            if (v < nv) acc[u] = ld16(srcs[0] + hb + v * 16);
        }
        for (int s = 1; s < ns; s++) {
            uint4 x[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                uint64_t v = v0 + u * nt;
                if (v < nv) x[u] = ld16(srcs[s] + hb + v * 16);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                T xs[V], ys[V];
                memcpy(xs, &acc[u], 16);
                memcpy(ys, &x[u], 16);
#pragma unroll
                for (int k = 0; k < V; k++) xs[k] = binop<DT, OP>::apply(xs[k], ys[k]);
                memcpy(&acc[u], xs, 16);
            }
        }
        if (divisor) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                T xs[V];
                memcpy(xs, &acc[u], 16);
#pragma unroll
                for (int k = 0; k < V; k++) xs[k] = ty<DT>::div(xs[k], dv);
                memcpy(&acc[u], xs, 16);
            }
        }
        for (int d = 0; d < nd; d++) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                uint64_t v = v0 + u * nt;
                if (v < nv) st16(dsts[d] + hb + v * 16, acc[u]);
            }
        }
    }
    for (uint64_t i = h + nv * V + tid; i < n; i += nt) {
        T acc = ld1((const T *)srcs[0] + i);
        for (int s = 1; s < ns; s++) acc = binop<DT, OP>::apply(acc, ld1((const T *)srcs[s] + i));
        if (divisor) acc = ty<DT>::div(acc, dv);
        for (int d = 0; d < nd; d++) ((T *)dsts[d])[i] = acc;
    }
}

/* ---- LL units: {lo 4 bytes, seq, hi 4 bytes, seq} in one 16-byte store ---- */

/* nb valid bytes at p (p may be unaligned; the rest of the word is 0). */
__device__ __forceinline__ uint64_t load8(const char *p, int64_t nb)
{
    if (nb >= 8 && ((uintptr_t)p & 7) == 0) return __ldcg((const unsigned long long *)p);
    uint64_t v = 0;
    for (int k = 0; k < nb && k < 8; k++) v |= (uint64_t)(unsigned char)p[k] << (8 * k);
    return v;
}
__device__ __forceinline__ void store8(char *p, uint64_t v, int64_t nb)
{
    if (nb >= 8 && ((uintptr_t)p & 7) == 0) {
        *(uint64_t *)p = v;
        return;
    }
    for (int k = 0; k < nb && k < 8; k++) p[k] = (char)(v >> (8 * k));
}
__device__ __forceinline__ void ll_put(char *unit, uint64_t v, uint32_t seq)
{
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(unit), "r"((uint32_t)v), "r"(seq),
                 "r"((uint32_t)(v >> 32)), "r"(seq)
                 : "memory");
}
/* Polls until both halves of the unit carry seq (each 8-byte half lands
 * whole), or the communicator is aborted / the wait timed out (then garbage). */
__device__ __forceinline__ uint64_t ll_get(const char *unit, uint32_t seq, const mpccl_abort_arg_t &ab,
                                           const mpccl_abort_why &why)
{
    uint32_t x, f1, y, f2;
    mpccl_abort_wait w{};
    for (;;) {
        asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(x), "=r"(f1), "=r"(y), "=r"(f2)
                     : "l"(unit)
                     : "memory");
        if (f1 == seq && f2 == seq) break;
        if (mpccl_abort_poll(ab, w, why)) break;
    }
    return (uint64_t)x | ((uint64_t)y << 32);
}

/* The op on the elements packed in 8 bytes. */
template <int DT, int OP> __device__ __forceinline__ uint64_t op8(uint64_t x, uint64_t y)
{
    typedef typename ty<DT>::T T;
    const int V = 8 / sizeof(T);
    T xs[V], ys[V];
    memcpy(xs, &x, 8);
    memcpy(ys, &y, 8);
#pragma unroll
    for (int k = 0; k < V; k++) xs[k] = binop<DT, OP>::apply(xs[k], ys[k]);
    memcpy(&x, xs, 8);
    return x;
}
template <int DT> __device__ __forceinline__ uint64_t div8(uint64_t x, uint64_t divisor)
{
    typedef typename ty<DT>::T T;
    const int V = 8 / sizeof(T);
    T xs[V];
    memcpy(xs, &x, 8);
#pragma unroll
    for (int k = 0; k < V; k++) xs[k] = ty<DT>::div(xs[k], ty<DT>::divisor(divisor));
    memcpy(&x, xs, 8);
    return x;
}

struct shared_ptrs {
    char *d[MPCCL_FLAT_MAX_RANKS + 1];
    const char *s[MPCCL_FLAT_MAX_RANKS];
    uint32_t epoch;
};

/* MODE >= 0 builds the struct for that mode alone (the move kernel), so the
 * compiler drops every other mode's code. */
template <int DT, int OP, int MODE = -1> struct flat {
    typedef typename ty<DT>::T T;
    const mpccl_flat_args_t &a;
    shared_ptrs &sh;
    int N, me, G, g;
    uint64_t flags_off, ll_off;

    __device__ char *area(int r, int src, uint32_t p, int phase2) const
    {
        return a.region[r] + ((uint64_t)p * N + src) * a.slice_bytes + (phase2 ? a.slice_bytes / 2 : 0) +
               (uint64_t)g * a.stride;
    }
    __device__ volatile uint32_t *flag(int r, int phase, uint32_t p, int src) const
    {
        return (volatile uint32_t *)(a.region[r] + flags_off) +
               (((uint64_t)phase * 2 + p) * N + src) * MPCCL_FLAT_MAX_CTAS + g;
    }
    __device__ int mode() const { return MODE >= 0 ? MODE : a.mode; }
    __device__ const char *in_at(uint64_t elem) const { return (const char *)a.in + elem * sizeof(T); }
    __device__ char *out_at(uint64_t elem) const { return (char *)a.out + elem * sizeof(T); }

    /* My data is in the peers' regions (and what I read of theirs is done). */
    __device__ void signal(int phase, uint32_t p, uint32_t seq) const
    {
        __syncthreads();
        for (int j = threadIdx.x; j < N; j += blockDim.x)
            if (j != me) {
                __threadfence_system();
                *flag(j, phase, p, me) = seq;
            }
    }
    /* Why a wait on peer j hangs (only built on the slow path). */
    __device__ mpccl_abort_why why(int j, uint32_t seq, const volatile uint32_t *f) const
    {
        return mpccl_abort_why{MPCCL_ABORT_OP_FLAT, a.mode, j, a.dtype, a.count, seq, f};
    }
    __device__ void wait(int phase, uint32_t p, uint32_t seq) const
    {
        for (int j = threadIdx.x; j < N; j += blockDim.x)
            if (j != me) {
                volatile uint32_t *f = flag(me, phase, p, j);
                mpccl_abort_wait w{};
                while ((int32_t)(vload(f) - seq) < 0)
                    if (mpccl_abort_poll(a.ab, w, why(j, seq, f))) break;
                __threadfence();
            }
        __syncthreads();
    }

    /* One combine with pointers thread 0 placed in sh; barriers around so the
     * pointer table can be reused. */
    __device__ void run(int nd, int ns, uint64_t n, uint64_t divisor) const
    {
        __syncthreads();
        combine<DT, OP>(sh.d, nd, sh.s, ns, n, divisor);
        __syncthreads();
    }
    __device__ void copy1(char *dst, const char *src, uint64_t n) const
    {
        if (dst == src || n == 0) return;
        if (threadIdx.x == 0) {
            sh.d[0] = dst;
            sh.s[0] = src;
        }
        run(1, 1, n, 0);
    }
    /* src to every peer's area for me. */
    __device__ void push_all(const char *src, uint32_t p, uint64_t n) const
    {
        if (n == 0) return;
        if (threadIdx.x == 0) {
            int k = 0;
            for (int j = 0; j < N; j++)
                if (j != me) sh.d[k++] = area(j, me, p, 0);
            sh.s[0] = src;
        }
        run(N - 1, 1, n, 0);
    }
    /* Reduce over all ranks in rank order: mine from `own`, the others from my
     * region; into dst (and, two-shot, into every peer's phase-2 area). */
    __device__ void reduce_all(char *dst, const char *own, uint32_t p, uint64_t n, int to_peers) const
    {
        if (n == 0) return;
        if (threadIdx.x == 0) {
            int k = 1;
            sh.d[0] = dst;
            for (int s = 0; s < N; s++) {
                sh.s[s] = s == me ? own : area(me, s, p, 0);
                if (to_peers && s != me) sh.d[k++] = area(s, me, p, 1);
            }
        }
        run(to_peers ? N : 1, N, n, a.divisor);
    }

    __device__ uint64_t part(uint64_t block_len) const
    {
        uint64_t o = (uint64_t)g * a.sub_elems;
        if (block_len <= o) return 0;
        uint64_t n = block_len - o;
        return n < a.sub_elems ? n : a.sub_elems;
    }

    /* Elements of slice s of the two-shot chunk starting at element first. */
    __device__ uint64_t slice_len(uint64_t first, int s, uint64_t cap) const
    {
        uint64_t b = first + (uint64_t)s * cap;
        if (a.count <= b) return 0;
        return a.count - b < cap ? a.count - b : cap;
    }

    __device__ void chunk_two_shot(uint64_t c, uint32_t p, uint32_t seq) const
    {
        uint64_t cap = (uint64_t)G * a.sub_elems, o = (uint64_t)g * a.sub_elems;
        uint64_t first = c * cap * N;
        for (int j = 0; j < N; j++) {
            if (j == me) continue;
            uint64_t n = part(slice_len(first, j, cap));
            if (n == 0) continue;
            if (threadIdx.x == 0) {
                sh.d[0] = area(j, me, p, 0);
                sh.s[0] = in_at(first + (uint64_t)j * cap + o);
            }
            run(1, 1, n, 0);
        }
        signal(0, p, seq);
        wait(0, p, seq);
        uint64_t mine0 = first + (uint64_t)me * cap + o;
        reduce_all(out_at(mine0), in_at(mine0), p, part(slice_len(first, me, cap)), 1);
        signal(1, p, seq);
        wait(1, p, seq);
        for (int s = 0; s < N; s++) {
            if (s == me) continue;
            copy1(out_at(first + (uint64_t)s * cap + o), area(me, s, p, 1), part(slice_len(first, s, cap)));
        }
    }

    __device__ void chunk(uint64_t c, uint32_t p, uint32_t seq) const
    {
        uint64_t cap = (uint64_t)G * a.sub_elems, base = c * cap, o = (uint64_t)g * a.sub_elems;
        uint64_t L = a.count - base < cap ? a.count - base : cap, n = part(L), at = base + o;
        uint64_t cnt = a.count;
        int root = a.root;
        /* push */
        switch (mode()) {
        case MPCCL_FLAT_ALLREDUCE_1:
        case MPCCL_FLAT_ALLGATHER: push_all(in_at(at), p, n); break;
        case MPCCL_FLAT_BROADCAST:
            if (me == root) push_all(in_at(at), p, n);
            break;
        case MPCCL_FLAT_REDUCE:
        case MPCCL_FLAT_GATHER:
            if (me != root && n) {
                if (threadIdx.x == 0) {
                    sh.d[0] = area(root, me, p, 0);
                    sh.s[0] = in_at(at);
                }
                run(1, 1, n, 0);
            }
            break;
        case MPCCL_FLAT_REDUCESCATTER:
        case MPCCL_FLAT_ALLTOALL:
        case MPCCL_FLAT_SCATTER:
            if ((mode() != MPCCL_FLAT_SCATTER || me == root) && n) {
                for (int j = 0; j < N; j++) {
                    if (j == me) continue;
                    if (threadIdx.x == 0) {
                        sh.d[0] = area(j, me, p, 0);
                        sh.s[0] = in_at((uint64_t)j * cnt + at);
                    }
                    run(1, 1, n, 0);
                }
            }
            break;
        default: break;
        }
        signal(0, p, seq);
        wait(0, p, seq);
        /* consume */
        switch (mode()) {
        case MPCCL_FLAT_ALLREDUCE_1: reduce_all(out_at(at), in_at(at), p, n, 0); break;
        case MPCCL_FLAT_REDUCESCATTER: reduce_all(out_at(at), in_at((uint64_t)me * cnt + at), p, n, 0); break;
        case MPCCL_FLAT_REDUCE:
            if (me == root) reduce_all(out_at(at), in_at(at), p, n, 0);
            break;
        case MPCCL_FLAT_ALLGATHER:
        case MPCCL_FLAT_ALLTOALL:
        case MPCCL_FLAT_GATHER:
            if (mode() == MPCCL_FLAT_GATHER && me != root) break;
            for (int s = 0; s < N; s++) {
                if (s == me && a.self_ctas) continue; /* the copy CTAs' work (self_copy) */
                const char *src = s != me ? area(me, s, p, 0)
                                 : in_at((mode() == MPCCL_FLAT_ALLTOALL ? (uint64_t)me * cnt : 0) + at);
                copy1(out_at((uint64_t)s * cnt + at), src, n);
            }
            break;
        case MPCCL_FLAT_BROADCAST: copy1(out_at(at), me == root ? in_at(at) : area(me, root, p, 0), n); break;
        case MPCCL_FLAT_SCATTER:
            copy1(out_at(at), me == root ? in_at((uint64_t)me * cnt + at) : area(me, root, p, 0), n);
            break;
        default: break;
        }
    }

    /* ---- LL: one chunk, data polled in place ---- */

    __device__ char *ll_area(int r, int src, uint32_t p) const
    {
        return a.region[r] + ll_off + ((uint64_t)p * N + src) * a.ll_bytes + (uint64_t)g * a.stride;
    }
    /* Whether rank `from` has data for rank `to` in this mode. */
    __device__ bool ll_sends(int from, int to) const
    {
        switch (mode()) {
        case MPCCL_FLAT_BROADCAST:
        case MPCCL_FLAT_SCATTER: return from == a.root;
        case MPCCL_FLAT_REDUCE:
        case MPCCL_FLAT_GATHER: return to == a.root;
        default: return true;
        }
    }
    /* My data for rank j (its sub-part g). */
    __device__ const char *ll_src(int j, uint64_t o) const
    {
        switch (mode()) {
        case MPCCL_FLAT_REDUCESCATTER:
        case MPCCL_FLAT_ALLTOALL:
        case MPCCL_FLAT_SCATTER: return in_at((uint64_t)j * a.count + o);
        default: return in_at(o);
        }
    }

    __device__ void chunk_ll(uint32_t p, uint32_t seq) const
    {
        const uint64_t o = (uint64_t)g * a.sub_elems, n = part(a.count);
        const int64_t nb = (int64_t)(n * sizeof(T));
        const int64_t units = (nb + 7) / 8;
        const int tid = threadIdx.x, nt = blockDim.x;
        /* push: data, or a token where there is none */
        for (int j = 0; j < N; j++) {
            if (j == me) continue;
            if (n && ll_sends(me, j)) {
                const char *src = ll_src(j, o);
                char *dst = ll_area(j, me, p);
                for (int64_t i = tid; i < units; i += nt) ll_put(dst + 16 * i, load8(src + 8 * i, nb - 8 * i), seq);
            } else if (tid == 0) {
                *flag(j, 0, p, me) = seq;
            }
        }
        /* The first barrier of an LL launch: thread 0 reset the abort flag
         * (body) before any wait below reads it. */
        __syncthreads();
        /* consume */
        const int mode = this->mode();
        bool reduce = mode == MPCCL_FLAT_ALLREDUCE_1 || mode == MPCCL_FLAT_REDUCESCATTER ||
                      (mode == MPCCL_FLAT_REDUCE && me == a.root);
        if (n && reduce) {
            const char *own = in_at(mode == MPCCL_FLAT_REDUCESCATTER ? (uint64_t)me * a.count + o : o);
            char *dst = out_at(o);
            for (int64_t i = tid; i < units; i += nt) {
                uint64_t acc = 0;
                for (int s = 0; s < N; s++) {
                    uint64_t v = s == me ? load8(own + 8 * i, nb - 8 * i) : ll_get(ll_area(me, s, p) + 16 * i, seq, a.ab, why(s, seq, nullptr));
                    acc = s == 0 ? v : op8<DT, OP>(acc, v);
                }
                if (a.divisor) acc = div8<DT>(acc, a.divisor);
                store8(dst + 8 * i, acc, nb - 8 * i);
            }
        } else if (n && mode != MPCCL_FLAT_REDUCE) {
            /* copies: every source block that comes to me, and my own */
            bool blocks = mode == MPCCL_FLAT_ALLGATHER || mode == MPCCL_FLAT_ALLTOALL || mode == MPCCL_FLAT_GATHER;
            for (int s = 0; s < N; s++) {
                if (blocks ? (mode == MPCCL_FLAT_GATHER && me != a.root) : s != (me == a.root ? me : a.root))
                    continue;
                char *dst = out_at((blocks ? (uint64_t)s * a.count : 0) + o);
                if (s == me) {
                    const char *src = in_at((mode == MPCCL_FLAT_ALLTOALL || mode == MPCCL_FLAT_SCATTER
                                                 ? (uint64_t)me * a.count : 0) + o);
                    if (src != dst)
                        for (int64_t i = tid; i < units; i += nt) store8(dst + 8 * i, load8(src + 8 * i, nb - 8 * i), nb - 8 * i);
                } else {
                    const char *src = ll_area(me, s, p);
                    for (int64_t i = tid; i < units; i += nt) store8(dst + 8 * i, ll_get(src + 16 * i, seq, a.ab, why(s, seq, nullptr)), nb - 8 * i);
                }
            }
        }
        /* tokens from the peers that had no data for me */
        for (int j = tid; j < N; j += nt)
            if (j != me && !(n && ll_sends(j, me))) {
                volatile uint32_t *f = flag(me, 0, p, j);
                mpccl_abort_wait w{};
                while ((int32_t)(vload(f) - seq) < 0)
                    if (mpccl_abort_poll(a.ab, w, why(j, seq, f))) break;
            }
        __syncthreads();
    }

    /* Copy CTA k of self_ctas (after the G CTAs that move the peers'
     * blocks): its share of this rank's own block, input to output, beside
     * the others' NVLink traffic instead of after each chunk's wait. */
    __device__ void self_copy() const
    {
        const uint64_t K = (uint64_t)a.self_ctas, k = (uint64_t)(g - G), vec = 16 / sizeof(T);
        const uint64_t per = ((a.count + K - 1) / K + vec - 1) / vec * vec, lo = k * per;
        if (lo >= a.count) return;
        const uint64_t n = a.count - lo < per ? a.count - lo : per;
        const uint64_t src = (mode() == MPCCL_FLAT_ALLTOALL ? (uint64_t)me * a.count : 0) + lo;
        copy1(out_at((uint64_t)me * a.count + lo), in_at(src), n);
    }

    __device__ void body() const
    {
        uint32_t *ctr = (uint32_t *)(a.region[me] + mpccl_flat_ctr_off(N, a.slice_bytes));
        /* Every thread reads the epoch itself, so an LL launch loads it and
         * its input at once and stores to the peers before any barrier (one
         * memory latency less).  ctr[0] changes only after every CTA has
         * passed its last barrier (below), so all threads read one value. */
        if (threadIdx.x == 0) mpccl_abort_begin();
        uint32_t epoch = vload(ctr);
        /* The move kernel never runs LL (copy CTAs come with large calls
         * only), so its build leaves chunk_ll out. */
        const uint32_t ll = MODE < 0 ? a.ll_bytes : 0u;
        if (!ll) __syncthreads(); /* (chunk_ll has its own after its stores) */
        uint64_t cap = (uint64_t)G * a.sub_elems;
        int two = mode() == MPCCL_FLAT_ALLREDUCE_2;
        uint64_t per = two ? cap * N : cap, nch = (a.count + per - 1) / per;
        if (ll) nch = 1; /* the host sends only one-chunk calls to LL */
        for (uint64_t c = 0; c < nch && ll; c++) chunk_ll((epoch + 1u) & 1u, epoch + 1u);
        /* (after an abort every wait returns at once: the remaining chunks
         * only move garbage; a per-thread break here could split the CTA
         * around its barriers) */
        if (g >= G) self_copy();
        for (uint64_t c = 0; c < nch && !ll && g < G; c++) {
            uint32_t seq = epoch + (uint32_t)c + 1u, p = seq & 1u;
            if (two) chunk_two_shot(c, p, seq);
            else chunk(c, p, seq);
        }
        /* The last CTA out advances the chunk counter for the next launch.
         * One CTA needs no count: the next launch on the stream sees its
         * store (kernel boundaries order memory). */
        const uint32_t all = gridDim.x; /* the copy CTAs too: all read the epoch */
        if (threadIdx.x == 0 && all == 1) {
            ctr[0] = epoch + (uint32_t)nch;
        } else if (threadIdx.x == 0) {
            /* (no fences: every thread read ctr[0] before the CTA's last
             * barrier, and the next launch is ordered by the stream) */
            if (atomicAdd(&ctr[1], 1u) == all - 1u) {
                ctr[1] = 0;
                ctr[0] = epoch + (uint32_t)nch;
            }
        }
    }
};

/* The arguments stay in the parameter space (__grid_constant__): flat<> holds
 * a reference to them, and without it every thread copied them (280 bytes)
 * into local memory at start, 1.8 us of a 512-thread launch inside a CUDA
 * graph on H100. */
template <int DT>
__global__ void __launch_bounds__(MPCCL_FLAT_THREADS) flat_kernel(const __grid_constant__ mpccl_flat_args_t a)
{
    __shared__ shared_ptrs sh;
    int N = a.nranks;
    uint64_t fo = mpccl_flat_flags_off(N, a.slice_bytes), lo = mpccl_flat_ll_off(N, a.slice_bytes);
    const int G = (int)gridDim.x - a.self_ctas; /* CTAs on the peers' blocks (the copy CTAs come after) */
    switch (a.op) {
    case OP_SUM: flat<DT, OP_SUM>{a, sh, N, a.rank, G, (int)blockIdx.x, fo, lo}.body(); break;
    case OP_PROD: flat<DT, OP_PROD>{a, sh, N, a.rank, G, (int)blockIdx.x, fo, lo}.body(); break;
    case OP_MAX: flat<DT, OP_MAX>{a, sh, N, a.rank, G, (int)blockIdx.x, fo, lo}.body(); break;
    default: flat<DT, OP_MIN>{a, sh, N, a.rank, G, (int)blockIdx.x, fo, lo}.body(); break;
    }
}

/* An out-of-place alltoall or allgather with copy CTAs (a.self_ctas > 0):
 * the same body, built for one mode and two CTAs per SM (at most 64
 * registers: flat_kernel's 128 x 512 threads fill an SM's register file), so
 * the copy CTAs run beside a full grid on the peers' blocks instead of taking
 * CTAs out of it.  One mode per instance (both in one spill at 64 registers);
 * pure movement, so one instance per element size (the host picks it). */
template <int DT, int MODE>
__global__ void __launch_bounds__(MPCCL_FLAT_THREADS, 2) flat_move_kernel(const __grid_constant__ mpccl_flat_args_t a)
{
    __shared__ shared_ptrs sh;
    int N = a.nranks;
    uint64_t fo = mpccl_flat_flags_off(N, a.slice_bytes), lo = mpccl_flat_ll_off(N, a.slice_bytes);
    const int G = (int)gridDim.x - a.self_ctas;
    flat<DT, OP_SUM, MODE>{a, sh, N, a.rank, G, (int)blockIdx.x, fo, lo}.body();
}

template <int DT> cudaError_t launch_move_dt(const mpccl_flat_args_t *a, uint32_t nctas, cudaStream_t stream)
{
    if (a->mode == MPCCL_FLAT_ALLGATHER)
        flat_move_kernel<DT, MPCCL_FLAT_ALLGATHER><<<nctas, MPCCL_FLAT_THREADS, 0, stream>>>(*a);
    else
        flat_move_kernel<DT, MPCCL_FLAT_ALLTOALL><<<nctas, MPCCL_FLAT_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

/* One datatype's kernel launch; each flat_*.cu instantiates a few datatypes,
 * so nvcc compiles them in parallel. */
template <int DT> cudaError_t launch_dt(const mpccl_flat_args_t *a, uint32_t nctas, uint32_t nthreads,
                                        cudaStream_t stream)
{
    flat_kernel<DT><<<nctas, nthreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

} // namespace

#include "kernels/flat_win_impl.cuh"

#define MPCCL_FLAT_INSTANTIATE(DT)                                                                           \
    extern "C" cudaError_t mpccl_flat_launch_##DT(const mpccl_flat_args_t *a, uint32_t nctas, uint32_t nt,    \
                                                  cudaStream_t s)                                            \
    {                                                                                                        \
        return launch_dt<DT>(a, nctas, nt, s);                                                               \
    }                                                                                                        \
    extern "C" cudaError_t mpccl_flat_win_launch_##DT(const mpccl_flat_win_args_t *a, uint32_t nctas,       \
                                                      cudaStream_t s)                                        \
    {                                                                                                        \
        return launch_win_dt<DT>(a, nctas, s);                                                               \
    }                                                                                                        \
    extern "C" cudaError_t mpccl_flat_load_##DT(void)                                                       \
    {                                                                                                        \
        cudaFuncAttributes fa;                                                                               \
        cudaError_t e = cudaFuncGetAttributes(&fa, flat_kernel<DT>);                                         \
        return e != cudaSuccess ? e : cudaFuncGetAttributes(&fa, flat_win_kernel<DT>);                       \
    }

/* The move kernel for elements of BYTES bytes, as datatype DT. */
#define MPCCL_FLAT_INSTANTIATE_MOVE(DT, BYTES)                                                               \
    extern "C" cudaError_t mpccl_flat_move_launch_##BYTES(const mpccl_flat_args_t *a, uint32_t nctas,       \
                                                          cudaStream_t s)                                    \
    {                                                                                                        \
        return launch_move_dt<DT>(a, nctas, s);                                                              \
    }                                                                                                        \
    extern "C" cudaError_t mpccl_flat_move_load_##BYTES(void)                                               \
    {                                                                                                        \
        cudaFuncAttributes fa;                                                                               \
        cudaError_t e = cudaFuncGetAttributes(&fa, flat_move_kernel<DT, MPCCL_FLAT_ALLGATHER>);              \
        return e != cudaSuccess ? e : cudaFuncGetAttributes(&fa, flat_move_kernel<DT, MPCCL_FLAT_ALLTOALL>); \
    }
#endif

