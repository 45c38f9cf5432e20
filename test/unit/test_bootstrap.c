/* Bootstrap tests: socket (unique id and MPCCL_COMM_ID), in-process and oob
 * implementations, ranks as threads of this process.  Data is seeded random
 * (MPCCL_TEST_SEED, printed).  Each test runs in its own fork, so settings that
 * are read once per process (MPCCL_BOOTSTRAP_TIMEOUT, NCCL_COMM_ID) are set at
 * the top of the test that needs them. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "mpccl.h"
#include "bootstrap/bootstrap_net.h"
#include "bootstrap/bootstrap_gate.h"
#include "bootstrap/bootstrap_root.h"
#include "util/config.h"
#include "util/status.h"

static unsigned long test_seed = 20240611;

/* The byte rank `r` contributes at offset i of collective `iter`. */
static unsigned char pattern(int iter, int r, size_t i)
{
    uint64_t x = test_seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)iter << 40) ^
                 ((uint64_t)r << 20) ^ (uint64_t)i;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 29;
    return (unsigned char)x;
}

/* One allgather of `bytes` per rank; returns the number of wrong bytes. */
static size_t check_allgather(mpccl_bootstrap_t *bs, int iter, size_t bytes, mpccl_status_t *st)
{
    int n = bs->nranks, r = bs->rank;
    unsigned char *buf = malloc((size_t)n * bytes + 1);
    memset(buf, 0xee, (size_t)n * bytes + 1);
    for (size_t i = 0; i < bytes; i++) buf[(size_t)r * bytes + i] = pattern(iter, r, i);
    *st = mpccl_bootstrap_allgather(bs, buf, bytes);
    size_t bad = 0;
    for (int j = 0; j < n && *st == MPCCL_OK; j++)
        for (size_t i = 0; i < bytes; i++) bad += buf[(size_t)j * bytes + i] != pattern(iter, j, i);
    if (buf[(size_t)n * bytes] != 0xee) bad++; /* wrote past the end */
    free(buf);
    return bad;
}

/* The whole life of one rank: sizes 0, 1, 7, 100000, barriers, back-to-back
 * small collectives, close.  Fills st/err for the first failure. */
static void exercise(mpccl_bootstrap_t *bs, mpccl_status_t *st, size_t *bad)
{
    static const size_t sizes[] = {0, 1, 7, 100000};
    int iter = 0;
    *bad = 0;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        *bad += check_allgather(bs, iter++, sizes[k], st);
        if (*st != MPCCL_OK) return;
        *st = mpccl_bootstrap_barrier(bs);
        if (*st != MPCCL_OK) return;
    }
    for (int k = 0; k < 20; k++) {
        *bad += check_allgather(bs, iter++, 8 + (size_t)k, st);
        if (*st != MPCCL_OK) return;
    }
    for (int k = 0; k < 5; k++)
        if ((*st = mpccl_bootstrap_barrier(bs)) != MPCCL_OK) return;
}

/* ---------------- socket bootstrap ---------------- */

typedef struct {
    unsigned char id[128];
    int rank, nranks;
    int full;           /* run exercise() after create */
    int lost_after_ms;  /* > 0: a watch reports rank nranks - 1 lost after this long */
    mpccl_status_t st;  /* first failure */
    size_t bad;
    int64_t ms;         /* time create (and exercise) took */
    char err[1024];
    pthread_t tid;
} rank_t;

static __thread int64_t watch_t0;
static int last_rank_lost(void *arg)
{
    const rank_t *a = arg;
    return mpccl_socket_now_ms() - watch_t0 >= a->lost_after_ms ? a->nranks - 1 : -1;
}

