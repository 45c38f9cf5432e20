/* The UCX transport between ranks that are threads of this process (each with
 * its own worker) and between two processes (fork + socketpair bootstrap).
 * Data is seeded random (MPCCL_TEST_SEED overrides; the seed is printed). */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "util/status.h"
#include "core/transport.h"
#include "ucx/ucx.h"

static uint64_t seed;

/* Ranks as threads of one process use the library's in-process bootstrap
 * (lib/bootstrap/bootstrap_inproc.c). */

/* ---- a bootstrap for two processes over a socketpair ---- */

static void full_io(int fd, void *buf, size_t n, int wr)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = wr ? write(fd, p, n) : read(fd, p, n);
        ck_assert_msg(k > 0, "socketpair bootstrap %s failed", wr ? "write" : "read");
        p += k;
        n -= (size_t)k;
    }
}

static mpccl_status_t sp_allgather(mpccl_bootstrap_t *bs, void *buf, size_t bytes)
{
    int fd = (int)(intptr_t)bs->impl;
    unsigned char *b = buf;
    full_io(fd, b + bytes * (size_t)bs->rank, bytes, 1);
    full_io(fd, b + bytes * (size_t)(1 - bs->rank), bytes, 0);
    return MPCCL_OK;
}

static mpccl_status_t sp_barrier(mpccl_bootstrap_t *bs)
{
    char b[2] = {1, 1};
    return sp_allgather(bs, b, 1);
}

static void sp_close(mpccl_bootstrap_t *bs) { (void)bs; /* the caller owns the socket */ }

static const struct mpccl_bootstrap_ops sp_ops = {sp_allgather, sp_barrier, sp_close};

/* ---- helpers ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* The bytes of message (src, dst, id): the receiver regenerates them to check. */
static void fill(unsigned char *p, size_t n, int src, int dst, uint64_t id)
{
    uint64_t s = mix(seed ^ mix(((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^ id));
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0) s = mix(s + i);
        p[i] = (unsigned char)(s >> (8 * (i % 8)));
    }
}

static void check_data(const unsigned char *p, size_t n, int src, int dst, uint64_t id)
{
    unsigned char *want = malloc(n + 1);
    fill(want, n, src, dst, id);
    size_t i = 0;
    while (i < n && p[i] == want[i]) i++;
    ck_assert_msg(i == n, "message %d->%d id %llu (%zu bytes) differs at byte %zu", src, dst,
                  (unsigned long long)id, n, i);
    free(want);
}

static uint64_t tag_of(int src, uint64_t id) { return ((uint64_t)src << 40) | id; }

/* Drives t until every request is done (the way the executor waits). */
static void wait_all(mpccl_transport_t *t, mpccl_req_t *reqs, int n, double limit_s)
{
    double end = now_s() + limit_s;
    int idle = 0;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) pending += !reqs[i].done;
        if (!pending) return;
        ck_assert_msg(now_s() < end, "rank %d: %d of %d requests still pending after %.0f s",
                      t->rank, pending, n, limit_s);
        if (t->ops->progress(t) > 0) idle = 0;
        else if (++idle > 16) t->ops->idle(t);
    }
}

static void progress_for(mpccl_transport_t *t, double s)
{
    double end = now_s() + s;
    while (now_s() < end)
        if (t->ops->progress(t) == 0) t->ops->idle(t);
}

/* ---- running n ranks as threads ---- */

typedef void (*rank_fn)(mpccl_transport_t *t, mpccl_bootstrap_t *bs, void *arg);

typedef struct {
    mpccl_inproc_group_t *g;
    int rank, nranks;
    rank_fn fn;
    void *arg;
} rank_arg_t;

