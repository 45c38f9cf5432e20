/* In-process bootstrap (ncclCommInitAll, grouped init): the ranks are threads of
 * one process and exchange through a shared object under a mutex.  A
 * generation-counted barrier makes back-to-back collectives safe: a fast rank
 * entering the next one cannot be mistaken for a late arrival of the last. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/bootstrap.h"
#include "util/log.h"
#include "bootstrap/bootstrap_net.h"

struct mpccl_inproc_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nranks;
    int refs;          /* the creator's plus one per open bootstrap */
    int arrived;       /* in the current barrier */
    uint64_t gen;      /* barriers completed */
    int failed;        /* a wait timed out or a rank left mid-way: the group is unusable */
    unsigned char *taken; /* ranks that have a bootstrap */
    void **bufs;       /* each rank's allgather buffer, valid between the two barriers */
    size_t *bytes;
};

typedef struct {
    mpccl_inproc_group_t *g;
} inproc_bs_t;

static void group_unref(mpccl_inproc_group_t *g)
{
    pthread_mutex_lock(&g->mu);
    int last = (--g->refs == 0);
    pthread_mutex_unlock(&g->mu);
    if (!last) return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->taken);
    free(g->bufs);
    free(g->bytes);
    free(g);
}

mpccl_status_t mpccl_inproc_group_create(int nranks, mpccl_inproc_group_t **out)
{
    if (out == NULL || nranks < 1)
        return mpccl_fail(MPCCL_ERR_ARG, "in-process group: nranks %d (expected >= 1)%s", nranks,
                          out ? "" : ", NULL output");
    mpccl_inproc_group_t *g = calloc(1, sizeof(*g));
    if (g) {
        g->taken = calloc((size_t)nranks, 1);
        g->bufs = calloc((size_t)nranks, sizeof(void *));
        g->bytes = calloc((size_t)nranks, sizeof(size_t));
    }
    if (g == NULL || !g->taken || !g->bufs || !g->bytes) {
        if (g) free(g->taken), free(g->bufs), free(g->bytes);
        free(g);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for an in-process group of %d", nranks);
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    /* Timeouts measure elapsed time, immune to wall clock changes. */
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g->mu, NULL);
    g->nranks = nranks;
    g->refs = 1;
    *out = g;
    return MPCCL_OK;
}

void mpccl_inproc_group_release(mpccl_inproc_group_t *g)
{
    if (g) group_unref(g);
}

/* Called with g->mu held.  Waits until all ranks arrived at this barrier. */
static mpccl_status_t barrier_locked(mpccl_inproc_group_t *g, int rank, const char *what)
{
    if (g->failed)
        return mpccl_fail(MPCCL_ERR_REMOTE,
                          "in-process bootstrap rank %d: the group failed earlier (%s)", rank,
                          what);
    uint64_t gen = g->gen;
    if (++g->arrived == g->nranks) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
        return MPCCL_OK;
    }
    int timeout_s = mpccl_bootstrap_timeout_s();
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_s;
    while (g->gen == gen && !g->failed) {
        int e = pthread_cond_timedwait(&g->cv, &g->mu, &dl);
        if (e == ETIMEDOUT && g->gen == gen) {
            int arrived = g->arrived;
            g->failed = 1; /* the counts are now meaningless for everyone */
            pthread_cond_broadcast(&g->cv);
            return mpccl_fail(MPCCL_ERR_REMOTE,
                              "in-process bootstrap rank %d: only %d of %d ranks reached %s "
                              "within %d s (MPCCL_BOOTSTRAP_TIMEOUT)",
                              rank, arrived, g->nranks, what, timeout_s);
        }
    }
    if (g->gen == gen)
        return mpccl_fail(MPCCL_ERR_REMOTE,
                          "in-process bootstrap rank %d: another rank failed or left during %s",
                          rank, what);
    return MPCCL_OK;
}

static mpccl_status_t inproc_allgather(mpccl_bootstrap_t *bs, void *buf, size_t bytes)
{
    mpccl_inproc_group_t *g = ((inproc_bs_t *)bs->impl)->g;
    int r = bs->rank, n = bs->nranks;
    mpccl_status_t st;
    pthread_mutex_lock(&g->mu);
    g->bufs[r] = buf;
    g->bytes[r] = bytes;
    MPCCL_CHECK_GOTO(barrier_locked(g, r, "an allgather"), st, out);
    for (int i = 0; i < n; i++)
        if (g->bytes[i] != bytes) {
            /* Every rank sees the same table, so all of them fail alike. */
            st = mpccl_fail(MPCCL_ERR_USAGE,
                            "in-process bootstrap allgather: rank %d passed %zu bytes, rank %d %zu",
                            r, bytes, i, g->bytes[i]);
            goto out;
        }
    /* The copies run unlocked: each rank writes only its own buffer, and the
     * second barrier keeps every source alive until all have read it. */
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < n && bytes; i++)
        if (i != r)
            memcpy((char *)buf + (size_t)i * bytes, (char *)g->bufs[i] + (size_t)i * bytes, bytes);
    pthread_mutex_lock(&g->mu);
    st = barrier_locked(g, r, "the end of an allgather");
out:
    pthread_mutex_unlock(&g->mu);
    return st;
}

static mpccl_status_t inproc_barrier(mpccl_bootstrap_t *bs)
{
    mpccl_inproc_group_t *g = ((inproc_bs_t *)bs->impl)->g;
    pthread_mutex_lock(&g->mu);
    mpccl_status_t st = barrier_locked(g, bs->rank, "a barrier");
    pthread_mutex_unlock(&g->mu);
    return st;
}

static void inproc_close(mpccl_bootstrap_t *bs)
{
    inproc_bs_t *b = bs->impl;
    if (b) {
        mpccl_inproc_group_t *g = b->g;
        pthread_mutex_lock(&g->mu);
        /* Ranks still waiting in a collective can no longer complete it. */
        if (g->arrived > 0) {
            g->failed = 1;
            pthread_cond_broadcast(&g->cv);
        }
        pthread_mutex_unlock(&g->mu);
        group_unref(g);
        free(b);
    }
    bs->impl = NULL;
    bs->ops = NULL;
}

static const struct mpccl_bootstrap_ops inproc_ops = {
    .allgather = inproc_allgather, .barrier = inproc_barrier, .close = inproc_close};

mpccl_status_t mpccl_inproc_bootstrap_create(mpccl_inproc_group_t *g, int rank,
                                             mpccl_bootstrap_t *out)
{
    if (g == NULL || out == NULL)
        return mpccl_fail(MPCCL_ERR_ARG, "in-process bootstrap: NULL %s", g ? "output" : "group");
    if (rank < 0 || rank >= g->nranks)
        return mpccl_fail(MPCCL_ERR_ARG, "in-process bootstrap: rank %d out of range [0,%d)", rank,
                          g->nranks);
    inproc_bs_t *b = malloc(sizeof(*b));
    if (b == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a bootstrap");
    pthread_mutex_lock(&g->mu);
    if (g->taken[rank]) {
        pthread_mutex_unlock(&g->mu);
        free(b);
        return mpccl_fail(MPCCL_ERR_USAGE, "in-process bootstrap: rank %d joined twice", rank);
    }
    g->taken[rank] = 1;
    g->refs++;
    pthread_mutex_unlock(&g->mu);
    b->g = g;
    out->rank = rank;
    out->nranks = g->nranks;
    out->ops = &inproc_ops;
    out->impl = b;
    return MPCCL_OK;
}
