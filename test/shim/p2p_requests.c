/* test_shim_p2p's tests of request life cycles and communicators:
 * completion calls over mixed request sets, persistent requests, cancel and
 * MPI_Request_free, communicator separation, and a 1-D halo exchange. */
#define _GNU_SOURCE
#include "p2p_harness.h"

/* ---- completion calls over mixed request sets ---- */
void test_completion(void)
{
    if (!test_begin("Waitany, Waitsome, Testany, Testsome, Testall over mixed sets", 1)) return;
    static const char *const how[] = {"Waitany", "Waitsome", "Testany", "Testsome", "Testall"};
    enum { M = 6, NS = 3 * M }; /* M receives, M sends, M null requests */
    for (int h = 0; h < 5; h++) {
        slot_t sl[NS];
        MPI_Request req[NS];
        MPI_Status sts[NS], st;
        int order[NS], idx[NS], out, flag, index;
        for (int j = 0; j < M; j++) {
            int tag = 1000 + 10 * h + j;
            size_t bytes = j % 3 == 2 ? 50000 + (size_t)j : (size_t)(7 * j);
            slot_init(&sl[j], S_RECV, T.left, tag, bytes);
            slot_init(&sl[M + j], S_SEND, T.right, tag, bytes);
            slot_init(&sl[2 * M + j], S_NULL, 0, 0, 0);
        }
        /* request i is slot order[i]: a shuffle, different on every rank */
        for (int i = 0; i < NS; i++) order[i] = i;
        for (int i = NS - 1; i > 0; i--) {
            int j = (int)(h4((uint64_t)T.no, (uint64_t)T.me, (uint64_t)h, (uint64_t)i) % (uint64_t)(i + 1)), x = order[i];
            order[i] = order[j], order[j] = x;
        }
        for (int i = 0; i < NS; i++) slot_post(&sl[order[i]], &req[i]);
        int calls = 0;
        switch (h) {
        case 0:
            for (;;) {
                MPI_OK(MPI_Waitany(NS, req, &index, &st));
                if (index == MPI_UNDEFINED) break;
                if (req[index] != MPI_REQUEST_NULL) FAIL("Waitany left request %d active", index);
                slot_done(&sl[order[index]], &st, how[h]);
                if (++calls > NS) FATAL("Waitany never says MPI_UNDEFINED");
            }
            check_empty(&st, "Waitany with no active request");
            break;
        case 1:
        case 3:
            for (;;) {
                if (h == 1) MPI_OK(MPI_Waitsome(NS, req, &out, idx, sts));
                else MPI_OK(MPI_Testsome(NS, req, &out, idx, sts));
                if (out == MPI_UNDEFINED) break;
                if (out == 0) {
                    if (h == 1) FAIL("Waitsome returned no request");
                    relax();
                }
                for (int k = 0; k < out; k++) slot_done(&sl[order[idx[k]]], &sts[k], how[h]);
                if (out && ++calls > NS) FATAL("%s never says MPI_UNDEFINED", how[h]);
            }
            break;
        case 2:
            for (;;) {
                MPI_OK(MPI_Testany(NS, req, &index, &flag, &st));
                if (flag && index == MPI_UNDEFINED) break;
                if (!flag) {
                    relax();
                    continue;
                }
                slot_done(&sl[order[index]], &st, how[h]);
                if (++calls > NS) FATAL("Testany never says MPI_UNDEFINED");
            }
            check_empty(&st, "Testany with no active request");
            break;
        case 4:
            for (flag = 0; !flag;) {
                MPI_OK(MPI_Testall(NS, req, &flag, sts));
                if (!flag) relax();
            }
            for (int i = 0; i < NS; i++) {
                if (sl[order[i]].kind == S_NULL) check_empty(&sts[i], "Testall: status of MPI_REQUEST_NULL");
                else slot_done(&sl[order[i]], &sts[i], how[h]);
            }
            break;
        }
        for (int i = 0; i < NS; i++) {
            if (req[i] != MPI_REQUEST_NULL) FAIL("%s left request %d active", how[h], i);
            if (sl[i].kind != S_NULL && !sl[i].done) FAIL("%s never completed the request with tag %d", how[h], sl[i].tag);
            slot_free(&sl[i]);
        }
    }
    test_end();
}