static void *rank_main(void *p)
{
    rank_arg_t *a = p;
    mpccl_bootstrap_t bs;
    ck_assert_int_eq(mpccl_inproc_bootstrap_create(a->g, a->rank, &bs), MPCCL_OK);
    mpccl_transport_t *t = NULL;
    mpccl_status_t st = mpccl_ucx_transport_create(&bs, &t);
    ck_assert_msg(st == MPCCL_OK, "rank %d: transport create: %s", a->rank, mpccl_last_error());
    ck_assert_int_eq(t->rank, a->rank);
    ck_assert_int_eq(t->nranks, a->nranks);
    /* One-sided operations exist (windows: test/mpi/test_onesided.c). */
    ck_assert_ptr_nonnull(t->ops->put);
    ck_assert_ptr_nonnull(t->ops->atomic_add);
    a->fn(t, &bs, a->arg);
    mpccl_bootstrap_close(&bs);
    return NULL;
}

static void run_ranks(int n, rank_fn fn, void *arg)
{
    mpccl_inproc_group_t *g = NULL;
    ck_assert_int_eq(mpccl_inproc_group_create(n, &g), MPCCL_OK);
    pthread_t th[8];
    rank_arg_t a[8];
    for (int r = 0; r < n; r++) {
        a[r] = (rank_arg_t){g, r, n, fn, arg};
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    mpccl_inproc_group_release(g);
}

/* Everyone's own requests are done; wait for the others before tearing down, so
 * no rank's close looks like a failure to a rank still receiving. */
static void close_after_barrier(mpccl_transport_t *t, mpccl_bootstrap_t *bs, int force)
{
    mpccl_bootstrap_barrier(bs);
    double t0 = now_s();
    t->ops->close(t, force);
    ck_assert_msg(now_s() - t0 < 1.5, "close(%d) took %.2f s", force, now_s() - t0);
}

/* ---- every pair, every size ---- */

static const size_t sizes[] = {0, 1, 7, 8193, (1u << 20) + 3};
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

/* Receives for even sizes are posted before the peers send, odd ones after the
 * messages arrived (UCX's unexpected queue); odd ones also get 5 spare bytes. */
static void pairs_rank(mpccl_transport_t *t, mpccl_bootstrap_t *bs, void *arg)
{
    int n = t->nranks, me = t->rank, force = *(int *)arg;
    int nmsg = n * NSIZES;
    mpccl_req_t *rr = calloc((size_t)nmsg, sizeof(*rr)), *sr = calloc((size_t)nmsg, sizeof(*sr));
    unsigned char **rb = calloc((size_t)nmsg, sizeof(void *)), **sb = calloc((size_t)nmsg, sizeof(void *));
    for (int p = 0; p < n; p++)
        for (int k = 0; k < NSIZES; k++) {
            int i = p * NSIZES + k;
            size_t spare = (k % 2) ? 5 : 0;
            rb[i] = malloc(sizes[k] + spare + 1);
            memset(rb[i], 0xa5, sizes[k] + spare + 1);
            sb[i] = malloc(sizes[k] + 1);
            fill(sb[i], sizes[k], me, p, (uint64_t)k);
        }
    for (int i = 0; i < nmsg; i++)
        if ((i % NSIZES) % 2 == 0)
            ck_assert_int_eq(t->ops->irecv(t, i / NSIZES, tag_of(i / NSIZES, (uint64_t)(i % NSIZES)),
                                           rb[i], sizes[i % NSIZES], &rr[i]), MPCCL_OK);
    mpccl_bootstrap_barrier(bs);
    for (int i = 0; i < nmsg; i++) {
        int p = i / NSIZES, k = i % NSIZES;
        const void *buf = sizes[k] ? (const void *)sb[i] : NULL; /* 0 bytes: no buffer needed */
        ck_assert_int_eq(t->ops->isend(t, p, tag_of(me, (uint64_t)k), buf, sizes[k], &sr[i]), MPCCL_OK);
    }
    progress_for(t, 0.05);
    for (int i = 0; i < nmsg; i++)
        if ((i % NSIZES) % 2 == 1)
            ck_assert_int_eq(t->ops->irecv(t, i / NSIZES, tag_of(i / NSIZES, (uint64_t)(i % NSIZES)),
                                           rb[i], sizes[i % NSIZES] + 5, &rr[i]), MPCCL_OK);
    wait_all(t, rr, nmsg, 30);
    wait_all(t, sr, nmsg, 30);
    for (int i = 0; i < nmsg; i++) {
        int p = i / NSIZES, k = i % NSIZES;
        size_t spare = (k % 2) ? 5 : 0;
        ck_assert_msg(rr[i].status == MPCCL_OK, "rank %d recv from %d size %zu: %s", me, p, sizes[k],
                      mpccl_status_name(rr[i].status));
        ck_assert_int_eq(sr[i].status, MPCCL_OK);
        ck_assert_ptr_null(rr[i].impl);
        check_data(rb[i], sizes[k], p, me, (uint64_t)k);
        for (size_t j = sizes[k]; j < sizes[k] + spare + 1; j++)
            ck_assert_msg(rb[i][j] == 0xa5, "rank %d: byte %zu past a %zu-byte message was written", me, j,
                          sizes[k]);
        free(rb[i]);
        free(sb[i]);
    }
    free(rr), free(sr), free(rb), free(sb);
    close_after_barrier(t, bs, force);
}

START_TEST(test_pairs)
{
    int n = 1 + _i % 4, force = _i >= 4; /* 1..4 ranks, flush close then forced close */
    printf("test_pairs: %d ranks, close(force=%d)\n", n, force);
    run_ranks(n, pairs_rank, &force);
}
END_TEST

/* ---- many messages in flight, shuffled posting ---- */

#define NFLIGHT 300

static size_t flight_size(int src, int i)
{
    uint64_t r = mix(seed + (uint64_t)src * 1000 + (uint64_t)i);
    return (r % 8 == 0) ? 65536 + r % 200000 : r % 3000; /* some rendezvous, mostly eager */
}

static void shuffle(int *v, int n, uint64_t s)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(mix(s + (uint64_t)i) % (uint64_t)(i + 1));
        int x = v[i];
        v[i] = v[j], v[j] = x;
    }
}

