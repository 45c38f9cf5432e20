/* The proxy's CPU tests share this world: ranks are threads of one process
 * with real UCX transports, staging is malloc'd (host pointer = device
 * pointer), and a "kernel" per rank plays the device engine's side of the
 * PROXY link protocol exactly as lib/kernels/devplan.h describes it, posting
 * its work to the proxy as the engine's launches do.
 * Payloads are seeded random (the includer sets seed). */
#ifndef MPCCL_PROXY_TEST_WORLD_H
#define MPCCL_PROXY_TEST_WORLD_H

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/bootstrap.h"
#include "proxy/proxy.h"
#include "proxy/proxy_wake.h"
#include "proxy_test_heap.h"
#include "util/status.h"
#include "core/transport.h"
#include "ucx/ucx.h"

#define MAXR 8

static uint64_t seed;

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* ---- ranks as threads: the in-process bootstrap, one UCX transport each ---- */

typedef struct world {
    int n;
    mpccl_inproc_group_t *grp;
    uint8_t remote[MAXR][MAXR]; /* remote[i][j]: rank j is on another node for rank i */
    uint32_t nctas, nslots, slot_bytes[MAXR];
    int msgs;                   /* messages per (pair, CTA) */
    int split;                  /* the CTAs' slots from alloc_slots (GPU-direct layout) */
    int lanes;                  /* transports per rank the proxy serves it through (0: 1) */
    uint32_t ll;                /* pieces of at most this many bytes go as LL lines (0: none) */
    uint32_t whole;             /* with split: what is left of a message goes whole from this
                                 * many bytes on (devplan.h; 0: never) */
    mpccl_transport_t *lane_t[MAXR][MPCCL_PROXY_MAX_LANES]; /* [rank][0] is the body's t */
    size_t max_len;
    cpu_heap_t heap[MAXR];
    void (*body)(struct world *w, int rank, mpccl_transport_t *t, mpccl_bootstrap_t *bs);
    double result[MAXR];
    uint32_t landed[MAXR]; /* LL pieces each rank read as they landed (kernel) */
    uint32_t wholes[MAXR]; /* whole messages each rank sent and received (kernel) */
    uint32_t launches[MAXR][MPCCL_PROXY_WORK_KINDS]; /* each rank's "device" launch counts */
} world_t;

typedef struct rank_arg {
    world_t *w;
    int rank;
} rank_arg_t;

static inline void *rank_main(void *p)
{
    rank_arg_t *a = p;
    world_t *w = a->w;
    mpccl_bootstrap_t bs;
    ck_assert_int_eq(mpccl_inproc_bootstrap_create(w->grp, a->rank, &bs), MPCCL_OK);
    mpccl_transport_t *t = NULL;
    ck_assert_msg(mpccl_ucx_transport_create(&bs, &t) == MPCCL_OK, "rank %d: transport: %s", a->rank,
                  mpccl_last_error());
    w->lane_t[a->rank][0] = t;
    for (int l = 1; l < w->lanes; l++)
        ck_assert_msg(mpccl_ucx_transport_create(&bs, &w->lane_t[a->rank][l]) == MPCCL_OK,
                      "rank %d: transport of lane %d: %s", a->rank, l, mpccl_last_error());
    w->body(w, a->rank, t, &bs);
    for (int l = 1; l < w->lanes; l++) w->lane_t[a->rank][l]->ops->close(w->lane_t[a->rank][l], 0);
    mpccl_bootstrap_close(&bs);
    return NULL;
}

static inline void run_world(world_t *w)
{
    pthread_t th[MAXR];
    rank_arg_t a[MAXR];
    ck_assert_int_eq(mpccl_inproc_group_create(w->n, &w->grp), MPCCL_OK);
    for (int r = 0; r < w->n; r++) {
        pthread_mutex_init(&w->heap[r].mu, NULL);
        a[r] = (rank_arg_t){w, r};
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < w->n; r++) pthread_join(th[r], NULL);
    mpccl_inproc_group_release(w->grp);
}

static inline void all_remote(world_t *w)
{
    for (int i = 0; i < w->n; i++)
        for (int j = 0; j < w->n; j++) w->remote[i][j] = i != j;
}