/* ---- persistent requests ---- */
void test_persistent(int full)
{
    if (!test_begin("persistent Send_init/Recv_init, Start/Startall, Request_free", 1)) return;
    enum { P = 4, NR = 4 * P + 2 };
    const size_t sizes[P] = {0, 17, 4096, full && !quick ? 120000 : 40000};
    buf_t s[2 * P], r[2 * P], pns, pnr;
    MPI_Request req[NR];
    MPI_Status sts[NR], st;
    /* requests 0..P-1 receive from the left, P..2P-1 from the right, 2P..3P-1
     * send to the right, 3P..4P-1 to the left, then a pair with MPI_PROC_NULL */
    for (int k = 0; k < P; k++) {
        r[k] = rbuf_new(sizes[k] + 4);
        r[P + k] = rbuf_new(sizes[k] + 4);
        s[k] = balloc(sizes[k], T.sdev);
        s[P + k] = balloc(sizes[k], T.sdev);
        MPI_OK(MPI_Recv_init(r[k].d, (int)sizes[k] + 4, MPI_BYTE, T.left, 1100 + k, T.comm, &req[k]));
        MPI_OK(MPI_Recv_init(r[P + k].d, (int)sizes[k] + 4, MPI_BYTE, T.right, 1110 + k, T.comm, &req[P + k]));
        MPI_OK(MPI_Send_init(s[k].d, (int)sizes[k], MPI_BYTE, T.right, 1100 + k, T.comm, &req[2 * P + k]));
        MPI_OK(MPI_Send_init(s[P + k].d, (int)sizes[k], MPI_BYTE, T.left, 1110 + k, T.comm, &req[3 * P + k]));
    }
    pns = sbuf_new(8, 0), pnr = rbuf_new(8);
    MPI_OK(MPI_Send_init(pns.d, 8, MPI_BYTE, MPI_PROC_NULL, 1120, T.comm, &req[4 * P]));
    MPI_OK(MPI_Recv_init(pnr.d, 8, MPI_BYTE, MPI_PROC_NULL, 1120, T.comm, &req[4 * P + 1]));
    int iters = quick ? 3 : 6;
    for (int it = 0; it < iters; it++) {
        /* new contents every iteration, written into the same buffers */
        for (int k = 0; k < P; k++) {
            gen(s[k].h, sizes[k], key(T.me, T.right, it * 16 + k));
            put(s[k].d, s[k].h, sizes[k], s[k].dev);
            gen(s[P + k].h, sizes[k], key(T.me, T.left, it * 16 + P + k));
            put(s[P + k].d, s[P + k].h, sizes[k], s[P + k].dev);
            bguard(&r[k]), bguard(&r[P + k]);
        }
        if (it % 2 == 0) {
            MPI_OK(MPI_Startall(NR, req));
        } else {
            for (int i = NR - 1; i >= 0; i--) MPI_OK(MPI_Start(&req[i]));
        }
        MPI_OK(MPI_Waitall(NR, req, sts));
        for (int k = 0; k < 2 * P; k++) {
            int from = k < P ? T.left : T.right, tag = 1100 + (k < P ? k : 10 + k - P);
            size_t bytes = sizes[k % P];
            char what[96];
            snprintf(what, sizeof what, "iteration %d, %zu bytes from the %s", it, bytes, k < P ? "left" : "right");
            check_status(&sts[k], &pt[P_BYTE], from, tag, bytes, what);
            check_data(&r[k], &pt[P_BYTE], bytes, key(from, T.me, it * 16 + k), what);
        }
        check_proc_null(&sts[4 * P + 1], "persistent receive from MPI_PROC_NULL");
        for (int i = 0; i < NR; i++)
            if (req[i] == MPI_REQUEST_NULL) FATAL("Waitall freed persistent request %d", i);
    }
    /* inactive persistent requests: complete at once with the empty status */
    int flag = 0;
    MPI_OK(MPI_Test(&req[0], &flag, &st));
    if (!flag) FAIL("Test of an inactive persistent request gave flag 0");
    check_empty(&st, "Test of an inactive persistent receive");
    MPI_OK(MPI_Wait(&req[2 * P], &st));
    check_empty(&st, "Wait on an inactive persistent send");
    for (int i = 0; i < NR; i++) {
        MPI_OK(MPI_Request_free(&req[i]));
        if (req[i] != MPI_REQUEST_NULL) FAIL("Request_free left persistent request %d set", i);
    }
    for (int k = 0; k < 2 * P; k++) bfree(&s[k]), bfree(&r[k]);
    bfree(&pns), bfree(&pnr);
    test_end();
}