static void flight_rank(mpccl_transport_t *t, mpccl_bootstrap_t *bs, void *arg)
{
    (void)arg;
    int n = t->nranks, me = t->rank, to = (me + 1) % n, from = (me + n - 1) % n;
    mpccl_req_t *rr = calloc(NFLIGHT, sizeof(*rr)), *sr = calloc(NFLIGHT, sizeof(*sr));
    unsigned char *rb[NFLIGHT], *sb[NFLIGHT];
    int order[NFLIGHT];
    for (int i = 0; i < NFLIGHT; i++) {
        order[i] = i;
        rb[i] = malloc(flight_size(from, i) + 1);
        sb[i] = malloc(flight_size(me, i) + 1);
        fill(sb[i], flight_size(me, i), me, to, 1000 + (uint64_t)i);
    }
    shuffle(order, NFLIGHT, seed + (uint64_t)me);
    for (int j = 0; j < NFLIGHT / 2; j++) {
        int i = order[j];
        t->ops->irecv(t, from, tag_of(from, 1000 + (uint64_t)i), rb[i], flight_size(from, i), &rr[i]);
    }
    mpccl_bootstrap_barrier(bs);
    shuffle(order, NFLIGHT, seed * 3 + (uint64_t)me);
    for (int j = 0; j < NFLIGHT; j++) {
        int i = order[j];
        t->ops->isend(t, to, tag_of(me, 1000 + (uint64_t)i), sb[i], flight_size(me, i), &sr[i]);
    }
    progress_for(t, 0.02);
    for (int i = 0; i < NFLIGHT; i++)
        if (!rr[i].done && rr[i].impl == NULL) /* not posted yet */
            t->ops->irecv(t, from, tag_of(from, 1000 + (uint64_t)i), rb[i], flight_size(from, i), &rr[i]);
    wait_all(t, rr, NFLIGHT, 30);
    wait_all(t, sr, NFLIGHT, 30);
    for (int i = 0; i < NFLIGHT; i++) {
        ck_assert_int_eq(rr[i].status, MPCCL_OK);
        ck_assert_int_eq(sr[i].status, MPCCL_OK);
        check_data(rb[i], flight_size(from, i), from, me, 1000 + (uint64_t)i);
        free(rb[i]);
        free(sb[i]);
    }
    free(rr), free(sr);
    close_after_barrier(t, bs, 0);
}

