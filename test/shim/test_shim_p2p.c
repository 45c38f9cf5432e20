/* Point-to-point semantics under libmpccl_shim.so: whatever route a message
 * takes (a device buffer's message travels as an envelope plus data beside
 * it), the program must see exactly what MPI promises -- contents, statuses,
 * matching order, request life cycles, errors, communicator separation.  This
 * is a plain MPI program (it does not link mpccl), so it runs unchanged with
 * and without the shim; without it, it checks the MPI underneath.
 *
 *   test_shim_p2p [--gpu] [--mixed] [--quick] [--verbose]
 *
 * --gpu      send and receive buffers from cudaMalloc (exit 77 without a
 *            usable GPU)
 * --mixed    (implies --gpu) per test, alternately: send buffers on the
 *            device and receive buffers on the host, then the reverse
 * --quick    fewer sizes, iterations and datatypes
 * --verbose  world rank 0 prints each test and its time
 * Seed: MPCCL_TEST_SEED (default 20261121), printed by rank 0.  A watchdog
 * (alarm) ends a rank that spends more than MPCCL_P2P_TEST_TIMEOUT seconds
 * (default 120, 0 = off) in one test, naming the test, so no run hangs.
 * Tests that need two ranks skip on a communicator of one. */
#define _GNU_SOURCE
#include "p2p_harness.h"

/* ---- blocking send/recv: sizes and datatypes ---- */

/* One blocking exchange around the ring (to the right, from the left).  Even
 * ranks send first and odd ranks receive first, so no cycle of blocking sends
 * can form even when every send waits for its receive.  The receive offers
 * 3 elements more than the message: the status must give the message's count. */
static void ring_blocking(const ptype_t *t, size_t count, int idx, int ssend)
{
    char what[160];
    snprintf(what, sizeof what, "%s of %zu x %s", ssend ? "Ssend" : "Send", count, t->name);
    buf_t s = sbuf_new(count * t->extent, key(T.me, T.right, idx));
    buf_t r = rbuf_new((count + 3) * t->extent);
    MPI_Status st;
    for (int phase = 0; phase < 2; phase++) {
        if ((phase == 0) == (T.me % 2 == 0)) {
            if (ssend)
                MPI_OK(MPI_Ssend(s.d, (int)count, t->dt, T.right, idx, T.comm));
            else
                MPI_OK(MPI_Send(s.d, (int)count, t->dt, T.right, idx, T.comm));
        } else {
            MPI_OK(MPI_Recv(r.d, (int)count + 3, t->dt, T.left, idx, T.comm, &st));
        }
    }
    check_status(&st, t, T.left, idx, count, what);
    check_data(&r, t, count, key(T.left, T.me, idx), what);
    bfree(&s), bfree(&r);
}

static const size_t sizes_full[] = {0, 1, 7, 8, 13, 100, 1024, 4096, 65535, 65536 + 3, 262144 + 1, 1048576 + 5};
static const size_t sizes_quick[] = {0, 1, 7, 8, 13, 4096, 65536 + 3, 1048576 + 5};

/* Elements of t for about `bytes` bytes: the tiny sizes as element counts. */
static size_t count_for(const ptype_t *t, size_t bytes)
{
    if (t->extent == 1 || bytes <= 13) return bytes;
    return bytes / t->extent + 1;
}

static void test_blocking(int full)
{
    if (!test_begin("blocking Send/Recv, sizes x datatypes", 2)) return;
    const size_t *sizes = quick ? sizes_quick : sizes_full;
    int nsizes = quick ? (int)(sizeof sizes_quick / sizeof sizes_quick[0]) : (int)(sizeof sizes_full / sizeof sizes_full[0]);
    for (int ti = 0; ti < NPTYPES; ti++)
        for (int si = 0; si < nsizes; si++) {
            /* secondary communicators: the large sizes in bytes only */
            if (!full && ti != P_BYTE && sizes[si] > 5000) continue;
            ring_blocking(&pt[ti], count_for(&pt[ti], sizes[si]), ti * 32 + si, 0);
        }
    test_end();
}

static void test_ssend(int full)
{
    if (!test_begin("Ssend ring", 2)) return;
    static const size_t sizes[] = {0, 1, 8, 4096, 65536 + 3, 1048576 + 5};
    int nsizes = full && !quick ? 6 : 5;
    for (int si = 0; si < nsizes; si++) ring_blocking(&pt[P_BYTE], sizes[si], si, 1);
    ring_blocking(&pt[P_DOUBLE], 1000, 10, 1);
    ring_blocking(&pt[P_VECTOR], 77, 11, 1);
    test_end();
}

/* Issend completes only once the matching receive has started: as long as
 * no rank has posted its receive (they wait at a barrier first), MPI_Test
 * must say "not yet" however often it is asked. */