static void *socket_rank(void *arg)
{
    rank_t *a = arg;
    mpccl_bootstrap_t bs;
    int64_t t0 = mpccl_socket_now_ms();
    watch_t0 = t0;
    if (a->lost_after_ms > 0) mpccl_bootstrap_set_watch(last_rank_lost, a);
    a->st = mpccl_socket_bootstrap_create(a->id, a->rank, a->nranks, &bs);
    mpccl_bootstrap_set_watch(NULL, NULL);
    if (a->st == MPCCL_OK) {
        if (bs.rank != a->rank || bs.nranks != a->nranks) a->bad++;
        if (a->full) exercise(&bs, &a->st, &a->bad);
        mpccl_bootstrap_close(&bs);
        mpccl_bootstrap_close(&bs); /* a second close is harmless */
    }
    a->ms = mpccl_socket_now_ms() - t0;
    snprintf(a->err, sizeof(a->err), "%s", a->st == MPCCL_OK ? "" : mpccl_last_error());
    return NULL;
}

static rank_t *make_ranks(const void *id, int nranks, int full)
{
    rank_t *r = calloc((size_t)nranks, sizeof(*r));
    for (int i = 0; i < nranks; i++) {
        memcpy(r[i].id, id, 128);
        r[i].rank = i;
        r[i].nranks = nranks;
        r[i].full = full;
    }
    return r;
}

static void start(rank_t *r) { ck_assert_int_eq(pthread_create(&r->tid, NULL, socket_rank, r), 0); }

static void expect_ok(rank_t *r, int n)
{
    for (int i = 0; i < n; i++) {
        ck_assert_msg(r[i].st == MPCCL_OK, "rank %d of %d failed: %s", r[i].rank, n, r[i].err);
        ck_assert_msg(r[i].bad == 0, "rank %d of %d: %zu wrong bytes", r[i].rank, n, r[i].bad);
    }
}

static void run_comm(const void *id, int nranks)
{
    rank_t *r = make_ranks(id, nranks, 1);
    for (int i = 0; i < nranks; i++) start(&r[i]);
    for (int i = 0; i < nranks; i++) pthread_join(r[i].tid, NULL);
    expect_ok(r, nranks);
    free(r);
}

static const int sizes_nranks[] = {1, 2, 5, 8};

START_TEST(socket_nranks)
{
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    mpccl_socket_id_t sid;
    memcpy(&sid, id, sizeof(sid));
    ck_assert_uint_eq(sid.version, 2); /* with the gate secret */
    ck_assert_uint_ne(sid.addrlen, 0);
    run_comm(id, sizes_nranks[_i]);
}
END_TEST

START_TEST(socket_concurrent_comms)
{
    enum { NCOMM = 3 };
    const int n[NCOMM] = {3, 4, 2};
    unsigned char id[NCOMM][128];
    rank_t *r[NCOMM];
    for (int c = 0; c < NCOMM; c++) {
        ck_assert_int_eq(mpccl_socket_get_unique_id(id[c]), MPCCL_OK);
        r[c] = make_ranks(id[c], n[c], 1);
    }
    ck_assert(memcmp(id[0], id[1], 8) != 0); /* distinct magics */
    /* Interleave the starts so the roots see their ranks mixed in time. */
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < NCOMM; c++)
            if (i < n[c]) start(&r[c][i]);
    for (int c = 0; c < NCOMM; c++) {
        for (int i = 0; i < n[c]; i++) pthread_join(r[c][i].tid, NULL);
        expect_ok(r[c], n[c]);
        free(r[c]);
    }
}
END_TEST