START_TEST(test_in_flight)
{
    run_ranks(2 + _i, flight_rank, NULL);
}
END_TEST

/* ---- errors: truncation, cancel ---- */

static void errors_rank(mpccl_transport_t *t, mpccl_bootstrap_t *bs, void *arg)
{
    (void)arg;
    int me = t->rank;
    size_t big = 3u << 20; /* rendezvous */
    unsigned char *sbuf = malloc(big), *rbuf = malloc(big);
    fill(sbuf, big, me, 1 - me, 7);
    mpccl_req_t r[4];
    memset(r, 0, sizeof(r));
    if (me == 0) {
        t->ops->isend(t, 1, tag_of(0, 1), sbuf, 100, &r[0]);
        t->ops->isend(t, 1, tag_of(0, 2), sbuf, big, &r[1]);
        wait_all(t, r, 2, 30);
    } else {
        /* An eager and a rendezvous message into receives too small. */
        t->ops->irecv(t, 0, tag_of(0, 1), rbuf, 50, &r[0]);
        t->ops->irecv(t, 0, tag_of(0, 2), rbuf, 1000, &r[1]);
        for (int i = 0; i < 2; i++) {
            wait_all(t, &r[i], 1, 30);
            ck_assert_int_eq(r[i].status, MPCCL_ERR_INTERNAL);
            ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "larger than"));
            printf("truncation reported: %s\n", mpccl_last_error());
        }
    }
    mpccl_bootstrap_barrier(bs);
    /* A receive nobody matches, cancelled: it ends with an error. */
    t->ops->irecv(t, 1 - me, tag_of(1 - me, 99), rbuf, 10, &r[2]);
    progress_for(t, 0.01);
    ck_assert_int_eq(r[2].done, 0);
    t->ops->cancel(t, &r[2]);
    wait_all(t, &r[2], 1, 10);
    ck_assert_int_ne(r[2].status, MPCCL_OK);
    t->ops->cancel(t, &r[2]); /* already done: no effect */
    /* A rendezvous send nobody receives, cancelled: its caller is released. */
    t->ops->isend(t, 1 - me, tag_of(me, 98), sbuf, big, &r[3]);
    progress_for(t, 0.01);
    ck_assert_int_eq(r[3].done, 0);
    t->ops->cancel(t, &r[3]);
    wait_all(t, &r[3], 1, 10);
    ck_assert_int_ne(r[3].status, MPCCL_OK);
    /* The transport still works afterwards. */
    mpccl_req_t ok[2];
    t->ops->irecv(t, 1 - me, tag_of(1 - me, 5), rbuf, 4000, &ok[0]);
    t->ops->isend(t, 1 - me, tag_of(me, 5), sbuf, 4000, &ok[1]);
    wait_all(t, ok, 2, 30);
    ck_assert_int_eq(ok[0].status, MPCCL_OK);
    ck_assert_int_eq(ok[1].status, MPCCL_OK);
    memcpy(sbuf, rbuf, 4000);
    fill(rbuf, big, 1 - me, me, 7);
    ck_assert_int_eq(memcmp(sbuf, rbuf, 4000), 0);
    /* A receive still posted at close ends too (with an error). */
    mpccl_req_t left;
    t->ops->irecv(t, 1 - me, tag_of(1 - me, 97), rbuf, 10, &left);
    close_after_barrier(t, bs, me); /* rank 0 flushes, rank 1 forces */
    ck_assert_int_eq(left.done, 1);
    ck_assert_int_ne(left.status, MPCCL_OK);
    free(sbuf);
    free(rbuf);
}

START_TEST(test_errors)
{
    run_ranks(2, errors_rank, NULL);
}
END_TEST

