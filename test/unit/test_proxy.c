/* The GPU proxy on the CPU (the world: proxy_test_world.h): traffic, errors,
 * detach, the one-sided channel, argument checks.  Idle costs and wake-ups:
 * test_proxy_idle.c.  Payloads are seeded random (MPCCL_TEST_SEED overrides;
 * the seed is printed). */
#define _GNU_SOURCE
#include <unistd.h>

#include "proxy_test_world.h"

/* Whether [p, p+n) lies inside h's slot block. */
static int in_slot_block(cpu_heap_t *h, const void *p, size_t n)
{
    const char *c = p, *b = h->slot_block;
    return b && c >= b && c + n <= b + h->slot_block_bytes;
}

/* The links of remote peers point into the staging (the slots into the slot
 * block when split), distinct and aligned; the others (one-sided-only peers
 * too) are untouched. */
static void check_links(world_t *w, int rank, const mpccl_dev_link_t *links)
{
    size_t slots = (size_t)w->nctas * w->nslots * w->slot_bytes[rank];
    size_t words = (size_t)w->nctas * w->nslots * 4, acks = (size_t)w->nctas * 4;
    for (int i = 0; i < w->n; i++) {
        const mpccl_dev_link_t *l = &links[i];
        if (w->remote[rank][i] != MPCCL_PROXY_REMOTE) {
            ck_assert_uint_eq(l->kind, MPCCL_LINK_NVLINK);
            ck_assert_uint_eq(l->pad, 77);
            continue;
        }
        ck_assert_uint_eq(l->kind, MPCCL_LINK_PROXY);
        ck_assert(in_heap(&w->heap[rank], l->tx_slots, slots));
        ck_assert(in_heap(&w->heap[rank], l->rx_slots, slots));
        ck_assert_int_eq(in_slot_block(&w->heap[rank], l->tx_slots, slots), w->split);
        ck_assert_int_eq(in_slot_block(&w->heap[rank], l->rx_slots, slots), w->split);
        ck_assert(!in_slot_block(&w->heap[rank], (const void *)l->tx_ready, 4));
        ck_assert(!in_slot_block(&w->heap[rank], (const void *)l->rx_ack, 4));
        ck_assert(in_heap(&w->heap[rank], (const void *)l->tx_ready, words));
        ck_assert(in_heap(&w->heap[rank], (const void *)l->tx_len, words));
        ck_assert(in_heap(&w->heap[rank], (const void *)l->tx_word, 2 * words));
        ck_assert(in_heap(&w->heap[rank], (const void *)l->rx_word, 2 * words));
        ck_assert_uint_eq((uintptr_t)l->rx_word % 8, 0); /* one aligned store and load */
        ck_assert(l->rx_ready == NULL && l->rx_len == NULL);
        ck_assert(in_heap(&w->heap[rank], (const void *)l->tx_ack, acks));
        ck_assert(in_heap(&w->heap[rank], (const void *)l->rx_ack, acks));
        ck_assert_uint_eq((uintptr_t)l->tx_slots % 16, 0);
        ck_assert_uint_eq((uintptr_t)l->rx_slots % 16, 0);
        ck_assert(l->rx_slots >= l->tx_slots + slots || l->tx_slots >= l->rx_slots + slots);
        for (size_t k = 0; k < words / 4; k++)
            ck_assert(l->tx_ready[k] == 0 && l->tx_len[k] == 0 && l->tx_word[k] == 0 && l->rx_word[k] == 0);
        for (size_t k = 0; k < acks / 4; k++) ck_assert(l->tx_ack[k] == 0 && l->rx_ack[k] == 0);
        for (int j = 0; j < i; j++)
            if (w->remote[rank][j] == MPCCL_PROXY_REMOTE) ck_assert_ptr_ne(links[j].tx_slots, l->tx_slots);
    }
}

/* ---- traffic ---- */

