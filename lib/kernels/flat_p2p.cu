/* Flat point-to-point (flat.h): a group's send/recv calls of one single-node,
 * all-P2P communicator in one launch.
 *
 * CTAs [0, send_ctas) send and the others receive, so outgoing stores and
 * incoming copies overlap; lane g of a direction is blockIdx.x counted from
 * the first CTA of that direction.
 * Channel (me -> peer, lane g): chunk k (the k-th this lane ever sent to that
 * peer, counted in my region's tx counters; the receiver counts the same in
 * rx) goes into the peer's region at data[me][k & 1] + g * stride.
 *   sender:   wait until ack >= k - 2 (the peer has consumed the chunk that
 *             used this parity), store the bytes, __syncthreads, system
 *             fence, ready[me][k & 1][g] = k in the peer's region
 *   receiver: wait until ready >= k, copy into the user's buffer,
 *             __syncthreads, fence, ack[me][g] = k in the sender's region
 * A CTA moves whichever of its calls can move (thread 0 looks, all threads
 * copy), calls to the same peer in the same direction strictly in program
 * order; the two directions never wait for each other.
 * Messages are cut from their size alone: both ends agree without talking.
 * Direct messages (op.sync, flat.h): at its first chunk k0 the receiver
 * writes {its buffer as the sender sees it or 0, k0} into the sender's
 * region (direct[me][g]) and the sender writes {its buffer as the receiver
 * sees it or 0, k0} into the receiver's (pull[me][g]).  Each end then knows
 * the mode, one chunk per CTA unless staged:
 *   push (receive buffer known): the sender stores straight into it (no
 *     slot, no wait for acks) and raises ready; the receiver copies nothing
 *     and acks;
 *   pull (only the send buffer known): the receiver copies straight out of
 *     it and acks; the sender moves nothing, and waits for that ack before
 *     it raises ready, so its send completes after the receiver's reads;
 *   staged otherwise.
 * A sender writes its next announcement to a peer only once the receiver
 * acknowledged the first chunk of the previous one (so it was read; a staged
 * sender may run ahead by two chunks).  The counters stay those of the
 * staged protocol, so all kinds mix freely.
 * LL messages (op.ll, small): chunk m of a lane (its own counters ll_tx /
 * ll_rx) goes as 16-byte units {4 data bytes, m, 4 data bytes, m} into the
 * peer's LL part at [me][m & 1]; the receiver polls the units themselves, so
 * data and flag cross NVLink once, with no fence.  The receiver acknowledges
 * m - 1 (ll_ack) when it starts waiting for chunk m, not after consuming m: a
 * remote store at the end of a kernel would hold its completion for a round
 * trip.  The sender of m waits for ll_ack >= m - 2, which the receiver wrote
 * when it began to wait for m - 1, already sent, so no dependency beyond the
 * staged protocol's appears; stale units of a parity carry m - 2, never m. */
#include "kernels/flat_impl.cuh"

namespace {

enum { STAGED = 0, PUSH = 1, PULL = 2 };

struct p2p_state {
    uint32_t chunks[MPCCL_FLAT_P2P_MAX_OPS]; /* chunks this CTA finished, per call */
    uint32_t ll_chunks[MPCCL_FLAT_P2P_MAX_OPS]; /* LL calls: chunks with data for this lane */
    char *other[MPCCL_FLAT_P2P_MAX_OPS];     /* sync calls: push: the receive buffer; pull: the send buffer */
    uint8_t fin[MPCCL_FLAT_P2P_MAX_OPS];
    uint8_t known[MPCCL_FLAT_P2P_MAX_OPS]; /* sync calls: 1 announced, 2 the other end's announcement read */
    uint8_t mode[MPCCL_FLAT_P2P_MAX_OPS];  /* STAGED, PUSH or PULL */
    uint8_t ll_acked[MPCCL_FLAT_P2P_MAX_OPS]; /* LL receives: the chunk before the awaited one is acknowledged */
    int act;
    int ll; /* the chosen chunk is LL */
    uint32_t k;
    uint64_t n; /* bytes of the chosen chunk for this CTA */
    shared_ptrs ptrs;
};

struct p2p {
    const mpccl_flat_p2p_head_t &a;
    const mpccl_flat_p2p_op_t *ops;
    p2p_state &sh;
    int N, me, g;
    uint32_t sending; /* this CTA's direction */

