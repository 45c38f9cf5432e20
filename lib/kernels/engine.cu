/* The device engine: one launch runs one rank's device plan, every CTA on its
 * partition of every step (doc/GPU_DESIGN.md, "One kernel per call").
 *
 * A CTA mirrors the host engine (lib/host/host_exec.c): it keeps a window of its
 * first plan->window unfinished steps, and makes non-blocking progress on any
 * step of the window whose dependencies are met --
 * a compute step runs whole, a SEND moves one piece when a slot is free, a RECV
 * consumes one piece when it has arrived.  Thread 0 picks the next action and
 * keeps the books, all threads move the data.
 *
 * Dependencies: `local` ones are this CTA's own progress (a step admitted to
 * the window and no longer in it is done); the others wait for the
 * step's completion counter to reach (epoch + 1) * G, epoch being the plan's
 * launch count when the kernel started -- counters only grow, so a captured
 * graph replays without resets.  All counter comparisons are modulo 2^32.
 *
 * Messages: CTA g of the sender talks to CTA g of the receiver only; pieces of
 * at most slot_bytes go through the peer's mailbox slots with the ready / ack
 * protocol of devplan.h, numbered by the persistent per-(peer, CTA) counters
 * comm->tx_seq / rx_seq.  Messages to (from) one peer are handled strictly in
 * step order, which is message order on both sides. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "nccl.h" /* before extern "C": it includes C++ CUDA headers */
extern "C" {
#include "algo/algo_schedule.h"
#include "util/status.h"
#include "kernels/plan.h"
}
#include "kernels/abort.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/engine.h"
#include "kernels/engine_trace.cuh"
#include "kernels/proxy_ll.cuh"

namespace {

using namespace mpccl_ew;

/* The partition both ends of a message agree on (devplan.h). */
__device__ __forceinline__ void partition(uint64_t count, uint32_t es, uint32_t nctas, uint32_t min_bytes, uint32_t g,
                                          uint64_t &b, uint64_t &e)
{
    mpccl_dev_partition(count, es, nctas, min_bytes, g, &b, &e);
}

__device__ __forceinline__ int reached(uint32_t value, uint32_t target) { return (int32_t)(value - target) >= 0; }

__device__ __forceinline__ uint32_t vload(const volatile uint32_t *p) { return *p; }

enum { ACT_EXIT = -1 };

/* One step in progress.  The window holds the first W unfinished steps in step
 * order (every unfinished step before `next` is in it): a step that cannot move
 * (a send waiting for its receiver) does not keep later steps out, which a
 * window anchored at the first unfinished step would -- and with it the receive
 * a peer's send waits for. */
struct win_entry {
    mpccl_dev_step_t st;
    uint64_t prog;  /* SEND/RECV: elements of my partition moved */
    uint32_t idx;   /* step index */
    uint32_t depk;  /* dependencies found met so far (they stay met) */
    uint32_t wseq;  /* SEND/RECV: the whole transfer in flight (when whole_wait) */
    uint8_t done, ready;
    uint8_t shared; /* a dependency met through another step's counter (other CTAs' writes) */
    uint8_t whole_wait; /* a whole transfer of this step is with the proxy */
};

struct cta_state {
    win_entry w[MPCCL_ENGINE_MAX_WINDOW];
    uint32_t na;    /* entries in w */
    uint32_t next;  /* first step not yet admitted */
    uint32_t epoch;
    /* the action all threads run next */
    int32_t act;    /* entry of w, or ACT_EXIT */
    uint32_t kind;  /* MPCCL_STEP_* */
    char *dst;
    const char *src0, *src1;
    uint64_t n;     /* elements */
    uint32_t piece; /* SEND/RECV: piece number */
    uint32_t slot;  /* SEND/RECV: slot index [g][slot] */
    uint32_t ll;    /* SEND/RECV: the piece goes as LL lines (devplan.h) */
    uint32_t bad;   /* an LL line with a flag other than the piece's */
    const volatile uint64_t *landing; /* RECV of an LL piece read as it lands: the proxy's word
                                       * for it (NULL: the proxy raised it, every line is there) */
    int32_t peer;
    engine_trace tr; /* empty unless built with MPCCL_ENGINE_TRACE */
};

struct engine {
    const mpccl_engine_args_t &a;
    const mpccl_dev_comm_t *comm;
    const mpccl_dev_plan_t *plan;
    uint32_t G, g, W, N, es;
    cta_state &sh;
    uint32_t whole_bytes; /* comm->proxy_whole_bytes, read once by thread 0 (the only reader) */