/* ---- cancel, Request_free ---- */
void test_cancel(void)
{
    if (!test_begin("Cancel of an unmatched receive; Request_free of sends", 1)) return;
    buf_t r1 = rbuf_new(64), r2 = rbuf_new(64);
    MPI_Request q[2];
    MPI_Status st;
    int flag = 0;
    MPI_OK(MPI_Irecv(r1.d, 64, MPI_BYTE, T.left, 1200, T.comm, &q[0]));
    MPI_OK(MPI_Irecv(r2.d, 64, MPI_BYTE, MPI_ANY_SOURCE, 1201, T.comm, &q[1]));
    MPI_OK(MPI_Cancel(&q[0]));
    MPI_OK(MPI_Wait(&q[0], &st));
    MPI_OK(MPI_Test_cancelled(&st, &flag));
    if (!flag) FAIL("Cancel + Wait of a receive nobody sends to: not cancelled");
    MPI_OK(MPI_Cancel(&q[1]));
    for (flag = 0; !flag;) {
        MPI_OK(MPI_Test(&q[1], &flag, &st));
        if (!flag) relax();
    }
    flag = 0;
    MPI_OK(MPI_Test_cancelled(&st, &flag));
    if (!flag) FAIL("Cancel + Test of an MPI_ANY_SOURCE receive: not cancelled");
    if (q[0] != MPI_REQUEST_NULL || q[1] != MPI_REQUEST_NULL) FAIL("cancelled requests not MPI_REQUEST_NULL after completion");
    check_data(&r1, &pt[P_BYTE], 0, 0, "cancelled receive");
    check_data(&r2, &pt[P_BYTE], 0, 0, "cancelled MPI_ANY_SOURCE receive");
    bfree(&r1), bfree(&r2);

    /* the cancelled receives are really gone: messages on their tags now
     * reach new receives (sent only once every rank has cancelled) */
    MPI_Barrier(T.comm);
    slot_t s[2], r[2];
    MPI_Request sq[2];
    for (int j = 0; j < 2; j++) {
        slot_init(&s[j], S_SEND, T.right, 1200 + j, j ? 70000 : 300);
        slot_post(&s[j], &sq[j]);
        slot_init(&r[j], S_RECV, T.left, 1200 + j, j ? 70000 : 300);
        MPI_OK(MPI_Recv(r[j].b.d, (int)r[j].bytes + 4, MPI_BYTE, T.left, 1200 + j, T.comm, &st));
        slot_done(&r[j], &st, "Recv on the tag of a cancelled receive");
    }
    MPI_OK(MPI_Waitall(2, sq, MPI_STATUSES_IGNORE));
    for (int j = 0; j < 2; j++) slot_free(&s[j]), slot_free(&r[j]);

    /* Request_free of a send still in flight (MPI completes it anyway) and of a
     * send known complete (its receiver says so); buffers live until then */
    slot_init(&s[0], S_SEND, T.right, 1202, 70001);
    slot_init(&s[1], S_SEND, T.right, 1203, 1000);
    slot_post(&s[0], &sq[0]);
    MPI_OK(MPI_Request_free(&sq[0]));
    if (sq[0] != MPI_REQUEST_NULL) FAIL("Request_free of an active send left the handle set");
    slot_post(&s[1], &sq[1]);
    for (int j = 0; j < 2; j++) {
        slot_init(&r[j], S_RECV, T.left, 1202 + j, s[j].bytes);
        MPI_OK(MPI_Recv(r[j].b.d, (int)r[j].bytes + 4, MPI_BYTE, T.left, 1202 + j, T.comm, &st));
        slot_done(&r[j], &st, "Recv of a freed send");
    }
    MPI_Request ack;
    MPI_OK(MPI_Isend(NULL, 0, MPI_BYTE, T.left, 1204, T.comm, &ack));
    MPI_OK(MPI_Recv(NULL, 0, MPI_BYTE, T.right, 1204, T.comm, &st)); /* both my sends have arrived */
    MPI_OK(MPI_Wait(&ack, MPI_STATUS_IGNORE));
    MPI_OK(MPI_Request_free(&sq[1]));
    if (sq[1] != MPI_REQUEST_NULL) FAIL("Request_free of a completed send left the handle set");
    for (int j = 0; j < 2; j++) slot_free(&s[j]), slot_free(&r[j]);
    test_end();
}

/* ---- communicator separation ---- */

/* The same tag from the same neighbours on two communicators at once: each
 * receive gets its own communicator's message, and a wildcard receive on one
 * never takes the other's.  Round 0 has the wildcard on b and sends on a
 * first, round 1 the reverse. */