    __device__ uint64_t ready_base() const { return a.p2p_off + 2ull * N * a.p2p_slice; }
    __device__ uint64_t ack_base() const { return ready_base() + 2ull * N * MPCCL_FLAT_MAX_CTAS * 4; }
    __device__ uint64_t tx_base() const { return ack_base() + (uint64_t)N * MPCCL_FLAT_MAX_CTAS * 4; }
    __device__ uint64_t rx_base() const { return tx_base() + (uint64_t)N * MPCCL_FLAT_MAX_CTAS * 4; }
    __device__ char *data(int r, int src, uint32_t par) const
    {
        return a.region[r] + a.p2p_off + ((uint64_t)src * 2 + par) * a.p2p_slice + (uint64_t)g * a.stride;
    }
    __device__ volatile uint32_t *ready(int r, int src, uint32_t par) const
    {
        return (volatile uint32_t *)(a.region[r] + ready_base()) + ((uint64_t)src * 2 + par) * MPCCL_FLAT_MAX_CTAS + g;
    }
    __device__ volatile uint32_t *ack(int r, int dst) const
    {
        return (volatile uint32_t *)(a.region[r] + ack_base()) + (uint64_t)dst * MPCCL_FLAT_MAX_CTAS + g;
    }
    __device__ uint64_t direct_base() const { return rx_base() + (uint64_t)N * MPCCL_FLAT_MAX_CTAS * 4; }
    /* {buffer, first chunk} that src announced to r */
    __device__ volatile unsigned long long *direct(int r, int src) const
    {
        return (volatile unsigned long long *)(a.region[r] + direct_base()) + ((uint64_t)src * MPCCL_FLAT_MAX_CTAS + g) * 2;
    }
    /* {send buffer, first chunk} that sender src announced to r */
    __device__ volatile unsigned long long *pull(int r, int src) const
    {
        return direct(r, src) + 2ull * N * MPCCL_FLAT_MAX_CTAS;
    }
    __device__ uint32_t *counter(int send, int peer) const
    {
        return (uint32_t *)(a.region[me] + (send ? tx_base() : rx_base())) + (uint64_t)peer * MPCCL_FLAT_MAX_CTAS + g;
    }
    /* LL part: ll_ack [dst N][CTA], ll_tx [peer N][CTA], ll_rx [peer N][CTA], units */
    __device__ uint64_t ll_base() const { return a.p2p_off + mpccl_flat_p2p_ll_off(N, a.p2p_slice); }
    __device__ volatile uint32_t *ll_ack(int r, int dst) const
    {
        return (volatile uint32_t *)(a.region[r] + ll_base()) + (uint64_t)dst * MPCCL_FLAT_MAX_CTAS + g;
    }
    __device__ uint32_t *ll_counter(int send, int peer) const
    {
        return (uint32_t *)(a.region[me] + ll_base()) + ((send ? 1ull : 2ull) * N + peer) * MPCCL_FLAT_MAX_CTAS + g;
    }
    __device__ char *ll_slot(int r, int src, uint32_t par) const
    {
        return a.region[r] + ll_base() + mpccl_flat_p2p_ll_units_off(N) +
               (((uint64_t)src * 2 + par) * MPCCL_FLAT_P2P_LL_LANES + g) * (2ull * MPCCL_FLAT_P2P_LL_LANE);
    }
    /* Chunks of an LL message that carry data for this lane (an empty lane
     * part is skipped by both ends alike). */
    __device__ uint32_t ll_lane_chunks(const mpccl_flat_p2p_op_t &op) const
    {
        uint64_t first = (uint64_t)g * op.sub, chunk = (uint64_t)op.ctas * op.sub;
        return op.bytes > first ? (uint32_t)((op.bytes - first - 1) / chunk + 1) : 0u;
    }
    /* Thread 0: whether the first unit of LL chunk m is here (non-blocking). */
    __device__ bool ll_arrived(const char *unit, uint32_t m) const
    {
        [[maybe_unused]] uint32_t x, y;
        uint32_t f1, f2;
        asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(x), "=r"(f1), "=r"(y), "=r"(f2)
                     : "l"(unit)
                     : "memory");
        return f1 == m && f2 == m;
    }