static void traffic_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR];
    double t0 = now_s();
    for (int round = 0; round < 2; round++) { /* the second round restarts the thread */
        mpccl_proxy_comm_t *pc = attach(w, me, t, links);
        check_links(w, me, links);
        mpccl_bootstrap_barrier(bs); /* nobody sends before every rank checked its fresh links */
        kernel(w, me, links, pc, 60);
        ck_assert_int_eq(mpccl_proxy_error(pc), MPCCL_OK);
        mpccl_bootstrap_barrier(bs); /* traffic idle everywhere */
        mpccl_proxy_detach(pc, 0);
        ck_assert_int_eq(w->heap[me].outstanding, 0);
        mpccl_bootstrap_barrier(bs);
    }
    /* GPU-direct: the proxy bound its device and flushed before handing pieces over. */
    if (w->split) ck_assert(w->heap[me].binds > 0 && w->heap[me].flushes > 0);
    else ck_assert(w->heap[me].binds == 0 && w->heap[me].flushes == 0);
    w->result[me] = now_s() - t0;
    mpccl_bootstrap_barrier(bs);
    t->ops->close(t, 0);
}

START_TEST(test_traffic)
{
    /* 2 or 3 ranks, 2..4 CTAs; in one 3-rank case ranks 0 and 1 share a node;
     * slots large enough for UCX's rendezvous protocol in the fifth; the
     * sixth to eighth with the CTAs' slots apart from the staging
     * (GPU-direct); the next four through 2..4 lanes (transports and threads),
     * one asking for more lanes than there are CTAs; the last with messages
     * of at most 8 KB, every piece LL lines, read as they land wherever the
     * slot allows (half a thousand lines a piece racing UCX's copy).  The two
     * before it (GPU-direct layout) send messages of at least `whole` bytes
     * whole, straight from and into buffers of their own (devplan.h), the
     * others through slots, one of them over UCX's rendezvous. */
    static const struct {
        int n;
        uint32_t nctas;
        int local01;
        uint32_t slot;
        int msgs, split, lanes;
        uint32_t whole;
    } cases[] = {
        {2, 2, 0, 256, 300, 0, 1, 0},  {3, 3, 0, 256, 300, 0, 1, 0},   {3, 4, 1, 256, 300, 0, 1, 0},
        {2, 4, 0, 256, 300, 0, 1, 0},  {2, 2, 0, 65536, 40, 0, 1, 0},  {2, 2, 0, 256, 300, 1, 1, 0},
        {3, 4, 1, 256, 300, 1, 1, 0},  {2, 2, 0, 65536, 40, 1, 1, 0},  {2, 4, 0, 256, 300, 0, 2, 0},
        {3, 3, 1, 256, 300, 0, 3, 0},  {2, 4, 0, 65536, 40, 1, 4, 0},  {2, 2, 0, 256, 300, 0, 3, 0},
        {3, 3, 1, 256, 300, 1, 2, 500}, {2, 2, 0, 65536, 40, 1, 1, 131072}, {2, 2, 0, 65536, 300, 0, 1, 0}};
    world_t *w = calloc(1, sizeof(*w));
    w->n = cases[_i].n;
    w->nctas = cases[_i].nctas;
    w->nslots = 4;
    for (int r = 0; r < MAXR; r++) w->slot_bytes[r] = cases[_i].slot;
    w->msgs = cases[_i].msgs;
    w->split = cases[_i].split;
    w->lanes = cases[_i].lanes;
    w->whole = cases[_i].whole;
    /* staged: the short pieces as LL lines (twice their bytes in the slot) */
    w->ll = w->split ? 0 : cases[_i].slot / 4 < MPCCL_PROXY_LL_MAX ? cases[_i].slot / 4 : MPCCL_PROXY_LL_MAX;
    w->max_len = 4 * cases[_i].slot + 76; /* up to 5 pieces per message, the last one short */
    if (_i == sizeof(cases) / sizeof(cases[0]) - 1) w->max_len = w->ll; /* every piece LL */
    all_remote(w);
    if (cases[_i].local01) w->remote[0][1] = w->remote[1][0] = 0;
    w->body = traffic_body;
    run_world(w);
    size_t pieces = 0;
    for (int s = 0; s < w->n; s++)
        for (int d = 0; d < w->n; d++)
            for (uint32_t g = 0; w->remote[s][d] && g < w->nctas; g++)
                for (int m = 0; m < w->msgs; m++)
                    pieces += (msg_len(w, s, d, g, m) + cases[_i].slot - 1) / cases[_i].slot;
    uint32_t landed = 0, wholes = 0;
    for (int r = 0; r < w->n; r++) landed += w->landed[r], wholes += w->wholes[r];
    if (w->whole) ck_assert_uint_gt(wholes, 0);
    printf("test_traffic: %d ranks, %u CTAs, %u-byte slots, local01=%d, split=%d, %d lane(s), whole from %u: 2 "
           "rounds of %zu pieces in %.3f s, %u LL pieces read as they landed, %u messages whole\n", w->n, w->nctas,
           cases[_i].slot, cases[_i].local01, w->split, w->lanes, w->whole, pieces, w->result[0], landed, wholes);
    free(w);
}
END_TEST

