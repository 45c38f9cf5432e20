/* The harness of test_shim_p2p (p2p_harness.h). */
#define _GNU_SOURCE
#include "p2p_harness.h"

int mixed, quick, verbose, skipped, ntests;

test_state_t T = {MPI_COMM_NULL, "-", "setup", 0, 1, 0, 0, 0, 0, 0};

/* Failure lines name the test and its communicator (fail_context). */
const char *p2p_fail_context(void)
{
    static char ctx[160];
    snprintf(ctx, sizeof(ctx), "%s, %s", T.name, T.cname);
    return ctx;
}

/* ---- watchdog ---- */
char watch_msg[320];
unsigned watch_s = 120;

void on_alarm(int sig)
{
    (void)sig;
    /* only async-signal-safe calls here: the message was formatted in test_test_begin() */
    ssize_t w = write(2, watch_msg, strlen(watch_msg));
    (void)w;
    _exit(124);
}

buf_t balloc(size_t bytes, int dev)
{
    buf_t b = {dbuf(bytes, dev), malloc(bytes + 1), bytes, dev};
    if (b.h == NULL) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return b;
}

void bfree(buf_t *b)
{
    dfree(b->d, b->dev);
    free(b->h);
    b->d = NULL, b->h = NULL;
}

/* ---- deterministic data ---- */
/* The contents of message idx from src to dst in the current test: different
 * for every message, so a message delivered to the wrong receive shows. */
uint64_t key(int src, int dst, int idx)
{
    return h4((uint64_t)T.no, (uint64_t)(src + 2), (uint64_t)(dst + 2), (uint64_t)idx);
}