    /* Thread 0: LL call i, if its next chunk can move (else false). */
    __device__ bool select_ll(const mpccl_flat_p2p_op_t &op, int i, bool *spin) const
    {
        uint32_t m = *ll_counter(op.send, op.peer) + 1u, par = m & 1u;
        uint64_t off = (uint64_t)sh.chunks[i] * op.ctas * op.sub + (uint64_t)g * op.sub;
        uint64_t n = op.bytes - off < op.sub ? op.bytes - off : op.sub; /* off < bytes: ll_lane_chunks */
        if (op.send) {
            /* parity m & 1 last held m - 2 */
            if ((int32_t)(vload(ll_ack(me, op.peer)) - (m - 2u)) < 0) return false;
            sh.ptrs.d[0] = ll_slot(op.peer, me, par);
            sh.ptrs.s[0] = op.buf + off;
        } else {
            const char *u = ll_slot(me, op.peer, par);
            if (!sh.ll_acked[i]) {
                /* m - 1 is consumed (its loads returned before the barrier
                 * that ended its chunk): a posted store, no fence, whose
                 * round trip hides behind the wait for m */
                *ll_ack(op.peer, me) = m - 1u;
                sh.ll_acked[i] = 1;
            }
            if (!ll_arrived(u, m)) {
                *spin = true;
                return false;
            }
            sh.ptrs.s[0] = u;
            sh.ptrs.d[0] = op.buf + off;
        }
        sh.act = i;
        sh.ll = 1;
        sh.k = m;
        sh.n = n;
        return true;
    }
    /* All threads: one LL chunk (units of 8 data bytes; any alignment, any tail). */
    __device__ void move_ll() const
    {
        const int64_t nb = (int64_t)sh.n, units = (nb + 7) / 8;
        const uint32_t m = sh.k;
        if (ops[sh.act].send) {
            const char *src = sh.ptrs.s[0];
            char *dst = sh.ptrs.d[0];
            for (int64_t u = threadIdx.x; u < units; u += blockDim.x) ll_put(dst + 16 * u, load8(src + 8 * u, nb - 8 * u), m);
        } else {
            const char *src = sh.ptrs.s[0];
            char *dst = sh.ptrs.d[0];
            for (int64_t u = threadIdx.x; u < units; u += blockDim.x) store8(dst + 8 * u,
                       ll_get(src + 16 * u, m, a.ab,
                              mpccl_abort_why{MPCCL_ABORT_OP_FLAT_P2P, 0, ops[sh.act].peer, -1, ops[sh.act].bytes,
                                              m, nullptr}),
                       nb - 8 * u);
        }
    }
    /* A direct message has no slot to fit: it is one chunk per CTA, so each
     * CTA streams its whole part and raises one flag (both ends know it is
     * direct once the handshake is done). */
    __device__ bool is_direct(const mpccl_flat_p2p_op_t &op, int i) const
    {
        return sh.mode[i] != STAGED;
    }
    __device__ uint64_t sub_of(const mpccl_flat_p2p_op_t &op, int i) const
    {
        if (!is_direct(op, i)) return op.sub;
        return ((op.bytes + op.ctas - 1) / op.ctas + 15) / 16 * 16;
    }
    __device__ uint64_t nchunks(const mpccl_flat_p2p_op_t &op, int i) const
    {
        uint64_t chunk = (uint64_t)op.ctas * sub_of(op, i);
        return (op.bytes + chunk - 1) / chunk;
    }

    /* Thread 0: why this CTA waits (the first call not finished). */
    __device__ mpccl_abort_why stuck() const
    {
        for (int i = 0; i < a.nops; i++)
            if (!sh.fin[i])
                return mpccl_abort_why{MPCCL_ABORT_OP_FLAT_P2P, ops[i].send, ops[i].peer, -1, ops[i].bytes,
                                       sh.chunks[i] + 1u, nullptr};
        return mpccl_abort_why{MPCCL_ABORT_OP_FLAT_P2P, 0, -1, -1, 0, 0, nullptr};
    }

