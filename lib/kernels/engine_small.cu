/* The engine's small-call form: one CTA runs a whole plan whose messages all
 * go to other nodes as single LL pieces (devplan.h), from the plan's
 * flattened form (mpccl_dev_small_step_t, built on the host) held in shared
 * memory (doc/GPU_DESIGN.md, "Small calls between nodes").
 *
 * It speaks the engine's protocol exactly -- the same pieces on CTA 0's
 * channels, numbered by the same tx_seq / rx_seq counters, the same slots,
 * words and acks -- so the proxy and the peer cannot tell which kernel ran,
 * and a peer may run either.  What it leaves out is what made the engine's
 * small calls slow (doc/PERFORMANCE.md, 2026-11-27): thread 0 reading each
 * step, its link and its counters one dependent load after another (here
 * thread t loads step t, then its channel's counters: two loads deep);
 * the window's bookkeeping (here bit masks of done steps, dependencies and
 * earlier messages); a receive polled by thread 0 and then read again by
 * every thread; the completion counters other CTAs would wait on (there are
 * none).
 *
 * A receive is a probe: every thread reads its lines of the slot at once and
 * the piece is taken where all carry its flag (in a slot that held only LL
 * lines before) or the proxy's word says it landed; otherwise nothing is
 * written and the CTA looks for other work.  Where there is none, the probe
 * is patient: each thread polls its line until it is there (bounded, then
 * the CTA looks again).  The host picks this kernel per plan
 * (mpccl_gpu_plan_small), once, so a plan's counters are only ever the
 * engine's or never used. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "nccl.h" /* before extern "C": it includes C++ CUDA headers */