    __device__ char *bufp(uint32_t buf, uint64_t off) const { return (char *)a.buf[buf] + off * es; }

    /* Drops finished entries (keeping step order) and admits new steps. */
    __device__ void refill()
    {
        uint32_t k = 0;
        for (uint32_t j = 0; j < sh.na; j++)
            if (!sh.w[j].done) {
                if (k != j) sh.w[k] = sh.w[j];
                k++;
            }
        for (; k < W && sh.next < N; k++) {
            win_entry &e = sh.w[k];
            e.st = plan->steps[sh.next];
            e.idx = sh.next++;
            e.prog = 0;
            e.depk = 0;
            e.whole_wait = 0;
            e.done = 0;
            e.ready = 0;
            e.shared = 0;
        }
        sh.na = k;
    }

    /* Thread 0: marks entry k's step done by this CTA (after the data moved). */
    __device__ void finish(uint32_t k)
    {
        if (sh.w[k].st.flags & MPCCL_DEV_STEP_COUNTED) { /* another CTA may wait for it */
            __threadfence();
            atomicAdd(&plan->step_done[sh.w[k].idx], 1u);
        }
        sh.w[k].done = 1;
    }

    /* This CTA finished step d (d < next): it is not among the unfinished. */
    __device__ bool done_here(uint32_t d) const
    {
        for (uint32_t j = 0; j < sh.na; j++)
            if (sh.w[j].idx == d) return sh.w[j].done;
        return true;
    }

    __device__ bool deps_met(win_entry &e)
    {
        uint32_t target = (sh.epoch + 1u) * G;
        for (; e.depk < e.st.ndeps; e.depk++) {
            mpccl_dev_dep_t d = plan->deps[e.st.dep_first + e.depk];
            if (d.local) {
                if (!done_here(d.step)) return false;
            } else {
                if (!reached(vload(&plan->step_done[d.step]), target)) return false;
                e.shared = 1;
            }
        }
        return true;
    }

    /* No earlier unfinished SEND (RECV) to the same peer: message order. */
    __device__ bool first_for_peer(uint32_t k) const
    {
        const win_entry &e = sh.w[k];
        for (uint32_t j = 0; j < k; j++) {
            const win_entry &o = sh.w[j];
            if (!o.done && o.st.kind == e.st.kind && o.st.peer == e.st.peer) return false;
        }
        return true;
    }

    __device__ __noinline__ void bad_link(uint32_t i, int peer)
    {
        printf("mpccl engine: rank %d step %u talks to peer %d, which has no link\n", comm->rank, i, peer);
        __trap();
    }

    /* Stops this communicator's kernels (its survivors may shrink) rather
     * than trap: a trap poisons the CUDA context of the whole process. */
    __device__ void stop_comm() const
    {
        if (a.ab.word) {
            a.ab.word->stop = 1u;
            __threadfence_system();
        }
        *(volatile uint32_t *)&mpccl_abort_seen = 1;
    }

    /* Thread 0: the next piece of SEND/RECV entry k if it goes whole
     * (devplan.h, whole messages): hands it to the proxy, or finds it done.
     * -1: not a whole piece; 0: waiting for the proxy; 1: moved. */
    __device__ int try_whole(uint32_t k, uint64_t pb, uint64_t pe)
    {
        uint32_t wb = whole_bytes;
        if (!wb) return -1;
        win_entry &e = sh.w[k];
        const mpccl_dev_link_t *L = &comm->links[e.st.peer];
        bool send = e.st.kind == MPCCL_STEP_SEND;
        volatile mpccl_dev_whole_t *d = send ? L->tx_whole : L->rx_whole;
        if (!d) return -1;
        int whole;
        uint64_t n = mpccl_dev_proxy_piece(pe - pb - e.prog, es, comm->slot_bytes, wb, comm->proxy_eager_bytes, &whole);
        if (!whole) return -1;
        const volatile uint32_t *done = (send ? L->tx_whole_done : L->rx_whole_done) + g;
        if (!e.whole_wait) {
            uint64_t off = pb + e.prog;
            char *buf = send ? bufp(e.st.src0_buf, e.st.src0_off + off) : bufp(e.st.dst_buf, e.st.dst_off + off);
            uint32_t seq = mpccl_acquire_load(done) + 1u; /* the channel's one transfer at a time */
            d[g].addr = (uint64_t)(uintptr_t)buf;
            d[g].bytes = (uint32_t)(n * es);
            __threadfence_system(); /* release: the data (other CTAs' too, met above) and the address */
            d[g].seq = seq;
            e.wseq = seq;
            e.whole_wait = 1;
            sh.tr.mark(TRACE_POSTED, e.idx);
            return 1;
        }
        /* acquire: what the transport wrote into the destination, before any
         * thread reads it (after the barrier) */
        if (mpccl_acquire_load(done) != e.wseq) return 0;
        e.whole_wait = 0;
        e.prog += n;
        if (e.prog == pe - pb) finish(k);
        return 1;
    }