/* ---- errors ---- */

/* The proxy's error once it reports one (at most 20 s). */
static mpccl_status_t wait_error(mpccl_proxy_comm_t *pc, const char *what)
{
    double end = now_s() + 20;
    while (mpccl_proxy_error(pc) == MPCCL_OK) {
        ck_assert_msg(now_s() < end, "%s was never reported", what);
        usleep(1000);
    }
    return mpccl_proxy_error(pc);
}

static void error_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR];
    mpccl_proxy_comm_t *pc = attach(w, me, t, links);
    if (me == 0) { /* piece 0 of CTA 0: 512 bytes towards a peer whose slots hold 256 */
        const mpccl_dev_link_t *l = &links[1];
        mpccl_proxy_due_t due = {1, 0, 1, 0, 0, 0};
        mpccl_proxy_post_pieces(pc, &due, 1, 1);
        for (int k = 0; k < 512; k++) l->tx_slots[k] = (char)msg_byte(0, 1, 0, 0, (size_t)k);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        l->tx_word[0] = (512ull << 32) | 1u;
    }
    if (me == 1) {
        ck_assert_int_eq(wait_error(pc, "the truncated receive"), MPCCL_ERR_INTERNAL);
        ck_assert_uint_eq(links[0].rx_word[0], 0); /* never handed to the kernel */
        printf("test_error: rank 1 reports %s: %s\n", mpccl_status_name(mpccl_proxy_error(pc)), mpccl_last_error());
    }
    mpccl_bootstrap_barrier(bs);
    if (me == 0) ck_assert_int_eq(mpccl_proxy_error(pc), MPCCL_OK);
    double t0 = now_s();
    mpccl_proxy_detach(pc, 0);
    ck_assert_msg(now_s() - t0 < 1.0, "detach after an error took %.2f s", now_s() - t0);
    ck_assert_int_eq(w->heap[me].outstanding, 0);
    mpccl_bootstrap_barrier(bs);
    t->ops->close(t, 1);
}

/* A peer that closes its side while this rank's proxy has nothing in flight
 * (a peer that destroyed its communicator first): the pre-posted receives
 * fail, the proxy logs it at INFO only, and the next use gets the error,
 * naming it. */
static void closed_idle_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR];
    mpccl_proxy_comm_t *pc = attach(w, me, t, links);
    mpccl_bootstrap_barrier(bs);
    if (me == 0) {
        mpccl_proxy_detach(pc, 0);
        t->ops->close(t, 1);
    } else {
        ck_assert_int_eq(wait_error(pc, "the peer's close"), MPCCL_ERR_REMOTE);
        ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "while nothing was in flight"));
        printf("test_closed_idle: rank 1 reports %s\n", mpccl_last_error());
    }
    mpccl_bootstrap_barrier(bs);
    if (me == 1) {
        mpccl_proxy_detach(pc, 0);
        t->ops->close(t, 1);
    }
}

/* Two ranks, both remote, 2 CTAs of 4 slots, one message per channel. */
static void run_pair(void (*body)(world_t *, int, mpccl_transport_t *, mpccl_bootstrap_t *), uint32_t slot0,
                     uint32_t slot1)
{
    world_t *w = calloc(1, sizeof(*w));
    w->n = 2;
    w->nctas = 2;
    w->nslots = 4;
    w->slot_bytes[0] = slot0;
    w->slot_bytes[1] = slot1;
    w->msgs = 1;
    all_remote(w);
    w->body = body;
    run_world(w);
    free(w);
}

START_TEST(test_error)
{
    run_pair(error_body, 512, 256);
}
END_TEST

START_TEST(test_closed_idle)
{
    run_pair(closed_idle_body, 256, 256);
}
END_TEST

/* ---- detach with traffic in flight: forced at once, flushing bounded by
 * UCX_CLOSE_TIMEOUT (2 s by default) ---- */

