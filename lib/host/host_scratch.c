/* Scratch memory kept between host communicators' calls (host_scratch.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "host/host_scratch.h"

#define SCRATCH_ALIGN 256 /* whole cache lines, vector loads */
#define SCRATCH_KEPT 4    /* idle blocks at most: a call needs one or two */

struct mpccl_scratch_pool {
    pthread_mutex_t lock; /* calls of a communicator may run on an async thread */
    size_t keep_bytes, idle_bytes;
    int nidle;
    void *idle[SCRATCH_KEPT];
    size_t size[SCRATCH_KEPT];
};

mpccl_scratch_pool_t *mpccl_scratch_pool_new(size_t keep_bytes)
{
    mpccl_scratch_pool_t *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->keep_bytes = keep_bytes;
    return p;
}

void mpccl_scratch_pool_free(mpccl_scratch_pool_t *p)
{
    if (!p) return;
    for (int i = 0; i < p->nidle; i++) free(p->idle[i]);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static void drop(mpccl_scratch_pool_t *p, int i)
{
    p->idle_bytes -= p->size[i];
    p->nidle--;
    p->idle[i] = p->idle[p->nidle];
    p->size[i] = p->size[p->nidle];
}

void *mpccl_scratch_get(mpccl_scratch_pool_t *p, size_t bytes, size_t *got)
{
    if (bytes > SIZE_MAX - SCRATCH_ALIGN) return NULL;
    size_t want = bytes ? (bytes + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN : SCRATCH_ALIGN;
    if (p) {
        pthread_mutex_lock(&p->lock);
        int best = -1;
        for (int i = 0; i < p->nidle; i++)
            if (p->size[i] >= want && (best < 0 || p->size[i] < p->size[best])) best = i;
        if (best >= 0) {
            void *b = p->idle[best];
            *got = p->size[best];
            drop(p, best);
            pthread_mutex_unlock(&p->lock);
            return b;
        }
        pthread_mutex_unlock(&p->lock);
    }
    void *b = NULL;
    if (posix_memalign(&b, SCRATCH_ALIGN, want)) return NULL;
    *got = want;
    return b;
}

void mpccl_scratch_put(mpccl_scratch_pool_t *p, void *buf, size_t got)
{
    if (!buf) return;
    if (!p || got > p->keep_bytes) {
        free(buf);
        return;
    }
    pthread_mutex_lock(&p->lock);
    /* room for it: smaller idle blocks go first (a larger one serves them too) */
    while (p->nidle > 0 && (p->nidle == SCRATCH_KEPT || p->idle_bytes + got > p->keep_bytes)) {
        int small = 0;
        for (int i = 1; i < p->nidle; i++)
            if (p->size[i] < p->size[small]) small = i;
        if (p->size[small] > got) break;
        void *old = p->idle[small];
        drop(p, small);
        free(old);
    }
    if (p->nidle < SCRATCH_KEPT && p->idle_bytes + got <= p->keep_bytes) {
        p->idle[p->nidle] = buf;
        p->size[p->nidle] = got;
        p->nidle++;
        p->idle_bytes += got;
        buf = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    free(buf);
}

size_t mpccl_scratch_idle_bytes(mpccl_scratch_pool_t *p)
{
    if (!p) return 0;
    pthread_mutex_lock(&p->lock);
    size_t n = p->idle_bytes;
    pthread_mutex_unlock(&p->lock);
    return n;
}