static void test_issend(void)
{
    if (!test_begin("Issend + Test loop", 2)) return;
    static const size_t sizes[] = {0, 64, 200003};
    for (int si = 0; si < 3; si++) {
        size_t bytes = sizes[si];
        char what[96];
        snprintf(what, sizeof what, "Issend of %zu bytes", bytes);
        buf_t s = sbuf_new(bytes, key(T.me, T.right, si)), r = rbuf_new(bytes + 5);
        MPI_Request sr, rr;
        MPI_Status st, rst;
        int sdone = 0, rdone = 0;
        MPI_OK(MPI_Issend(s.d, (int)bytes, MPI_BYTE, T.right, 20 + si, T.comm, &sr));
        for (int k = 0; k < 10 && !sdone; k++) {
            MPI_OK(MPI_Test(&sr, &sdone, &st));
            if (sdone) FAIL("%s completed before its receive was posted", what);
            usleep(1000);
        }
        MPI_Barrier(T.comm); /* only now does anyone post a receive */
        MPI_OK(MPI_Irecv(r.d, (int)bytes + 5, MPI_BYTE, T.left, 20 + si, T.comm, &rr));
        while (!sdone || !rdone) {
            if (!sdone) MPI_OK(MPI_Test(&sr, &sdone, &st));
            if (!rdone) MPI_OK(MPI_Test(&rr, &rdone, &rst));
            if (!sdone || !rdone) relax();
        }
        if (sr != MPI_REQUEST_NULL || rr != MPI_REQUEST_NULL) FAIL("%s: completed requests not set to MPI_REQUEST_NULL", what);
        check_status(&rst, &pt[P_BYTE], T.left, 20 + si, bytes, what);
        check_data(&r, &pt[P_BYTE], bytes, key(T.left, T.me, si), what);
        bfree(&s), bfree(&r);
    }
    test_end();
}

/* Mostly small messages with a large one every 8th: eager and rendezvous
 * protocols (and the shim's inline and side paths) interleaved. */
static size_t ring_size(int tag)
{
    return tag % 8 == 7 ? 20000 + 13 * (size_t)tag : 5 * (size_t)tag;
}

static void test_waitall_ring(int full)
{
    if (!test_begin("Isend/Irecv ring, many outstanding, Waitall", 1)) return;
    int K = full && !quick ? 40 : 16, nreq = 4 * K;
    slot_t *sl = malloc(sizeof(slot_t) * (size_t)nreq);
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)nreq);
    MPI_Status *sts = malloc(sizeof(MPI_Status) * (size_t)nreq);
    for (int iter = 0; iter < 2; iter++) {
        /* tags 0..K-1 travel rightwards, K..2K-1 leftwards; iteration 0 posts
         * receives first, iteration 1 sends first */
        for (int k = 0; k < K; k++) {
            int base = iter == 0 ? 0 : 2 * K;
            slot_init(&sl[base + 2 * k], S_RECV, T.left, k, ring_size(k));
            slot_init(&sl[base + 2 * k + 1], S_RECV, T.right, K + k, ring_size(K + k));
            slot_init(&sl[2 * K - base + 2 * k], S_SEND, T.right, k, ring_size(k));
            slot_init(&sl[2 * K - base + 2 * k + 1], S_SEND, T.left, K + k, ring_size(K + k));
        }
        for (int i = 0; i < nreq; i++) slot_post(&sl[i], &req[i]);
        MPI_OK(MPI_Waitall(nreq, req, sts));
        for (int i = 0; i < nreq; i++) {
            if (req[i] != MPI_REQUEST_NULL) FAIL("Waitall left request %d active", i);
            slot_done(&sl[i], &sts[i], iter == 0 ? "Waitall (receives posted first)" : "Waitall (sends posted first)");
            slot_free(&sl[i]);
        }
    }
    free(sl), free(req), free(sts);
    test_end();
}

/* ---- matching: tags, wildcards, probes ---- */

static size_t tag_size(int j)
{
    return j % 3 == 1 ? 70000 + (size_t)j : 3 * (size_t)j;
}

static void test_tags(void)
{
    if (!test_begin("distinct tags in reverse order; MPI_ANY_TAG in send order", 1)) return;
    enum { M = 10 };
    slot_t s[M], r[M];
    MPI_Request sreq[M];
    MPI_Status st;
    /* every send posted, then blocking receives in the reverse order of tags:
     * each must find its own message, whatever arrived first */
    for (int j = 0; j < M; j++) {
        slot_init(&s[j], S_SEND, T.right, 100 + j, tag_size(j));
        slot_post(&s[j], &sreq[j]);
    }
    for (int j = M - 1; j >= 0; j--) {
        slot_init(&r[j], S_RECV, T.left, 100 + j, tag_size(j));
        MPI_OK(MPI_Recv(r[j].b.d, (int)r[j].bytes + 4, MPI_BYTE, T.left, 100 + j, T.comm, &st));
        slot_done(&r[j], &st, "Recv in reverse tag order");
    }
    MPI_OK(MPI_Waitall(M, sreq, MPI_STATUSES_IGNORE));
    for (int j = 0; j < M; j++) slot_free(&s[j]), slot_free(&r[j]);

    /* MPI_ANY_TAG from one source: the messages come in the order they were
     * sent, whatever their tags (7 is prime to M: distinct tags) */
    size_t cap = 70000 + M + 4;
    for (int j = 0; j < M; j++) {
        slot_init(&s[j], S_SEND, T.right, 200 + (7 * j) % M, tag_size(j));
        slot_post(&s[j], &sreq[j]);
    }
    buf_t rb = rbuf_new(cap);
    for (int j = 0; j < M; j++) {
        char what[96];
        snprintf(what, sizeof what, "MPI_ANY_TAG receive %d", j);
        int tag = 200 + (7 * j) % M;
        bguard(&rb);
        MPI_OK(MPI_Recv(rb.d, (int)cap, MPI_BYTE, T.left, MPI_ANY_TAG, T.comm, &st));
        check_status(&st, &pt[P_BYTE], T.left, tag, tag_size(j), what);
        check_data(&rb, &pt[P_BYTE], tag_size(j), key(T.left, T.me, tag), what);
    }
    MPI_OK(MPI_Waitall(M, sreq, MPI_STATUSES_IGNORE));
    for (int j = 0; j < M; j++) slot_free(&s[j]);
    bfree(&rb);
    test_end();
}