static void force_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR];
    mpccl_proxy_comm_t *pc = attach(w, me, t, links);
    /* Send as far as the slots allow, never consume: the peer's proxy fills its
     * K receive slots, further pieces wait in UCX (large ones unmatched). */
    kchan_t tx[MAXR][8];
    memset(tx, 0, sizeof(tx));
    double end = now_s() + 0.5;
    kernel_post_pieces(w, me, pc, 1); /* never all moved: detach does not wait for posted work */
    while (now_s() < end)
        for (int peer = 0; peer < w->n; peer++)
            for (uint32_t g = 0; w->remote[me][peer] && g < w->nctas; g++)
                if (!kernel_send(w, me, peer, g, &links[peer], &tx[peer][g])) sched_yield();
    mpccl_bootstrap_barrier(bs);
    int force = w->msgs == 1000000;
    double t0 = now_s();
    mpccl_proxy_detach(pc, force);
    double dt = now_s() - t0;
    ck_assert_msg(dt < (force ? 0.5 : 3.0), "detach(force=%d) took %.2f s", force, dt);
    printf("test_force: rank %d, %u-byte slots: detach(force=%d) %.1f ms, %d staging blocks left to UCX\n", me,
           w->slot_bytes[me], force, dt * 1e3, w->heap[me].outstanding);
    mpccl_bootstrap_barrier(bs);
    t->ops->close(t, 1);
    /* The worker is gone: nothing can touch the staging, or a whole
     * message's buffer, any more. */
    for (int i = 0; i < 16; i++)
        if (w->heap[me].blocks[i]) cpu_free(&w->heap[me], w->heap[me].blocks[i]);
    for (int peer = 0; peer < w->n; peer++)
        for (uint32_t g = 0; g < w->nctas; g++) free(tx[peer][g].wbuf);
}

START_TEST(test_force)
{
    world_t *w = calloc(1, sizeof(*w));
    w->n = 2;
    w->nctas = 3;
    w->nslots = 4;
    w->slot_bytes[0] = w->slot_bytes[1] = _i % 2 ? 256 * 1024 : 256; /* eager / rendezvous sized */
    w->msgs = _i % 4 < 2 ? 1000000 : 999999; /* forced / flushing detach */
    w->max_len = 5 * w->slot_bytes[0];
    if (_i >= 4) { /* GPU-direct layout, the longer messages whole: sends the receiver never posts */
        w->split = 1;
        w->whole = 2 * w->slot_bytes[0];
    }
    all_remote(w);
    w->body = force_body;
    run_world(w);
    free(w);
}
END_TEST

/* ---- the one-sided channel ---- */

/* What a rank's deliver callback saw, per sender. */
typedef struct os_rx {
    world_t *w;
    int me;
    uint32_t next[MAXR];  /* next piece expected from each sender */
    int fail_at;          /* > 0: refuse this piece for good (deliver returns -1) */
    int refusals[MAXR];   /* "not now" answers given */
    char bad[256];        /* first mismatch (asserting here would log every call) */
} os_rx_t;

static os_rx_t os_rx[MAXR];

static size_t os_len(const world_t *w, int src, int dst, uint32_t p)
{
    return 1 + mix(seed ^ 0x05ULL ^ mix(((uint64_t)src << 48) ^ ((uint64_t)dst << 40) ^ p)) % w->slot_bytes[src];
}

/* Delivers in place (host = device here), refusing every other first offer
 * of some pieces so that the retry path runs. */
static int test_deliver(void *ctx, int src, uint32_t piece, const void *host, const void *dev, uint32_t len,
                        volatile uint32_t *ack)
{
    os_rx_t *s = ctx;
    if (s->bad[0]) return 0;
    if (host != dev) snprintf(s->bad, sizeof(s->bad), "host %p != dev %p", host, dev);
    else if (piece != s->next[src])
        snprintf(s->bad, sizeof(s->bad), "from %d: piece %u, expected %u (order)", src, piece, s->next[src]);
    if (s->bad[0]) return 0;
    if (s->fail_at > 0 && piece == (uint32_t)s->fail_at) return -1;
    if (piece % 5 == 2 && s->refusals[src]++ % 2 == 0) return 0;
    size_t n = os_len(s->w, src, s->me, piece);
    const unsigned char *b = host;
    if (len != n) snprintf(s->bad, sizeof(s->bad), "from %d piece %u: %u bytes, expected %zu", src, piece, len, n);
    for (size_t k = 0; k < n && !s->bad[0]; k++)
        if (b[k] != msg_byte(src, s->me, 200, (int)piece, k))
            snprintf(s->bad, sizeof(s->bad), "from %d piece %u: byte %zu differs", src, piece, k);
    if (s->bad[0]) return 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    *ack = piece + 1;
    __atomic_store_n(&s->next[src], piece + 1, __ATOMIC_RELEASE);
    return 1;
}

