/* test_proxy's staging allocator: malloc'd blocks standing in for pinned
 * host memory (host pointer = device pointer) and for the GPU-direct slot
 * block, with counts of what is outstanding and of the bind/flush calls. */
#ifndef MPCCL_PROXY_TEST_HEAP_H
#define MPCCL_PROXY_TEST_HEAP_H

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/proxy.h"
#include "util/status.h"

/* ---- staging from malloc, with a count of what is outstanding ---- */

typedef struct cpu_heap {
    pthread_mutex_t mu;
    int outstanding;
    size_t bytes;
    void *blocks[16];
    size_t sizes[16];
    void *slot_block; /* the CTAs' slots (alloc_slots), one of blocks[] */
    size_t slot_block_bytes;
    int binds, flushes; /* calls of bind and flush (proxy thread) */
} cpu_heap_t;

static inline mpccl_status_t cpu_alloc(void *ctx, size_t bytes, void **host, void **dev)
{
    cpu_heap_t *h = ctx;
    void *p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "test allocator: %zu bytes", bytes);
    memset(p, 0xcd, bytes); /* the proxy must clear its flags itself */
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < 16; i++)
        if (h->blocks[i] == NULL) {
            h->blocks[i] = p;
            h->sizes[i] = bytes;
            break;
        }
    h->outstanding++;
    h->bytes = bytes;
    pthread_mutex_unlock(&h->mu);
    *host = *dev = p;
    return MPCCL_OK;
}

static inline void cpu_free(void *ctx, void *host)
{
    cpu_heap_t *h = ctx;
    pthread_mutex_lock(&h->mu);
    int found = 0;
    for (int i = 0; i < 16; i++)
        if (h->blocks[i] == host) {
            h->blocks[i] = NULL;
            found = 1;
        }
    h->outstanding--;
    pthread_mutex_unlock(&h->mu);
    ck_assert_msg(found, "proxy freed %p, which it never allocated", host);
    free(host);
}

/* The GPU-direct callbacks, with host memory standing in for the device's. */
static inline mpccl_status_t cpu_alloc_slots(void *ctx, size_t bytes, void **dev)
{
    cpu_heap_t *h = ctx;
    void *host = NULL;
    MPCCL_CHECK(cpu_alloc(ctx, bytes, &host, dev));
    h->slot_block = host;
    h->slot_block_bytes = bytes;
    return MPCCL_OK;
}

static inline void cpu_free_slots(void *ctx, void *dev)
{
    cpu_heap_t *h = ctx;
    ck_assert_ptr_eq(dev, h->slot_block);
    cpu_free(ctx, dev);
}

static inline void cpu_bind(void *ctx) { __atomic_add_fetch(&((cpu_heap_t *)ctx)->binds, 1, __ATOMIC_RELAXED); }
static inline void cpu_flush(void *ctx) { __atomic_add_fetch(&((cpu_heap_t *)ctx)->flushes, 1, __ATOMIC_RELAXED); }

static inline mpccl_proxy_alloc_t cpu_allocator(cpu_heap_t *h, int split)
{
    mpccl_proxy_alloc_t a = {.alloc = cpu_alloc, .free = cpu_free, .ctx = h};
    if (split) {
        a.alloc_slots = cpu_alloc_slots;
        a.free_slots = cpu_free_slots;
        a.bind = cpu_bind;
        a.flush = cpu_flush;
    }
    return a;
}

/* Whether [p, p+n) lies inside one block of h. */
static inline int in_heap(cpu_heap_t *h, const void *p, size_t n)
{
    const char *c = p;
    for (int i = 0; i < 16; i++) {
        const char *b = h->blocks[i];
        if (b && c >= b && c + n <= b + h->sizes[i]) return 1;
    }
    return 0;
}

#endif