static inline mpccl_proxy_comm_t *attach(world_t *w, int rank, mpccl_transport_t *t, mpccl_dev_link_t *links)
{
    mpccl_proxy_alloc_t al = cpu_allocator(&w->heap[rank], w->split);
    mpccl_proxy_comm_t *pc = NULL;
    for (int i = 0; i < w->n; i++) links[i] = (mpccl_dev_link_t){.kind = MPCCL_LINK_NVLINK, .pad = 77};
    w->lane_t[rank][0] = t;
    mpccl_status_t st = mpccl_proxy_attach_lanes(w->lane_t[rank], w->lanes > 1 ? w->lanes : 1, rank, w->n,
                                                 w->remote[rank], w->nctas, w->nslots, w->slot_bytes[rank], &al,
                                                 links, NULL, NULL, &pc);
    ck_assert_msg(st == MPCCL_OK, "rank %d: attach: %s", rank, mpccl_last_error());
    ck_assert_ptr_nonnull(pc);
    mpccl_proxy_set_ll_bytes(pc, w->ll);
    return pc;
}

/* Every rank detaches (force as given), then closes its transport once all
 * have detached. */
static inline void detach_together(mpccl_proxy_comm_t *pc, mpccl_transport_t *t, mpccl_bootstrap_t *bs, int force)
{
    mpccl_bootstrap_barrier(bs);
    mpccl_proxy_detach(pc, force);
    mpccl_bootstrap_barrier(bs);
    t->ops->close(t, force);
}

/* ---- the kernel side of the protocol ---- */

static inline size_t msg_len(const world_t *w, int src, int dst, uint32_t g, int m)
{
    uint64_t h = mix(seed ^ mix(((uint64_t)src << 48) ^ ((uint64_t)dst << 40) ^ ((uint64_t)g << 32) ^ (uint64_t)m));
    return 1 + h % w->max_len;
}

static inline unsigned char msg_byte(int src, int dst, uint32_t g, int m, size_t off)
{
    uint64_t base = mix(seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(((src * MAXR + dst) * 256 + (int)g) * 100000 + m));
    return (unsigned char)(mix(base + off / 8) >> (8 * (off % 8)));
}

typedef struct kchan {
    unsigned char *wbuf; /* the whole message with the proxy (its source or destination), or NULL */
    uint32_t wseq;  /* its seq */
    int msg;        /* current message */
    size_t off;     /* bytes of it already moved */
    uint32_t seq;   /* pieces moved on this channel, ever */
    uint32_t clean[8]; /* receiver: lines of each slot known to hold only LL lines (the device's rx_clean) */
    uint32_t landed;   /* receiver: LL pieces read from their lines, not after the proxy's word */
} kchan_t;

/* A whole message (devplan.h) through channel g of link l, as the engine's
 * try_whole: the rest of message c->msg from c->off goes whole when it is at
 * least w->whole bytes.  The first call hands it to the proxy (a buffer of
 * its own, filled for a send), a later one finds it done (a receive checked).
 * -1: not whole; 0: waiting; 1: moved. */
static inline int kernel_whole(world_t *w, int me, int peer, uint32_t g, const mpccl_dev_link_t *l, kchan_t *c,
                               int rx)
{
    int src = rx ? peer : me, dst = rx ? me : peer;
    size_t left = msg_len(w, src, dst, g, c->msg) - c->off;
    if (!w->whole || left < w->whole) return -1;
    volatile mpccl_dev_whole_t *d = (rx ? l->rx_whole : l->tx_whole) + g;
    volatile uint32_t *done = (rx ? l->rx_whole_done : l->tx_whole_done) + g;
    ck_assert_ptr_nonnull((const void *)d);
    if (c->wbuf == NULL) {
        c->wbuf = malloc(left);
        ck_assert_ptr_nonnull(c->wbuf);
        for (size_t k = 0; k < left; k++)
            c->wbuf[k] = rx ? (unsigned char)~msg_byte(src, dst, g, c->msg, c->off + k)
                            : msg_byte(src, dst, g, c->msg, c->off + k);
        c->wseq = __atomic_load_n(done, __ATOMIC_ACQUIRE) + 1;
        d->addr = (uint64_t)(uintptr_t)c->wbuf;
        d->bytes = (uint32_t)left;
        __atomic_thread_fence(__ATOMIC_SEQ_CST); /* __threadfence_system */
        d->seq = c->wseq;
        return 1;
    }
    if (__atomic_load_n(done, __ATOMIC_ACQUIRE) != c->wseq) return 0;
    for (size_t k = 0; rx && k < left; k++)
        if (c->wbuf[k] != msg_byte(src, dst, g, c->msg, c->off + k))
            ck_abort_msg("rank %d from %d CTA %u whole message %d: byte %zu differs", me, peer, g, c->msg, c->off + k);
    free(c->wbuf);
    c->wbuf = NULL;
    w->wholes[me]++;
    c->msg++;
    c->off = 0;
    return 1;
}

