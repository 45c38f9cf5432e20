/* The engine's small-call form: one CTA runs a whole plan whose messages all
 * go to other nodes as single LL pieces (devplan.h), with the plan's steps,
 * their links and their piece numbers in shared memory (doc/GPU_DESIGN.md,
 * "Small calls between nodes").
 *
 * It speaks the engine's protocol exactly -- the same pieces on CTA 0's
 * channels, numbered by the same tx_seq / rx_seq counters, the same slots,
 * words and acks -- so the proxy and the peer cannot tell which kernel ran,
 * and a peer may run either.  What it leaves out is what made the engine's
 * small calls slow (doc/PERFORMANCE.md, 2026-11-27): thread 0 reading each
 * step, its link and its counters one dependent load after another; a
 * receive polled by thread 0 and then read again by every thread; the
 * completion counters other CTAs would wait on (there are none).
 *
 * A receive is a probe: every thread reads its lines of the slot at once and
 * the piece is taken where all carry its flag (in a slot that held only LL
 * lines before) or the proxy's word says it landed; otherwise nothing is
 * written and the CTA looks for other work.  The host picks this kernel per
 * plan (mpccl_gpu_plan_small), once, so a plan's counters are only ever the
 * engine's or never used. */
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime.h>

#include "nccl.h" /* before extern "C": it includes C++ CUDA headers */
extern "C" {
#include "algo/algo_schedule.h"
#include "util/status.h"
#include "gpu/gpu_plan.h"
}
#include "kernels/abort.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/engine.h"
#include "kernels/engine_trace.cuh"
#include "kernels/proxy_ll.cuh"

namespace {

using namespace mpccl_ew;

/* Lines one thread handles at most (MPCCL_PROXY_LL_MAX bytes of payload). */
#define SMALL_LINES_PER_THREAD ((MPCCL_PROXY_LL_LINES(MPCCL_PROXY_LL_MAX) + MPCCL_ENGINE_THREADS - 1) / MPCCL_ENGINE_THREADS)
/* Pieces of at most this many lines (512 bytes) are read whole by each probe. */
#define SMALL_PROBE_LINES 64u

struct small_step {
    uint8_t kind, done;
    int32_t peer;
    uint32_t dep_first, ndeps;
    uint64_t n; /* elements */
    char *dst;  /* SEND: its slot */
    const char *src0, *src1; /* RECV: src0 is its slot */
    /* messages */
    uint32_t piece, bytes;
    uint32_t known; /* SEND: the latest ack read; RECV: LL lines the slot held (rx_clean) */
    volatile uint64_t *word; /* SEND: tx_word of its slot; RECV: rx_word of its slot */
    volatile uint32_t *ack;  /* SEND: tx_ack (the proxy raises it); RECV: rx_ack (we raise it) */
};

enum { ACT_EXIT = -1 };

struct small_state {
    small_step s[MPCCL_ENGINE_SMALL_MAX_STEPS];
    uint32_t dep[MPCCL_ENGINE_SMALL_MAX_DEPS];
    uint32_t nsteps;
    int32_t act;       /* step, or ACT_EXIT */
    uint32_t probing;  /* act is a receive's probe */
    uint32_t rr;       /* where the next probe search starts (no receive starves) */
    uint64_t word;     /* a probe's read of the proxy's word */
    uint32_t taken;    /* a probe found its piece */
    uint32_t bad;      /* a line is not the piece's although the proxy says it landed */
    engine_trace tr;   /* empty unless built with MPCCL_ENGINE_TRACE (codes as the engine's; 7: a probe missed) */
};

#ifdef MPCCL_ENGINE_TRACE
static __device__ uint32_t small_trace_launches; /* this process's launches, for the trace's sampling */
#endif

__device__ __forceinline__ int reached(uint32_t value, uint32_t target) { return (int32_t)(value - target) >= 0; }

__device__ __forceinline__ bool is_msg(uint32_t kind) { return kind == MPCCL_STEP_SEND || kind == MPCCL_STEP_RECV; }

struct small_engine {
    const mpccl_engine_args_t &a;
    const mpccl_dev_comm_t *comm;
    small_state &sh;
    uint32_t G, K;

    /* Stops this communicator's kernels (as the engine does, never a trap). */
    __device__ void stop_comm() const
    {
        if (a.ab.word) {
            a.ab.word->stop = 1u;
            __threadfence_system();
        }
        *(volatile uint32_t *)&mpccl_abort_seen = 1;
    }