/* Slots of the one-sided channel: twice a CTA's, so that mixing the two
 * counts in the layout shows. */
#define OS_SLOTS 8u

/* The put kernel's side: piece p into slot p % K once tx_ack >= p - K + 1. */
static void os_send_all(world_t *w, int me, mpccl_proxy_comm_t *pc, const mpccl_dev_link_t *os_links, double end)
{
    uint32_t K = OS_SLOTS, S = w->slot_bytes[me];
    kernel_post(pc, MPCCL_PROXY_WORK_PUT);
    for (int peer = 0; peer < w->n; peer++) {
        if (!w->remote[me][peer]) continue;
        const mpccl_dev_link_t *l = &os_links[peer];
        ck_assert_uint_eq(l->kind, MPCCL_LINK_PROXY);
        for (uint32_t p = 0; p < (uint32_t)w->msgs; p++) {
            while ((int32_t)(*l->tx_ack - (p - K + 1)) < 0) {
                if (now_s() > end) ck_abort_msg("rank %d: one-sided piece %u to %d: no free slot", me, p, peer);
                sched_yield();
            }
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            size_t n = os_len(w, me, peer, p);
            char *slot = l->tx_slots + (size_t)(p % K) * S;
            for (size_t k = 0; k < n; k++) slot[k] = (char)msg_byte(me, peer, 200, (int)p, k);
            l->tx_len[p % K] = (uint32_t)n;
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            l->tx_ready[p % K] = p + 1;
        }
    }
    kernel_done(pc, MPCCL_PROXY_WORK_PUT, &w->launches[me][MPCCL_PROXY_WORK_PUT]);
}

/* Attaches rank me with the one-sided channel (OS_SLOTS slots) delivering
 * through test_deliver into os_rx[me], which it resets (fail_at: see os_rx_t). */
static mpccl_proxy_comm_t *os_attach(world_t *w, int me, mpccl_transport_t *t, int fail_at, mpccl_dev_link_t *links,
                                     mpccl_dev_link_t *os_links)
{
    memset(os_links, 0, MAXR * sizeof(*os_links));
    for (int i = 0; i < w->n; i++) links[i] = (mpccl_dev_link_t){.kind = MPCCL_LINK_NVLINK, .pad = 77};
    os_rx_t *rx = &os_rx[me];
    memset(rx, 0, sizeof(*rx));
    rx->w = w;
    rx->me = me;
    rx->fail_at = fail_at;
    mpccl_proxy_alloc_t al = cpu_allocator(&w->heap[me], w->split);
    mpccl_proxy_os_t os = {.deliver = test_deliver, .ctx = rx, .nslots = OS_SLOTS};
    mpccl_proxy_comm_t *pc = NULL;
    mpccl_status_t st = mpccl_proxy_attach(t, me, w->n, w->remote[me], w->nctas, w->nslots, w->slot_bytes[me], &al,
                                           links, &os, os_links, &pc);
    ck_assert_msg(st == MPCCL_OK, "rank %d: attach: %s", me, mpccl_last_error());
    return pc;
}