START_TEST(test_bad_peer)
{
    mpccl_inproc_group_t *g = NULL;
    mpccl_bootstrap_t bs;
    ck_assert_int_eq(mpccl_inproc_group_create(1, &g), MPCCL_OK);
    ck_assert_int_eq(mpccl_inproc_bootstrap_create(g, 0, &bs), MPCCL_OK);
    mpccl_transport_t *t;
    ck_assert_int_eq(mpccl_ucx_transport_create(&bs, &t), MPCCL_OK);
    mpccl_req_t r;
    char b[4] = {0};
    ck_assert_int_ne(t->ops->isend(t, 1, 0, b, 4, &r), MPCCL_OK);
    ck_assert_int_eq(r.done, 1);
    ck_assert_int_ne(t->ops->irecv(t, -1, 0, b, 4, &r), MPCCL_OK);
    t->ops->close(t, 0);
    mpccl_bootstrap_close(&bs);
    mpccl_inproc_group_release(g);
    printf("UCX supports CUDA memory: %d\n", mpccl_ucx_supports_cuda());
}
END_TEST

/* GPUDirect RDMA detection (MPCCL_GPU_DIRECT=auto): only a verbs NIC that
 * registers CUDA memory qualifies, not the CUDA transports' own domains. */
START_TEST(test_gdr_rule)
{
    uint64_t host = UCS_BIT(UCS_MEMORY_TYPE_HOST), cuda = UCS_BIT(UCS_MEMORY_TYPE_CUDA);
    ck_assert_int_eq(mpccl_ucx_md_is_gdr_nic("ib", host | cuda), 1);
    ck_assert_int_eq(mpccl_ucx_md_is_gdr_nic("ib", host), 0);
    ck_assert_int_eq(mpccl_ucx_md_is_gdr_nic("cuda_cpy", cuda), 0);
    ck_assert_int_eq(mpccl_ucx_md_is_gdr_nic("cuda_ipc", cuda), 0);
    ck_assert_int_eq(mpccl_ucx_md_is_gdr_nic("gdr_copy", host | cuda), 0);
    ck_assert_int_eq(mpccl_ucx_md_is_gdr_nic("tcp", host), 0);
    ck_assert_int_eq(mpccl_ucx_md_is_gdr_nic(NULL, cuda), 0);
    const char *nic = mpccl_ucx_gdr_nic(); /* this machine's answer, asked twice: the same */
    ck_assert_ptr_eq(nic, mpccl_ucx_gdr_nic());
    printf("UCX network device that reads GPU memory: %s\n", nic ? nic : "none");
}
END_TEST

/* The eager limit read from an endpoint's description: UCX 1.13's format,
 * no rendezvous, an endpoint still connecting, an unknown format. */
START_TEST(test_eager_max_parse)
{
    const char *v113 = "#                tag_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)\n"
                       "#            tag_send_nbr: 0..<egr/short>..93..<egr/bcopy>..262144..<rndv>..(inf)\n";
    ck_assert_uint_eq(mpccl_ucx_parse_eager_max(v113), 8255);
    ck_assert_uint_eq(mpccl_ucx_parse_eager_max("#  tag_send: 0..<egr/short>..93..<egr/bcopy>..(inf)\n"), SIZE_MAX);
    ck_assert_uint_eq(mpccl_ucx_parse_eager_max("# lane[0]: 1:tcp/lo wireup\n# tag_send: 0..<egr/short>..8..<rndv>..(inf)\n"), 0);
    ck_assert_uint_eq(mpccl_ucx_parse_eager_max("#  tag_send_nbr: 0..<egr/short>..262144..<rndv>..(inf)\n"), 0);
    ck_assert_uint_eq(mpccl_ucx_parse_eager_max("#  tag_send: 0..<rndv>..(inf)\n"), 0);
    ck_assert_uint_eq(mpccl_ucx_parse_eager_max(""), 0);
}
END_TEST

/* Whether every lane stays on the machine, from UCX 1.13's lines: shared
 * memory and CMA; tcp (UCX_TLS=tcp between ranks of one machine); a mix; a
 * tcp lane marked wireup; nothing listed; a line unlike UCX's. */
