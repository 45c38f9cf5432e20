/* The proxy's one-sided channel as GPU-direct puts (mpccl_proxy_os_rma), on
 * the CPU: host memory stands in for the device slots and the windows, which
 * are registered with UCX as the library registers device memory.  Each rank
 * puts seeded random pieces into every other rank's window, some carrying a
 * signal; the target only waits for its counters and then finds every byte
 * in place (the data lands before the signal's value).  Every third piece
 * leaves from a source buffer of the sender's (a window of its own in the
 * library) instead of the slot.  Nothing runs at the target but its proxy
 * thread progressing UCX. */
#define _GNU_SOURCE
#include <unistd.h>

#include "proxy_test_world.h"
#include "ucx/ucx_rma.h"

#define OS_SLOTS 8u
#define HDR 64u             /* MPCCL_PROXY_OS_DATA_OFFSET */
#define HDR_MAGIC 0x726d6121u
#define KEY_MAX 2048

/* This test's piece header (the library's is the put kernel's; the proxy
 * reads none of it and writes the signal's value into its last 8 bytes). */
typedef struct {
    uint32_t magic, bytes;
    uint64_t offset; /* into the target's window */
    uint32_t sig;    /* 1: the piece signals */
    uint32_t from_src; /* 1: the data is at src_off in the sender's source buffer, not in the slot */
    uint64_t src_off;
} test_hdr_t;

typedef struct {
    uint64_t win_addr, sig_addr, win_klen, sig_klen;
    unsigned char win_key[KEY_MAX], sig_key[KEY_MAX];
} rank_keys_t;

typedef struct side {
    world_t *w;
    int me;
    mpccl_transport_t *t;
    rank_keys_t keys[MAXR];    /* allgathered */
    void *win_rkey[MAXR], *sig_rkey[MAXR]; /* unpacked on the proxy thread */
    uint64_t sent[MAXR];       /* signals put to each peer */
    char *src_buf;             /* pieces that leave from outside the slots */
    void *src_region;
    int calls;
    char bad[256];
} side_t;

static side_t sides[MAXR];
static int needs_flush; /* the case's "device" needs a NIC's writes flushed */

static int in_slot_block(cpu_heap_t *h, const void *p, size_t n)
{
    const char *c = p, *b = h->slot_block;
    return b && c >= b && c + n <= b + h->slot_block_bytes;
}

static size_t piece_len(const world_t *w, int src, int dst, uint32_t p)
{
    return 1 + mix(seed ^ 0x0aULL ^ mix(((uint64_t)src << 48) ^ ((uint64_t)dst << 40) ^ p)) % (w->slot_bytes[src] - HDR);
}

static int signals(uint32_t p) { return p % 5 == 4; }
static int from_source(uint32_t p) { return p % 3 == 1; }

/* Where src's piece p lands in dst's window: a region per source. */
static uint64_t piece_offset(const world_t *w, int src, uint32_t p)
{
    return ((uint64_t)src * (uint64_t)w->msgs + p) * w->slot_bytes[src];
}

static int test_rma_target(void *ctx, int peer, const void *hdr, uint32_t len, mpccl_proxy_rma_t *out)
{
    side_t *s = ctx;
    const test_hdr_t *h = hdr;
    s->calls++;
    if (h->magic != HDR_MAGIC || len != HDR + h->bytes) {
        snprintf(s->bad, sizeof(s->bad), "piece to %d: header magic %#x, len %u, bytes %u", peer, h->magic, len,
                 h->bytes);
        return -1;
    }
    const rank_keys_t *k = &s->keys[peer];
    if (!s->win_rkey[peer] && mpccl_ucx_rkey_unpack(s->t, peer, k->win_key, &s->win_rkey[peer]) != MPCCL_OK) return -1;
    if (!s->sig_rkey[peer] && mpccl_ucx_rkey_unpack(s->t, peer, k->sig_key, &s->sig_rkey[peer]) != MPCCL_OK) return -1;
    memset(out, 0, sizeof(*out));
    out->data_bytes = h->bytes;
    if (h->from_src) {
        out->src = s->src_buf + h->src_off;
        out->src_region = s->src_region;
    }
    out->data_addr = k->win_addr + h->offset;
    out->data_rkey = s->win_rkey[peer];
    if (h->sig) {
        out->sig_addr = k->sig_addr + (uint64_t)s->me * sizeof(uint64_t);
        out->sig_rkey = s->sig_rkey[peer];
        out->sig_value = ++s->sent[peer];
    }
    return 1;
}

static int refuse_deliver(void *ctx, int src, uint32_t piece, const void *host, const void *dev, uint32_t len,
                          volatile uint32_t *ack)
{
    side_t *s = ctx;
    snprintf(s->bad, sizeof(s->bad), "piece %u from %d delivered: GPU-direct puts have no delivery", piece, src);
    return 0;
}