static void os_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR], os_links[MAXR];
    mpccl_proxy_comm_t *pc = os_attach(w, me, t, 0, links, os_links);
    os_rx_t *rx = &os_rx[me];
    /* The CTAs' links are laid out as without the channel. */
    check_links(w, me, links);
    /* A one-sided-only peer's staging holds its channel alone. */
    size_t S = w->slot_bytes[me], staged = 0, bound = 0;
    for (int i = 0; i < 16; i++) staged += w->heap[me].blocks[i] ? w->heap[me].sizes[i] : 0;
    for (int i = 0; i < w->n; i++)
        if (w->remote[me][i])
            bound += 2 * (OS_SLOTS + (w->remote[me][i] == MPCCL_PROXY_REMOTE ? (size_t)w->nctas * w->nslots : 0)) * S +
                     /* split: the remote peers' one-sided data slots for GPU-direct puts */
                     (w->split && w->remote[me][i] == MPCCL_PROXY_REMOTE ? OS_SLOTS * S : 0) +
                     (w->split ? 2 : 1) * 4096 + 1024; /* page rounding (of both blocks), flag words */
    ck_assert_msg(staged <= bound, "rank %d: %zu bytes of staging, expected at most %zu", me, staged, bound);
    for (int i = 0; i < w->n; i++)
        if (w->remote[me][i]) {
            ck_assert(in_heap(&w->heap[me], os_links[i].tx_slots, (size_t)OS_SLOTS * w->slot_bytes[me]));
            ck_assert(!in_slot_block(&w->heap[me], os_links[i].tx_slots, 1)); /* always in the staging */
            ck_assert(in_heap(&w->heap[me], (const void *)os_links[i].tx_ready, OS_SLOTS * 4));
            ck_assert(in_heap(&w->heap[me], (const void *)os_links[i].tx_len, OS_SLOTS * 4));
            if (w->remote[me][i] != MPCCL_PROXY_REMOTE) continue;
            if (!w->split)
                ck_assert(os_links[i].tx_slots >= links[i].tx_slots + (size_t)w->nctas * w->nslots * w->slot_bytes[me] ||
                          os_links[i].tx_slots + (size_t)OS_SLOTS * w->slot_bytes[me] <= links[i].tx_slots);
            ck_assert_ptr_eq((const void *)os_links[i].tx_ack, (const void *)(links[i].tx_ack + w->nctas));
        }
    mpccl_bootstrap_barrier(bs);
    double end = now_s() + 60;
    os_send_all(w, me, pc, os_links, end); /* one-sided pieces first, the CTAs' traffic beside them */
    kernel(w, me, links, pc, 60);
    for (int src = 0; src < w->n; src++)
        while (w->remote[me][src] && __atomic_load_n(&rx->next[src], __ATOMIC_ACQUIRE) != (uint32_t)w->msgs) {
            if (rx->bad[0]) ck_abort_msg("rank %d: %s", me, rx->bad);
            if (mpccl_proxy_error(pc) != MPCCL_OK) ck_abort_msg("rank %d: proxy error: %s", me, mpccl_last_error());
            if (now_s() > end) ck_abort_msg("rank %d: %u of %d one-sided pieces from %d", me, rx->next[src], w->msgs, src);
            sched_yield();
        }
    for (int peer = 0; peer < w->n; peer++)
        while (w->remote[me][peer] && *os_links[peer].tx_ack != (uint32_t)w->msgs) {
            if (now_s() > end) ck_abort_msg("rank %d: one-sided acks to %d stuck", me, peer);
            sched_yield();
        }
    ck_assert_msg(!rx->bad[0], "rank %d: %s", me, rx->bad);
    for (int src = 0; src < w->n; src++)
        if (w->remote[me][src]) ck_assert_int_gt(rx->refusals[src], 0);
    ck_assert_int_eq(mpccl_proxy_error(pc), MPCCL_OK);
    mpccl_bootstrap_barrier(bs);
    mpccl_proxy_detach(pc, 0);
    ck_assert_int_eq(w->heap[me].outstanding, 0);
    mpccl_bootstrap_barrier(bs);
    t->ops->close(t, 0);
}

/* A delivery that fails stops the communicator: the proxy reports it and
 * hands nothing more over; detach still returns. */
static void os_fail_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR], os_links[MAXR];
    mpccl_proxy_comm_t *pc = os_attach(w, me, t, me == 1 ? 3 : 0, links, os_links);
    os_rx_t *rx = &os_rx[me];
    mpccl_bootstrap_barrier(bs);
    double end = now_s() + 30;
    if (me == 0) os_send_all(w, me, pc, os_links, end); /* msgs <= OS_SLOTS: no wait for acks */
    if (me == 1) {
        while (mpccl_proxy_error(pc) == MPCCL_OK) {
            if (now_s() > end) ck_abort_msg("rank 1: the failed delivery was not reported");
            sched_yield();
        }
        ck_assert_int_eq(mpccl_proxy_error(pc), MPCCL_ERR_INTERNAL);
        /* pieces 0..2 were delivered, 3 refused, nothing after it */
        ck_assert_uint_eq(rx->next[0], 3);
    }
    detach_together(pc, t, bs, 1);
}

START_TEST(test_os_fail)
{
    world_t *w = calloc(1, sizeof(*w));
    w->n = 2;
    all_remote(w);
    w->nctas = 1;
    w->nslots = 4;
    w->slot_bytes[0] = w->slot_bytes[1] = 256;
    w->msgs = 6;
    w->body = os_fail_body;
    run_world(w);
    free(w);
}
END_TEST