/* A size per (source, destination): a third of them past the eager limits. */
static size_t probe_size(int src, int dst)
{
    uint64_t h = h4((uint64_t)T.no, (uint64_t)src, (uint64_t)dst, 77);
    return h % 3 == 0 ? 70000 + (size_t)(h >> 8) % 1000 : (size_t)(h >> 8) % 300;
}

static void test_probe(void)
{
    if (!test_begin("MPI_ANY_SOURCE + Probe/Mprobe sized by Get_count; Iprobe loops", 1)) return;
    int n = T.n;
    slot_t *s = malloc(sizeof(slot_t) * (size_t)n);
    /* (the Iprobe part below reuses the first three) */
    MPI_Request *sreq = malloc(sizeof(MPI_Request) * (size_t)(n > 3 ? n : 3));
    char *seen = calloc((size_t)n, 1);
    /* one message to every rank (this one included), the tag naming the sender */
    for (int d = 0; d < n; d++) {
        slot_init(&s[d], S_SEND, d, 100 + T.me, probe_size(T.me, d));
        slot_post(&s[d], &sreq[d]);
    }
    /* the receiver learns source, tag and size from the probe alone, and
     * receives into a buffer of exactly that size */
    for (int i = 0; i < n; i++) {
        MPI_Status st, st2;
        MPI_Message msg = MPI_MESSAGE_NULL;
        int cnt = -1, mp = i % 2;
        const char *how = mp ? "Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG) + Mrecv" : "Probe(MPI_ANY_SOURCE, MPI_ANY_TAG) + Recv";
        if (mp) MPI_OK(MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, T.comm, &msg, &st));
        else MPI_OK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, T.comm, &st));
        int src = st.MPI_SOURCE;
        if (src < 0 || src >= n || seen[src]) FATAL("%s: source %d (tag %d) already received or not a rank", how, src, st.MPI_TAG);
        seen[src] = 1;
        check_status(&st, &pt[P_BYTE], src, 100 + src, probe_size(src, T.me), how);
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        if (cnt < 0) FATAL("%s: MPI_Get_count gave %d", how, cnt);
        buf_t r = rbuf_new((size_t)cnt);
        if (mp) {
            MPI_OK(MPI_Mrecv(r.d, cnt, MPI_BYTE, &msg, &st2));
            if (msg != MPI_MESSAGE_NULL) FAIL("%s: the message handle is not MPI_MESSAGE_NULL after MPI_Mrecv", how);
        } else {
            MPI_OK(MPI_Recv(r.d, cnt, MPI_BYTE, src, st.MPI_TAG, T.comm, &st2));
        }
        check_status(&st2, &pt[P_BYTE], src, 100 + src, probe_size(src, T.me), how);
        check_data(&r, &pt[P_BYTE], (size_t)cnt, key(src, T.me, 100 + src), how);
        bfree(&r);
    }
    MPI_OK(MPI_Waitall(n, sreq, MPI_STATUSES_IGNORE));
    for (int d = 0; d < n; d++) slot_free(&s[d]);

    /* Iprobe loops: the message shows up eventually, probing does not
     * consume it, and a tag nobody sends on shows nothing.  (The barrier:
     * these messages must not meet another rank's wildcard probes above.) */
    MPI_Barrier(T.comm);
    static const size_t isz[3] = {5, 90000, 0};
    slot_t is[3];
    for (int j = 0; j < 3; j++) {
        slot_init(&is[j], S_SEND, T.right, 200 + j, isz[j]);
        slot_post(&is[j], &sreq[j]);
    }
    for (int jj = 0; jj < 3; jj++) {
        int j = (jj + 2) % 3, flag = 0, c1 = -1, c2 = -1;
        MPI_Status st;
        while (!flag) {
            MPI_OK(MPI_Iprobe(MPI_ANY_SOURCE, 200 + j, T.comm, &flag, &st));
            if (!flag) relax();
        }
        check_status(&st, &pt[P_BYTE], T.left, 200 + j, isz[j], "Iprobe(MPI_ANY_SOURCE)");
        MPI_Get_count(&st, MPI_BYTE, &c1);
        flag = 0;
        MPI_OK(MPI_Iprobe(T.left, 200 + j, T.comm, &flag, &st));
        MPI_Get_count(&st, MPI_BYTE, &c2);
        if (!flag || c2 != c1) FAIL("a second Iprobe of tag %d: flag %d count %d (the first: count %d)", 200 + j, flag, c2, c1);
        slot_t r;
        slot_init(&r, S_RECV, T.left, 200 + j, isz[j]);
        MPI_OK(MPI_Recv(r.b.d, (int)isz[j], MPI_BYTE, T.left, 200 + j, T.comm, &st));
        slot_done(&r, &st, "Recv after Iprobe");
        slot_free(&r);
    }
    int flag = 1;
    MPI_Status st;
    MPI_OK(MPI_Iprobe(MPI_ANY_SOURCE, 299, T.comm, &flag, &st));
    if (flag) FAIL("Iprobe found a message on tag 299 (source %d), which nobody sends", st.MPI_SOURCE);
    MPI_OK(MPI_Waitall(3, sreq, MPI_STATUSES_IGNORE));
    for (int j = 0; j < 3; j++) slot_free(&is[j]);
    free(s), free(sreq), free(seen);
    test_end();
}