/* The put kernel's side: data into the device slot, header into the staging. */
static void put_all(world_t *w, int me, mpccl_proxy_comm_t *pc, const mpccl_dev_link_t *os_links, double end)
{
    uint32_t K = OS_SLOTS, S = w->slot_bytes[me];
    kernel_post(pc, MPCCL_PROXY_WORK_PUT);
    for (int peer = 0; peer < w->n; peer++) {
        if (!w->remote[me][peer]) continue;
        const mpccl_dev_link_t *l = &os_links[peer];
        ck_assert_ptr_nonnull(l->rx_slots);
        ck_assert(in_slot_block(&w->heap[me], l->rx_slots, (size_t)K * S));
        for (uint32_t p = 0; p < (uint32_t)w->msgs; p++) {
            while ((int32_t)(*l->tx_ack - (p - K + 1)) < 0) {
                if (now_s() > end) ck_abort_msg("rank %d: piece %u to %d: no free slot", me, p, peer);
                sched_yield();
            }
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            size_t n = piece_len(w, me, peer, p);
            uint64_t src_off = ((uint64_t)peer * (uint64_t)w->msgs + p) * S;
            char *data = from_source(p) ? sides[me].src_buf + src_off : (char *)l->rx_slots + (size_t)(p % K) * S + HDR;
            for (size_t k = 0; k < n; k++) data[k] = (char)msg_byte(me, peer, 201, (int)p, k);
            test_hdr_t *h = (test_hdr_t *)(l->tx_slots + (size_t)(p % K) * S);
            *h = (test_hdr_t){HDR_MAGIC, (uint32_t)n, piece_offset(w, me, p), (uint32_t)signals(p),
                              (uint32_t)from_source(p), src_off};
            l->tx_len[p % K] = HDR + (uint32_t)n;
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            l->tx_ready[p % K] = p + 1;
        }
    }
    for (int peer = 0; peer < w->n; peer++) /* every put left: the GPU-direct kernel's end */
        while (w->remote[me][peer] && *os_links[peer].tx_ack != (uint32_t)w->msgs) {
            if (now_s() > end) ck_abort_msg("rank %d: acks from the proxy for %d stuck", me, peer);
            sched_yield();
        }
    kernel_done(pc, MPCCL_PROXY_WORK_PUT, &w->launches[me][MPCCL_PROXY_WORK_PUT]);
}

/* mpccl_proxy_run: a call on the proxy thread, its result returned. */
static int on_proxy(void *arg)
{
    *(pthread_t *)arg = pthread_self();
    return 7;
}