START_TEST(socket_wrong_magic_rejected)
{
    unsigned char id[128], forged[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    memcpy(forged, id, 128);
    forged[0] ^= 0x5a; /* same root address, another magic */
    rank_t *r = make_ranks(id, 2, 1);
    rank_t *f = make_ranks(forged, 2, 0);
    start(&r[0]);
    start(&f[0]);
    pthread_join(f[0].tid, NULL);
    ck_assert_int_eq(f[0].st, MPCCL_ERR_REMOTE);
    /* The forged id's key differs: the root's gate refuses its proof. */
    ck_assert_msg(strstr(f[0].err, "refused") != NULL, "message: %s", f[0].err);
    ck_assert_msg(f[0].ms < 5000, "rejection took %lld ms", (long long)f[0].ms);
    start(&r[1]);
    pthread_join(r[0].tid, NULL);
    pthread_join(r[1].tid, NULL);
    expect_ok(r, 2);
    free(r);
    free(f);
}
END_TEST

START_TEST(socket_missing_rank_times_out)
{
    setenv("MPCCL_BOOTSTRAP_TIMEOUT", "2", 1);
    ck_assert_int_eq(mpccl_bootstrap_timeout_s(), 2);
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    rank_t *r = make_ranks(id, 3, 1);
    start(&r[0]);
    start(&r[2]); /* rank 1 never comes */
    pthread_join(r[0].tid, NULL);
    pthread_join(r[2].tid, NULL);
    for (int i = 0; i < 3; i += 2) {
        ck_assert_int_eq(r[i].st, MPCCL_ERR_REMOTE);
        ck_assert_msg(strstr(r[i].err, "2 of 3") && strstr(r[i].err, "rank(s) 1"),
                      "message: %s", r[i].err);
        ck_assert_msg(r[i].ms < 6000, "rank %d failed after %lld ms", i, (long long)r[i].ms);
        printf("missing rank: rank %d failed after %lld ms: %s\n", i, (long long)r[i].ms,
               r[i].err);
    }
    free(r);
}
END_TEST

/* A rank that died is reported by the watch (as a shrink's peer watcher
 * would): the others give up at once, naming it, instead of at the timeout. */
START_TEST(socket_lost_rank_ends_wait)
{
    setenv("MPCCL_BOOTSTRAP_TIMEOUT", "60", 1);
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    rank_t *r = make_ranks(id, 3, 1);
    for (int i = 0; i < 2; i++) r[i].lost_after_ms = 300;
    start(&r[0]);
    start(&r[1]); /* rank 2 never comes */
    pthread_join(r[0].tid, NULL);
    pthread_join(r[1].tid, NULL);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(r[i].st, MPCCL_ERR_REMOTE);
        ck_assert_msg(strstr(r[i].err, "rank 2 of the communicator being formed died"), "message: %s", r[i].err);
        ck_assert_msg(r[i].ms < 20000, "rank %d gave up after %lld ms", i, (long long)r[i].ms);
    }
    free(r);
}
END_TEST

START_TEST(socket_reused_id_fails)
{
    setenv("MPCCL_BOOTSTRAP_TIMEOUT", "20", 1);
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    run_comm(id, 2);
    rank_t *r = make_ranks(id, 2, 0);
    start(&r[0]);
    start(&r[1]);
    pthread_join(r[0].tid, NULL);
    pthread_join(r[1].tid, NULL);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(r[i].st, MPCCL_ERR_REMOTE);
        ck_assert_msg(strstr(r[i].err, "no bootstrap root listening") &&
                          strstr(r[i].err, "already used"),
                      "message: %s", r[i].err);
        /* Refusals are retried a few seconds, not the whole timeout. */
        ck_assert_msg(r[i].ms < 10000, "took %lld ms", (long long)r[i].ms);
    }
    printf("reused id: %s (%lld ms)\n", r[0].err, (long long)r[0].ms);
    free(r);
}
END_TEST

START_TEST(socket_inconsistent_ranks_fail_all)
{
    unsigned char id[128];
    /* Two processes claiming the same rank. */
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    rank_t *r = make_ranks(id, 2, 0);
    r[1].rank = 0;
    start(&r[0]);
    start(&r[1]);
    pthread_join(r[0].tid, NULL);
    pthread_join(r[1].tid, NULL);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(r[i].st, MPCCL_ERR_REMOTE);
        ck_assert_msg(strstr(r[i].err, "arrived twice"), "message: %s", r[i].err);
    }
    free(r);
    /* Ranks that disagree on nranks. */
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    r = make_ranks(id, 3, 0);
    r[1].nranks = 2;
    start(&r[0]);
    start(&r[1]);
    /* Both fail at once, whichever came first (rank 2 is not needed for that). */
    for (int i = 0; i < 2; i++) {
        pthread_join(r[i].tid, NULL);
        ck_assert_int_eq(r[i].st, MPCCL_ERR_REMOTE);
        ck_assert_msg(strstr(r[i].err, "nranks=2") && strstr(r[i].err, "nranks=3"),
                      "message: %s", r[i].err);
        ck_assert_msg(r[i].ms < 5000, "took %lld ms", (long long)r[i].ms);
    }
    free(r);
}
END_TEST