extern "C" {
#include "algo/algo_schedule.h"
#include "util/status.h"
#include "kernels/plan_small.h"
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
/* A patient probe (the launch has nothing else to do) polls each line this
 * many times (each a read over PCIe, about 1.3 us) before it looks again. */
#define SMALL_PATIENT_POLLS 16u
/* Slots whose rx_clean words a receive loads at once, before its piece number is known. */
#define SMALL_MAX_SLOTS 8u

struct small_step {
    uint8_t kind;
    int32_t peer;
    uint32_t deps, before; /* masks over the plan's steps (devplan.h) */
    uint64_t n;            /* elements */
    char *dst;             /* SEND: its slot */
    const char *src0, *src1; /* RECV: src0 is its slot */
    /* messages */
    uint32_t piece, bytes;
    uint32_t known;          /* SEND: the latest ack read; RECV: LL lines the slot held (rx_clean) */
    volatile uint64_t *word; /* SEND: tx_word of its slot; RECV: rx_word of its slot */
    volatile uint32_t *ack;  /* SEND: tx_ack (the proxy raises it); RECV: rx_ack (we raise it) */
    uint32_t *seq, *known_at; /* the channel's counter; tx_acked, or the slot's rx_clean (NULL: none) */
};

enum { ACT_EXIT = -1 };
enum { PROBE_NONE = 0, PROBE_ONCE, PROBE_PATIENT };

struct small_state {
    small_step s[MPCCL_ENGINE_SMALL_MAX_STEPS];
    uint32_t nsteps;
    uint32_t done;     /* mask: steps finished */
    int32_t act;       /* step, or ACT_EXIT */
    uint32_t probing;  /* act is a receive's probe (PROBE_*) */
    uint32_t rr;       /* where the next probe search starts (no receive starves) */
    int32_t follow;    /* with a probe: the reduction that waits only for its piece (or -1), done with it */
    uint64_t word;     /* a probe's read of the proxy's word */
    uint32_t taken;    /* a probe found its piece */
    uint32_t bad;      /* a line is not the piece's although the proxy says it landed */
    engine_trace tr;   /* empty unless built with MPCCL_ENGINE_TRACE (codes as the engine's; 7: a probe missed) */
};

#ifdef MPCCL_ENGINE_TRACE
static __device__ uint32_t small_trace_launches; /* this process's launches, for the trace's sampling */
#endif

__device__ __forceinline__ int reached(uint32_t value, uint32_t target) { return (int32_t)(value - target) >= 0; }

/* Whether [x, x + bytes) and [y, y + bytes) are the same range or do not meet. */
__device__ __forceinline__ bool apart_or_same(const char *x, const char *y, uint32_t bytes)
{
    return x == y || x + bytes <= y || y + bytes <= x;
}

template <int DT> __device__ __forceinline__ typename ty<DT>::T apply_op(int op, typename ty<DT>::T x,
                                                                         typename ty<DT>::T y)
{
    switch (op) {
    case OP_SUM: return binop<DT, OP_SUM>::apply(x, y);
    case OP_PROD: return binop<DT, OP_PROD>::apply(x, y);
    case OP_MAX: return binop<DT, OP_MAX>::apply(x, y);
    default: return binop<DT, OP_MIN>::apply(x, y);
    }
}

__device__ __forceinline__ bool is_msg(uint32_t kind) { return kind == MPCCL_STEP_SEND || kind == MPCCL_STEP_RECV; }

struct small_engine {
    const mpccl_engine_args_t &a;
    small_state &sh;
    uint32_t K;

    /* Stops this communicator's kernels (as the engine does, never a trap). */
    __device__ void stop_comm() const
    {
        if (a.ab.word) {
            a.ab.word->stop = 1u;
            __threadfence_system();
        }
        *(volatile uint32_t *)&mpccl_abort_seen = 1;
    }

    __device__ int rank() const { return a.comm->rank; }

    /* Thread 0: ends the launch (the communicator is stopped or timed out). */
    __device__ void give_up() { sh.done = sh.nsteps >= 32 ? ~0u : (1u << sh.nsteps) - 1u; }

    /* Thread 0: whether send t's slot is free (its ack read when needed). */
    __device__ bool slot_free(uint32_t t)
    {
        small_step &e = sh.s[t];
        if (reached(e.known, e.piece + 1u - K)) return true;
        uint32_t ack = mpccl_acquire_load(e.ack);
        if (!reached(ack, e.piece + 1u - K)) return false;
        *e.known_at = ack;
        for (uint32_t u = t; u < sh.nsteps; u++)
            if (u == t || ((sh.s[u].before >> t) & 1u)) sh.s[u].known = ack;
        return true;
    }

    __device__ mpccl_abort_why stuck() const
    {
        for (uint32_t t = 0; t < sh.nsteps; t++)
            if (!((sh.done >> t) & 1u) && is_msg(sh.s[t].kind))
                return mpccl_abort_why{MPCCL_ABORT_OP_ENGINE, (int32_t)sh.s[t].kind, sh.s[t].peer, a.dtype,
                                       sh.s[t].n, 0u, nullptr};
        return mpccl_abort_why{MPCCL_ABORT_OP_ENGINE, 0, -1, a.dtype, 0, 0u, nullptr};
    }

    /* Thread 0: a reduction that waits only for receive t and reads its
     * destination as one operand, element for element (-1: none).  Whoever
     * takes t's piece reduces those elements too, from the values it just
     * wrote: no selection, barrier or second pass between the two. */
    __device__ int32_t follower(uint32_t t) const
    {
        const small_step &e = sh.s[t];
        for (uint32_t u = t + 1; u < sh.nsteps; u++) {
            const small_step &f = sh.s[u];
            if (((sh.done >> u) & 1u) || f.kind != MPCCL_STEP_REDUCE || (f.deps & ~sh.done) != (1u << t)) continue;
            /* element j of every operand is thread-local only where the destination
             * is each source exactly or misses it */
            if (f.bytes == e.bytes && (f.src0 == e.dst || f.src1 == e.dst) && apart_or_same(f.dst, f.src0, f.bytes) &&
                apart_or_same(f.dst, f.src1, f.bytes))
                return (int32_t)u;
        }
        return -1;
    }

    /* Thread 0: the next action -- a step that can move, else a receive to
     * probe (patiently where nothing else waits), else (sleeping between
     * passes) one of those once it can. */
    __device__ void select(mpccl_abort_wait &w)
    {
        unsigned backoff = 0;
        const uint32_t all = sh.nsteps >= 32 ? ~0u : (1u << sh.nsteps) - 1u;
        for (;;) {
            bool moved = false, blocked = false;
            int probe = -1, probes = 0;
            const uint32_t done = sh.done;
            if (done == all) {
                sh.act = ACT_EXIT;
                return;
            }
            for (uint32_t t = 0; t < sh.nsteps; t++) {
                if ((done >> t) & 1u) continue;
                const small_step &e = sh.s[t];
                if ((done & e.deps) != e.deps) continue;
                if (e.kind == MPCCL_STEP_NOP) {
                    sh.done |= 1u << t;
                    moved = true;
                    continue;
                }
                if ((e.before & ~done) != 0) continue; /* an earlier message on its channel first */
                if (e.kind == MPCCL_STEP_RECV) {
                    probes++;
                    if (probe < 0 || (t >= sh.rr && (uint32_t)probe < sh.rr)) probe = (int)t;
                    continue;
                }
                if (e.kind == MPCCL_STEP_SEND && !slot_free(t)) {
                    blocked = true;
                    continue;
                }
                sh.act = (int32_t)t;
                sh.probing = PROBE_NONE;
                return;
            }
            if (moved) continue;
            if (probe >= 0) {
                sh.act = probe;
                sh.probing = probes == 1 && !blocked ? PROBE_PATIENT : PROBE_ONCE;
                sh.rr = (uint32_t)probe + 1u;
                sh.follow = follower((uint32_t)probe);
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
     * over PCIe each pass, and its lines are then read as they land.  A
     * patient probe of a slot that held only LL lines polls each line until
     * it is there (up to SMALL_PATIENT_POLLS reads): the launch has nothing
     * else to do, and no barrier or selection comes between two reads. */
    template <int DT> __device__ void probe_and_take()
    {
        const small_step &e = sh.s[sh.act];
        const uint32_t flag = MPCCL_PROXY_LL_FLAG(e.piece), lines = MPCCL_PROXY_LL_LINES(e.bytes);
        const bool clean = e.known >= lines, whole_read = lines <= SMALL_PROBE_LINES;
        const bool patient = sh.probing == PROBE_PATIENT && clean && whole_read;
        uint32_t lo[SMALL_LINES_PER_THREAD], hi[SMALL_LINES_PER_THREAD];
        bool miss = false;
        /* the word on another warp than the lines' first, so both are in flight at once */
        if (!patient && threadIdx.x == 32 % blockDim.x) sh.word = mpccl_acquire_load64(e.word);
#pragma unroll
        for (uint32_t k = 0; k < SMALL_LINES_PER_THREAD; k++) {
            const uint32_t i = threadIdx.x + k * blockDim.x;
            if (i >= lines) break;
            if (!whole_read && i != lines - 1u) continue;
            for (uint32_t polls = 1;; polls++) {
                uint32_t f0, f1;
                mpccl_ll_load(e.src0 + 16u * i, lo[k], f0, hi[k], f1);
                if (f0 == flag && f1 == flag) break;
                if (!patient || polls == SMALL_PATIENT_POLLS) {
                    miss = true;
                    break;
                }
            }
        }
        const bool any_miss = __syncthreads_or(miss);
        if (patient) {
            if (!any_miss) take<DT>(e, lo, hi, flag, lines, false, false, false);
            else if (threadIdx.x == 0) sh.taken = 0;
            return;
        }
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
                       rank(), e.piece, e.peer, (uint32_t)(word >> 32), 16u * lines);
                stop_comm();
                sh.taken = 0;
            }
            return;
        }
        take<DT>(e, lo, hi, flag, lines, whole_read, miss || !clean, raised);
    }

    /* All threads: unpacks the piece into its destination.  Lines not read
     * yet (!whole_read), or read before the proxy's word (acquired before the
     * barrier) where they missed or where the slot held other data whose
     * bytes could pass for a flag (reread), are read now; a line still on
     * its way (the piece found by its flags alone) is waited for. */
    template <int DT>
    __device__ void take(const small_step &e, uint32_t *lo, uint32_t *hi, uint32_t flag, uint32_t lines,
                         bool whole_read, bool reread, bool raised)
    {
        typedef typename ty<DT>::T T;
#pragma unroll
        for (uint32_t k = 0; k < SMALL_LINES_PER_THREAD; k++) {
            const uint32_t i = threadIdx.x + k * blockDim.x;
            if (i >= lines) break;
            const bool read = whole_read || i == lines - 1u;
            if (!read || reread) {
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
            if (sh.follow >= 0) { /* the reduction waiting for this piece, on the elements of this line */
                const small_step &f = sh.s[sh.follow];
                const uint32_t end = 8u * i + 8u < e.bytes ? 8u * i + 8u : e.bytes;
                for (uint32_t j = 8u * i / sizeof(T); j < end / sizeof(T); j++)
                    ((T *)f.dst)[j] = apply_op<DT>(a.op, ((const T *)f.src0)[j], ((const T *)f.src1)[j]);
            }
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
                       "stopping the communicator\n", rank(), e.piece, e.peer);
            stop_comm();
            give_up();
            return;
        }
        /* No fence before the ack: every thread's reads of the slot returned
         * before the barrier (as in the engine). */
        *e.ack = e.piece + 1u;
        *e.seq = e.piece + 1u;
        if (e.known_at) {
            uint32_t lines = MPCCL_PROXY_LL_LINES(e.bytes), clean = e.known > lines ? e.known : lines;
            *e.known_at = clean;
            for (uint32_t u = t + 1; u < sh.nsteps; u++) /* later pieces of the channel in the same slot */
                if (((sh.s[u].before >> t) & 1u) && sh.s[u].piece % K == e.piece % K) sh.s[u].known = clean;
        }
        sh.done |= 1u << t;
    }

    /* One thread, after a send's lines were written: raises the slot's word
     * (no fence: the proxy sends the piece once every line's flags are
     * there).  The caller marks the step done. */
    __device__ void post_send(uint32_t t) const
    {
        const small_step &e = sh.s[t];
        uint32_t hi = (16u * MPCCL_PROXY_LL_LINES(e.bytes)) | MPCCL_PROXY_LL_BIT;
        *e.word = ((uint64_t)hi << 32) | (uint64_t)(e.piece + 1u);
        *e.seq = e.piece + 1u;
    }

    /* All threads, before the first selection: the sends that can go at once
     * (nothing to wait for, the first of their channel, the slot known to be
     * free), a warp each, side by side -- they start the launch's way
     * through the network without waiting for thread 0. */
    __device__ void first_sends()
    {
        const uint32_t warp = threadIdx.x / 32u, lane = threadIdx.x % 32u, nwarps = blockDim.x / 32u;
        const uint32_t done = sh.done;
        for (uint32_t t = warp; t < sh.nsteps; t += nwarps) {
            const small_step &e = sh.s[t];
            if (e.kind != MPCCL_STEP_SEND || ((done >> t) & 1u) || (e.deps & ~done) || e.before ||
                !reached(e.known, e.piece + 1u - K))
                continue;
            mpccl_ll_pack(e.dst, e.src0, e.bytes, MPCCL_PROXY_LL_FLAG(e.piece), lane, 32u);
            __syncwarp();
            if (lane == 0) {
                post_send(t);
                atomicOr(&sh.done, 1u << t);
            }
        }
    }
};

/* Thread t < nsteps: step t of the flattened plan into shared memory, its
 * buffers resolved and, for a message, its piece number (the channel's
 * counter plus the earlier messages of the launch on it), slot, words and
 * what this rank last knew of the slot.  Two dependent loads: the step, then
 * the channel's counters (a receive loads every slot's rx_clean word beside
 * its counter and keeps its own). */
template <typename T>
__device__ void load_step(const mpccl_engine_args_t &a, small_state &sh, uint32_t t, const mpccl_dev_small_step_t &d)
{
    small_step &e = sh.s[t];
    e.kind = d.kind;
    e.peer = d.peer;
    e.deps = d.deps;
    e.before = d.before;
    e.n = d.count;
    e.dst = (char *)a.buf[d.dst_buf] + d.dst_off * sizeof(T);
    e.src0 = (const char *)a.buf[d.src0_buf] + d.src0_off * sizeof(T);
    e.src1 = (const char *)a.buf[d.src1_buf] + d.src1_off * sizeof(T);
    e.bytes = (uint32_t)(d.count * sizeof(T));
    e.known_at = nullptr;
    if (!is_msg(d.kind) || d.count == 0) return;
    const uint32_t K = a.nslots;
    uint32_t clean[SMALL_MAX_SLOTS];
    if (d.kind == MPCCL_STEP_RECV && d.known && K <= SMALL_MAX_SLOTS) {
#pragma unroll
        for (uint32_t i = 0; i < SMALL_MAX_SLOTS; i++)
            if (i < K) clean[i] = d.known[i];
    }
    const uint32_t piece = *d.seq + __popc(d.before), slot = piece % K;
    e.piece = piece;
    e.seq = d.seq;
    e.ack = d.ack;
    e.word = d.word + slot;
    if (d.kind == MPCCL_STEP_SEND) {
        e.dst = d.slots + (size_t)slot * a.slot_bytes;
        e.known_at = d.known;
        e.known = *d.known;
    } else {
        e.src0 = d.slots + (size_t)slot * a.slot_bytes;
        e.known_at = d.known ? d.known + slot : nullptr;
        uint32_t c = 0;
        if (d.known) {
#pragma unroll
            for (uint32_t i = 0; i < SMALL_MAX_SLOTS; i++)
                if (i == slot) c = clean[i];
            if (K > SMALL_MAX_SLOTS) c = d.known[slot];
        }
        e.known = c;
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
    const uint32_t nsteps = a.small_nsteps;
    small_engine eng{a, sh, a.nslots};
    if (threadIdx.x == 0) {
        sh.tr.begin();
        sh.nsteps = nsteps;
        sh.rr = 0;
        sh.bad = 0;
        mpccl_abort_begin();
    }
    /* A launch that may start before the previous kernel of its stream ends
     * (mpccl_engine_small_launch, overlap) reads nothing another kernel
     * writes before that kernel is done: the flattened plan (written by the
     * host when the plan was made) first, then the wait, then counters and
     * buffers.  Only then may the next launch start early: one launch waits
     * ahead, not the whole queue.  Without the overlap both instructions do
     * nothing. */
    mpccl_dev_small_step_t d;
    if (threadIdx.x < nsteps) d = a.small[threadIdx.x];
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x < nsteps) load_step<T>(a, sh, threadIdx.x, d);
    /* Steps without data are done here (the engine's rule; a NOP joins and waits) */
    const bool empty = threadIdx.x < nsteps && sh.s[threadIdx.x].kind != MPCCL_STEP_NOP && sh.s[threadIdx.x].n == 0;
    const uint32_t done = __ballot_sync(~0u, empty); /* steps < 32: warp 0 holds them all */
    if (threadIdx.x == 0) sh.done = done;
    __syncthreads();
    if (threadIdx.x == 0) sh.tr.mark(TRACE_SEQ, nsteps);
    eng.first_sends();
    __syncthreads();
    if (threadIdx.x == 0) sh.tr.mark(TRACE_POSTED, 0);
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
        if (sh.probing) eng.probe_and_take<DT>();
        else if (e.kind == MPCCL_STEP_SEND) mpccl_ll_pack(e.dst, e.src0, e.bytes, MPCCL_PROXY_LL_FLAG(e.piece));
        else run_compute<DT>(a, e);
        __syncthreads();
        if (threadIdx.x != 0) continue;
        sh.tr.mark(sh.probing && !sh.taken ? TRACE_DEPS : TRACE_MOVED, (uint32_t)act);
        if (!sh.probing) {
            if (e.kind == MPCCL_STEP_SEND) eng.post_send((uint32_t)act);
            sh.done |= 1u << act;
            w = mpccl_abort_wait{};
        } else if (sh.taken) {
            eng.post_recv((uint32_t)act);
            if (sh.follow >= 0) sh.done |= 1u << sh.follow;
            w = mpccl_abort_wait{};
        } else if (mpccl_abort_poll(a.ab, w, eng.stuck(), sh.probing == PROBE_PATIENT ? 64 : 8)) {
            eng.give_up(); /* the piece is not there and the communicator stopped, or the wait timed out */
        }
    }
#ifdef MPCCL_ENGINE_TRACE
    if (threadIdx.x == 0) sh.tr.end(a.comm->rank, small_trace_launches++);
#endif
}

} // namespace