START_TEST(test_lanes_local_parse)
{
    const char *shm = "#                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] am\n"
                      "#                 lane[1]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255] amo#1\n"
                      "#                 lane[2]:  5:cma/memory.0 md[4]            -> md[4]/cma/sysdev[255] rma_bw#0\n";
    const char *tcp = "#                 lane[0]:  1:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] am\n";
    const char *mix = "#                 lane[0]:  3:sysv/memory.0 md[2]  am\n#   lane[1]:  7:rc_mlx5/mlx5_0:1 md[6] rma_bw\n";
    ck_assert_int_eq(mpccl_ucx_parse_lanes_local(shm), 1);
    ck_assert_int_eq(mpccl_ucx_parse_lanes_local(tcp), 0);
    ck_assert_int_eq(mpccl_ucx_parse_lanes_local(mix), 0);
    ck_assert_int_eq(mpccl_ucx_parse_lanes_local("# lane[0]: 1:tcp/lo.0 md[1] -> md[1]/tcp wireup\n"), 0);
    ck_assert_int_eq(mpccl_ucx_parse_lanes_local("#  tag_send: 0..<rndv>..(inf)\n"), -1);
    ck_assert_int_eq(mpccl_ucx_parse_lanes_local("# lane[0]: sysv\n"), -1);
}
END_TEST

/* Regions (region_open): a send to itself and its receive through host
 * regions arrive whole; a request outside its region and bad kinds are
 * refused with an error, not sent. */
START_TEST(test_regions)
{
    mpccl_inproc_group_t *g = NULL;
    mpccl_bootstrap_t bs;
    ck_assert_int_eq(mpccl_inproc_group_create(1, &g), MPCCL_OK);
    ck_assert_int_eq(mpccl_inproc_bootstrap_create(g, 0, &bs), MPCCL_OK);
    mpccl_transport_t *t;
    ck_assert_int_eq(mpccl_ucx_transport_create(&bs, &t), MPCCL_OK);
    ck_assert_ptr_nonnull(t->ops->region_open);
    enum { N = 4096 };
    char *sbuf = malloc(2 * N), *rbuf = sbuf + N;
    for (int i = 0; i < N; i++) sbuf[i] = (char)(i * 7 + 1);
    memset(rbuf, 0, N);
    void *sreg = NULL, *rreg = NULL, *bad = NULL;
    ck_assert_int_eq(t->ops->region_open(t, sbuf, N, MPCCL_REGION_HOST, &sreg), MPCCL_OK);
    ck_assert_int_eq(t->ops->region_open(t, rbuf, N, MPCCL_REGION_HOST, &rreg), MPCCL_OK);
    ck_assert_int_ne(t->ops->region_open(t, sbuf, N, 7, &bad), MPCCL_OK);
    ck_assert_int_ne(t->ops->region_open(t, NULL, N, MPCCL_REGION_HOST, &bad), MPCCL_OK);
    mpccl_req_t s, r, x;
    memset(&x, 0, sizeof(x));
    ck_assert_int_ne(t->ops->isend_region(t, 0, tag_of(0, 5), sbuf + 1, N, sreg, &x), MPCCL_OK);
    ck_assert_int_ne(t->ops->irecv_region(t, 0, tag_of(0, 5), sbuf, N, rreg, &x), MPCCL_OK);
    ck_assert_int_eq(t->ops->irecv_region(t, 0, tag_of(0, 6), rbuf, N, rreg, &r), MPCCL_OK);
    ck_assert_int_eq(t->ops->isend_region(t, 0, tag_of(0, 6), sbuf + 16, N - 16, sreg, &s), MPCCL_OK);
    for (int spins = 0; (!s.done || !r.done) && spins < 10000000; spins++) t->ops->progress(t);
    ck_assert_int_eq(s.done && r.done, 1);
    ck_assert_int_eq(s.status, MPCCL_OK);
    ck_assert_int_eq(r.status, MPCCL_OK);
    ck_assert_uint_eq(r.bytes, N - 16);
    ck_assert_int_eq(memcmp(rbuf, sbuf + 16, N - 16), 0);
    t->ops->region_close(t, sreg);
    t->ops->region_close(t, rreg);
    t->ops->close(t, 0);
    mpccl_bootstrap_close(&bs);
    mpccl_inproc_group_release(g);
    free(sbuf);
}
END_TEST

/* ---- ping-pong latency, with and without idle() ---- */

typedef struct {
    int iters;
    int use_idle;
    double usec;
} pp_arg_t;