    /* Lines of the LL piece the rx slot of piece p from peer holds (0: other data). */
    __device__ uint32_t *rx_clean_word(int peer, uint32_t p) const
    {
        return &comm->rx_clean[((size_t)peer * G + g) * comm->nslots + p % comm->nslots];
    }

    /* Thread 0: sets up one piece of SEND/RECV entry k if possible (a piece
     * through a slot: mpccl_dev_proxy_piece's cut where the link is PROXY). */
    __device__ bool try_message(win_entry &e, uint64_t pb, uint64_t pe)
    {
        const mpccl_dev_link_t *L = &comm->links[e.st.peer];
        uint32_t K = comm->nslots;
        uint64_t n = mpccl_dev_slot_piece(pe - pb - e.prog, es, comm->slot_bytes,
                                          L->tx_word ? comm->proxy_eager_bytes : 0u); /* PROXY links only */
        sh.tr.mark_early(TRACE_SETUP, e.idx);
        uint32_t *seq = (e.st.kind == MPCCL_STEP_SEND ? comm->tx_seq : comm->rx_seq) + (size_t)e.st.peer * G + g;
        uint32_t p = *seq, slot = g * K + p % K;
        sh.tr.mark_early(TRACE_SEQ, e.idx);
        /* Small pieces to another node go as LL lines (both ends decide alike) */
        uint32_t ll = L->tx_word && n * es <= comm->proxy_ll_bytes;
        if (e.st.kind == MPCCL_STEP_SEND) {
            if (!L->tx_slots) bad_link(e.idx, e.st.peer);
            /* The slot is free: known from an earlier read, else read the ack. */
            uint32_t *acked = comm->tx_acked + (size_t)e.st.peer * G + g;
            if (!reached(*acked, p + 1u - K)) {
                uint32_t ack = mpccl_acquire_load(&L->tx_ack[g]);
                if (!reached(ack, p + 1u - K)) return false;
                *acked = ack;
            }
            sh.dst = L->tx_slots + (size_t)slot * comm->slot_bytes;
            sh.src0 = bufp(e.st.src0_buf, e.st.src0_off + pb + e.prog);
        } else {
            if (!L->rx_slots) bad_link(e.idx, e.st.peer);
            uint32_t len, want = ll ? 16u * MPCCL_PROXY_LL_LINES(n * es) : (uint32_t)(n * es);
            sh.landing = nullptr;
            if (L->rx_word) { /* PROXY: ready and length in one load over PCIe */
                const char *lines = L->rx_slots + (size_t)slot * comm->slot_bytes;
                /* An LL piece in a slot that held only LL lines: its last line
                 * is the poll (read beside the proxy's word, in flight together) */
                bool landed = false;
                if (ll && comm->rx_clean && *rx_clean_word(e.st.peer, p) >= want / 16u)
                    landed = mpccl_ll_line_is(lines + want - 16u, MPCCL_PROXY_LL_FLAG(p));
                uint64_t v = mpccl_acquire_load64(&L->rx_word[slot]);
                if ((uint32_t)v == p + 1u) {
                    len = (uint32_t)(v >> 32);
                } else if (landed) {
                    len = want;
                    sh.landing = &L->rx_word[slot];
                } else {
                    return false;
                }
            } else {
                if (mpccl_acquire_load(&L->rx_ready[slot]) != p + 1u) return false;
                len = vload(&L->rx_len[slot]);
            }
            if (len != want) {
                /* A peer whose communicator was aborted skips its remaining
                 * sends, so what arrives no longer matches: stop. */
                printf("mpccl engine: rank %d step %u: piece %u from peer %d has %u bytes, expected %u "
                       "(the peer aborted, or the ranks' schedules disagree): stopping the communicator\n",
                       comm->rank, e.idx, p, e.st.peer, len, want);
                stop_comm();
                return false;
            }
            sh.src0 = L->rx_slots + (size_t)slot * comm->slot_bytes;
            sh.dst = bufp(e.st.dst_buf, e.st.dst_off + pb + e.prog);
        }
        sh.n = n;
        sh.piece = p;
        sh.slot = slot;
        sh.ll = ll;
        sh.bad = 0;
        sh.peer = e.st.peer;
        return true;
    }