START_TEST(test_os_channel)
{
    /* 2 and 3 ranks (in the second, ranks 0 and 1 share a node; in the fourth
     * they share one without P2P: the proxy carries only their one-sided
     * pieces); small slots, then slots in UCX's rendezvous range. */
    static const struct { int n; int local01; uint32_t slot; int msgs; int split; } cases[] = {
        {2, 0, 256, 200, 0}, {3, 1, 256, 200, 0}, {2, 0, 65536, 30, 0}, {3, 2, 256, 200, 0}, {3, 2, 256, 200, 1}};
    world_t *w = calloc(1, sizeof(*w));
    w->n = cases[_i].n;
    all_remote(w);
    if (cases[_i].local01 == 1) w->remote[0][1] = w->remote[1][0] = 0;
    if (cases[_i].local01 == 2) w->remote[0][1] = w->remote[1][0] = MPCCL_PROXY_ONESIDED_ONLY;
    w->nctas = 2;
    w->nslots = 4;
    for (int r = 0; r < MAXR; r++) w->slot_bytes[r] = cases[_i].slot;
    w->msgs = cases[_i].msgs;
    w->split = cases[_i].split;
    w->max_len = 2 * cases[_i].slot + 5;
    w->body = os_body;
    run_world(w);
    free(w);
}
END_TEST

/* ---- argument checks ---- */

START_TEST(test_args)
{
    mpccl_transport_t t = {.ops = NULL, .rank = 0, .nranks = 2, .impl = NULL};
    cpu_heap_t heap = {.mu = PTHREAD_MUTEX_INITIALIZER};
    mpccl_proxy_alloc_t al = cpu_allocator(&heap, 0), bad = {.free = cpu_free, .ctx = &heap};
    mpccl_proxy_alloc_t half = cpu_allocator(&heap, 1);
    half.free_slots = NULL;
    uint8_t rem[2] = {0, 1}, self[2] = {1, 1};
    mpccl_dev_link_t links[2];
    mpccl_proxy_comm_t *pc = NULL;
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, rem, 0, 4, 256, &al, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "nctas = 0"));
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, rem, MPCCL_PROXY_MAX_CTAS + 1, 4, 256, &al, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, rem, 2, 3, 256, &al, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "nslots = 3"));
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, rem, 2, 4, 100, &al, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "slot_bytes = 100"));
    ck_assert_int_eq(mpccl_proxy_attach(&t, 1, 2, rem, 2, 4, 256, &al, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, self, 2, 4, 256, &al, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, rem, 2, 4, 256, &bad, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, rem, 2, 4, 256, &half, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "alloc_slots and free_slots"));
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, rem, 2, 4, 256, &al, NULL, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    uint8_t os_only[2] = {0, MPCCL_PROXY_ONESIDED_ONLY}, three[2] = {0, 3};
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, os_only, 2, 4, 256, &al, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "no one-sided channel"));
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, three, 2, 4, 256, &al, links, NULL, NULL, &pc), MPCCL_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "is_remote[1] = 3"));
    ck_assert_ptr_null(pc);
    ck_assert_int_eq(heap.outstanding, 0);
    /* No remote peer: nothing allocated, no thread, links untouched. */
    uint8_t none[2] = {0, 0};
    links[1].kind = MPCCL_LINK_HOST;
    ck_assert_int_eq(mpccl_proxy_attach(&t, 0, 2, none, 2, 4, 256, &al, links, NULL, NULL, &pc), MPCCL_OK);
    ck_assert_uint_eq(links[1].kind, MPCCL_LINK_HOST);
    ck_assert_int_eq(heap.outstanding, 0);
    ck_assert_int_eq(mpccl_proxy_error(pc), MPCCL_OK);
    mpccl_proxy_detach(pc, 0);
    ck_assert_uint_eq(mpccl_proxy_tag(5, 3, 0x40000001u),
                      (5ULL << 40) | (3ULL << 38) | (3ULL << 30) | 1ULL);
}
END_TEST

int main(void)
{
    const proxy_test_case_t cases[] = {
        {"args", test_args, 0}, {"traffic", test_traffic, 15}, {"error", test_error, 0},
        {"force", test_force, 8}, {"os_channel", test_os_channel, 5}, {"os_fail", test_os_fail, 0},
        {"closed_idle", test_closed_idle, 0}};
    return proxy_test_main("proxy", cases, sizeof(cases) / sizeof(cases[0]));
}
