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
#include <dlfcn.h>
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* MPCCL_NO_CUDA: built without CUDA even where CUDA headers exist. */
#if defined(__has_include) && !defined(MPCCL_NO_CUDA)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define HAVE_CUDA_RT 1
#endif
#endif

static int use_gpu, mixed, quick, verbose, failures, world_rank, skipped, ntests;
static unsigned long long seed = 20261121ULL;

/* The test in progress: every rank of a communicator runs the same sequence
 * of tests, so `no` (the count of tests begun) is the same on all of them and
 * seeds the message contents. */
static struct {
    MPI_Comm comm;
    const char *cname, *name;
    int me, n, left, right, no;
    int sdev, rdev; /* whether this test's send / receive buffers are on the device */
} T = {MPI_COMM_NULL, "-", "setup", 0, 1, 0, 0, 0, 0, 0};

#define FAIL(...)                                                                              \
    do {                                                                                       \
        if (failures++ < 30) {                                                                 \
            fprintf(stderr, "[rank %d] FAIL %s:%d [%s, %s]: ", world_rank, __FILE__, __LINE__, \
                    T.name, T.cname);                                                          \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
        }                                                                                      \
    } while (0)
#define MPI_OK(call)                                                                           \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != MPI_SUCCESS) FAIL("%s returned %d", #call, rc_);                            \
    } while (0)
/* A state the test cannot go on from (a message from a rank that sent none):
 * carrying on would only hang on messages that never come. */
#define FATAL(...)                                                                             \
    do {                                                                                       \
        FAIL(__VA_ARGS__);                                                                     \
        MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    } while (0)

/* ---- watchdog ---- */
static char watch_msg[320];
static unsigned watch_s = 120;

static void on_alarm(int sig)
{
    (void)sig;
    /* only async-signal-safe calls here: the message was formatted in begin() */
    ssize_t w = write(2, watch_msg, strlen(watch_msg));
    (void)w;
    _exit(124);
}

/* ---- buffers: host or device, filled and read through host copies ---- */
static void *dbuf(size_t bytes, int dev)
{
    void *p = NULL;
    if (bytes == 0) bytes = 1;
#ifdef HAVE_CUDA_RT
    if (dev) {
        if (cudaMalloc(&p, bytes) != cudaSuccess) p = NULL;
    } else
#endif
        p = malloc(bytes);
    if (p == NULL) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static void dfree(void *p, int dev)
{
#ifdef HAVE_CUDA_RT
    if (dev) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

static void put(void *d, const void *h, size_t bytes, int dev)
{
#ifdef HAVE_CUDA_RT
    if (dev) {
        if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) FAIL("cudaMemcpy to the device");
        return;
    }
#endif
    memcpy(d, h, bytes);
}

static void get(void *h, const void *d, size_t bytes, int dev)
{
#ifdef HAVE_CUDA_RT
    if (dev) {
        if (bytes && cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) FAIL("cudaMemcpy from the device");
        return;
    }
#endif
    memcpy(h, d, bytes);
}

/* A buffer and its host mirror. */
typedef struct {
    void *d;          /* what MPI sees: device or host memory */
    unsigned char *h; /* host copy, filled before put() and after get() */
    size_t bytes;
    int dev;
} buf_t;

#define GUARD 0xa5 /* receive buffers start as this: bytes MPI must not write keep it */

static buf_t balloc(size_t bytes, int dev)
{
    buf_t b = {dbuf(bytes, dev), malloc(bytes + 1), bytes, dev};
    if (b.h == NULL) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return b;
}

static void bfree(buf_t *b)
{
    dfree(b->d, b->dev);
    free(b->h);
    b->d = NULL, b->h = NULL;
}

/* ---- deterministic data ---- */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t h4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix(seed ^ mix(a ^ mix(b ^ mix(c ^ mix(d)))));
}

/* The contents of message idx from src to dst in the current test: different
 * for every message, so a message delivered to the wrong receive shows. */
static uint64_t key(int src, int dst, int idx)
{
    return h4((uint64_t)T.no, (uint64_t)(src + 2), (uint64_t)(dst + 2), (uint64_t)idx);
}