    /* Thread 0: why this CTA waits (the first message step not done). */
    __device__ mpccl_abort_why stuck() const
    {
        for (uint32_t k = 0; k < sh.na; k++) {
            const win_entry &e = sh.w[k];
            if (!e.done && (e.st.kind == MPCCL_STEP_SEND || e.st.kind == MPCCL_STEP_RECV))
                return mpccl_abort_why{MPCCL_ABORT_OP_ENGINE, (int32_t)e.st.kind, e.st.peer, a.dtype, e.st.count,
                                       0u, nullptr};
        }
        return mpccl_abort_why{MPCCL_ABORT_OP_ENGINE, 0, -1, a.dtype, 0, 0u, nullptr};
    }

    /* Thread 0: picks the next action (sleeping while nothing can move). */
    __device__ void select()
    {
        unsigned backoff = 0;
        mpccl_abort_wait w{};
        sh.tr.select_begin();
        for (;;) {
            bool moved = false;
            refill();
            sh.tr.mark_early(TRACE_ADMIT, sh.na);
            if (sh.na == 0) {
                sh.tr.mark(TRACE_EXIT, 0);
                sh.act = ACT_EXIT;
                return;
            }
            for (uint32_t k = 0; k < sh.na; k++) {
                win_entry &e = sh.w[k];
                if (e.done) continue;
                const mpccl_dev_step_t &st = e.st;
                uint64_t pb, pe;
                partition(st.count, es, G, comm->cta_min_bytes, g, pb, pe);
                /* Nothing of this step here: done at once, dependencies or not.
                 * This CTA neither reads nor writes for it, and a CTA that has
                 * a part waits for them before it finishes, so the step's
                 * count still means "its dependencies were met".  Small calls
                 * live on CTA 0 alone, which thus never waits for idle CTAs to
                 * wake from their back-off and count a step they had no part
                 * in.  A NOP (a join) has no part anywhere: it waits. */
                if (st.kind != MPCCL_STEP_NOP && pb == pe) {
                    finish(k);
                    moved = true;
                    continue;
                }
                if (!e.ready) {
                    if (!deps_met(e)) continue;
                    e.ready = 1;
                    if (e.shared) __threadfence(); /* acquire: other CTAs' results of the dependencies */
                    sh.tr.mark_early(TRACE_DEPS, e.idx);
                }
                if (st.kind == MPCCL_STEP_NOP) {
                    finish(k);
                    moved = true;
                    continue;
                }
                sh.kind = st.kind;
                sh.ll = 0; /* try_message decides for messages */
                if (st.kind == MPCCL_STEP_SEND || st.kind == MPCCL_STEP_RECV) {
                    if (!first_for_peer(k)) continue;
                    int w = try_whole(k, pb, pe);
                    if (w > 0) {
                        moved = true;
                        continue;
                    }
                    if (w == 0 || !try_message(e, pb, pe)) continue;
                } else {
                    sh.dst = bufp(st.dst_buf, st.dst_off + pb);
                    sh.src0 = bufp(st.src0_buf, st.src0_off + pb);
                    sh.src1 = bufp(st.src1_buf, st.src1_off + pb);
                    sh.n = pe - pb;
                }
                sh.act = (int32_t)k;
                sh.tr.mark(TRACE_ACTION, (st.kind << 8) | e.idx);
                return;
            }
            sh.tr.select_pass();
            if (moved) {
                backoff = 0;
                continue;
            }
            /* nothing can move: aborted or timed out? */
            if (mpccl_abort_poll(a.ab, w, stuck(), 8)) {
                sh.act = ACT_EXIT;
                return;
            }
            /* At most 256 ns: a pass that polls a flag in host memory takes
             * 1.3 us already, and a longer sleep on top delayed seeing a piece
             * by half of it on average. */
            backoff = backoff ? (backoff < 256 ? backoff * 2 : 256) : 32;
            __nanosleep(backoff);
        }
    }