/* Matched probes: the message is taken off the queue by the probe and
 * received later, in another order; a probe of MPI_PROC_NULL gives
 * MPI_MESSAGE_NO_PROC. */
static void test_mprobe(void)
{
    if (!test_begin("Mprobe + Mrecv, Improbe + Imrecv", 1)) return;
    static const size_t msz[3] = {37, 150000, 0};
    slot_t s[3], r[3];
    MPI_Request sreq[3], rreq[2];
    MPI_Message m[3];
    MPI_Status st, sts[2];
    int flag = 0;
    for (int j = 0; j < 3; j++) {
        slot_init(&s[j], S_SEND, T.right, 300 + j, msz[j]);
        slot_post(&s[j], &sreq[j]);
        slot_init(&r[j], S_RECV, T.left, 300 + j, msz[j]);
    }
    MPI_OK(MPI_Mprobe(T.left, 301, T.comm, &m[1], &st));
    check_status(&st, &pt[P_BYTE], T.left, 301, msz[1], "Mprobe");
    while (!flag) {
        MPI_OK(MPI_Improbe(T.left, 300, T.comm, &flag, &m[0], &st));
        if (!flag) relax();
    }
    check_status(&st, &pt[P_BYTE], T.left, 300, msz[0], "Improbe");
    for (flag = 0; !flag;) {
        MPI_OK(MPI_Improbe(MPI_ANY_SOURCE, 302, T.comm, &flag, &m[2], &st));
        if (!flag) relax();
    }
    check_status(&st, &pt[P_BYTE], T.left, 302, msz[2], "Improbe(MPI_ANY_SOURCE)");
    /* a matched message is gone from the queue: nothing more to probe */
    MPI_Message none = MPI_MESSAGE_NULL;
    MPI_OK(MPI_Improbe(MPI_ANY_SOURCE, 300, T.comm, &flag, &none, &st));
    if (flag) FAIL("Improbe found tag 300 again after it was matched (source %d)", st.MPI_SOURCE);
    MPI_OK(MPI_Imrecv(r[0].b.d, (int)msz[0] + 4, MPI_BYTE, &m[0], &rreq[0]));
    MPI_OK(MPI_Mrecv(r[1].b.d, (int)msz[1] + 4, MPI_BYTE, &m[1], &st));
    slot_done(&r[1], &st, "Mrecv");
    MPI_OK(MPI_Imrecv(r[2].b.d, (int)msz[2] + 4, MPI_BYTE, &m[2], &rreq[1]));
    for (int j = 0; j < 3; j++)
        if (m[j] != MPI_MESSAGE_NULL) FAIL("message handle %d not MPI_MESSAGE_NULL after (I)Mrecv", j);
    MPI_OK(MPI_Waitall(2, rreq, sts));
    slot_done(&r[0], &sts[0], "Imrecv");
    slot_done(&r[2], &sts[1], "Imrecv");
    MPI_OK(MPI_Waitall(3, sreq, MPI_STATUSES_IGNORE));
    for (int j = 0; j < 3; j++) slot_free(&s[j]), slot_free(&r[j]);

    MPI_Message pm;
    buf_t pb = rbuf_new(16);
    MPI_OK(MPI_Mprobe(MPI_PROC_NULL, 5, T.comm, &pm, &st));
    if (pm != MPI_MESSAGE_NO_PROC) FAIL("Mprobe(MPI_PROC_NULL) did not give MPI_MESSAGE_NO_PROC");
    check_proc_null(&st, "Mprobe(MPI_PROC_NULL)");
    MPI_OK(MPI_Mrecv(pb.d, 16, MPI_BYTE, &pm, &st));
    check_proc_null(&st, "Mrecv(MPI_MESSAGE_NO_PROC)");
    check_data(&pb, &pt[P_BYTE], 0, 0, "Mrecv(MPI_MESSAGE_NO_PROC)");
    bfree(&pb);
    test_end();
}

/* ---- ordering ---- */

/* Tiny and large alternate: a large message must never be overtaken by the
 * tiny one sent after it, whatever protocol each takes. */
static size_t order_size(int i, size_t large)
{
    return i % 2 ? large + (size_t)i : (size_t)(i % 5);
}