/* The pattern of key k, 8 bytes per hash. */
static void gen(unsigned char *h, size_t bytes, uint64_t k)
{
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t v = mix(k + i);
        memcpy(h + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
}

/* A send buffer of this test's kind holding pattern k (holes of derived
 * types included: they must not travel, and would show if they did). */
static buf_t sbuf_new(size_t bytes, uint64_t k)
{
    buf_t b = balloc(bytes, T.sdev);
    gen(b.h, bytes, k);
    put(b.d, b.h, bytes, b.dev);
    return b;
}

/* A receive buffer of this test's kind, all guard bytes. */
static void bguard(buf_t *b)
{
    memset(b->h, GUARD, b->bytes);
    put(b->d, b->h, b->bytes, b->dev);
}

static buf_t rbuf_new(size_t bytes)
{
    buf_t b = balloc(bytes, T.rdev);
    bguard(&b);
    return b;
}

/* ---- datatypes: the bytes each element covers, to know what a receive writes ---- */
typedef struct {
    MPI_Datatype dt;
    const char *name;
    size_t extent; /* bytes from one element to the next */
    int nelem;     /* basic elements per element (MPI_Get_elements) */
    int nseg;      /* covered byte ranges of an element, in order; the rest are holes */
    size_t off[3], len[3];
} ptype_t;
enum { P_BYTE, P_INT, P_DOUBLE, P_VECTOR, P_STRUCT, NPTYPES };
static ptype_t pt[NPTYPES];

struct rec {
    int i;
    double d;
    char c;
};

static void init_types(void)
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
static void expected_bytes(unsigned char *out, size_t span, const ptype_t *t, size_t count, uint64_t k)
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
static int check_data(buf_t *b, const ptype_t *t, size_t count, uint64_t k, const char *what)
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
static int check_status(const MPI_Status *st, const ptype_t *t, int src, int tag, size_t count, const char *what)
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
static void check_proc_null(const MPI_Status *st, const char *what)
{
    check_status(st, &pt[P_BYTE], MPI_PROC_NULL, MPI_ANY_TAG, 0, what);
}

/* The empty status (null or inactive requests): MPI_ANY_SOURCE, MPI_ANY_TAG, count 0. */
static void check_empty(const MPI_Status *st, const char *what)
{
    check_status(st, &pt[P_BYTE], MPI_ANY_SOURCE, MPI_ANY_TAG, 0, what);
}

/* Spin loops (Test, Iprobe) let the other ranks run: the tests oversubscribe. */
static void relax(void)
{
    sched_yield();
}

/* ---- test framing ---- */
static double t_begin;

/* Starts a test on T.comm; returns 0 (skip) if the communicator has fewer
 * than min_ranks ranks.  The barrier keeps tests apart: no rank sends for the
 * next test while another still receives (with wildcards) for this one. */
static int begin(const char *name, int min_ranks)
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
static void end(void)
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
    if (!begin("blocking Send/Recv, sizes x datatypes", 2)) return;
    const size_t *sizes = quick ? sizes_quick : sizes_full;
    int nsizes = quick ? (int)(sizeof sizes_quick / sizeof sizes_quick[0]) : (int)(sizeof sizes_full / sizeof sizes_full[0]);
    for (int ti = 0; ti < NPTYPES; ti++)
        for (int si = 0; si < nsizes; si++) {
            /* secondary communicators: the large sizes in bytes only */
            if (!full && ti != P_BYTE && sizes[si] > 5000) continue;
            ring_blocking(&pt[ti], count_for(&pt[ti], sizes[si]), ti * 32 + si, 0);
        }
    end();
}

static void test_ssend(int full)
{
    if (!begin("Ssend ring", 2)) return;
    static const size_t sizes[] = {0, 1, 8, 4096, 65536 + 3, 1048576 + 5};
    int nsizes = full && !quick ? 6 : 5;
    for (int si = 0; si < nsizes; si++) ring_blocking(&pt[P_BYTE], sizes[si], si, 1);
    ring_blocking(&pt[P_DOUBLE], 1000, 10, 1);
    ring_blocking(&pt[P_VECTOR], 77, 11, 1);
    end();
}

/* Issend completes only once the matching receive has started: as long as
 * no rank has posted its receive (they wait at a barrier first), MPI_Test
 * must say "not yet" however often it is asked. */
static void test_issend(void)
{
    if (!begin("Issend + Test loop", 2)) return;
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
    end();
}

/* ---- nonblocking: many requests at once ---- */

/* One nonblocking message of a test: a send to peer or a receive from it. */
typedef struct {
    int kind; /* 0 none (MPI_REQUEST_NULL), 1 send, 2 receive */
    int peer, tag;
    size_t bytes; /* the message; receives offer 4 bytes more */
    buf_t b;
    int done;
} slot_t;
enum { S_NULL, S_SEND, S_RECV };

/* Message contents are keyed by the tag: unique per (source, destination)
 * pair in every test that uses slots. */
static void slot_init(slot_t *s, int kind, int peer, int tag, size_t bytes)
{
    *s = (slot_t){kind, peer, tag, bytes, {0}, 0};
    if (kind == S_SEND) s->b = sbuf_new(bytes, key(T.me, peer, tag));
    if (kind == S_RECV) s->b = rbuf_new(bytes + 4);
}

static void slot_post(slot_t *s, MPI_Request *req)
{
    if (s->kind == S_SEND) MPI_OK(MPI_Isend(s->b.d, (int)s->bytes, MPI_BYTE, s->peer, s->tag, T.comm, req));
    else if (s->kind == S_RECV) MPI_OK(MPI_Irecv(s->b.d, (int)s->bytes + 4, MPI_BYTE, s->peer, s->tag, T.comm, req));
    else *req = MPI_REQUEST_NULL;
}