    /* Thread 0, after the data moved: publish the piece / finish the step. */
    __device__ void post()
    {
        uint32_t k = (uint32_t)sh.act;
        win_entry &e = sh.w[k];
        if (sh.kind != MPCCL_STEP_SEND && sh.kind != MPCCL_STEP_RECV) {
            finish(k);
            return;
        }
        const mpccl_dev_link_t *L = &comm->links[e.st.peer];
        if (sh.kind == MPCCL_STEP_SEND) {
            uint32_t bytes = (uint32_t)(sh.n * es);
            if (L->tx_word) { /* PROXY: one word; an LL piece needs no fence (its lines carry flags) */
                uint32_t hi = sh.ll ? (16u * MPCCL_PROXY_LL_LINES(bytes)) | MPCCL_PROXY_LL_BIT : bytes;
                if (!sh.ll) __threadfence_system(); /* release: the piece before its word */
                L->tx_word[sh.slot] = ((uint64_t)hi << 32) | (uint64_t)(sh.piece + 1u);
            } else {
                L->tx_len[sh.slot] = bytes;
                __threadfence_system(); /* release: the piece and its length before ready */
                L->tx_ready[sh.slot] = sh.piece + 1u;
            }
            comm->tx_seq[(size_t)e.st.peer * G + g] = sh.piece + 1u;
        } else {
            if (sh.bad) { /* the lines are not the piece's: schedules disagree (a peer aborted) */
                if (!mpccl_aborted())
                    printf("mpccl engine: rank %d step %u: piece %u from peer %d is not the LL piece expected: "
                           "stopping the communicator\n", comm->rank, e.idx, sh.piece, e.st.peer);
                stop_comm();
                return;
            }
            /* No fence before the ack: every thread's reads of the slot
             * returned (their values were stored to the destination) before
             * __syncthreads, so a refill cannot reach what was read.  The
             * fence cost 1.6 us on every piece (NCCL posts its receive
             * steps the same way, with a plain store). */
            L->rx_ack[g] = sh.piece + 1u;
            comm->rx_seq[(size_t)e.st.peer * G + g] = sh.piece + 1u;
            if (L->rx_word && comm->rx_clean) { /* what the slot holds now: LL lines, or other data */
                uint32_t *clean = rx_clean_word(e.st.peer, sh.piece);
                uint32_t lines = sh.ll ? MPCCL_PROXY_LL_LINES((uint32_t)(sh.n * es)) : 0u;
                *clean = sh.ll ? (*clean > lines ? *clean : lines) : 0u;
            }
        }
        e.prog += sh.n;
        uint64_t pb, pe;
        partition(e.st.count, es, G, comm->cta_min_bytes, g, pb, pe);
        if (e.prog == pe - pb) finish(k);
        sh.tr.mark(TRACE_POSTED, e.idx);
    }
};

/* Once the proxy raised the piece (landing NULL) every line is there; a
 * flag other than the piece's marks a piece that is not it.  A piece read as
 * it lands (landing: the proxy's word for it) may still have lines on their
 * way: each thread waits for its own, and a line still not the piece's once
 * the proxy's word says all of it arrived marks it bad. */
__device__ void ll_unpack(const mpccl_engine_args_t &a, char *dst, const char *lines, uint32_t bytes, uint32_t piece,
                          const volatile uint64_t *landing, int32_t peer, uint32_t *bad)
{
    const uint32_t flag = MPCCL_PROXY_LL_FLAG(piece);
    for (uint32_t i = threadIdx.x; i < MPCCL_PROXY_LL_LINES(bytes); i += blockDim.x) {
        uint32_t lo, f0, hi, f1;
        mpccl_abort_wait w{};
        bool whole = landing == nullptr; /* every line of the piece is known to be there */
        for (uint32_t spins = 1;; spins++) {
            mpccl_ll_load(lines + 16u * i, lo, f0, hi, f1);
            if (f0 == flag && f1 == flag) break;
            if (whole || mpccl_abort_poll(a.ab, w,
                                          mpccl_abort_why{MPCCL_ABORT_OP_ENGINE, MPCCL_STEP_RECV, peer, a.dtype,
                                                          bytes, flag, nullptr})) {
                *(volatile uint32_t *)bad = 1u;
                break;
            }
            /* now and then the proxy's word: once it shows the piece, one more read decides */
            if ((spins & 63u) == 0 && (uint32_t)mpccl_acquire_load64(landing) == piece + 1u) whole = true;
        }
        mpccl_ll_scatter((unsigned char *)dst, bytes, 8u * i, (uint64_t)lo | ((uint64_t)hi << 32));
    }
}

template <int DT> __device__ void run_action(const mpccl_engine_args_t &a, cta_state &sh)
{
    typedef typename ty<DT>::T T;
    T *d = (T *)sh.dst;
    const T *s0 = (const T *)sh.src0, *s1 = (const T *)sh.src1;
    if (sh.ll) {
        uint32_t bytes = (uint32_t)(sh.n * sizeof(T)), flag = MPCCL_PROXY_LL_FLAG(sh.piece);
        if (sh.kind == MPCCL_STEP_SEND) mpccl_ll_pack(sh.dst, sh.src0, bytes, flag);
        else ll_unpack(a, sh.dst, sh.src0, bytes, sh.piece, sh.landing, sh.peer, &sh.bad);
        return;
    }
    switch (sh.kind) {
    case MPCCL_STEP_SEND:
    case MPCCL_STEP_RECV:
    case MPCCL_STEP_COPY: copy_range<T>(d, s0, sh.n); break;
    case MPCCL_STEP_REDUCE: reduce_range<DT>(a.op, d, s0, s1, sh.n); break;
    case MPCCL_STEP_SCALE: unary_range<scaleop<DT> >(d, s0, ty<DT>::scalar(a.scalar), sh.n); break;
    case MPCCL_STEP_DIVIDE: unary_range<divop<DT> >(d, s0, ty<DT>::divisor(a.divisor), sh.n); break;
    default: break;
    }
}

template <int DT> __global__ void __launch_bounds__(MPCCL_ENGINE_THREADS) engine_kernel(mpccl_engine_args_t a)
{
    __shared__ cta_state sh;
    const mpccl_dev_plan_t *plan = a.plan;
    uint32_t W = plan->window;
    W = W < 1 ? 1 : W > MPCCL_ENGINE_MAX_WINDOW ? MPCCL_ENGINE_MAX_WINDOW : W;
    engine eng{a, a.comm, plan, gridDim.x, blockIdx.x, W, plan->nsteps, (uint32_t)sizeof(typename ty<DT>::T), sh, 0u};
    if (threadIdx.x == 0) {
        eng.whole_bytes = a.comm->proxy_whole_bytes;
        if (a.comm->nctas != gridDim.x) {
            printf("mpccl engine: launched with %u CTAs, the communicator has %u\n", gridDim.x, a.comm->nctas);
            __trap();
        }
        sh.tr.begin();
        sh.epoch = vload(plan->launches);
        sh.tr.mark(TRACE_START, 0);
        sh.na = 0;
        sh.next = 0;
        mpccl_abort_begin();
    }
    for (;;) {
        if (threadIdx.x == 0) eng.select();
        __syncthreads();
        if (sh.act == ACT_EXIT) break;
        run_action<DT>(a, sh);
        __syncthreads();
        if (threadIdx.x == 0) {
            sh.tr.mark(TRACE_MOVED, 0);
            eng.post();
        }
    }
    if (threadIdx.x == 0) {
        uint32_t G = gridDim.x, last = (sh.epoch + 1u) * G;
        __threadfence();
        /* Nothing for the proxy: it knows each launch's pieces from the host
         * (lib/proxy/proxy.h, mpccl_proxy_post_pieces). */
        if (atomicAdd(plan->ctas_finished, 1u) + 1u == last) atomicAdd(plan->launches, 1u);
        sh.tr.end(a.comm->rank, sh.epoch);
    }
}

/* Prescale: each CTA scales its partition of the vector. */
struct scalar_arg {
    unsigned char b[8];
};

/* sdev: a PreMulSum scalar of ncclScalarDevice residence, read when the kernel
 * runs (NCCL's semantics); NULL: the value in s. */
template <int DT> __global__ void __launch_bounds__(MPCCL_ENGINE_THREADS)
    scale_kernel(void *dst, const void *src, scalar_arg s, const unsigned char *sdev, uint64_t n)
{
    typedef typename ty<DT>::T T;
    uint64_t b, e;
    if (sdev)
        for (unsigned i = 0; i < sizeof(T); i++) s.b[i] = sdev[i];
    partition(n, sizeof(T), gridDim.x, 0, blockIdx.x, b, e);
    unary_range<scaleop<DT> >((T *)dst + b, (const T *)src + b, ty<DT>::scalar(s.b), e - b);
}

mpccl_status_t launched(const char *what, int dtype)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return MPCCL_OK;
    return mpccl_fail(MPCCL_ERR_CUDA, "launching the %s kernel (datatype %d) failed: %s", what, dtype,
                      cudaGetErrorString(e));
}

} // namespace