typedef struct {
    rank_t base;
    size_t bytes;
} mismatch_t;

static void *mismatch_rank(void *p)
{
    mismatch_t *m = p;
    mpccl_bootstrap_t bs;
    char buf[64];
    m->base.st = mpccl_socket_bootstrap_create(m->base.id, m->base.rank, 2, &bs);
    if (m->base.st == MPCCL_OK) {
        m->base.st = mpccl_bootstrap_allgather(&bs, buf, m->bytes);
        snprintf(m->base.err, sizeof(m->base.err), "%s", mpccl_last_error());
        /* Out of step for good: later collectives fail at once. */
        if (mpccl_bootstrap_barrier(&bs) != MPCCL_ERR_REMOTE) m->base.bad++;
        mpccl_bootstrap_close(&bs);
    }
    return NULL;
}

START_TEST(socket_allgather_size_mismatch)
{
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    mismatch_t m[2];
    memset(m, 0, sizeof(m));
    for (int i = 0; i < 2; i++) {
        memcpy(m[i].base.id, id, 128);
        m[i].base.rank = i;
        m[i].bytes = 4 + 4 * (size_t)i;
        ck_assert_int_eq(pthread_create(&m[i].base.tid, NULL, mismatch_rank, &m[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(m[i].base.tid, NULL);
        ck_assert_int_eq(m[i].base.st, MPCCL_ERR_USAGE);
        ck_assert_msg(strstr(m[i].base.err, "out of step"), "message: %s", m[i].base.err);
        ck_assert_uint_eq(m[i].base.bad, 0);
    }
}
END_TEST

START_TEST(socket_ifname_setting)
{
    setenv("MPCCL_SOCKET_IFNAME", "=lo", 1);
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    mpccl_socket_id_t sid;
    mpccl_sockaddr_t a;
    memcpy(&sid, id, sizeof(sid));
    memcpy(&a, sid.addr, sizeof(a));
    char str[MPCCL_SOCKADDR_STRLEN];
    ck_assert_msg(a.sa.sa_family == AF_INET && ntohl(a.in.sin_addr.s_addr) == INADDR_LOOPBACK,
                  "root at %s, expected the loopback interface", mpccl_sockaddr_str(&a, str));
    run_comm(id, 3);
}
END_TEST

START_TEST(socket_ifname_none_matches)
{
    setenv("NCCL_SOCKET_IFNAME", "=no_such_if0", 1);
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_ERR_SYSTEM);
    ck_assert_msg(strstr(mpccl_last_error(), "no_such_if0") && strstr(mpccl_last_error(), "lo"),
                  "message: %s", mpccl_last_error());
}
END_TEST

/* Ranks as processes: the id crosses a pipe like it crosses MPI_Bcast.  The
 * children are forked before the id exists: making it starts the root's
 * thread, and a fork while that thread holds a lock (the sanitizers'
 * allocator has no fork handler) would leave the child stuck on it. */
START_TEST(socket_processes)
{
    enum { N = 4 };
    pid_t pid[N];
    int go[N][2];
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(pipe(go[i]), 0);
        pid[i] = fork();
        ck_assert_int_ge(pid[i], 0);
        if (pid[i] == 0) {
            unsigned char cid[128];
            close(go[i][1]);
            if (read(go[i][0], cid, sizeof(cid)) != (ssize_t)sizeof(cid)) _exit(2);
            rank_t *r = make_ranks(cid, N, 1);
            socket_rank(&r[i]);
            if (r[i].st != MPCCL_OK || r[i].bad) fprintf(stderr, "rank %d: %s\n", i, r[i].err);
            _exit(r[i].st != MPCCL_OK || r[i].bad ? 1 : 0);
        }
        close(go[i][0]);
    }
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(write(go[i][1], id, sizeof(id)), (ssize_t)sizeof(id));
        close(go[i][1]);
    }
    for (int i = 0; i < N; i++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pid[i], &status, 0), pid[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank process %d failed (status %#x)", i,
                      status);
    }
}
END_TEST