/* A completed slot: receives get their status and contents checked. */
static void slot_done(slot_t *s, const MPI_Status *st, const char *how)
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

static void slot_free(slot_t *s)
{
    if (s->kind != S_NULL) bfree(&s->b);
}

/* Mostly small messages with a large one every 8th: eager and rendezvous
 * protocols (and the shim's inline and side paths) interleaved. */
static size_t ring_size(int tag)
{
    return tag % 8 == 7 ? 20000 + 13 * (size_t)tag : 5 * (size_t)tag;
}

static void test_waitall_ring(int full)
{
    if (!begin("Isend/Irecv ring, many outstanding, Waitall", 1)) return;
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
    end();
}

/* ---- matching: tags, wildcards, probes ---- */

static size_t tag_size(int j)
{
    return j % 3 == 1 ? 70000 + (size_t)j : 3 * (size_t)j;
}

static void test_tags(void)
{
    if (!begin("distinct tags in reverse order; MPI_ANY_TAG in send order", 1)) return;
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
    end();
}

/* A size per (source, destination): a third of them past the eager limits. */
static size_t probe_size(int src, int dst)
{
    uint64_t h = h4((uint64_t)T.no, (uint64_t)src, (uint64_t)dst, 77);
    return h % 3 == 0 ? 70000 + (size_t)(h >> 8) % 1000 : (size_t)(h >> 8) % 300;
}

static void test_probe(void)
{
    if (!begin("MPI_ANY_SOURCE + Probe/Mprobe sized by Get_count; Iprobe loops", 1)) return;
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
    end();
}

/* Matched probes: the message is taken off the queue by the probe and
 * received later, in another order; a probe of MPI_PROC_NULL gives
 * MPI_MESSAGE_NO_PROC. */
static void test_mprobe(void)
{
    if (!begin("Mprobe + Mrecv, Improbe + Imrecv", 1)) return;
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
    end();
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
    if (!begin("non-overtaking: one source and tag, tiny and large alternating", 1)) return;
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
    end();
}

/* ---- MPI_PROC_NULL and zero counts ---- */
static void test_proc_null(void)
{
    if (!begin("MPI_PROC_NULL and zero counts", 1)) return;
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
    end();
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
    if (!begin("truncation: MPI_ERR_TRUNCATE under MPI_ERRORS_RETURN", 2)) return;
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
    end();
}

/* ---- Sendrecv ---- */
static void test_sendrecv(int full)
{
    if (!begin("Sendrecv and Sendrecv_replace rings, periodic and with MPI_PROC_NULL ends", 1)) return;
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
    end();
}

/* Every rank sends (blocking, standard mode) before it receives: with small
 * messages MPI buffers them, and the shim must not turn that into a wait for
 * the receiver. */
static void test_send_first(void)
{
    if (!begin("everyone sends first (<= 1 KB), then receives", 2)) return;
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
    end();
}

/* ---- completion calls over mixed request sets ---- */
static void test_completion(void)
{
    if (!begin("Waitany, Waitsome, Testany, Testsome, Testall over mixed sets", 1)) return;
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
    end();
}

/* ---- persistent requests ---- */
static void test_persistent(int full)
{
    if (!begin("persistent Send_init/Recv_init, Start/Startall, Request_free", 1)) return;
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
    end();
}

/* ---- cancel, Request_free ---- */
static void test_cancel(void)
{
    if (!begin("Cancel of an unmatched receive; Request_free of sends", 1)) return;
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
    end();
}

/* ---- communicator separation ---- */

/* The same tag from the same neighbours on two communicators at once: each
 * receive gets its own communicator's message, and a wildcard receive on one
 * never takes the other's.  Round 0 has the wildcard on b and sends on a
 * first, round 1 the reverse. */
static void test_separation(MPI_Comm a, const char *aname, MPI_Comm b, const char *bname)
{
    char cname[64];
    snprintf(cname, sizeof cname, "%s + %s", aname, bname);
    T.comm = a, T.cname = cname;
    if (!begin("same tag on two communicators at once", 1)) return;
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
    end();
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

static void test_halo(int full)
{
    if (!begin("1-D halo exchange (Sendrecv) against a serial computation", 1)) return;
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
    end();
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
    if (getenv("MPCCL_TEST_SEED")) seed = strtoull(getenv("MPCCL_TEST_SEED"), NULL, 0);
    if (getenv("MPCCL_P2P_TEST_TIMEOUT")) watch_s = (unsigned)strtoul(getenv("MPCCL_P2P_TEST_TIMEOUT"), NULL, 0);
    signal(SIGALRM, on_alarm);
    if (use_gpu) {
        int ndev = 0;
#ifdef HAVE_CUDA_RT
        if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
        if (ndev > 0) cudaSetDevice(world_rank % ndev);
#endif
        if (ndev == 0) {
            if (world_rank == 0) printf("SKIP: --gpu needs a CUDA build and a GPU\n");
            MPI_Finalize();
            return 77;
        }
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