#define MPCCL_ALL_TYPES(X)                                                                                    \
    X(ncclInt8) X(ncclUint8) X(ncclInt32) X(ncclUint32) X(ncclInt64) X(ncclUint64) X(ncclFloat16)             \
    X(ncclFloat32) X(ncclFloat64) X(ncclBfloat16) X(ncclFloat8e4m3) X(ncclFloat8e5m2)

extern "C" mpccl_status_t mpccl_engine_launch(const mpccl_engine_args_t *args, uint32_t nctas, cudaStream_t stream)
{
    if (nctas < 1) return mpccl_fail(MPCCL_ERR_INTERNAL, "engine launch with %u CTAs", nctas);
    if ((unsigned)args->op >= MPCCL_NUM_OPS) return mpccl_fail(MPCCL_ERR_INTERNAL, "engine launch with op %d", args->op);
    switch (args->dtype) {
#define X(DT)                                                                        \
    case DT: engine_kernel<DT><<<nctas, MPCCL_ENGINE_THREADS, 0, stream>>>(*args); break;
        MPCCL_ALL_TYPES(X)
#undef X
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "engine launch with datatype %d", args->dtype);
    }
    return launched("engine", args->dtype);
}

extern "C" mpccl_status_t mpccl_engine_load(void)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaSuccess;
#define X(DT)                                                                        \
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, engine_kernel<DT>);         \
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, scale_kernel<DT>);
    MPCCL_ALL_TYPES(X)