#define MPCCL_ALL_TYPES(X)                                                                                    \
    X(ncclInt8) X(ncclUint8) X(ncclInt32) X(ncclUint32) X(ncclInt64) X(ncclUint64) X(ncclFloat16)             \
    X(ncclFloat32) X(ncclFloat64) X(ncclBfloat16) X(ncclFloat8e4m3) X(ncclFloat8e5m2)

extern "C" mpccl_status_t mpccl_engine_small_launch(const mpccl_engine_args_t *args, cudaStream_t stream,
                                                    int overlap)
{
    if (!args->small || args->small_nsteps < 1 || args->small_nsteps > MPCCL_ENGINE_SMALL_MAX_STEPS || !args->nslots)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "small engine launch with %u steps, %u slots", args->small_nsteps,
                          args->nslots);
    if ((unsigned)args->op >= MPCCL_NUM_OPS)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "small engine launch with op %d", args->op);
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cudaLaunchAttribute attr;
    memset(&attr, 0, sizeof(attr));
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(MPCCL_ENGINE_THREADS);
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = overlap ? 1 : 0;
    cudaError_t e = cudaSuccess;
    for (int attempt = 0; attempt < 2; attempt++) {
        switch (args->dtype) {
#define X(DT)                                                                        \
        case DT: e = cudaLaunchKernelEx(&cfg, small_kernel<DT>, *args); break;
            MPCCL_ALL_TYPES(X)
#undef X
        default: return mpccl_fail(MPCCL_ERR_INTERNAL, "small engine launch with datatype %d", args->dtype);
        }
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaErrorNotSupported || cfg.numAttrs == 0) break;
        (void)cudaGetLastError(); /* a driver without overlapped launches: a plain one */
        cfg.numAttrs = 0;
    }
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