    /* Thread 0: ends the launch (the communicator is stopped or timed out). */
    __device__ void give_up()
    {
        for (uint32_t t = 0; t < sh.nsteps; t++) sh.s[t].done = 1;
    }

    __device__ bool deps_met(const small_step &e) const
    {
        for (uint32_t j = 0; j < e.ndeps; j++)
            if (!sh.s[sh.dep[e.dep_first + j]].done) return false;
        return true;
    }

    /* No earlier unfinished message of the same direction and peer. */
    __device__ bool first_for_peer(uint32_t t) const
    {
        for (uint32_t u = 0; u < t; u++)
            if (!sh.s[u].done && sh.s[u].kind == sh.s[t].kind && sh.s[u].peer == sh.s[t].peer) return false;
        return true;
    }

    /* Thread 0: whether send t's slot is free (its ack read when needed). */
    __device__ bool slot_free(uint32_t t)
    {
        small_step &e = sh.s[t];
        if (reached(e.known, e.piece + 1u - K)) return true;
        uint32_t ack = mpccl_acquire_load(e.ack);
        if (!reached(ack, e.piece + 1u - K)) return false;
        comm->tx_acked[(size_t)e.peer * G] = ack;
        for (uint32_t u = t; u < sh.nsteps; u++)
            if (sh.s[u].kind == MPCCL_STEP_SEND && sh.s[u].peer == e.peer) sh.s[u].known = ack;
        return true;
    }

    __device__ mpccl_abort_why stuck() const
    {
        for (uint32_t t = 0; t < sh.nsteps; t++)
            if (!sh.s[t].done && is_msg(sh.s[t].kind))
                return mpccl_abort_why{MPCCL_ABORT_OP_ENGINE, (int32_t)sh.s[t].kind, sh.s[t].peer, a.dtype,
                                       sh.s[t].n, 0u, nullptr};
        return mpccl_abort_why{MPCCL_ABORT_OP_ENGINE, 0, -1, a.dtype, 0, 0u, nullptr};
    }

    /* Thread 0: the next action -- a step that can move, else a receive to
     * probe, else (sleeping between passes) one of those once it can. */
    __device__ void select(mpccl_abort_wait &w)
    {
        unsigned backoff = 0;
        for (;;) {
            bool moved = false, left = false;
            int probe = -1;
            for (uint32_t t = 0; t < sh.nsteps; t++) {
                small_step &e = sh.s[t];
                if (e.done) continue;
                left = true;
                if (!deps_met(e)) continue;
                if (e.kind == MPCCL_STEP_NOP) {
                    e.done = 1;
                    moved = true;
                    continue;
                }
                if (is_msg(e.kind) && !first_for_peer(t)) continue;
                if (e.kind == MPCCL_STEP_RECV) {
                    if (probe < 0 || (t >= sh.rr && (uint32_t)probe < sh.rr)) probe = (int)t;
                    continue;
                }
                if (e.kind == MPCCL_STEP_SEND && !slot_free(t)) continue;
                sh.act = (int32_t)t;
                sh.probing = 0;
                return;
            }
            if (!left) {
                sh.act = ACT_EXIT;
                return;
            }
            if (moved) continue;
            if (probe >= 0) {
                sh.act = probe;
                sh.probing = 1;
                sh.rr = (uint32_t)probe + 1u;
                return;
            }
            /* only sends waiting for a free slot */
            if (mpccl_abort_poll(a.ab, w, stuck(), 8)) {
                sh.act = ACT_EXIT;
                return;
            }
            backoff = backoff ? (backoff < 256 ? backoff * 2 : 256) : 32;
            __nanosleep(backoff);
        }
    }