static void test_order(int full)
{
    if (!test_begin("non-overtaking: one source and tag, tiny and large alternating", 1)) return;
    int M = quick ? 8 : 16;
    size_t large = full && !quick ? 200000 : 40000, cap = large + (size_t)M + 8;
    slot_t *s = malloc(sizeof(slot_t) * (size_t)M);
    buf_t *r = malloc(sizeof(buf_t) * (size_t)M);
    MPI_Request *sreq = malloc(sizeof(MPI_Request) * (size_t)M), *rreq = malloc(sizeof(MPI_Request) * (size_t)M);
    MPI_Status *sts = malloc(sizeof(MPI_Status) * (size_t)M);
    /* variant 0: all receives posted before any send (a barrier between);
     * variant 1: all sends before any receive, so messages arrive unexpected */
    for (int v = 0; v < 2; v++) {
        int tag = 400 + v;
        for (int i = 0; i < M; i++) r[i] = rbuf_new(cap);
        if (v == 0)
            for (int i = 0; i < M; i++) MPI_OK(MPI_Irecv(r[i].d, (int)cap, MPI_BYTE, T.left, tag, T.comm, &rreq[i]));
        MPI_Barrier(T.comm);
        for (int i = 0; i < M; i++) {
            /* the contents say which message this is: keyed by v * 64 + i */
            s[i] = (slot_t){S_SEND, T.right, tag, order_size(i, large), sbuf_new(order_size(i, large), key(T.me, T.right, v * 64 + i)), 0};
            MPI_OK(MPI_Isend(s[i].b.d, (int)s[i].bytes, MPI_BYTE, T.right, tag, T.comm, &sreq[i]));
        }
        if (v == 0) {
            MPI_OK(MPI_Waitall(M, rreq, sts));
        } else {
            MPI_Barrier(T.comm);
            for (int i = 0; i < M; i++) MPI_OK(MPI_Recv(r[i].d, (int)cap, MPI_BYTE, T.left, tag, T.comm, &sts[i]));
        }
        for (int i = 0; i < M; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s message %d", v ? "unexpected" : "pre-posted", i);
            check_status(&sts[i], &pt[P_BYTE], T.left, tag, order_size(i, large), what);
            check_data(&r[i], &pt[P_BYTE], order_size(i, large), key(T.left, T.me, v * 64 + i), what);
        }
        MPI_OK(MPI_Waitall(M, sreq, MPI_STATUSES_IGNORE));
        for (int i = 0; i < M; i++) bfree(&r[i]), slot_free(&s[i]);
    }
    free(s), free(r), free(sreq), free(rreq), free(sts);

    /* every rank to every rank, three tags, received with MPI_ANY_SOURCE and
     * MPI_ANY_TAG: per source, the order of sending */
    int n = T.n, M2 = quick ? 4 : 6, ns = n * M2;
    size_t large2 = 30000, cap2 = large2 + (size_t)M2 + 8;
    s = malloc(sizeof(slot_t) * (size_t)ns);
    sreq = malloc(sizeof(MPI_Request) * (size_t)ns);
    int *next = calloc((size_t)n, sizeof(int));
    for (int i = 0; i < M2; i++)
        for (int d = 0; d < n; d++) {
            slot_t *x = &s[i * n + d];
            *x = (slot_t){S_SEND, d, 500 + i % 3, order_size(i, large2), sbuf_new(order_size(i, large2), key(T.me, d, 128 + i)), 0};
            MPI_OK(MPI_Isend(x->b.d, (int)x->bytes, MPI_BYTE, d, x->tag, T.comm, &sreq[i * n + d]));
        }
    buf_t rb = rbuf_new(cap2);
    for (int k = 0; k < ns; k++) {
        MPI_Status st;
        char what[96];
        bguard(&rb);
        MPI_OK(MPI_Recv(rb.d, (int)cap2, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, T.comm, &st));
        int src = st.MPI_SOURCE;
        if (src < 0 || src >= n || next[src] >= M2) FATAL("MPI_ANY_SOURCE receive: source %d unexpected", src);
        int i = next[src]++;
        snprintf(what, sizeof what, "MPI_ANY_SOURCE/MPI_ANY_TAG: message %d from rank %d", i, src);
        check_status(&st, &pt[P_BYTE], src, 500 + i % 3, order_size(i, large2), what);
        check_data(&rb, &pt[P_BYTE], order_size(i, large2), key(src, T.me, 128 + i), what);
    }
    MPI_OK(MPI_Waitall(ns, sreq, MPI_STATUSES_IGNORE));
    for (int k = 0; k < ns; k++) slot_free(&s[k]);
    bfree(&rb);
    free(s), free(sreq), free(next);
    test_end();
}

/* ---- MPI_PROC_NULL and zero counts ---- */
static void test_proc_null(void)
{
    if (!test_begin("MPI_PROC_NULL and zero counts", 1)) return;
    MPI_Status st, sts[2];
    MPI_Request q[2];
    int flag = 0;
    buf_t s = sbuf_new(100, key(T.me, MPI_PROC_NULL, 0)), r = rbuf_new(100);
    MPI_OK(MPI_Send(s.d, 100, MPI_BYTE, MPI_PROC_NULL, 7, T.comm));
    MPI_OK(MPI_Recv(r.d, 100, MPI_BYTE, MPI_PROC_NULL, 7, T.comm, &st));
    check_proc_null(&st, "Recv(MPI_PROC_NULL)");
    MPI_OK(MPI_Isend(s.d, 100, MPI_BYTE, MPI_PROC_NULL, 7, T.comm, &q[0]));
    MPI_OK(MPI_Irecv(r.d, 100, MPI_BYTE, MPI_PROC_NULL, 7, T.comm, &q[1]));
    MPI_OK(MPI_Waitall(2, q, sts));
    check_proc_null(&sts[1], "Irecv(MPI_PROC_NULL)");
    MPI_OK(MPI_Probe(MPI_PROC_NULL, 7, T.comm, &st));
    check_proc_null(&st, "Probe(MPI_PROC_NULL)");
    MPI_OK(MPI_Iprobe(MPI_PROC_NULL, 7, T.comm, &flag, &st));
    if (!flag) FAIL("Iprobe(MPI_PROC_NULL) gave flag 0");
    check_proc_null(&st, "Iprobe(MPI_PROC_NULL)");
    MPI_OK(MPI_Sendrecv(s.d, 100, MPI_BYTE, MPI_PROC_NULL, 7, r.d, 100, MPI_BYTE, MPI_PROC_NULL, 7, T.comm, &st));
    check_proc_null(&st, "Sendrecv(MPI_PROC_NULL)");
    check_data(&r, &pt[P_BYTE], 0, 0, "receives from MPI_PROC_NULL");
    bfree(&s), bfree(&r);

    /* zero counts to a real rank: from a buffer, from NULL, of a derived type;
     * the status says 0 and the (larger) receive buffer is untouched */
    buf_t z = sbuf_new(16, key(T.me, T.right, 1)), rz = rbuf_new(16), rv = rbuf_new(2 * pt[P_VECTOR].extent);
    MPI_Request zq[3];
    MPI_OK(MPI_Isend(z.d, 0, MPI_BYTE, T.right, 600, T.comm, &zq[0]));
    MPI_OK(MPI_Isend(NULL, 0, MPI_INT, T.right, 601, T.comm, &zq[1]));
    MPI_OK(MPI_Isend(z.d, 0, pt[P_VECTOR].dt, T.right, 602, T.comm, &zq[2]));
    MPI_OK(MPI_Recv(rz.d, 16, MPI_BYTE, T.left, 600, T.comm, &st));
    check_status(&st, &pt[P_BYTE], T.left, 600, 0, "zero bytes into 16");
    MPI_OK(MPI_Recv(NULL, 0, MPI_INT, T.left, 601, T.comm, &st));
    check_status(&st, &pt[P_INT], T.left, 601, 0, "zero ints into NULL");
    MPI_OK(MPI_Recv(rv.d, 2, pt[P_VECTOR].dt, T.left, 602, T.comm, &st));
    check_status(&st, &pt[P_VECTOR], T.left, 602, 0, "zero vectors into 2");
    MPI_OK(MPI_Waitall(3, zq, MPI_STATUSES_IGNORE));
    check_data(&rz, &pt[P_BYTE], 0, 0, "zero bytes into 16");
    check_data(&rv, &pt[P_BYTE], 0, 0, "zero vectors into 2");
    bfree(&z), bfree(&rz), bfree(&rv);
    test_end();
}