/* One piece from a sender CTA if its slot is free (ack >= p - K + 1). */
static inline int kernel_send(world_t *w, int me, int peer, uint32_t g, const mpccl_dev_link_t *l, kchan_t *c)
{
    uint32_t K = w->nslots, S = w->slot_bytes[me], p = c->seq;
    if (c->msg >= w->msgs) return 0;
    int whole = kernel_whole(w, me, peer, g, l, c, 0);
    if (whole >= 0) return whole;
    if ((int32_t)(l->tx_ack[g] - (p - K + 1)) < 0) return 0;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    size_t len = msg_len(w, me, peer, g, c->msg), n = len - c->off < S ? len - c->off : S;
    size_t i = (size_t)g * K + p % K;
    char *slot = l->tx_slots + i * S;
    if (n <= w->ll) {
        /* LL lines, the word raised first, as a device's unfenced stores may
         * land: the proxy must wait for every line's flags */
        uint32_t nl = MPCCL_PROXY_LL_LINES((uint32_t)n), f = MPCCL_PROXY_LL_FLAG(p);
        uint64_t hi = (uint64_t)(16u * nl | MPCCL_PROXY_LL_BIT);
        __atomic_store_n(&l->tx_word[i], (hi << 32) | (uint64_t)(p + 1), __ATOMIC_RELAXED);
        volatile uint32_t *line = (volatile uint32_t *)slot;
        for (uint32_t q = nl; q-- > 0;) { /* last line first */
            uint32_t d[2] = {0, 0};
            for (uint32_t k = 0; k < 8 && 8 * q + k < n; k++)
                d[k / 4] |= (uint32_t)msg_byte(me, peer, g, c->msg, c->off + 8 * q + k) << (8 * (k % 4));
            line[4 * q] = d[0];
            line[4 * q + 2] = d[1];
            __atomic_thread_fence(__ATOMIC_RELEASE); /* each half's data before its flag */
            line[4 * q + 1] = f;
            line[4 * q + 3] = f;
        }
    } else {
        for (size_t k = 0; k < n; k++) slot[k] = (char)msg_byte(me, peer, g, c->msg, c->off + k);
        __atomic_thread_fence(__ATOMIC_SEQ_CST); /* __threadfence_system */
        __atomic_store_n(&l->tx_word[i], ((uint64_t)n << 32) | (uint64_t)(p + 1), __ATOMIC_RELAXED);
    }
    c->seq++;
    c->off += n;
    if (c->off == len) c->msg++, c->off = 0;
    return 1;
}

/* One 8-byte {data, flag} half of an LL line, in one load: what the device
 * relies on UCX's copies to keep whole (lib/kernels/devplan.h). */
static inline uint64_t ll_half(const unsigned char *slot, size_t j)
{
    return __atomic_load_n((const uint64_t *)(slot + 8 * j), __ATOMIC_ACQUIRE);
}

/* One piece into a receiver CTA if it is there (the word's ready half == p + 1).
 * As the device does, an LL piece whose slot held only LL lines is read as it
 * lands, once its last line's flags show, each half waited for until its
 * flag does -- so a half UCX left torn (the flag there, its data not) fails
 * here.  As on the device, a slot counts as clean only after an LL piece
 * went through it. */