/* A port nothing listens on right now (the kernel picked it as free). */
static int free_port(int family)
{
    mpccl_sockaddr_t a, b;
    memset(&a, 0, sizeof(a));
    a.sa.sa_family = (sa_family_t)family;
    if (family == AF_INET) a.in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else a.in6.sin6_addr = in6addr_loopback;
    int fd = -1;
    if (mpccl_socket_listen(&a, &fd, &b) != MPCCL_OK) return -1;
    mpccl_socket_close(&fd);
    return ntohs(family == AF_INET ? b.in.sin_port : b.in6.sin6_port);
}

static void comm_id_case(const char *fmt, int family)
{
    int port = free_port(family);
    ck_assert_int_gt(port, 0);
    char env[64];
    snprintf(env, sizeof(env), fmt, port);
    setenv("NCCL_COMM_ID", env, 1);
    printf("NCCL_COMM_ID=%s\n", env);
    unsigned char id[128], id2[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    ck_assert_int_eq(mpccl_socket_get_unique_id(id2), MPCCL_OK);
    ck_assert(memcmp(id, id2, 128) == 0); /* every process can build it alone */
    /* get_unique_id started nothing: the port is still free. */
    mpccl_sockaddr_t root;
    ck_assert_int_eq(mpccl_sockaddr_parse(env, &root), MPCCL_OK);
    int fd = -1;
    int64_t now = mpccl_socket_now_ms();
    ck_assert_int_eq(mpccl_socket_connect(&root, now + 1000, now, &fd), ECONNREFUSED);
    /* Twice in a row: each communicator's rank 0 starts the root afresh. */
    for (int round = 0; round < 2; round++) {
        rank_t *r = make_ranks(id, 3, 1);
        start(&r[2]);
        start(&r[1]);
        usleep(300 * 1000); /* the others arrive before rank 0 listens */
        start(&r[0]);
        for (int i = 0; i < 3; i++) pthread_join(r[i].tid, NULL);
        expect_ok(r, 3);
        free(r);
    }
}

START_TEST(socket_comm_id_ipv4) { comm_id_case("127.0.0.1:%d", AF_INET); }
END_TEST

START_TEST(socket_comm_id_ipv6)
{
    if (free_port(AF_INET6) < 0) {
        printf("socket_comm_id_ipv6: no IPv6 loopback here; the case cannot run\n");
        return;
    }
    comm_id_case("[::1]:%d", AF_INET6);
}
END_TEST

/* With MPCCL_COMM_ID the root's address is known to everyone and the id's
 * magic is a constant: a stranger that connects first, claiming rank 1, must
 * be refused without learning anything (it does not know the job's
 * NCCL_SOCKET_MAGIC / MPCCL_COMM_SECRET), and the job must form all the same. */
START_TEST(socket_comm_id_hijack)
{
    int port = free_port(AF_INET);
    ck_assert_int_gt(port, 0);
    char env[64];
    snprintf(env, sizeof(env), "127.0.0.1:%d", port);
    setenv("NCCL_COMM_ID", env, 1);
    setenv("NCCL_SOCKET_MAGIC", "the job's secret 7f3a", 1);
    mpccl_config_reload();
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    rank_t *r = make_ranks(id, 2, 1);
    start(&r[0]); /* starts the root */

    /* The stranger listens where it asks rank 0 to connect. */
    mpccl_sockaddr_t lo, mine, root;
    memset(&lo, 0, sizeof(lo));
    lo.in.sin_family = AF_INET;
    lo.in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int trap = -1;
    ck_assert_int_eq(mpccl_socket_listen(&lo, &trap, &mine), MPCCL_OK);
    ck_assert_int_eq(mpccl_sockaddr_parse(env, &root), MPCCL_OK);
    static const char *guesses[] = {"", "secret", "the job's secret 7f3b"};
    for (int g = 0; g < 3; g++) {
        int64_t now = mpccl_socket_now_ms();
        int fd = -1, refused = 0, closed = 0;
        ck_assert_int_eq(mpccl_socket_connect(&root, now + 10000, now + 10000, &fd), 0);
        mpccl_gate_key_t key;
        mpccl_gate_key_from(guesses[g], strlen(guesses[g]), &key);
        mpccl_root_hello_t h;
        memset(&h, 0, sizeof(h));
        h.version = MPCCL_SOCKET_ID_VERSION;
        h.rank = 1;
        h.nranks = 2;
        h.listen_addr = mine;
        mpccl_status_t st = mpccl_gate_enter(fd, &key, MPCCL_GATE_LABEL_ROOT, &h, sizeof(h),
                                             mpccl_socket_now_ms() + 5000, "a stranger's hello", &refused, &closed);
        ck_assert_int_eq(st, MPCCL_ERR_REMOTE);
        ck_assert_msg(refused, "guess '%s': %s", guesses[g], mpccl_last_error());
        mpccl_socket_close(&fd);
    }
    start(&r[1]);
    pthread_join(r[0].tid, NULL);
    pthread_join(r[1].tid, NULL);
    expect_ok(r, 2);
    free(r);
    /* Nobody connected to the stranger: it was never counted as rank 1. */
    int c = -1;
    ck_assert_int_ne(mpccl_socket_accept(trap, mpccl_socket_now_ms() + 300, "a connection to the stranger", &c),
                     MPCCL_OK);
    mpccl_socket_close(&trap);
    unsetenv("NCCL_COMM_ID");
    unsetenv("NCCL_SOCKET_MAGIC");
    mpccl_config_reload();
}
END_TEST

START_TEST(socket_bad_args)
{
    unsigned char id[128];
    mpccl_bootstrap_t bs;
    memset(id, 0, sizeof(id));
    ck_assert_int_eq(mpccl_socket_bootstrap_create(id, 0, 2, &bs), MPCCL_ERR_ARG); /* not an id */
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    ck_assert_int_eq(mpccl_socket_bootstrap_create(id, 2, 2, &bs), MPCCL_ERR_ARG);
    ck_assert_int_eq(mpccl_socket_bootstrap_create(id, -1, 2, &bs), MPCCL_ERR_ARG);
    ck_assert_int_eq(mpccl_socket_bootstrap_create(id, 0, 0, &bs), MPCCL_ERR_ARG);
    ck_assert_int_eq(mpccl_socket_get_unique_id(NULL), MPCCL_ERR_ARG);
}
END_TEST

/* ---------------- in-process bootstrap ---------------- */

typedef struct {
    mpccl_inproc_group_t *g;
    int rank;
    mpccl_status_t st;
    size_t bad;
    char err[512];
} inproc_arg_t;

static void *inproc_rank(void *p)
{
    inproc_arg_t *a = p;
    mpccl_bootstrap_t bs;
    a->st = mpccl_inproc_bootstrap_create(a->g, a->rank, &bs);
    if (a->st == MPCCL_OK) {
        exercise(&bs, &a->st, &a->bad);
        mpccl_bootstrap_close(&bs);
    }
    snprintf(a->err, sizeof(a->err), "%s", a->st == MPCCL_OK ? "" : mpccl_last_error());
    return NULL;
}

START_TEST(inproc_nranks)
{
    int n = _i;
    mpccl_inproc_group_t *g;
    ck_assert_int_eq(mpccl_inproc_group_create(n, &g), MPCCL_OK);
    inproc_arg_t a[8];
    pthread_t t[8];
    for (int i = 0; i < n; i++) {
        a[i] = (inproc_arg_t){.g = g, .rank = i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, inproc_rank, &a[i]), 0);
    }
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    /* The ranks closed: this drops the last reference (valgrind/ASan see a leak
     * or a double free if the counting is wrong). */
    mpccl_inproc_group_release(g);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(a[i].st == MPCCL_OK, "rank %d of %d: %s", i, n, a[i].err);
        ck_assert_msg(a[i].bad == 0, "rank %d of %d: %zu wrong bytes", i, n, a[i].bad);
    }
}
END_TEST