    /* All threads: probes receive act and takes its piece where it is there.
     * A piece of at most SMALL_PROBE_LINES lines is read whole by the probe
     * (the read that finds it is the read that unpacks it); a larger one is
     * probed at its last line only, so that waiting does not read kilobytes
     * over PCIe each pass, and its lines are then read as they land. */
    __device__ void probe_and_take()
    {
        const small_step &e = sh.s[sh.act];
        const uint32_t flag = MPCCL_PROXY_LL_FLAG(e.piece), lines = MPCCL_PROXY_LL_LINES(e.bytes);
        const bool clean = e.known >= lines, whole_read = lines <= SMALL_PROBE_LINES;
        uint32_t lo[SMALL_LINES_PER_THREAD], hi[SMALL_LINES_PER_THREAD];
        bool miss = false;
        /* the word on another warp than the lines' first, so both are in flight at once */
        if (threadIdx.x == 32 % blockDim.x) sh.word = mpccl_acquire_load64(e.word);
#pragma unroll
        for (uint32_t k = 0; k < SMALL_LINES_PER_THREAD; k++) {
            const uint32_t i = threadIdx.x + k * blockDim.x;
            if (i >= lines) break;
            if (!whole_read && i != lines - 1u) continue;
            uint32_t f0, f1;
            mpccl_ll_load(e.src0 + 16u * i, lo[k], f0, hi[k], f1);
            miss |= f0 != flag || f1 != flag;
        }
        const bool any_miss = __syncthreads_or(miss);
        const uint64_t word = sh.word;
        const bool raised = (uint32_t)word == e.piece + 1u;
        if (!raised && !(clean && !any_miss)) {
            if (threadIdx.x == 0) sh.taken = 0;
            return;
        }
        if (raised && (uint32_t)(word >> 32) != 16u * lines) {
            if (threadIdx.x == 0) {
                printf("mpccl engine: rank %d: piece %u from peer %d has %u bytes, expected %u "
                       "(the peer aborted, or the ranks' schedules disagree): stopping the communicator\n",
                       comm->rank, e.piece, e.peer, (uint32_t)(word >> 32), 16u * lines);
                stop_comm();
                sh.taken = 0;
            }
            return;
        }
        /* Lines not read yet, or read before the proxy's word (acquired above,
         * ordered by the barrier) where they missed or where the slot held
         * other data whose bytes could pass for a flag, are read now; a line
         * still on its way (the piece found by its flags alone) is waited for. */
#pragma unroll
        for (uint32_t k = 0; k < SMALL_LINES_PER_THREAD; k++) {
            const uint32_t i = threadIdx.x + k * blockDim.x;
            if (i >= lines) break;
            const bool read = whole_read || i == lines - 1u;
            if (!read || miss || !clean) {
                mpccl_abort_wait w{};
                bool there = raised; /* every line of the piece has landed */
                for (uint32_t spins = 1;; spins++) {
                    uint32_t f0, f1;
                    mpccl_ll_load(e.src0 + 16u * i, lo[k], f0, hi[k], f1);
                    if (f0 == flag && f1 == flag) break;
                    if (there || mpccl_abort_poll(a.ab, w, mpccl_abort_why{MPCCL_ABORT_OP_ENGINE, MPCCL_STEP_RECV,
                                                                            e.peer, a.dtype, e.bytes, flag, nullptr})) {
                        *(volatile uint32_t *)&sh.bad = 1u;
                        break;
                    }
                    if ((spins & 63u) == 0 && (uint32_t)mpccl_acquire_load64(e.word) == e.piece + 1u) there = true;
                }
            }
            mpccl_ll_scatter((unsigned char *)e.dst, e.bytes, 8u * i, (uint64_t)lo[k] | ((uint64_t)hi[k] << 32));
        }
        if (threadIdx.x == 0) sh.taken = 1;
    }

    /* Thread 0, after a receive took its piece: acks the slot. */
    __device__ void post_recv(uint32_t t)
    {
        small_step &e = sh.s[t];
        if (sh.bad) { /* not the piece: a peer aborted, or the schedules disagree */
            if (!mpccl_aborted())
                printf("mpccl engine: rank %d: piece %u from peer %d is not the LL piece expected: "
                       "stopping the communicator\n", comm->rank, e.piece, e.peer);
            stop_comm();
            give_up();
            return;
        }
        /* No fence before the ack: every thread's reads of the slot returned
         * before the barrier (as in the engine). */
        *e.ack = e.piece + 1u;
        comm->rx_seq[(size_t)e.peer * G] = e.piece + 1u;
        if (comm->rx_clean) {
            uint32_t lines = MPCCL_PROXY_LL_LINES(e.bytes), clean = e.known > lines ? e.known : lines;
            comm->rx_clean[(size_t)e.peer * G * K + e.piece % K] = clean;
            for (uint32_t u = t + 1; u < sh.nsteps; u++)
                if (sh.s[u].kind == MPCCL_STEP_RECV && sh.s[u].peer == e.peer && sh.s[u].piece % K == e.piece % K)
                    sh.s[u].known = clean;
        }
        e.done = 1;
    }