static void rma_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    side_t *s = &sides[me];
    memset(s, 0, sizeof(*s));
    s->w = w;
    s->me = me;
    s->t = t;
    mpccl_dev_link_t links[MAXR], os_links[MAXR];
    memset(os_links, 0, sizeof(os_links));
    for (int i = 0; i < w->n; i++) links[i] = (mpccl_dev_link_t){.kind = MPCCL_LINK_NVLINK, .pad = 77};
    mpccl_proxy_alloc_t al = cpu_allocator(&w->heap[me], w->split);
    /* A device that needs a NIC's writes flushed cannot take puts nobody
     * flushes; host memory is coherent, so only that case keeps one. */
    if (!needs_flush) al.flush = NULL;
    mpccl_proxy_os_t os = {
        .deliver = refuse_deliver, .rma_target = test_rma_target, .ctx = s, .nslots = OS_SLOTS, .rma_slots = 1};
    mpccl_proxy_comm_t *pc = NULL;
    ck_assert_msg(mpccl_proxy_attach(t, me, w->n, w->remote[me], w->nctas, w->nslots, w->slot_bytes[me], &al, links,
                                     &os, os_links, &pc) == MPCCL_OK,
                  "rank %d: attach: %s", me, mpccl_last_error());
    /* Staged slots cannot be put from, nor can a device whose NIC writes need
     * a flush take puts: only the GPU-direct layout without flush allows it. */
    ck_assert_int_eq(mpccl_proxy_os_rma(pc, 0), w->split && !al.flush);
    if (!w->split || al.flush) {
        for (int i = 0; i < w->n && !w->split; i++) ck_assert_ptr_null(os_links[i].rx_slots);
        detach_together(pc, t, bs, 0);
        return;
    }
    /* The window (a region per source) and the counters (one per source). */
    size_t win_bytes = (size_t)w->n * w->msgs * w->slot_bytes[me];
    unsigned char *win = calloc(1, win_bytes);
    uint64_t *sig = calloc(MAXR, sizeof(uint64_t));
    mpccl_ucx_mem_t wm, sm;
    ck_assert_int_eq(mpccl_ucx_mem_map(win, win_bytes, &wm), MPCCL_OK);
    ck_assert_int_eq(mpccl_ucx_mem_map(sig, MAXR * sizeof(uint64_t), &sm), MPCCL_OK);
    ck_assert(wm.packed_len <= KEY_MAX && sm.packed_len <= KEY_MAX);
    rank_keys_t *k = &s->keys[me];
    k->win_addr = (uintptr_t)win;
    k->sig_addr = (uintptr_t)sig;
    k->win_klen = wm.packed_len;
    k->sig_klen = sm.packed_len;
    memcpy(k->win_key, wm.packed, wm.packed_len);
    memcpy(k->sig_key, sm.packed, sm.packed_len);
    ck_assert_int_eq(mpccl_bootstrap_allgather(bs, s->keys, sizeof(rank_keys_t)), MPCCL_OK);
    size_t src_bytes = (size_t)w->n * w->msgs * w->slot_bytes[me];
    s->src_buf = calloc(1, src_bytes);
    ck_assert_ptr_nonnull(s->src_buf);
    ck_assert_int_eq(t->ops->region_open(t, s->src_buf, src_bytes, MPCCL_REGION_HOST, &s->src_region), MPCCL_OK);
    pthread_t ran_on = pthread_self();
    ck_assert_int_eq(mpccl_proxy_run(pc, on_proxy, &ran_on), 7);
    ck_assert(!pthread_equal(ran_on, pthread_self()));
    ck_assert_int_eq(mpccl_proxy_os_rma(pc, 1), 1);
    mpccl_bootstrap_barrier(bs); /* every rank put its proxy in GPU-direct mode */
    double end = now_s() + 60;
    put_all(w, me, pc, os_links, end);
    ck_assert_msg(!s->bad[0], "rank %d: %s", me, s->bad);
    ck_assert_int_eq(mpccl_proxy_error(pc), MPCCL_OK);
    /* The target: wait for each source's last signal, then every byte. */
    for (int src = 0; src < w->n; src++) {
        if (!w->remote[me][src]) continue;
        uint64_t want = 0;
        for (uint32_t p = 0; p < (uint32_t)w->msgs; p++) want += (uint64_t)signals(p);
        while (__atomic_load_n(&sig[src], __ATOMIC_ACQUIRE) != want) {
            if (now_s() > end) ck_abort_msg("rank %d: signal from %d at %llu, expected %llu", me, src,
                                            (unsigned long long)sig[src], (unsigned long long)want);
            sched_yield();
        }
        for (uint32_t p = 0; p < (uint32_t)w->msgs; p++) {
            const unsigned char *d = win + piece_offset(w, src, p);
            size_t n = piece_len(w, src, me, p);
            for (size_t b = 0; b < n; b++)
                if (d[b] != msg_byte(src, me, 201, (int)p, b))
                    ck_abort_msg("rank %d: piece %u from %d, byte %zu of %zu differs", me, p, src, b, n);
        }
    }
    ck_assert_int_eq(s->calls, (w->n - 1) * w->msgs);
    mpccl_bootstrap_barrier(bs);
    mpccl_proxy_detach(pc, 0);
    ck_assert_int_eq(w->heap[me].outstanding, 0);
    for (int i = 0; i < w->n; i++) {
        mpccl_ucx_rkey_destroy(s->win_rkey[i]);
        mpccl_ucx_rkey_destroy(s->sig_rkey[i]);
    }
    mpccl_bootstrap_barrier(bs);
    t->ops->region_close(t, s->src_region);
    t->ops->close(t, 0);
    mpccl_ucx_mem_unmap(&wm);
    mpccl_ucx_mem_unmap(&sm);
    free(win);
    free(sig);
    free(s->src_buf);
}

START_TEST(test_os_rma)
{
    /* 2 and 3 ranks, small slots and slots in UCX's rendezvous range; then
     * the staged layout and a device that needs flushes, which refuse
     * GPU-direct puts. */
    static const struct { int n; uint32_t slot; int msgs; int split, flush; } cases[] = {
        {2, 256, 200, 1, 0}, {3, 256, 120, 1, 0}, {2, 65536, 40, 1, 0}, {3, 512, 40, 0, 0}, {2, 256, 40, 1, 1}};
    world_t *w = calloc(1, sizeof(*w));
    w->n = cases[_i].n;
    all_remote(w);
    w->nctas = 2;
    w->nslots = 4;
    for (int r = 0; r < MAXR; r++) w->slot_bytes[r] = cases[_i].slot;
    w->msgs = cases[_i].msgs;
    w->split = cases[_i].split;
    needs_flush = cases[_i].flush;
    w->max_len = cases[_i].slot;
    w->body = rma_body;
    run_world(w);
    free(w);
}
END_TEST

int main(void)
{
    const proxy_test_case_t cases[] = {{"os_rma", test_os_rma, 5}};
    return proxy_test_main("proxy_rma", cases, sizeof(cases) / sizeof(cases[0]));
}