START_TEST(inproc_misuse)
{
    mpccl_inproc_group_t *g;
    mpccl_bootstrap_t b0, b1;
    setenv("MPCCL_BOOTSTRAP_TIMEOUT", "1", 1); /* before anything reads settings */
    ck_assert_int_eq(mpccl_inproc_group_create(0, &g), MPCCL_ERR_ARG);
    ck_assert_int_eq(mpccl_inproc_group_create(2, &g), MPCCL_OK);
    ck_assert_int_eq(mpccl_inproc_bootstrap_create(g, 2, &b0), MPCCL_ERR_ARG);
    ck_assert_int_eq(mpccl_inproc_bootstrap_create(g, 0, &b0), MPCCL_OK);
    ck_assert_int_eq(mpccl_inproc_bootstrap_create(g, 0, &b1), MPCCL_ERR_USAGE);
    mpccl_inproc_group_release(g);
    /* Rank 1 never joins: the wait ends with an error, not a hang. */
    int64_t t0 = mpccl_socket_now_ms();
    ck_assert_int_eq(mpccl_bootstrap_barrier(&b0), MPCCL_ERR_REMOTE);
    ck_assert_int_lt(mpccl_socket_now_ms() - t0, 4000);
    ck_assert_msg(strstr(mpccl_last_error(), "1 of 2"), "%s", mpccl_last_error());
    mpccl_bootstrap_close(&b0);
}
END_TEST