static void pp_wait(mpccl_transport_t *t, mpccl_req_t *r, int use_idle)
{
    int spins = 0;
    while (!r->done)
        if (t->ops->progress(t) > 0) spins = 0;
        else if (use_idle && ++spins > 16) t->ops->idle(t);
}

static void pingpong_rank(mpccl_transport_t *t, mpccl_bootstrap_t *bs, void *arg)
{
    pp_arg_t *a = arg;
    int me = t->rank, other = me ^ 1; /* pairs 0-1, 2-3, ... */
    uint64_t v = 0, got = 0;
    mpccl_req_t s, r;
    mpccl_bootstrap_barrier(bs);
    double t0 = 0;
    for (int i = -100; i < a->iters; i++) { /* 100 warm-up rounds */
        if (i == 0) t0 = now_s();
        if (me % 2 == 0) {
            v = (uint64_t)i;
            t->ops->isend(t, other, tag_of(me, 1), &v, 8, &s);
            t->ops->irecv(t, other, tag_of(other, 1), &got, 8, &r);
            pp_wait(t, &s, a->use_idle);
            pp_wait(t, &r, a->use_idle);
            ck_assert_uint_eq(got, (uint64_t)i + 1);
        } else {
            t->ops->irecv(t, other, tag_of(other, 1), &got, 8, &r);
            pp_wait(t, &r, a->use_idle);
            v = got + 1;
            t->ops->isend(t, other, tag_of(me, 1), &v, 8, &s);
            pp_wait(t, &s, a->use_idle);
        }
    }
    if (me == 0) a->usec = (now_s() - t0) * 1e6 / a->iters;
    close_after_barrier(t, bs, 0);
}

/* Also 4 pairs at once: more busy threads than this machine's cores. */
START_TEST(test_pingpong)
{
    for (int n = 2; n <= 8; n += 6)
        for (int use_idle = 0; use_idle < 2; use_idle++) {
            pp_arg_t a = {.iters = n == 2 ? 5000 : 1000, .use_idle = use_idle};
            run_ranks(n, pingpong_rank, &a);
            printf("ping-pong 8 B, %d threads, %s: %.2f us per round trip\n", n,
                   use_idle ? "progress + idle()" : "busy progress", a.usec);
            ck_assert(a.usec > 0);
        }
}
END_TEST

/* ---- two processes ---- */

/* mode 0: exchange and close; mode 1: the child dies without closing and the
 * parent must see MPCCL_ERR_REMOTE on a pending receive and close in time. */