    /* Thread 0, after a send's lines were written: raises the slot's word (no
     * fence: the proxy sends the piece once every line's flags are there). */
    __device__ void post_send(uint32_t t)
    {
        small_step &e = sh.s[t];
        uint32_t hi = (16u * MPCCL_PROXY_LL_LINES(e.bytes)) | MPCCL_PROXY_LL_BIT;
        *e.word = ((uint64_t)hi << 32) | (uint64_t)(e.piece + 1u);
        comm->tx_seq[(size_t)e.peer * G] = e.piece + 1u;
        e.done = 1;
    }
};

/* Thread t < nsteps: step t of the plan into shared memory, its buffers
 * resolved (a message's slot comes later, with its piece number). */
template <typename T> __device__ void load_step(const mpccl_engine_args_t &a, const mpccl_dev_plan_t *plan,
                                                small_state &sh, uint32_t t)
{
    const mpccl_dev_step_t st = plan->steps[t];
    small_step &e = sh.s[t];
    e.kind = st.kind;
    e.peer = st.peer;
    e.dep_first = st.dep_first;
    e.ndeps = st.ndeps;
    e.n = st.count;
    /* A step without data is done here (the engine's rule: a NOP joins and waits) */
    e.done = st.kind != MPCCL_STEP_NOP && st.count == 0;
    e.dst = (char *)a.buf[st.dst_buf] + st.dst_off * sizeof(T);
    e.src0 = (const char *)a.buf[st.src0_buf] + st.src0_off * sizeof(T);
    e.src1 = (const char *)a.buf[st.src1_buf] + st.src1_off * sizeof(T);
    e.bytes = (uint32_t)(st.count * sizeof(T));
    for (uint32_t j = 0; j < st.ndeps; j++) sh.dep[st.dep_first + j] = plan->deps[st.dep_first + j].step;
}

/* Thread t < nsteps, once every step is loaded: message t's piece number (the
 * channel's counter plus the earlier messages of the launch on it), slot,
 * words and what this rank last knew of the slot. */
__device__ void place_message(const mpccl_dev_comm_t *comm, small_state &sh, uint32_t t, uint32_t G, uint32_t K,
                              uint32_t slot_bytes)
{
    small_step &e = sh.s[t];
    if (e.done || !is_msg(e.kind)) return;
    uint32_t before = 0;
    for (uint32_t u = 0; u < t; u++)
        before += !sh.s[u].done && sh.s[u].kind == e.kind && sh.s[u].peer == e.peer;
    const size_t ch = (size_t)e.peer * G; /* the peer's channel of CTA 0 */
    const mpccl_dev_link_t *L = &comm->links[e.peer];
    if (e.kind == MPCCL_STEP_SEND) {
        e.piece = comm->tx_seq[ch] + before;
        e.dst = L->tx_slots + (size_t)(e.piece % K) * slot_bytes;
        e.word = L->tx_word + e.piece % K;
        e.ack = L->tx_ack;
        e.known = comm->tx_acked[ch];
    } else {
        e.piece = comm->rx_seq[ch] + before;
        e.src0 = L->rx_slots + (size_t)(e.piece % K) * slot_bytes;
        e.word = L->rx_word + e.piece % K;
        e.ack = L->rx_ack;
        e.known = comm->rx_clean ? comm->rx_clean[ch * K + e.piece % K] : 0u;
    }
}

template <int DT> __device__ void run_compute(const mpccl_engine_args_t &a, const small_step &e)
{
    typedef typename ty<DT>::T T;
    T *d = (T *)e.dst;
    const T *s0 = (const T *)e.src0, *s1 = (const T *)e.src1;
    switch (e.kind) {
    case MPCCL_STEP_COPY: copy_range<T>(d, s0, e.n); break;
    case MPCCL_STEP_REDUCE: reduce_range<DT>(a.op, d, s0, s1, e.n); break;
    case MPCCL_STEP_SCALE: unary_range<scaleop<DT> >(d, s0, ty<DT>::scalar(a.scalar), e.n); break;
    case MPCCL_STEP_DIVIDE: unary_range<divop<DT> >(d, s0, ty<DT>::divisor(a.divisor), e.n); break;
    default: break;
    }
}

template <int DT> __global__ void __launch_bounds__(MPCCL_ENGINE_THREADS) small_kernel(mpccl_engine_args_t a)
{
    typedef typename ty<DT>::T T;
    __shared__ small_state sh;
    const mpccl_dev_comm_t *comm = a.comm;
    const mpccl_dev_plan_t *plan = a.plan;
    const uint32_t nsteps = plan->nsteps, G = comm->nctas, K = comm->nslots, slot_bytes = comm->slot_bytes;
    small_engine eng{a, comm, sh, G, K};
    if (threadIdx.x == 0) {
        sh.tr.begin();
        sh.nsteps = nsteps;
        sh.rr = 0;
        sh.bad = 0;
        mpccl_abort_begin();
    }
    if (threadIdx.x < nsteps) load_step<T>(a, plan, sh, threadIdx.x);
    __syncthreads();
    if (threadIdx.x < nsteps) place_message(comm, sh, threadIdx.x, G, K, slot_bytes);
    __syncthreads();
    if (threadIdx.x == 0) sh.tr.mark(TRACE_SEQ, nsteps);
    mpccl_abort_wait w{};
    for (;;) {
        if (threadIdx.x == 0) {
            eng.select(w);
            if (sh.act != ACT_EXIT) sh.tr.mark(TRACE_ACTION, (sh.s[sh.act].kind << 8) | (uint32_t)sh.act);
        }
        __syncthreads();
        const int32_t act = sh.act;
        if (act == ACT_EXIT) break;
        const small_step &e = sh.s[act];
        if (sh.probing) eng.probe_and_take();
        else if (e.kind == MPCCL_STEP_SEND) mpccl_ll_pack(e.dst, e.src0, e.bytes, MPCCL_PROXY_LL_FLAG(e.piece));
        else run_compute<DT>(a, e);
        __syncthreads();
        if (threadIdx.x != 0) continue;
        sh.tr.mark(sh.probing && !sh.taken ? TRACE_DEPS : TRACE_MOVED, (uint32_t)act);
        if (!sh.probing) {
            if (e.kind == MPCCL_STEP_SEND) eng.post_send((uint32_t)act);
            else sh.s[act].done = 1;
            w = mpccl_abort_wait{};
        } else if (sh.taken) {
            eng.post_recv((uint32_t)act);
            w = mpccl_abort_wait{};
        } else if (mpccl_abort_poll(a.ab, w, eng.stuck(), 8)) {
            eng.give_up(); /* the piece is not there and the communicator stopped, or the wait timed out */
        }
    }
#ifdef MPCCL_ENGINE_TRACE
    if (threadIdx.x == 0) sh.tr.end(comm->rank, small_trace_launches++);
#endif
}

} // namespace