void test_separation(MPI_Comm a, const char *aname, MPI_Comm b, const char *bname)
{
    char cname[64];
    snprintf(cname, sizeof cname, "%s + %s", aname, bname);
    T.comm = a, T.cname = cname;
    if (!test_begin("same tag on two communicators at once", 1)) return;
    MPI_Comm c[2] = {a, b};
    int me[2], n[2], l[2], rt[2];
    for (int i = 0; i < 2; i++) {
        MPI_Comm_rank(c[i], &me[i]);
        MPI_Comm_size(c[i], &n[i]);
        l[i] = (me[i] + n[i] - 1) % n[i], rt[i] = (me[i] + 1) % n[i];
    }
    for (int round = 0; round < 2; round++) {
        int w = round == 0 ? 1 : 0, o = 1 - w, tag = 1300 + round; /* w: the communicator with the wildcard */
        static const size_t sz[3] = {3000, 100, 70000}; /* o's message, then w's two */
        buf_t s[3], r[3];
        MPI_Request q[6];
        MPI_Status sts[6];
        for (int j = 0; j < 3; j++) {
            int ci = j ? w : o;
            s[j] = sbuf_new(sz[j], key(me[ci], rt[ci], 10 * round + j));
            r[j] = rbuf_new(70000 + 8);
        }
        MPI_OK(MPI_Irecv(r[1].d, 70008, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, c[w], &q[0]));
        MPI_OK(MPI_Irecv(r[2].d, 70008, MPI_BYTE, l[w], tag, c[w], &q[1]));
        MPI_OK(MPI_Irecv(r[0].d, 70008, MPI_BYTE, l[o], tag, c[o], &q[2]));
        MPI_OK(MPI_Isend(s[0].d, (int)sz[0], MPI_BYTE, rt[o], tag, c[o], &q[3]));
        MPI_OK(MPI_Isend(s[1].d, (int)sz[1], MPI_BYTE, rt[w], tag, c[w], &q[4]));
        MPI_OK(MPI_Isend(s[2].d, (int)sz[2], MPI_BYTE, rt[w], tag, c[w], &q[5]));
        MPI_OK(MPI_Waitall(6, q, sts));
        for (int j = 0; j < 3; j++) {
            int ci = j ? w : o, st_i = j == 0 ? 2 : j - 1;
            char what[128];
            snprintf(what, sizeof what, "%s receive on %s", j == 1 ? "wildcard" : "specific", ci ? bname : aname);
            check_status(&sts[st_i], &pt[P_BYTE], l[ci], tag, sz[j], what);
            check_data(&r[j], &pt[P_BYTE], sz[j], key(l[ci], me[ci], 10 * round + j), what);
            bfree(&s[j]), bfree(&r[j]);
        }
    }
    /* b too must hold nothing more */
    int flag = 0;
    MPI_Status st;
    MPI_Barrier(a);
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, b, &flag, &st);
    if (flag) FAIL("a stray message on %s: source %d tag %d", bname, st.MPI_SOURCE, st.MPI_TAG);
    test_end();
}

/* ---- 1-D halo exchange ---- */

/* One stencil for both computations: the same operations in the same order
 * give bit-identical results. */
static double stencil5(const double *u)
{
    return 0.375 * u[0] + 0.25 * (u[-1] + u[1]) + 0.0625 * (u[-2] + u[2]);
}

static double initial(size_t i)
{
    return (double)(int64_t)(h4(11, i, 0, 0) % 2000001) / 1000000.0 - 1.0;
}