static inline int kernel_recv(world_t *w, int me, int peer, uint32_t g, const mpccl_dev_link_t *l, kchan_t *c)
{
    uint32_t K = w->nslots, S = w->slot_bytes[me], p = c->seq;
    size_t i = (size_t)g * K + p % K;
    if (c->msg >= w->msgs) return 0;
    int whole = kernel_whole(w, me, peer, g, l, c, 1);
    if (whole >= 0) return whole;
    size_t len = msg_len(w, peer, me, g, c->msg), n = len - c->off < S ? len - c->off : S;
    int ll = n <= w->ll;
    uint32_t nl = ll ? MPCCL_PROXY_LL_LINES((uint32_t)n) : 0, f = MPCCL_PROXY_LL_FLAG(p);
    size_t want = ll ? 16u * nl : n;
    const unsigned char *slot = (const unsigned char *)l->rx_slots + i * S;
    /* The lines first, whether or not the proxy's word is there yet: every LL
     * piece in a clean slot takes the landing path, racing UCX's copy. */
    int landing = ll && c->clean[p % K] >= nl && (uint32_t)(ll_half(slot, 2 * (size_t)nl - 1) >> 32) == f;
    if (!landing) {
        uint64_t word = __atomic_load_n(&l->rx_word[i], __ATOMIC_ACQUIRE); /* one load, as the kernel */
        if ((uint32_t)word != p + 1) return 0;
        if ((uint32_t)(word >> 32) != want) /* Check's asserts log each call: test in C first */
            ck_abort_msg("rank %d from %d CTA %u piece %u: length %u, expected %zu", me, peer, g, p,
                         (uint32_t)(word >> 32), want);
    }
    if (ll) {
        for (size_t j = 0; j < 2 * (size_t)nl; j++) {
            uint64_t v = ll_half(slot, j);
            for (double end = 0; landing && (uint32_t)(v >> 32) != f; v = ll_half(slot, j)) {
                double now = now_s();
                if (end == 0) end = now + 10;
                if (now > end) ck_abort_msg("rank %d from %d CTA %u piece %u: half %zu never landed", me, peer, g, p, j);
            }
            if ((uint32_t)(v >> 32) != f) ck_abort_msg("rank %d from %d CTA %u piece %u: LL flag of half %zu", me, peer, g, p, j);
            for (size_t k = 4 * j; k < 4 * j + 4 && k < n; k++)
                if ((unsigned char)(v >> (8 * (k - 4 * j))) != msg_byte(peer, me, g, c->msg, c->off + k))
                    ck_abort_msg("rank %d from %d CTA %u message %d: byte %zu differs%s", me, peer, g, c->msg,
                                 c->off + k, landing ? " (read as it landed: a torn half)" : "");
        }
    } else {
        for (size_t k = 0; k < n; k++)
            if (slot[k] != msg_byte(peer, me, g, c->msg, c->off + k))
                ck_abort_msg("rank %d from %d CTA %u message %d: byte %zu differs", me, peer, g, c->msg, c->off + k);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    l->rx_ack[g] = p + 1;
    c->clean[p % K] = ll ? (c->clean[p % K] > nl ? c->clean[p % K] : nl) : 0;
    c->landed += landing;
    c->seq++;
    c->off += n;
    if (c->off == len) c->msg++, c->off = 0;
    return 1;
}

/* What a launch does around its work.  An engine launch: the host posts the
 * pieces it will move per channel before it starts (counted here from the
 * messages, as gpu_plan counts them from the plan), and the kernel signals
 * nothing at its end.  A put launch: the host posts it, and its last CTA
 * stores the count of launches finished into the done word after its last
 * tx_ready (it does not wait for the sends to complete); the count lives in
 * the device's memory, here a plain counter per communicator and kind (a
 * rank's launches of one kind run one at a time). */
static inline uint32_t pieces_of(size_t len, uint32_t slot)
{
    return (uint32_t)((len + slot - 1) / slot);
}

/* A message's pieces into d: whole (one transfer) or through slots. */
static inline void count_message(const world_t *w, size_t len, uint32_t slot, uint32_t *pieces, uint32_t *whole)
{
    if (w->whole && len >= w->whole) ++*whole;
    else *pieces += pieces_of(len, slot);
}

/* The pieces of every message of this rank's channels, posted times times. */
static inline void kernel_post_pieces(world_t *w, int me, mpccl_proxy_comm_t *pc, int32_t times)
{
    mpccl_proxy_due_t due[MAXR * 8];
    uint32_t n = 0;
    for (int peer = 0; peer < w->n; peer++)
        for (uint32_t g = 0; w->remote[me][peer] == MPCCL_PROXY_REMOTE && g < w->nctas; g++) {
            mpccl_proxy_due_t d = {peer, g, 0, 0, 0, 0};
            for (int m = 0; m < w->msgs; m++) {
                count_message(w, msg_len(w, me, peer, g, m), w->slot_bytes[me], &d.tx, &d.whole_tx);
                count_message(w, msg_len(w, peer, me, g, m), w->slot_bytes[me], &d.rx, &d.whole_rx);
            }
            due[n++] = d;
        }
    mpccl_proxy_post_pieces(pc, due, n, times);
}

static inline void kernel_post(mpccl_proxy_comm_t *pc, int kind)
{
    mpccl_proxy_post(pc, kind, 1, MPCCL_PROXY_ALL_CTAS);
}

static inline void kernel_done(mpccl_proxy_comm_t *pc, int kind, uint32_t *count)
{
    volatile uint32_t *done = NULL;
    mpccl_proxy_done_counter(pc, kind, &done);
    ck_assert_ptr_nonnull((const void *)done);
    uint32_t v = ++*count;
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* __threadfence_system */
    *done = v;
}

/* Runs every channel of this rank (both directions, every CTA) until all
 * messages went out and came in, the way one engine CTA interleaves its steps. */
static inline void kernel(world_t *w, int me, const mpccl_dev_link_t *links, mpccl_proxy_comm_t *pc, double limit)
{
    kchan_t tx[MAXR][8], rx[MAXR][8];
    memset(tx, 0, sizeof(tx));
    memset(rx, 0, sizeof(rx));
    ck_assert_uint_le(w->nslots, sizeof(rx[0][0].clean) / sizeof(rx[0][0].clean[0]));
    double end = now_s() + limit;
    kernel_post_pieces(w, me, pc, 1);
    for (;;) {
        int act = 0, left = 0;
        for (int peer = 0; peer < w->n; peer++) {
            if (w->remote[me][peer] != MPCCL_PROXY_REMOTE) continue; /* no CTA channels otherwise */
            for (uint32_t g = 0; g < w->nctas; g++) {
                act += kernel_send(w, me, peer, g, &links[peer], &tx[peer][g]);
                act += kernel_recv(w, me, peer, g, &links[peer], &rx[peer][g]);
                left += (tx[peer][g].msg < w->msgs) + (rx[peer][g].msg < w->msgs);
            }
        }
        if (!left) break;
        if (act) continue;
        if (mpccl_proxy_error(pc) != MPCCL_OK) ck_abort_msg("rank %d: proxy error: %s", me, mpccl_last_error());
        if (now_s() > end) ck_abort_msg("rank %d: %d channels unfinished after %.0f s", me, left, limit);
        sched_yield();
    }
    for (int peer = 0; peer < w->n; peer++)
        for (uint32_t g = 0; g < w->nctas; g++) w->landed[me] += rx[peer][g].landed;
    /* Every tx piece acknowledged: the proxy finishes the sends on its own. */
    for (int peer = 0; peer < w->n; peer++)
        for (uint32_t g = 0; w->remote[me][peer] == MPCCL_PROXY_REMOTE && g < w->nctas; g++)
            while (links[peer].tx_ack[g] != tx[peer][g].seq) {
                if (now_s() > end)
                    ck_abort_msg("rank %d: acks to %d CTA %u stuck at %u of %u", me, peer, g,
                                 links[peer].tx_ack[g], tx[peer][g].seq);
                sched_yield();
            }
}

/* One Check case per behaviour (so CK_RUN_CASE picks one), each bounded in
 * time; the seed from MPCCL_TEST_SEED or the clock, printed.  Returns the
 * exit status. */
typedef struct proxy_test_case {
    const char *name;
    const TTest *t;
    int loops; /* 0: one run */
} proxy_test_case_t;

static inline int proxy_test_main(const char *suite, const proxy_test_case_t *cases, size_t n)
{
    const char *s = getenv("MPCCL_TEST_SEED");
    seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
    printf("test_%s: seed %llu (MPCCL_TEST_SEED)\n", suite, (unsigned long long)seed);
    Suite *su = suite_create(suite);
    for (size_t i = 0; i < n; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 120);
        if (cases[i].loops) tcase_add_loop_test(tc, cases[i].t, 0, cases[i].loops);
        else tcase_add_test(tc, cases[i].t);
        suite_add_tcase(su, tc);
    }
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

#endif