#define MPCCL_ALL_TYPES(X)                                                                                    \
    X(ncclInt8) X(ncclUint8) X(ncclInt32) X(ncclUint32) X(ncclInt64) X(ncclUint64) X(ncclFloat16)             \
    X(ncclFloat32) X(ncclFloat64) X(ncclBfloat16) X(ncclFloat8e4m3) X(ncclFloat8e5m2)

extern "C" mpccl_status_t mpccl_engine_small_launch(const mpccl_engine_args_t *args, cudaStream_t stream)
{
    if ((unsigned)args->op >= MPCCL_NUM_OPS)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "small engine launch with op %d", args->op);
    switch (args->dtype) {
#define X(DT)                                                                        \
    case DT: small_kernel<DT><<<1, MPCCL_ENGINE_THREADS, 0, stream>>>(*args); break;
        MPCCL_ALL_TYPES(X)
#undef X
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "small engine launch with datatype %d", args->dtype);
    }
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return MPCCL_OK;
    return mpccl_fail(MPCCL_ERR_CUDA, "launching the small engine kernel (datatype %d) failed: %s", args->dtype,
                      cudaGetErrorString(e));
}

extern "C" mpccl_status_t mpccl_engine_small_load(void)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaSuccess;
#define X(DT)                                                                        \
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, small_kernel<DT>);
    MPCCL_ALL_TYPES(X)
#undef X
    if (e != cudaSuccess)
        return mpccl_fail(MPCCL_ERR_CUDA, "loading the small engine kernels: %s", cudaGetErrorString(e));
    return MPCCL_OK;
}