void test_halo(int full)
{
    if (!test_begin("1-D halo exchange (Sendrecv) against a serial computation", 1)) return;
    enum { W = 2 }; /* ghost width of the 5-point stencil */
    int steps = full && !quick ? 25 : 8;
    size_t N = 61 * (size_t)T.n + 29, lo = N * (size_t)T.me / (size_t)T.n, nl = N * (size_t)(T.me + 1) / (size_t)T.n - lo;
    size_t bw = W * sizeof(double);
    for (int periodic = 1; periodic >= 0; periodic--) {
        int left = T.left, right = T.right;
        if (!periodic && T.me == 0) left = MPI_PROC_NULL;
        if (!periodic && T.me == T.n - 1) right = MPI_PROC_NULL;
        double *g = calloc(N + 2 * W, sizeof(double)), *gn = calloc(N + 2 * W, sizeof(double));
        double *u = calloc(nl + 2 * W, sizeof(double)), *un = calloc(nl + 2 * W, sizeof(double));
        for (size_t i = 0; i < N; i++) g[W + i] = initial(i);
        for (size_t i = 0; i < nl; i++) u[W + i] = initial(lo + i);
        buf_t sl = balloc(bw, T.sdev), sr = balloc(bw, T.sdev), gl = balloc(bw, T.rdev), gr = balloc(bw, T.rdev);
        for (int step = 0; step < steps; step++) {
            MPI_Status st;
            put(sl.d, u + W, bw, sl.dev);
            put(sr.d, u + nl, bw, sr.dev);
            /* open ends: the ghosts stay zero (a receive from MPI_PROC_NULL writes nothing) */
            memset(gl.h, 0, bw), memset(gr.h, 0, bw);
            put(gl.d, gl.h, bw, gl.dev), put(gr.d, gr.h, bw, gr.dev);
            MPI_OK(MPI_Sendrecv(sr.d, W, MPI_DOUBLE, right, 1400, gl.d, W, MPI_DOUBLE, left, 1400, T.comm, &st));
            if (left == MPI_PROC_NULL) check_proc_null(&st, "halo from the left");
            else check_status(&st, &pt[P_DOUBLE], left, 1400, W, "halo from the left");
            MPI_OK(MPI_Sendrecv(sl.d, W, MPI_DOUBLE, left, 1401, gr.d, W, MPI_DOUBLE, right, 1401, T.comm, &st));
            if (right == MPI_PROC_NULL) check_proc_null(&st, "halo from the right");
            else check_status(&st, &pt[P_DOUBLE], right, 1401, W, "halo from the right");
            get(u, gl.d, bw, gl.dev);
            get(u + W + nl, gr.d, bw, gr.dev);
            for (size_t i = 0; i < nl; i++) un[W + i] = stencil5(u + W + i);
            double *x = u;
            u = un, un = x;
            /* the serial reference over the whole domain */
            for (int j = 0; j < W; j++) {
                g[j] = periodic ? g[N + j] : 0.0;
                g[W + N + j] = periodic ? g[W + j] : 0.0;
            }
            for (size_t i = 0; i < N; i++) gn[W + i] = stencil5(g + W + i);
            x = g, g = gn, gn = x;
        }
        if (memcmp(u + W, g + W + lo, nl * sizeof(double)) != 0) {
            size_t i = 0;
            while (u[W + i] == g[W + lo + i]) i++;
            FAIL("%s halo exchange: point %zu is %.17g after %d steps, serial %.17g", periodic ? "periodic" : "open",
                 lo + i, u[W + i], steps, g[W + lo + i]);
        }
        bfree(&sl), bfree(&sr), bfree(&gl), bfree(&gr);
        free(g), free(gn), free(u), free(un);
    }
    test_end();
}

/* As bandwidth benchmarks post messages (osu_bw, osu_bibw): a window of
 * receives, then a window of sends to the same peer, wait for all the sends,
 * then for the receives; both directions at once, more messages in flight
 * than the shim looks at in one pass of its progress. */
void test_window(void)
{
    if (!test_begin("a window of 150 receives and 150 sends in flight each way", 2)) return;
    enum { W = 150 };
    static const size_t sizes[] = {64, 4096, 65536};
    for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        slot_t *rs = calloc(W, sizeof(*rs)), *ss = calloc(W, sizeof(*ss));
        MPI_Request *rr = calloc(W, sizeof(*rr)), *sr = calloc(W, sizeof(*sr));
        MPI_Status *sts = calloc(W, sizeof(*sts));
        if (!rs || !ss || !rr || !sr || !sts) FATAL("out of memory");
        for (int j = 0; j < W; j++) {
            int tag = 3000 + 200 * (int)z + j;
            slot_init(&rs[j], S_RECV, T.left, tag, sizes[z]);
            slot_init(&ss[j], S_SEND, T.right, tag, sizes[z]);
        }
        for (int j = 0; j < W; j++) slot_post(&rs[j], &rr[j]);
        for (int j = 0; j < W; j++) slot_post(&ss[j], &sr[j]);
        MPI_OK(MPI_Waitall(W, sr, sts));
        MPI_OK(MPI_Waitall(W, rr, sts));
        for (int j = 0; j < W; j++) slot_done(&rs[j], &sts[j], "Waitall over the window");
        for (int j = 0; j < W; j++) slot_free(&rs[j]), slot_free(&ss[j]);
        free(rs), free(ss), free(rr), free(sr), free(sts);
    }
    test_end();
}
