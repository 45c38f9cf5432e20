/* Scratch memory the host communicators of a process keep between their
 * calls (host_executor.c holds one pool for all of them).  The schedule
 * engine (host_exec.c) takes a call's scratch here and gives it back when the
 * call is done.  Allocating it per call cost large calls most of their time:
 * glibc maps a fresh region for it, every page faults on first touch, and the
 * free unmaps it again (a 2-rank 16 MB host allreduce: 12.2 ms per call, 4.4
 * with the memory kept). */
#ifndef MPCCL_HOST_SCRATCH_H
#define MPCCL_HOST_SCRATCH_H

#include <stddef.h>

typedef struct mpccl_scratch_pool mpccl_scratch_pool_t;

/* A pool keeping at most keep_bytes of idle scratch (0: keeps none, every
 * block is freed when it comes back).  NULL: out of memory. */
mpccl_scratch_pool_t *mpccl_scratch_pool_new(size_t keep_bytes);
/* Frees the idle blocks and the pool (NULL: nothing). */
void mpccl_scratch_pool_free(mpccl_scratch_pool_t *p);
/* At least bytes (at least 1), 256-byte aligned: the smallest idle block that
 * fits, or a new one.  *got is its size, for mpccl_scratch_put.  p may be NULL
 * (a plain allocation).  NULL: out of memory. */
void *mpccl_scratch_get(mpccl_scratch_pool_t *p, size_t bytes, size_t *got);
/* Gives buf (of got bytes, from mpccl_scratch_get) back: kept while the idle
 * blocks stay within keep_bytes (smaller idle blocks make room for a larger
 * one), else freed.  NULL buf: nothing. */
void mpccl_scratch_put(mpccl_scratch_pool_t *p, void *buf, size_t got);
/* Idle bytes kept now (tests). */
size_t mpccl_scratch_idle_bytes(mpccl_scratch_pool_t *p);

#endif