/* ---------------- oob bootstrap over an in-process "transport" ---------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, arrived;
    unsigned gen;
    const void *send[8];
    int overlap;  /* some rank passed sendbuf inside its recvbuf */
    int releases[8];
} oob_shared_t;

typedef struct {
    oob_shared_t *sh;
    int rank;
} oob_ctx_t;

static void sh_barrier(oob_shared_t *sh)
{
    pthread_mutex_lock(&sh->mu);
    unsigned gen = sh->gen;
    if (++sh->arrived == sh->n) {
        sh->arrived = 0;
        sh->gen++;
        pthread_cond_broadcast(&sh->cv);
    } else {
        while (sh->gen == gen) pthread_cond_wait(&sh->cv, &sh->mu);
    }
    pthread_mutex_unlock(&sh->mu);
}

static int cb_allgather(void *ctx, const void *sendbuf, void *recvbuf, size_t bytes)
{
    oob_ctx_t *c = ctx;
    oob_shared_t *sh = c->sh;
    const char *s = sendbuf, *r = recvbuf;
    if (bytes && s + bytes > r && s < r + (size_t)sh->n * bytes) sh->overlap = 1;
    sh->send[c->rank] = sendbuf;
    sh_barrier(sh);
    for (int i = 0; i < sh->n; i++) memcpy((char *)recvbuf + (size_t)i * bytes, sh->send[i], bytes);
    sh_barrier(sh);
    return 0;
}

static int cb_barrier(void *ctx)
{
    sh_barrier(((oob_ctx_t *)ctx)->sh);
    return 0;
}

static void cb_release(void *ctx)
{
    oob_ctx_t *c = ctx;
    __atomic_add_fetch(&c->sh->releases[c->rank], 1, __ATOMIC_SEQ_CST);
}

typedef struct {
    oob_ctx_t ctx;
    int with_barrier;
    mpccl_status_t st;
    size_t bad;
    char err[512];
} oob_arg_t;

static void *oob_rank(void *p)
{
    oob_arg_t *a = p;
    mpcclOobOps_t ops = {.allgather = cb_allgather,
                         .barrier = a->with_barrier ? cb_barrier : NULL,
                         .release = cb_release};
    mpccl_bootstrap_t bs;
    /* ops lives on this stack only during create: the bootstrap keeps a copy. */
    a->st = mpccl_oob_bootstrap_create(&ops, &a->ctx, a->ctx.rank, a->ctx.sh->n, &bs);
    memset(&ops, 0, sizeof(ops));
    if (a->st == MPCCL_OK) {
        exercise(&bs, &a->st, &a->bad);
        mpccl_bootstrap_close(&bs);
        mpccl_bootstrap_close(&bs);
    }
    snprintf(a->err, sizeof(a->err), "%s", a->st == MPCCL_OK ? "" : mpccl_last_error());
    return NULL;
}

