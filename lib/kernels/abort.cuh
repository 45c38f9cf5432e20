// How every wait loop of every kernel gives up: the communicator's abort word
// (set by ncclCommAbort / ncclCommRevoke / mpccl_gpu_comm_stop, host side in
// lib/gpu/gpu_abort.c) and MPCCL_OP_TIMEOUT.  The policy lives here only.
//
// Fast path: a wait whose flag is already there never enters its loop body,
// so it costs nothing.  Inside a loop, mpccl_abort_poll counts spins and every
// 16 reads a shared-memory word (sticky "this CTA gave up"); only every
// MPCCL_ABORT_SPINS spins does it read the mapped abort word (~1 us over PCIe)
// and %globaltimer.  Once a CTA gave up, every later wait of it returns within
// 16 spins (the data is garbage: the communicator is dead), so the launch runs
// through its remaining steps without waiting and exits within milliseconds.
// Where garbage could be a pointer (the window kernels' exchanged buffers),
// the kernel checks mpccl_aborted() after a barrier and skips its work.
//
// Usage: mpccl_abort_begin(arg) by thread 0 before the kernel's first
// __syncthreads; in a wait loop
//     mpccl_abort_wait w{};
//     while (!arrived) if (mpccl_abort_poll(arg, w, why)) break;
// The timeout counts from the wait's first slow check, so a long launch that
// keeps making progress never times out.
#ifndef MPCCL_KERNELS_ABORT_CUH
#define MPCCL_KERNELS_ABORT_CUH

#include <stdint.h>
#include "kernels/abort.h"

// ~1 us of PCIe per 1024 spins of a loop that waits anyway; a launch queued
// behind a stopped one exits after one such period (~0.5-1 ms).
#define MPCCL_ABORT_SPINS 1024u

// Per CTA: nonzero once it gave up.
static __shared__ uint32_t mpccl_abort_seen;
// (everything here is static: each .cu gets its own copy, no link clashes)

// Per wait loop, in registers.
struct mpccl_abort_wait {
    uint32_t spins;
    unsigned long long deadline; // ns of %globaltimer; 0: not started
};

// What a wait was for: recorded when it times out, and where a wait that
// lasts is (the wait_* fields of the abort word).
struct mpccl_abort_why {
    int32_t op, sub, peer, dtype;
    uint64_t count;
    uint32_t want;
    const volatile uint32_t *flag; // the peer's flag it polls, or NULL
};

__device__ __forceinline__ void mpccl_abort_begin()
{
    mpccl_abort_seen = 0;
}

__device__ __forceinline__ bool mpccl_aborted() { return *(volatile uint32_t *)&mpccl_abort_seen != 0; }

__device__ __forceinline__ unsigned long long mpccl_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ uint32_t mpccl_abort_ld(const volatile uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The slow part: the mapped word, then the clock.  Arguments by value (a
// reference into the kernel's parameters or the loop's registers would push
// them to local memory): returns MPCCL_ABORT_GIVE_UP, or the wait's deadline.
#define MPCCL_ABORT_GIVE_UP (~0ull)
static __device__ __noinline__ unsigned long long mpccl_abort_slow(mpccl_gpu_abort_t *w, uint32_t seq,
                                                            unsigned long long deadline, mpccl_abort_why why)
{
    if (w == nullptr) return deadline;
    if (mpccl_abort_ld(&w->stop)) {
        *(volatile uint32_t *)&mpccl_abort_seen = 1;
        return MPCCL_ABORT_GIVE_UP;
    }
    const unsigned long long now = mpccl_globaltimer();
    // Where this wait is, for hang reports: posted stores to mapped memory,
    // beside the read above (the fast path never gets here).
    w->wait_seq = seq;
    w->wait_op = why.op;
    w->wait_sub = why.sub;
    w->wait_peer = why.peer;
    w->wait_want = why.want;
    w->wait_seen = why.flag ? *why.flag : 0u;
    *(volatile unsigned long long *)&w->wait_stamp = now;
    const unsigned long long timeout = *(volatile unsigned long long *)&w->timeout_ns;
    if (timeout == 0) return deadline;
    if (deadline == 0) return now + timeout;
    if (now < deadline) return deadline;
    // Timed out: the first kernel of the communicator records why, then all stop.
    if (atomicCAS_system((unsigned int *)&w->hung, 0u, 1u) == 0u) {
        w->op = why.op;
        w->sub = why.sub;
        w->peer = why.peer;
        w->seq = seq;
        w->dtype = why.dtype;
        w->count = why.count;
        w->want = why.want;
        w->seen = why.flag ? *why.flag : 0u;
        __threadfence_system();
        w->hung = 2u;
    }
    __threadfence_system();
    w->stop = 1u;
    *(volatile uint32_t *)&mpccl_abort_seen = 1;
    return MPCCL_ABORT_GIVE_UP;
}

// In a wait loop's body: true when the loop must give up.  weight: spins one
// pass counts for (loops that sleep ~0.5-1 us per pass use 8).
// The sticky flag is read every 16 spins, not every spin: a wait that follows
// a CTA's give-up still ends within 16 passes, and the loop that waits for a
// flag about to land stays one load long.
__device__ __forceinline__ bool mpccl_abort_poll(const mpccl_abort_arg_t &a, mpccl_abort_wait &st,
                                                 const mpccl_abort_why &why, uint32_t weight = 1)
{
    if ((st.spins += weight) < MPCCL_ABORT_SPINS) return (st.spins & 15u) < weight && mpccl_aborted();
    st.spins = 0;
    if (mpccl_aborted()) return true;
    const unsigned long long r = mpccl_abort_slow(a.word, a.seq, st.deadline, why);
    if (r == MPCCL_ABORT_GIVE_UP) return true;
    st.deadline = r;
    return false;
}

#endif