    /* Thread 0: the next call that can move one chunk (sh.act), or -1 when
     * all are done; sleeps a little while nothing can move. */
    __device__ void select() const
    {
        unsigned backoff = 0;
        mpccl_abort_wait w{};
        for (;;) {
            bool left = false, spin = false;
            for (int i = 0; i < a.nops; i++) {
                if (sh.fin[i]) continue;
                left = true;
                const mpccl_flat_p2p_op_t &op = ops[i];
                bool blocked = false;
                for (int j = 0; j < i && !blocked; j++)
                    blocked = !sh.fin[j] && ops[j].peer == op.peer && ops[j].send == op.send;
                if (blocked) continue;
                if (op.ll) {
                    if (select_ll(op, i, &spin)) return;
                    continue;
                }
                uint32_t k = *counter(op.send, op.peer) + 1u, par = k & 1u;
                if (op.sync && sh.known[i] != 2 && !handshake(op, i, k)) continue;
                uint64_t sub = sub_of(op, i), off = (uint64_t)sh.chunks[i] * op.ctas * sub + (uint64_t)g * sub;
                uint64_t n = off < op.bytes ? (op.bytes - off < sub ? op.bytes - off : sub) : 0;
                if (op.send) {
                    if (sh.mode[i] == PUSH) {
                        sh.ptrs.d[0] = sh.other[i] + off;
                    } else if (sh.mode[i] == PULL) {
                        /* the receiver copied chunk k out of our buffer */
                        if ((int32_t)(vload(ack(me, op.peer)) - k) < 0) continue;
                        sh.ptrs.d[0] = op.buf + off;
                        n = 0;
                    } else {
                        if ((int32_t)(vload(ack(me, op.peer)) - (k - 2u)) < 0) continue;
                        sh.ptrs.d[0] = data(op.peer, me, par);
                    }
                    sh.ptrs.s[0] = op.buf + off;
                } else if (sh.mode[i] == PULL) {
                    sh.ptrs.s[0] = sh.other[i] + off; /* announced after the sender's stream work */
                    sh.ptrs.d[0] = op.buf + off;
                } else {
                    if ((int32_t)(vload(ready(me, op.peer, par)) - k) < 0) continue;
                    sh.ptrs.s[0] = data(me, op.peer, par);
                    sh.ptrs.d[0] = op.buf + off;
                    if (sh.mode[i] == PUSH) n = 0; /* the sender stored it in place */
                }
                __threadfence(); /* acquire: the slot is free / the chunk is here */
                sh.act = i;
                sh.ll = 0;
                sh.k = k;
                sh.n = n;
                return;
            }
            if (!left) {
                sh.act = -1;
                return;
            }
            /* nothing can move: aborted or timed out? (peer: the first call left) */
            if (mpccl_abort_poll(a.ab, w, stuck(), spin ? 1 : 8)) {
                sh.act = -1;
                return;
            }
            if (spin) { /* an LL receive: its units land any moment, no sleep */
                backoff = 0;
                continue;
            }
            backoff = backoff ? (backoff < 256 ? backoff * 2 : 512) : 16;
            __nanosleep(backoff);
        }
    }

    /* Thread 0, at the first chunk k of a sync call: announce this end's
     * buffer, then read the other end's announcement (true once the mode is
     * known).  Each end's earlier stream work on its buffer is complete
     * before its announcement leaves, so stores into it (push) and loads
     * from it (pull) follow that work. */
    __device__ bool handshake(const mpccl_flat_p2p_op_t &op, int i, uint32_t k) const
    {
        if (sh.known[i] == 0) {
            volatile unsigned long long *a = op.send ? pull(op.peer, me) : direct(op.peer, me);
            /* The receiver has read the previous announcement once it
             * acknowledged that message's first chunk. */
            uint32_t prev = op.send ? (uint32_t)a[1] : 0u;
            if (prev && (int32_t)(vload(ack(me, op.peer)) - prev) < 0) return false;
            a[0] = (unsigned long long)(uintptr_t)op.peer_buf;
            __threadfence_system(); /* the address before the chunk number */
            a[1] = k;
            sh.known[i] = 1;
        }
        if (!op.send && op.peer_buf) { /* our buffer is known to the sender: push */
            sh.mode[i] = PUSH;
            sh.known[i] = 2;
            return true;
        }
        volatile unsigned long long *d = op.send ? direct(me, op.peer) : pull(me, op.peer);
        if ((uint32_t)d[1] != k) return false;
        __threadfence(); /* acquire: the address is the one announced with k */
        sh.other[i] = (char *)(uintptr_t)d[0];
        if (op.send) sh.mode[i] = sh.other[i] ? PUSH : op.peer_buf ? PULL : STAGED;
        else sh.mode[i] = sh.other[i] ? PULL : STAGED;
        sh.known[i] = 2;
        return true;
    }