#undef X
    if (e != cudaSuccess) return mpccl_fail(MPCCL_ERR_CUDA, "loading the engine kernels: %s", cudaGetErrorString(e));
    return MPCCL_OK;
}

extern "C" mpccl_status_t mpccl_gpu_scale_launch(int dtype, void *dst, const void *src, const void *scalar_elem,
                                                 uint64_t n, cudaStream_t stream)
{
    return mpccl_gpu_scale_launch_dev(dtype, dst, src, scalar_elem, NULL, n, stream);
}

extern "C" mpccl_status_t mpccl_gpu_scale_launch_dev(int dtype, void *dst, const void *src, const void *scalar_elem,
                                                     const void *scalar_dev, uint64_t n, cudaStream_t stream)
{
    size_t es = mpccl_dtype_size((ncclDataType_t)dtype);
    if (es == 0) return mpccl_fail(MPCCL_ERR_INTERNAL, "scale launch with datatype %d", dtype);
    if (n == 0) return MPCCL_OK;
    scalar_arg s;
    memset(&s, 0, sizeof(s));
    if (scalar_elem) memcpy(s.b, scalar_elem, es);
    /* About 256 KiB per CTA, at most 1024 CTAs. */
    uint64_t blocks = (n * es + (256u << 10) - 1) / (256u << 10);
    unsigned nb = (unsigned)(blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks);
    switch (dtype) {
#define X(DT)                                                                        \
    case DT: scale_kernel<DT><<<nb, MPCCL_ENGINE_THREADS, 0, stream>>>(dst, src, s, (const unsigned char *)scalar_dev, n); \
        break;
        MPCCL_ALL_TYPES(X)
#undef X
    default: return mpccl_fail(MPCCL_ERR_INTERNAL, "scale launch with datatype %d", dtype);
    }
    return launched("scale", dtype);
}