/* ---- truncation ---- */

static int err_class(int rc)
{
    int cls = -1;
    MPI_Error_class(rc, &cls);
    return cls;
}

/* Sends bytes to the right and receives with room for only cap (MPI_Recv,
 * or Irecv + Wait): MPI_ERR_TRUNCATE, the right status, and the send
 * completes normally.  Nothing may be written past cap -- checked for small
 * messages only: Open MPI 4.1 itself copies the whole of a truncated message
 * that goes through its self BTL (from about 1 KB) or vader's single-copy
 * path (from about 4 KB).  So the buffer has room for the whole message, and
 * the tests that truncate need a peer other than the rank itself. */
static void truncate_one(MPI_Comm d, size_t bytes, size_t cap, int tag, int nonblocking)
{
    char what[96];
    int guarded = bytes <= 1024;
    snprintf(what, sizeof what, "%s of %zu bytes into %zu", nonblocking ? "Irecv+Wait" : "Recv", bytes, cap);
    buf_t s = sbuf_new(bytes, key(T.me, T.right, tag)), r = rbuf_new(bytes + 16);
    MPI_Request sr, rr;
    MPI_Status st;
    int rc;
    MPI_OK(MPI_Isend(s.d, (int)bytes, MPI_BYTE, T.right, tag, d, &sr));
    if (nonblocking) {
        MPI_OK(MPI_Irecv(r.d, (int)cap, MPI_BYTE, T.left, tag, d, &rr));
        rc = MPI_Wait(&rr, &st);
    } else {
        rc = MPI_Recv(r.d, (int)cap, MPI_BYTE, T.left, tag, d, &st);
    }
    if (err_class(rc) != MPI_ERR_TRUNCATE) FAIL("%s returned %d (class %d), expected MPI_ERR_TRUNCATE", what, rc, err_class(rc));
    if (st.MPI_SOURCE != T.left || st.MPI_TAG != tag)
        FAIL("%s: status source %d tag %d, expected %d %d", what, st.MPI_SOURCE, st.MPI_TAG, T.left, tag);
    get(r.h, r.d, r.bytes, r.dev);
    for (size_t j = cap; guarded && j < r.bytes; j++)
        if (r.h[j] != GUARD) {
            FAIL("%s: byte %zu past the receive buffer was written", what, j - cap);
            break;
        }
    rc = MPI_Wait(&sr, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) FAIL("%s: the send's MPI_Wait returned %d", what, rc);
    bfree(&s), bfree(&r);
}

/* An ordinary exchange after the errors: the communicator still works. */
static void still_usable(MPI_Comm c, const char *cname)
{
    static const size_t sz[2] = {1000, 100003};
    for (int j = 0; j < 2; j++) {
        char what[96];
        snprintf(what, sizeof what, "%zu bytes on %s after the truncations", sz[j], cname);
        buf_t s = sbuf_new(sz[j], key(T.me, T.right, 720 + j)), r = rbuf_new(sz[j] + 4);
        MPI_Request q;
        MPI_Status st;
        MPI_OK(MPI_Isend(s.d, (int)sz[j], MPI_BYTE, T.right, 720 + j, c, &q));
        MPI_OK(MPI_Recv(r.d, (int)sz[j] + 4, MPI_BYTE, T.left, 720 + j, c, &st));
        MPI_OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        check_status(&st, &pt[P_BYTE], T.left, 720 + j, sz[j], what);
        check_data(&r, &pt[P_BYTE], sz[j], key(T.left, T.me, 720 + j), what);
        bfree(&s), bfree(&r);
    }
}