    /* Thread 0, after the bytes moved: tell the other end, count the chunk. */
    __device__ void post() const
    {
        int i = sh.act;
        const mpccl_flat_p2p_op_t &op = ops[i];
        uint32_t k = sh.k;
        if (sh.ll) { /* the units carry their own flag: nothing to raise */
            *ll_counter(op.send, op.peer) = k;
            sh.ll_acked[i] = 0;
            if (++sh.chunks[i] == sh.ll_chunks[i]) sh.fin[i] = 1;
            return;
        }
        __threadfence_system(); /* the data (or our reads of it) before the flag */
        if (op.send) *ready(op.peer, me, k & 1u) = k;
        else *ack(op.peer, me) = k;
        *counter(op.send, op.peer) = k;
        if (++sh.chunks[i] == nchunks(op, i)) sh.fin[i] = 1;
    }

    /* The one call this CTA moves, when it is a single LL chunk for this
     * lane (a small send/recv): its index, else -1.  Every thread computes
     * the same answer from the arguments. */
    __device__ int single_ll_chunk() const
    {
        int only = -1, count = 0;
        for (int i = 0; i < a.nops; i++) {
            const mpccl_flat_p2p_op_t &op = ops[i];
            if (op.send != sending || (uint32_t)g >= op.ctas || op.bytes == 0) continue;
            if (op.ll && ll_lane_chunks(op) == 0) continue;
            only = i;
            count++;
        }
        return count == 1 && ops[only].ll && ll_lane_chunks(ops[only]) == 1 ? only : -1;
    }
    /* That chunk without the general loop's rounds: every thread reads the
     * lane counter and its input at once (the sender's slot check by thread
     * 0 overlaps them), one barrier, then the units go out or come in
     * (one memory latency and three barriers less than select/move/post).
     * Same counters, acks and slots as select_ll/move_ll/post. */
    __device__ void run_single_ll(int i) const
    {
        const mpccl_flat_p2p_op_t &op = ops[i];
        const int tid = threadIdx.x, nt = blockDim.x;
        if (tid == 0) mpccl_abort_begin();
        const uint32_t m = *ll_counter(op.send, op.peer) + 1u;
        const uint64_t off = (uint64_t)g * op.sub;
        const int64_t nb = (int64_t)(op.bytes - off < op.sub ? op.bytes - off : op.sub);
        const int64_t units = (nb + 7) / 8;
        const mpccl_abort_why why{MPCCL_ABORT_OP_FLAT_P2P, (int32_t)op.send, op.peer, -1, op.bytes, m, nullptr};
        if (op.send) {
            const char *src = op.buf + off;
            const uint64_t first = tid < units ? load8(src + 8 * tid, nb - 8 * tid) : 0;
            if (tid == 0) { /* parity m & 1 last held m - 2: consumed? */
                mpccl_abort_wait w{};
                while ((int32_t)(vload(ll_ack(me, op.peer)) - (m - 2u)) < 0)
                    if (mpccl_abort_poll(a.ab, w, why)) break;
            }
            __syncthreads();
            if (mpccl_aborted()) return;
            char *dst = ll_slot(op.peer, me, m & 1u);
            for (int64_t u = tid; u < units; u += nt)
                ll_put(dst + 16 * u, u == tid ? first : load8(src + 8 * u, nb - 8 * u), m);
        } else {
            /* m - 1 was consumed in an earlier launch: a posted store whose
             * round trip hides behind the wait for m */
            if (tid == 0) *ll_ack(op.peer, me) = m - 1u;
            __syncthreads(); /* the abort flag is reset before any wait */
            const char *src = ll_slot(me, op.peer, m & 1u);
            char *dst = op.buf + off;
            for (int64_t u = tid; u < units; u += nt) store8(dst + 8 * u, ll_get(src + 16 * u, m, a.ab, why), nb - 8 * u);
        }
        if (tid == 0) *ll_counter(op.send, op.peer) = m;
    }

