// A timeline of one engine launch, for finding where a small call's time
// goes (doc/GPU_DESIGN.md, "Where a small call's time goes").  Compiled in
// only with -DMPCCL_ENGINE_TRACE (e.g. make NVCC="nvcc -DMPCCL_ENGINE_TRACE");
// otherwise every call below is empty and costs nothing.
//
// CTA 0's thread 0 stamps %globaltimer at each event; at the end of launches
// 50, 147, 244 and 341 of each plan it prints
//     TRACE rank R epoch E gap G: code/arg@ns ...
// ns counting from the kernel's start, gap the ns since the previous traced
// launch of this process ended.  Codes: 0 start, 1 action chosen (arg = kind
// << 8 | step), 4 its data moved, 3 posted (arg = step), 2 nothing left,
// 5 end (after the launch is counted for the plan's epoch); in the first two
// passes of each selection only, 6 steps admitted (arg = window entries), 7
// a step's dependencies met (arg = step), 8 a message's setup begun and 9 its
// sequence counter read (arg = step).
#ifndef MPCCL_KERNELS_ENGINE_TRACE_CUH
#define MPCCL_KERNELS_ENGINE_TRACE_CUH

enum {
    TRACE_START = 0, TRACE_ACTION = 1, TRACE_EXIT = 2, TRACE_POSTED = 3, TRACE_MOVED = 4, TRACE_END = 5,
    TRACE_ADMIT = 6, TRACE_DEPS = 7, TRACE_SETUP = 8, TRACE_SEQ = 9
};

#ifdef MPCCL_ENGINE_TRACE
#include <stdio.h>

static __device__ unsigned long long engine_trace_prev_end;

struct engine_trace {
    enum { MAX = 48 };
    unsigned long long t0;
    uint32_t n;
    uint32_t pass; /* passes of the current selection */
    unsigned long long ev[MAX]; // code << 56 | arg << 40 | ns

    __device__ static unsigned long long now()
    {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        return t;
    }
    __device__ void begin()
    {
        t0 = now();
        n = 0;
    }
    __device__ void select_begin() { pass = 0; }
    __device__ void select_pass() { pass++; }
    // a mark of the first two passes of a selection only (they would flood the buffer)
    __device__ void mark_early(uint32_t code, uint32_t arg)
    {
        if (pass < 2) mark(code, arg);
    }
    __device__ void mark(uint32_t code, uint32_t arg)
    {
        if (blockIdx.x != 0 || n >= MAX) return;
        ev[n++] = ((unsigned long long)code << 56) | ((unsigned long long)(arg & 0xffffu) << 40) |
                  ((now() - t0) & 0xffffffffffull);
    }
    __device__ void end(int rank, uint32_t epoch)
    {
        if (blockIdx.x != 0) return;
        mark(TRACE_END, 0);
        unsigned long long prev = engine_trace_prev_end;
        engine_trace_prev_end = t0 + (ev[n - 1] & 0xffffffffffull);
        if (epoch % 97u != 50u || epoch >= 400u) return;
        printf("TRACE rank %d epoch %u gap %lld:", rank, epoch, (long long)(t0 - prev));
        for (uint32_t i = 0; i < n; i++)
            printf(" %u/%u@%llu", (unsigned)(ev[i] >> 56), (unsigned)((ev[i] >> 40) & 0xffffu),
                   ev[i] & 0xffffffffffull);
        printf("\n");
    }
};
#else
struct engine_trace {
    __device__ void begin() {}
    __device__ void mark(uint32_t, uint32_t) {}
    __device__ void select_begin() {}
    __device__ void select_pass() {}
    __device__ void mark_early(uint32_t, uint32_t) {}
    __device__ void end(int, uint32_t) {}
};
#endif

#endif