START_TEST(oob_nranks)
{
    int n = 1 + _i % 8, with_barrier = _i >= 8;
    oob_shared_t sh;
    memset(&sh, 0, sizeof(sh));
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    sh.n = n;
    oob_arg_t a[8];
    pthread_t t[8];
    for (int i = 0; i < n; i++) {
        a[i] = (oob_arg_t){.ctx = {.sh = &sh, .rank = i}, .with_barrier = with_barrier};
        ck_assert_int_eq(pthread_create(&t[i], NULL, oob_rank, &a[i]), 0);
    }
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(a[i].st == MPCCL_OK, "rank %d of %d: %s", i, n, a[i].err);
        ck_assert_msg(a[i].bad == 0, "rank %d of %d: %zu wrong bytes", i, n, a[i].bad);
        ck_assert_int_eq(sh.releases[i], 1);
    }
    ck_assert_msg(!sh.overlap, "sendbuf passed inside recvbuf");
}
END_TEST

static int cb_fail_allgather(void *ctx, const void *s, void *r, size_t b)
{
    (void)ctx, (void)s, (void)r, (void)b;
    return 7;
}
static int cb_fail_barrier(void *ctx)
{
    (void)ctx;
    return 3;
}

START_TEST(oob_callback_errors)
{
    mpcclOobOps_t ops = {.allgather = cb_fail_allgather, .barrier = cb_fail_barrier};
    mpccl_bootstrap_t bs;
    char buf[4];
    ck_assert_int_eq(mpccl_oob_bootstrap_create(NULL, NULL, 0, 1, &bs), MPCCL_ERR_ARG);
    ck_assert_int_eq(mpccl_oob_bootstrap_create(&ops, NULL, 1, 1, &bs), MPCCL_ERR_ARG);
    ck_assert_int_eq(mpccl_oob_bootstrap_create(&ops, NULL, 0, 1, &bs), MPCCL_OK);
    ck_assert_int_eq(mpccl_bootstrap_allgather(&bs, buf, 4), MPCCL_ERR_REMOTE);
    ck_assert_msg(strstr(mpccl_last_error(), "failed with 7"), "%s", mpccl_last_error());
    ck_assert_int_eq(mpccl_bootstrap_barrier(&bs), MPCCL_ERR_REMOTE);
    ck_assert_msg(strstr(mpccl_last_error(), "failed with 3"), "%s", mpccl_last_error());
    mpccl_bootstrap_close(&bs); /* release is NULL: nothing to call */
}
END_TEST

static Suite *bootstrap_suite(void)
{
    Suite *s = suite_create("bootstrap");
    TCase *tc = tcase_create("socket");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, socket_nranks, 0, 4);
    tcase_add_test(tc, socket_concurrent_comms);
    tcase_add_test(tc, socket_wrong_magic_rejected);
    tcase_add_test(tc, socket_missing_rank_times_out);
    tcase_add_test(tc, socket_lost_rank_ends_wait);
    tcase_add_test(tc, socket_reused_id_fails);
    tcase_add_test(tc, socket_inconsistent_ranks_fail_all);
    tcase_add_test(tc, socket_allgather_size_mismatch);
    tcase_add_test(tc, socket_ifname_setting);
    tcase_add_test(tc, socket_ifname_none_matches);
    tcase_add_test(tc, socket_processes);
    tcase_add_test(tc, socket_comm_id_ipv4);
    tcase_add_test(tc, socket_comm_id_ipv6);
    tcase_add_test(tc, socket_comm_id_hijack);
    tcase_add_test(tc, socket_bad_args);
    suite_add_tcase(s, tc);

    tc = tcase_create("inproc_oob");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, inproc_nranks, 1, 9);
    tcase_add_test(tc, inproc_misuse);
    tcase_add_loop_test(tc, oob_nranks, 0, 16);
    tcase_add_test(tc, oob_callback_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *seed = getenv("MPCCL_TEST_SEED");
    if (seed) test_seed = strtoul(seed, NULL, 0);
    printf("test_bootstrap: seed %lu (MPCCL_TEST_SEED)\n", test_seed);
    SRunner *sr = srunner_create(bootstrap_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