/* The pattern of key k, 8 bytes per hash. */
void gen(unsigned char *h, size_t bytes, uint64_t k)
{
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t v = mix(k + i);
        memcpy(h + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
}

/* A send buffer of this test's kind holding pattern k (holes of derived
 * types included: they must not travel, and would show if they did). */
buf_t sbuf_new(size_t bytes, uint64_t k)
{
    buf_t b = balloc(bytes, T.sdev);
    gen(b.h, bytes, k);
    put(b.d, b.h, bytes, b.dev);
    return b;
}

/* A receive buffer of this test's kind, all guard bytes. */
void bguard(buf_t *b)
{
    memset(b->h, GUARD, b->bytes);
    put(b->d, b->h, b->bytes, b->dev);
}

buf_t rbuf_new(size_t bytes)
{
    buf_t b = balloc(bytes, T.rdev);
    bguard(&b);
    return b;
}

/* ---- datatypes: the bytes each element covers, to know what a receive writes ---- */
ptype_t pt[NPTYPES];

void init_types(void)
{
    pt[P_BYTE] = (ptype_t){MPI_BYTE, "MPI_BYTE", 1, 1, 1, {0}, {1}};
    pt[P_INT] = (ptype_t){MPI_INT, "MPI_INT", sizeof(int), 1, 1, {0}, {sizeof(int)}};
    pt[P_DOUBLE] = (ptype_t){MPI_DOUBLE, "MPI_DOUBLE", sizeof(double), 1, 1, {0}, {sizeof(double)}};
    /* 3 blocks of 2 ints, 4 ints apart: ints 2,3 and 6,7 are holes */
    MPI_Datatype vec;
    MPI_Type_vector(3, 2, 4, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    pt[P_VECTOR] = (ptype_t){vec, "vector(3 blocks of 2 int, stride 4)", 10 * sizeof(int), 6, 3,
                             {0, 4 * sizeof(int), 8 * sizeof(int)}, {2 * sizeof(int), 2 * sizeof(int), 2 * sizeof(int)}};
    /* a struct with padding after i and after c, resized to the C struct's size */
    int bl[3] = {1, 1, 1};
    MPI_Aint disp[3] = {offsetof(struct rec, i), offsetof(struct rec, d), offsetof(struct rec, c)};
    MPI_Datatype tys[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, st, rs;
    MPI_Type_create_struct(3, bl, disp, tys, &st);
    MPI_Type_create_resized(st, 0, sizeof(struct rec), &rs);
    MPI_Type_commit(&rs);
    MPI_Type_free(&st);
    pt[P_STRUCT] = (ptype_t){rs, "struct{int,double,char} resized", sizeof(struct rec), 3, 3,
                             {offsetof(struct rec, i), offsetof(struct rec, d), offsetof(struct rec, c)},
                             {sizeof(int), sizeof(double), 1}};
    for (int t = 0; t < NPTYPES; t++) {
        MPI_Aint lb, ext;
        MPI_Type_get_extent(pt[t].dt, &lb, &ext);
        if (lb != 0 || (size_t)ext != pt[t].extent) FATAL("%s: extent %ld, expected %zu", pt[t].name, (long)ext, pt[t].extent);
    }
}

/* What a receive buffer of span bytes must hold after count elements of t
 * with pattern k arrived: the pattern where the elements have data, the guard
 * in their holes and past them. */
void expected_bytes(unsigned char *out, size_t span, const ptype_t *t, size_t count, uint64_t k)
{
    size_t data = count * t->extent;
    if (data > span) data = span;
    gen(out, data, k);
    memset(out + data, GUARD, span - data);
    if (t->nseg == 1 && t->len[0] == t->extent) return; /* no holes */
    for (size_t e = 0; e < count; e++) {
        unsigned char *el = out + e * t->extent;
        size_t pos = 0;
        for (int s = 0; s < t->nseg; s++) {
            memset(el + pos, GUARD, t->off[s] - pos);
            pos = t->off[s] + t->len[s];
        }
        memset(el + pos, GUARD, t->extent - pos);
    }
}

/* Reads a receive buffer back and checks all of it (see expected_bytes). */
int check_data(buf_t *b, const ptype_t *t, size_t count, uint64_t k, const char *what)
{
    unsigned char *want = malloc(b->bytes + 1);
    get(b->h, b->d, b->bytes, b->dev);
    expected_bytes(want, b->bytes, t, count, k);
    int ok = memcmp(want, b->h, b->bytes) == 0;
    if (!ok) {
        size_t j = 0;
        while (want[j] == b->h[j]) j++;
        FAIL("%s: byte %zu of the %zu-byte receive buffer is 0x%02x, expected 0x%02x (%s)", what, j, b->bytes, b->h[j],
             want[j], want[j] == GUARD && j >= count * t->extent ? "past the message" : "message data or a hole");
    }
    free(want);
    return ok;
}

/* A receive's status: source, tag, count in t and in basic elements. */
int check_status(const MPI_Status *st, const ptype_t *t, int src, int tag, size_t count, const char *what)
{
    int c = -7, e = -7;
    MPI_Get_count(st, t->dt, &c);
    MPI_Get_elements(st, t->dt, &e);
    if (st->MPI_SOURCE != src || st->MPI_TAG != tag || c != (int)count || e != (int)count * t->nelem) {
        FAIL("%s: status source %d tag %d count %d elements %d, expected %d %d %zu %zu", what, st->MPI_SOURCE,
             st->MPI_TAG, c, e, src, tag, count, count * (size_t)t->nelem);
        return 0;
    }
    return 1;
}

/* MPI_PROC_NULL receives: source MPI_PROC_NULL, tag MPI_ANY_TAG, count 0. */
void check_proc_null(const MPI_Status *st, const char *what)
{
    check_status(st, &pt[P_BYTE], MPI_PROC_NULL, MPI_ANY_TAG, 0, what);
}

/* The empty status (null or inactive requests): MPI_ANY_SOURCE, MPI_ANY_TAG, count 0. */
void check_empty(const MPI_Status *st, const char *what)
{
    check_status(st, &pt[P_BYTE], MPI_ANY_SOURCE, MPI_ANY_TAG, 0, what);
}

/* Spin loops (Test, Iprobe) let the other ranks run: the tests oversubscribe. */
void relax(void)
{
    sched_yield();
}

/* ---- test framing ---- */
static double t_begin;

/* Starts a test on T.comm; returns 0 (skip) if the communicator has fewer
 * than min_ranks ranks.  The barrier keeps tests apart: no rank sends for the
 * next test while another still receives (with wildcards) for this one. */
int test_begin(const char *name, int min_ranks)
{
    T.name = name;
    T.no++;
    ntests++;
    MPI_Comm_rank(T.comm, &T.me);
    MPI_Comm_size(T.comm, &T.n);
    T.left = (T.me + T.n - 1) % T.n;
    T.right = (T.me + 1) % T.n;
    /* --mixed: one test sends from the device into host memory, the next the reverse */
    T.sdev = use_gpu && (!mixed || T.no % 2 == 0);
    T.rdev = use_gpu && (!mixed || T.no % 2 == 1);
    snprintf(watch_msg, sizeof watch_msg,
             "[rank %d] test_shim_p2p: watchdog: still in test '%s' on %s after %u s "
             "(MPCCL_P2P_TEST_TIMEOUT); aborting\n",
             world_rank, T.name, T.cname, watch_s);
    if (watch_s) alarm(watch_s);
    MPI_Barrier(T.comm);
    t_begin = MPI_Wtime();
    if (T.n < min_ranks) {
        skipped++;
        if (verbose && world_rank == 0) printf("  skip %-60s %s (needs %d ranks)\n", T.name, T.cname, min_ranks);
        return 0;
    }
    return 1;
}

/* Ends a test: once every rank is here, all of the test's messages have been
 * received, so anything a wildcard probe still sees is a stray (a device
 * message's data part made visible to the application, say). */
void test_end(void)
{
    int flag = 0;
    MPI_Status st;
    MPI_Barrier(T.comm);
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, T.comm, &flag, &st);
    if (flag) {
        int c = -1;
        MPI_Get_count(&st, MPI_BYTE, &c);
        FAIL("a message no receive was meant for is still there: source %d tag %d, %d bytes", st.MPI_SOURCE,
             st.MPI_TAG, c);
    }
    if (verbose && world_rank == 0) printf("  %6.3f s %-60s %s\n", MPI_Wtime() - t_begin, T.name, T.cname);
}

/* ---- nonblocking: many requests at once ---- */


/* Message contents are keyed by the tag: unique per (source, destination)
 * pair in every test that uses slots. */
void slot_init(slot_t *s, int kind, int peer, int tag, size_t bytes)
{
    *s = (slot_t){kind, peer, tag, bytes, {0}, 0};
    if (kind == S_SEND) s->b = sbuf_new(bytes, key(T.me, peer, tag));
    if (kind == S_RECV) s->b = rbuf_new(bytes + 4);
}

void slot_post(slot_t *s, MPI_Request *req)
{
    if (s->kind == S_SEND) MPI_OK(MPI_Isend(s->b.d, (int)s->bytes, MPI_BYTE, s->peer, s->tag, T.comm, req));
    else if (s->kind == S_RECV) MPI_OK(MPI_Irecv(s->b.d, (int)s->bytes + 4, MPI_BYTE, s->peer, s->tag, T.comm, req));
    else *req = MPI_REQUEST_NULL;
}

/* A completed slot: receives get their status and contents checked. */
void slot_done(slot_t *s, const MPI_Status *st, const char *how)
{
    char what[128];
    if (s->kind == S_NULL) {
        FAIL("%s reported MPI_REQUEST_NULL as completed", how);
        return;
    }
    if (s->done++) FAIL("%s reported the request with tag %d complete twice", how, s->tag);
    if (s->kind != S_RECV) return;
    snprintf(what, sizeof what, "%s: receive of %zu bytes, tag %d", how, s->bytes, s->tag);
    check_status(st, &pt[P_BYTE], s->peer, s->tag, s->bytes, what);
    check_data(&s->b, &pt[P_BYTE], s->bytes, key(s->peer, T.me, s->tag), what);
}

void slot_free(slot_t *s)
{
    if (s->kind != S_NULL) bfree(&s->b);
}