    __device__ void run() const
    {
        const int single = single_ll_chunk();
        if (single >= 0) {
            run_single_ll(single);
            return;
        }
        if (threadIdx.x == 0) mpccl_abort_begin();
        if (threadIdx.x == 0)
            for (int i = 0; i < a.nops; i++) {
                sh.chunks[i] = 0;
                sh.other[i] = NULL;
                sh.known[i] = 0;
                sh.mode[i] = STAGED;
                sh.ll_chunks[i] = ops[i].ll ? ll_lane_chunks(ops[i]) : 0u;
                sh.ll_acked[i] = 0;
                sh.fin[i] = ops[i].send != sending || (uint32_t)g >= ops[i].ctas || ops[i].bytes == 0 ||
                            (ops[i].ll && sh.ll_chunks[i] == 0);
            }
        for (;;) {
            if (threadIdx.x == 0) select();
            __syncthreads();
            if (sh.act < 0) break;
            if (sh.ll) move_ll();
            else combine<ncclUint8, OP_SUM>(sh.ptrs.d, 1, sh.ptrs.s, 1, sh.n, 0);
            __syncthreads();
            if (threadIdx.x == 0) post();
        }
    }
};

/* Kernel arguments sized for NOPS calls: a launch copies its arguments, and
 * most groups hold a send and a receive, not 64 calls. */
template <int NOPS> struct p2p_params {
    mpccl_flat_p2p_head_t h;
    mpccl_flat_p2p_op_t ops[NOPS];
};

template <int NOPS> __global__ void __launch_bounds__(MPCCL_FLAT_THREADS) flat_p2p_kernel(p2p_params<NOPS> a)
{
    __shared__ p2p_state sh;
    uint32_t sending = blockIdx.x < a.h.send_ctas;
    int g = (int)(sending ? blockIdx.x : blockIdx.x - a.h.send_ctas);
    p2p{a.h, a.ops, sh, a.h.nranks, a.h.rank, g, sending}.run();
}

template <int NOPS> static void launch_with(const mpccl_flat_p2p_args_t *a, uint32_t nctas, cudaStream_t stream)
{
    p2p_params<NOPS> p;
    p.h = a->h;
    for (int i = 0; i < a->h.nops; i++) p.ops[i] = a->ops[i];
    flat_p2p_kernel<NOPS><<<nctas, MPCCL_FLAT_THREADS, 0, stream>>>(p);
}

} // namespace

extern "C" mpccl_status_t mpccl_flat_p2p_load(void)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, flat_p2p_kernel<MPCCL_FLAT_P2P_FEW_OPS>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, flat_p2p_kernel<MPCCL_FLAT_P2P_MAX_OPS>);
    if (e != cudaSuccess) return mpccl_fail(MPCCL_ERR_CUDA, "loading the flat p2p kernels: %s", cudaGetErrorString(e));
    return MPCCL_OK;
}

extern "C" mpccl_status_t mpccl_flat_p2p_launch(const mpccl_flat_p2p_args_t *a, uint32_t nctas, cudaStream_t stream)
{
    const mpccl_flat_p2p_head_t *h = &a->h;
    if (nctas < 1 || nctas > 2 * MPCCL_FLAT_MAX_CTAS || h->send_ctas > nctas || h->nranks < 1 ||
        h->nranks > MPCCL_FLAT_MAX_RANKS || h->nops < 1 || h->nops > MPCCL_FLAT_P2P_MAX_OPS)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "flat p2p launch: %u CTAs, %d ranks, %d calls", nctas, h->nranks,
                          h->nops);
    for (int i = 0; i < h->nops; i++) /* an LL lane must fit its part of the region */
        if (a->ops[i].ll && (a->ops[i].ctas > MPCCL_FLAT_P2P_LL_LANES || a->ops[i].sub > MPCCL_FLAT_P2P_LL_LANE ||
                             a->ops[i].sub % 16 != 0))
            return mpccl_fail(MPCCL_ERR_INTERNAL, "flat p2p launch: LL call %d with %u CTAs of %u bytes", i,
                              a->ops[i].ctas, a->ops[i].sub);
    if (h->nops <= MPCCL_FLAT_P2P_FEW_OPS) launch_with<MPCCL_FLAT_P2P_FEW_OPS>(a, nctas, stream);
    else launch_with<MPCCL_FLAT_P2P_MAX_OPS>(a, nctas, stream);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return mpccl_fail(MPCCL_ERR_CUDA, "launching the flat p2p kernel failed: %s", cudaGetErrorString(e));
    return MPCCL_OK;
}
