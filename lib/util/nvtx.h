/* NVTX ranges around API calls, for Nsight Systems and other NVTX tools: domain
 * "NCCL", each range's message starts with the function's name as NCCL names its
 * ranges ("ncclAllReduce(): commHash 0x.., count .., datatype .., op ..").
 * MPCCL_NVTX=0 (or NCCL_NVTX_DISABLE=1) turns them off.  Builds without CUDA
 * compile them away.  With no tool attached a range costs a load and a branch:
 * the message is formatted only while a tool is attached (nvtx.c). */
#ifndef MPCCL_NVTX_H
#define MPCCL_NVTX_H

#if __has_include("build_config.h")
#include "build_config.h"
#endif

#ifdef MPCCL_HAVE_CUDA

/* 0: not decided yet; 1: off (MPCCL_NVTX=0, or no tool attached); 2: on. */
extern int mpccl_nvtx_state;
/* Decides the state once (MPCCL_NVTX, then whether NVTX loaded a tool). */
int mpccl_nvtx_decide(void);
/* Pushes a range with message printf(fmt, ...) in the "NCCL" domain; returns 1. */
int mpccl_nvtx_push(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void mpccl_nvtx_pop(void);

static inline int mpccl_nvtx_active(void)
{
    int s = __atomic_load_n(&mpccl_nvtx_state, __ATOMIC_RELAXED);
    if (__builtin_expect(s == 0, 0)) s = mpccl_nvtx_decide();
    return s == 2;
}

/* The cleanup of a range variable: pops what was pushed. */
static inline void mpccl_nvtx_end(const int *pushed)
{
    if (__builtin_expect(*pushed, 0)) mpccl_nvtx_pop();
}

#define MPCCL_NVTX_CAT2(a, b) a##b
#define MPCCL_NVTX_CAT(a, b) MPCCL_NVTX_CAT2(a, b)
/* A range from here to the end of the enclosing block, pushed when a tool is
 * attached and cond holds (cond and the message arguments are evaluated only
 * then).  A declaration: put it first in a function body. */
#define MPCCL_NVTX_RANGE_IF(cond, ...)                                                               \
    const int MPCCL_NVTX_CAT(mpccl_nvtx_range_, __LINE__) __attribute__((cleanup(mpccl_nvtx_end))) = \
        (__builtin_expect(mpccl_nvtx_active(), 0) && (cond)) ? mpccl_nvtx_push(__VA_ARGS__) : 0
#define MPCCL_NVTX_RANGE(...) MPCCL_NVTX_RANGE_IF(1, __VA_ARGS__)

#else /* no CUDA: nothing */

#define MPCCL_NVTX_RANGE_IF(cond, ...) ((void)0)
#define MPCCL_NVTX_RANGE(...) MPCCL_NVTX_RANGE_IF(1, __VA_ARGS__)

#endif
#endif