static void test_truncate(void)
{
    if (!test_begin("truncation: MPI_ERR_TRUNCATE under MPI_ERRORS_RETURN", 2)) return;
    MPI_Comm d;
    MPI_Comm_dup(T.comm, &d);
    MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN);
    truncate_one(d, 100, 10, 700, 0);
    truncate_one(d, 1000, 999, 704, 0);
    truncate_one(d, 200000, 1000, 701, 0);
    truncate_one(d, 65536 + 3, 65536, 702, 1);
    truncate_one(d, 9, 0, 703, 1);

    /* Waitall with one truncated receive among good ones: MPI_ERR_IN_STATUS,
     * the per-request error in each status (the truncated one's buffer has
     * room for all of it, as above) */
    slot_t s[2], r[2];
    MPI_Request sreq[2], rreq[2];
    MPI_Status sts[2];
    slot_init(&s[0], S_SEND, T.right, 710, 5000);
    slot_init(&s[1], S_SEND, T.right, 711, 80000);
    slot_init(&r[0], S_RECV, T.left, 710, 5000);
    slot_init(&r[1], S_RECV, T.left, 711, 80000);
    MPI_OK(MPI_Irecv(r[0].b.d, 5004, MPI_BYTE, T.left, 710, d, &rreq[0]));
    MPI_OK(MPI_Irecv(r[1].b.d, 100, MPI_BYTE, T.left, 711, d, &rreq[1]));
    for (int j = 0; j < 2; j++) MPI_OK(MPI_Isend(s[j].b.d, (int)s[j].bytes, MPI_BYTE, T.right, s[j].tag, d, &sreq[j]));
    int rc = MPI_Waitall(2, rreq, sts);
    if (err_class(rc) != MPI_ERR_IN_STATUS) FAIL("Waitall with a truncated receive returned class %d, expected MPI_ERR_IN_STATUS", err_class(rc));
    else {
        if (sts[0].MPI_ERROR != MPI_SUCCESS) FAIL("Waitall: the good receive's status error is %d", sts[0].MPI_ERROR);
        if (err_class(sts[1].MPI_ERROR) != MPI_ERR_TRUNCATE) FAIL("Waitall: the truncated receive's status error has class %d", err_class(sts[1].MPI_ERROR));
    }
    slot_done(&r[0], &sts[0], "Waitall next to a truncated receive");
    rc = MPI_Waitall(2, sreq, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) FAIL("the sends' Waitall returned %d", rc);
    for (int j = 0; j < 2; j++) slot_free(&s[j]), slot_free(&r[j]);

    still_usable(d, "the dup");
    still_usable(T.comm, T.cname);
    MPI_Comm_free(&d);
    test_end();
}

/* ---- Sendrecv ---- */
static void test_sendrecv(int full)
{
    if (!test_begin("Sendrecv and Sendrecv_replace rings, periodic and with MPI_PROC_NULL ends", 1)) return;
    static const size_t sizes[] = {0, 13, 4096, 100003, 1048576 + 5};
    int nsizes = full && !quick ? 5 : 4;
    for (int periodic = 1; periodic >= 0; periodic--) {
        int dst = T.right, src = T.left;
        if (!periodic && T.me == T.n - 1) dst = MPI_PROC_NULL;
        if (!periodic && T.me == 0) src = MPI_PROC_NULL;
        for (int si = 0; si < nsizes; si++) {
            /* the size depends on the sender: the count must be the left rank's */
            size_t mine = sizes[si] ? sizes[si] + 3 * (size_t)T.me : 0, theirs = sizes[si] ? sizes[si] + 3 * (size_t)T.left : 0;
            size_t cap = sizes[si] + 3 * (size_t)T.n + 8;
            int idx = periodic * 16 + si, tag = 800 + idx;
            char what[96];
            snprintf(what, sizeof what, "Sendrecv of about %zu bytes%s", sizes[si], periodic ? "" : " (open ends)");
            buf_t s = sbuf_new(mine, key(T.me, T.right, idx)), r = rbuf_new(cap);
            MPI_Status st;
            MPI_OK(MPI_Sendrecv(s.d, (int)mine, MPI_BYTE, dst, tag, r.d, (int)cap, MPI_BYTE, src, tag, T.comm, &st));
            if (src == MPI_PROC_NULL) {
                check_proc_null(&st, what);
                check_data(&r, &pt[P_BYTE], 0, 0, what);
            } else {
                check_status(&st, &pt[P_BYTE], T.left, tag, theirs, what);
                check_data(&r, &pt[P_BYTE], theirs, key(T.left, T.me, idx), what);
            }
            bfree(&s), bfree(&r);
        }
        /* in place: bytes, and a vector type whose holes must keep their
         * contents; a rank receiving from MPI_PROC_NULL keeps its own data */
        struct { int t; size_t count; } rp[] = {{P_BYTE, 0}, {P_BYTE, 777}, {P_BYTE, 300001}, {P_VECTOR, 5}, {P_VECTOR, 3001}};
        int nrp = full && !quick ? 5 : 4;
        for (int k = 0; k < nrp; k++) {
            const ptype_t *t = &pt[rp[k].t];
            size_t count = rp[k].count, span = count * t->extent;
            int idx = 64 + periodic * 16 + k, tag = 850 + idx;
            char what[96];
            snprintf(what, sizeof what, "Sendrecv_replace of %zu x %s%s", count, t->name, periodic ? "" : " (open ends)");
            buf_t b = balloc(span, T.sdev);
            expected_bytes(b.h, span, t, count, key(T.me, T.right, idx));
            put(b.d, b.h, span, b.dev);
            MPI_Status st;
            MPI_OK(MPI_Sendrecv_replace(b.d, (int)count, t->dt, dst, tag, src, tag, T.comm, &st));
            if (src == MPI_PROC_NULL) {
                check_proc_null(&st, what);
                check_data(&b, t, count, key(T.me, T.right, idx), what);
            } else {
                check_status(&st, t, T.left, tag, count, what);
                check_data(&b, t, count, key(T.left, T.me, idx), what);
            }
            bfree(&b);
        }
    }
    test_end();
}