static void two_proc_rank(int rank, int fd, int mode)
{
    mpccl_bootstrap_t bs = {.rank = rank, .nranks = 2, .ops = &sp_ops, .impl = (void *)(intptr_t)fd};
    mpccl_transport_t *t;
    ck_assert_msg(mpccl_ucx_transport_create(&bs, &t) == MPCCL_OK, "create: %s", mpccl_last_error());
    int other = 1 - rank;
    mpccl_req_t r[2 * NSIZES];
    unsigned char *rb[NSIZES], *sb[NSIZES];
    for (int k = 0; k < NSIZES; k++) {
        rb[k] = malloc(sizes[k] + 1);
        sb[k] = malloc(sizes[k] + 1);
        fill(sb[k], sizes[k], rank, other, (uint64_t)k);
        t->ops->irecv(t, other, tag_of(other, (uint64_t)k), rb[k], sizes[k], &r[k]);
        t->ops->isend(t, other, tag_of(rank, (uint64_t)k), sb[k], sizes[k], &r[NSIZES + k]);
    }
    wait_all(t, r, 2 * NSIZES, 30);
    for (int k = 0; k < NSIZES; k++) {
        ck_assert_int_eq(r[k].status, MPCCL_OK);
        ck_assert_int_eq(r[NSIZES + k].status, MPCCL_OK);
        check_data(rb[k], sizes[k], other, rank, (uint64_t)k);
    }
    /* mpccl's own UCX default (lib/ucx/ucx_context.c): eager below 64 KB,
     * unless the user set UCX_RNDV_THRESH or GPU memory may go to UCX.  0:
     * this UCX describes the endpoint in a form the parser does not know. */
    size_t em = t->ops->eager_max(t, other);
    const char *gd = getenv("MPCCL_GPU_DIRECT");
    if (em && !getenv("UCX_RNDV_THRESH") && !(gd && strcmp(gd, "1") == 0) && mpccl_ucx_gdr_nic() == NULL)
        ck_assert_msg(em == 65535, "UCX sends up to %zu bytes eagerly, expected 65535 (RNDV_THRESH=64K)", em);
    mpccl_bootstrap_barrier(&bs);
    if (mode == 1 && rank == 1) _exit(0); /* dies without a word */
    if (mode == 1) {
        /* With UCX peer error handling (the default) the failure must surface as
         * MPCCL_ERR_REMOTE; without it (MPCCL_UCX_ERR_MODE=none) nothing is
         * reported and only cancel and close must still work. */
        const char *em = getenv("MPCCL_UCX_ERR_MODE");
        int detect = !(em && strcmp(em, "none") == 0);
        mpccl_req_t lost;
        t->ops->irecv(t, other, tag_of(other, 77), rb[0], 1, &lost);
        double t0 = now_s();
        if (detect) {
            wait_all(t, &lost, 1, 60);
            printf("dead peer noticed after %.2f s: %s (%s)\n", now_s() - t0,
                   mpccl_status_name(lost.status), mpccl_last_error());
            ck_assert_int_eq(lost.status, MPCCL_ERR_REMOTE);
            mpccl_req_t later;
            t->ops->isend(t, other, tag_of(rank, 78), sb[1], 1, &later);
            ck_assert_int_eq(later.done, 1);
            ck_assert_int_eq(later.status, MPCCL_ERR_REMOTE);
        } else {
            progress_for(t, 1.0);
            ck_assert_int_eq(lost.done, 0);
            t->ops->cancel(t, &lost);
            wait_all(t, &lost, 1, 10);
            ck_assert_int_ne(lost.status, MPCCL_OK);
        }
        t0 = now_s();
        t->ops->close(t, 0);
        ck_assert_msg(now_s() - t0 < 3.0, "close after a peer died took %.2f s", now_s() - t0);
    } else {
        double t0 = now_s();
        t->ops->close(t, 0);
        ck_assert_msg(now_s() - t0 < 1.5, "close took %.2f s", now_s() - t0);
    }
    for (int k = 0; k < NSIZES; k++) free(rb[k]), free(sb[k]);
}

static void two_procs(int mode)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(sv[0]);
        two_proc_rank(1, sv[1], mode);
        _exit(0);
    }
    close(sv[1]);
    two_proc_rank(0, sv[0], mode);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child rank failed (status %#x)", status);
    close(sv[0]);
}

START_TEST(test_two_processes)
{
    two_procs(0);
}
END_TEST

START_TEST(test_peer_dies)
{
    two_procs(1);
}
END_TEST

int main(void)
{
    const char *s = getenv("MPCCL_TEST_SEED");
    seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
    printf("test_ucx: seed %llu (MPCCL_TEST_SEED to repeat)\n", (unsigned long long)seed);
    /* Notice a dead peer within seconds (UCX's default is far longer). */
    setenv("UCX_KEEPALIVE_INTERVAL", "200ms", 0);
    Suite *su = suite_create("ucx");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_pairs, 0, 8);
    tcase_add_loop_test(tc, test_in_flight, 0, 3);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_bad_peer);
    tcase_add_test(tc, test_regions);
    tcase_add_test(tc, test_gdr_rule);
    tcase_add_test(tc, test_eager_max_parse);
    tcase_add_test(tc, test_lanes_local_parse);
    tcase_add_test(tc, test_pingpong);
    suite_add_tcase(su, tc);
    TCase *tp = tcase_create("processes");
    tcase_set_timeout(tp, 120);
    tcase_add_test(tp, test_two_processes);
    tcase_add_test(tp, test_peer_dies);
    suite_add_tcase(su, tp);
    SRunner *sr = srunner_create(su);
    /* Each test in its own process: UCX must not be initialised before fork. */
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