/* Every rank sends (blocking, standard mode) before it receives: with small
 * messages MPI buffers them, and the shim must not turn that into a wait for
 * the receiver. */
static void test_send_first(void)
{
    if (!test_begin("everyone sends first (<= 1 KB), then receives", 2)) return;
    static const size_t rsz[4] = {0, 1, 512, 1024}, lsz[4] = {1024, 100, 8, 1};
    buf_t sr[4], sl[4];
    for (int k = 0; k < 4; k++) {
        sr[k] = sbuf_new(rsz[k], key(T.me, T.right, k));
        sl[k] = sbuf_new(lsz[k], key(T.me, T.left, 4 + k));
    }
    for (int k = 0; k < 4; k++) MPI_OK(MPI_Send(sr[k].d, (int)rsz[k], MPI_BYTE, T.right, 900 + k, T.comm));
    for (int k = 0; k < 4; k++) MPI_OK(MPI_Send(sl[k].d, (int)lsz[k], MPI_BYTE, T.left, 904 + k, T.comm));
    for (int k = 0; k < 8; k++) {
        size_t bytes = k < 4 ? rsz[k] : lsz[k - 4];
        int from = k < 4 ? T.left : T.right;
        char what[64];
        snprintf(what, sizeof what, "message %d of %zu bytes", k, bytes);
        buf_t r = rbuf_new(bytes + 2);
        MPI_Status st;
        MPI_OK(MPI_Recv(r.d, (int)bytes + 2, MPI_BYTE, from, 900 + k, T.comm, &st));
        check_status(&st, &pt[P_BYTE], from, 900 + k, bytes, what);
        check_data(&r, &pt[P_BYTE], bytes, key(from, T.me, k), what);
        bfree(&r);
    }
    for (int k = 0; k < 4; k++) bfree(&sr[k]), bfree(&sl[k]);
    test_end();
}

/* ---- all of it on one communicator ---- */
static void suite(MPI_Comm comm, const char *cname, int full)
{
    T.comm = comm, T.cname = cname;
    test_blocking(full);
    test_ssend(full);
    test_issend();
    test_waitall_ring(full);
    test_tags();
    test_probe();
    test_mprobe();
    test_order(full);
    test_proc_null();
    test_truncate();
    test_sendrecv(full);
    test_send_first();
    test_completion();
    test_persistent(full);
    test_cancel();
    test_halo(full);
    test_window();
}

int main(int argc, char **argv)
{
    int nworld;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nworld);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gpu")) use_gpu = 1;
        else if (!strcmp(argv[i], "--mixed")) use_gpu = mixed = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--verbose")) verbose = 1;
        else {
            if (world_rank == 0) fprintf(stderr, "usage: %s [--gpu] [--mixed] [--quick] [--verbose]\n", argv[0]);
            MPI_Finalize();
            return 99;
        }
    }
    if (getenv("MPCCL_P2P_TEST_TIMEOUT")) watch_s = (unsigned)strtoul(getenv("MPCCL_P2P_TEST_TIMEOUT"), NULL, 0);
    signal(SIGALRM, on_alarm);
    fail_context = p2p_fail_context;
    int setup = shim_test_setup();
    if (setup) {
        MPI_Finalize();
        return setup;
    }
    init_types();
    /* informational: whether this run goes through the shim at all */
    int shim = dlsym(RTLD_DEFAULT, "mpcclShimCount") != NULL;
    if (world_rank == 0)
        printf("test_shim_p2p: %d ranks, %s buffers, shim %s, seed %llu (MPCCL_TEST_SEED), watchdog %u s\n", nworld,
               mixed ? "device/host mixed" : use_gpu ? "device" : "host", shim ? "loaded" : "not loaded", seed, watch_s);
    double t0 = MPI_Wtime();

    suite(MPI_COMM_WORLD, "MPI_COMM_WORLD", 1);
    /* odd/even halves, ranks in reverse order: neighbours differ from the world's */
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, -world_rank, &half);
    suite(half, "odd/even split", !quick);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    suite(dup, "dup of MPI_COMM_WORLD", 0);
    test_separation(MPI_COMM_WORLD, "MPI_COMM_WORLD", dup, "its dup");
    test_separation(MPI_COMM_WORLD, "MPI_COMM_WORLD", half, "the odd/even split");
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    alarm(0);

    for (int t = 0; t < NPTYPES; t++)
        if (t >= P_VECTOR) MPI_Type_free(&pt[t].dt);
    int all = 0, allskip = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Reduce(&skipped, &allskip, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (world_rank == 0)
        printf("test_shim_p2p: %s (%d failures; %d tests, %d skipped for too few ranks) in %.1f s\n",
               all ? "FAILED" : "passed", all, ntests, allskip, MPI_Wtime() - t0);
    MPI_Finalize();
    return all ? 1 : 0;
}
