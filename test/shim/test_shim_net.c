/* Large point-to-point messages between hosts under libmpccl_shim.so: every
 * byte arrives, statuses and errors are MPI's, and (with --expect ucx) the
 * messages between ranks of different hosts went through the shim's UCX.
 * Run with MPCCL_SHIM_HOST=1 (host buffers count as device buffers) and
 * MPCCL_HOSTID set per rank (test/shim/run-shim.sh: rank % 2), so that the
 * route between hosts runs over UCX's shared-memory and TCP transports on one
 * machine.  A plain MPI program: it does not link mpccl.
 *
 *   test_shim_net [--expect ucx|mpi]
 *
 * A watchdog (alarm, MPCCL_P2P_TEST_TIMEOUT seconds, default 120) ends a
 * hung run, naming the test. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim_testlib.h"

static int me, np;
static const char *test = "setup";
static char watch_msg[200];

static const char *current_test(void) { return test; }

static void on_alarm(int sig)
{
    (void)sig;
    ssize_t w = write(2, watch_msg, strlen(watch_msg));
    (void)w;
    _exit(3);
}

static void begin(const char *name, unsigned limit)
{
    test = name;
    snprintf(watch_msg, sizeof(watch_msg), "[rank %d] test_shim_net: watchdog: still in '%s' after %u s\n", me, name,
             limit);
    alarm(limit);
}

/* The byte at position i of the message from rank `from` of size n. */
static unsigned char pattern(int from, size_t n, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ULL + (uint64_t)n * 31u + (uint64_t)from * 1000003u;
    return (unsigned char)(x >> 56);
}

static void fill(unsigned char *b, int from, size_t n)
{
    for (size_t i = 0; i < n; i++) b[i] = pattern(from, n, i);
}

static void check(const unsigned char *b, int from, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(from, n, i)) {
            FAIL("message of %zu bytes from rank %d: byte %zu is %u, not %u", n, from, i, b[i], pattern(from, n, i));
            return;
        }
}

typedef long long (*count_fn_t)(const char *, const char *);
static count_fn_t counter;

static long long count(const char *side, const char *route)
{
    return counter ? counter(side, route) : 0;
}

/* 1000: below MPCCL_SHIM_EAGER_BYTES (1 KB), stays an eager host copy */
static const size_t sizes[] = {1u << 20, 17u << 20, (17u << 20) + 1, (4u << 20) + 1, 1000003, 1025, 1000};
#define EAGER_BYTES 1024

/* Every rank sends to its right neighbour and receives from its left, both
 * in flight at once (rank r is on host r % 2: neighbours are on other hosts
 * except around an odd ring's end). */
static void test_ring(void)
{
    int right = (me + 1) % np, left = (me + np - 1) % np;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        unsigned char *s = malloc(n), *r = calloc(1, n);
        MPI_Request q[2];
        MPI_Status st[2];
        fill(s, me, n);
        MPI_OK(MPI_Irecv(r, (int)n, MPI_BYTE, left, 7, MPI_COMM_WORLD, &q[0]));
        MPI_OK(MPI_Isend(s, (int)n, MPI_BYTE, right, 7, MPI_COMM_WORLD, &q[1]));
        MPI_OK(MPI_Waitall(2, q, st));
        int got = 0;
        MPI_Get_count(&st[0], MPI_BYTE, &got);
        if (st[0].MPI_SOURCE != left || st[0].MPI_TAG != 7 || (size_t)got != n)
            FAIL("status: source %d tag %d count %d, expected %d 7 %zu", st[0].MPI_SOURCE, st[0].MPI_TAG, got, left, n);
        check(r, left, n);
        free(s);
        free(r);
    }
}

/* Pairs (2k, 2k+1), on different hosts: blocking and synchronous sends,
 * MPI_ANY_SOURCE / MPI_ANY_TAG, a receive with holes, truncation. */
static void test_pairs(void)
{
    int peer = me ^ 1;
    MPI_Comm c; /* (made by every rank: collective) */
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    if (peer >= np) {
        MPI_Comm_free(&c);
        return;
    }
    size_t n = (9u << 20) + 5;
    unsigned char *s = malloc(n), *r = malloc(n + 4096);
    MPI_Status st;
    int got = 0;
    fill(s, me, n);
    for (int round = 0; round < 2; round++) {
        memset(r, 0, n);
        if ((me & 1) == round) {
            MPI_OK(round ? MPI_Ssend(s, (int)n, MPI_BYTE, peer, 11, MPI_COMM_WORLD)
                         : MPI_Send(s, (int)n, MPI_BYTE, peer, 11, MPI_COMM_WORLD));
        } else {
            MPI_OK(MPI_Recv(r, (int)n + 4096, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            MPI_Get_count(&st, MPI_BYTE, &got);
            if (st.MPI_SOURCE != peer || st.MPI_TAG != 11 || (size_t)got != n)
                FAIL("status: source %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG, got);
            check(r, peer, n);
        }
    }

    /* a receive into a vector type: 3000 of every 3001 bytes, the holes kept */
    size_t blocks = 2000, m = blocks * 3000, span = blocks * 3001;
    MPI_Datatype vec;
    MPI_Type_vector((int)blocks, 3000, 3001, MPI_BYTE, &vec);
    MPI_Type_commit(&vec);
    unsigned char *h = malloc(span);
    if (me & 1) {
        memset(h, 0xa5, span);
        MPI_OK(MPI_Recv(h, 1, vec, peer, 12, MPI_COMM_WORLD, &st));
        for (size_t b = 0; b < blocks; b++) {
            for (size_t i = 0; i < 3000; i++)
                if (h[b * 3001 + i] != pattern(peer, m, b * 3000 + i)) {
                    FAIL("vector receive: block %zu byte %zu wrong", b, i);
                    b = blocks;
                    break;
                }
            if (b < blocks && h[b * 3001 + 3000] != 0xa5) {
                FAIL("vector receive: hole after block %zu written", b);
                break;
            }
        }
    } else {
        unsigned char *v = malloc(m);
        fill(v, me, m);
        MPI_OK(MPI_Send(v, (int)m, MPI_BYTE, peer, 12, MPI_COMM_WORLD));
        free(v);
    }
    MPI_Type_free(&vec);
    free(h);

    /* truncation: the receiver gets MPI_ERR_TRUNCATE, the sender completes */
    if (me & 1) {
        int rc = MPI_Recv(r, (int)(n / 2), MPI_BYTE, peer, 13, c, &st);
        int cls = 0;
        MPI_Error_class(rc, &cls);
        if (cls != MPI_ERR_TRUNCATE)
            FAIL("a receive of %zu bytes for %zu returned class %d, not MPI_ERR_TRUNCATE", n / 2, n, cls);
    } else {
        MPI_OK(MPI_Send(s, (int)n, MPI_BYTE, peer, 13, c));
    }
    /* and the pair goes on working after it */
    if (me & 1) {
        MPI_OK(MPI_Recv(r, (int)n, MPI_BYTE, peer, 14, c, &st));
        check(r, peer, n);
    } else {
        MPI_OK(MPI_Send(s, (int)n, MPI_BYTE, peer, 14, c));
    }
    MPI_Comm_free(&c);
    free(s);
    free(r);
}

int main(int argc, char **argv)
{
    const char *expect = NULL;
    unsigned limit = 120;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    world_rank = me;
    fail_context = current_test;
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--expect") && i + 1 < argc) expect = argv[++i];
        else {
            if (me == 0) fprintf(stderr, "usage: %s [--expect ucx|mpi]\n", argv[0]);
            MPI_Finalize();
            return 99;
        }
    }
    if (getenv("MPCCL_P2P_TEST_TIMEOUT")) limit = (unsigned)strtoul(getenv("MPCCL_P2P_TEST_TIMEOUT"), NULL, 0);
    signal(SIGALRM, on_alarm);
    counter = (count_fn_t)(uintptr_t)dlsym(RTLD_DEFAULT, "mpcclShimCount");
    if (expect && counter == NULL) {
        if (me == 0) printf("test_shim_net: --expect needs libmpccl_shim.so preloaded\n");
        MPI_Finalize();
        return 1;
    }
    double t0 = MPI_Wtime();
    long long ucx0 = count("send", "ucx"), staged0 = count("send", "staged");

    begin("ring", limit);
    test_ring();
    begin("pairs", limit);
    test_pairs();
    alarm(0);

    /* the messages to another host, large enough for the envelope */
    long long ucx = count("send", "ucx") - ucx0, staged = count("send", "staged") - staged0;
    long long remote = 0;
    int right = (me + 1) % np;
    for (size_t k = 0; np > 1 && right % 2 != me % 2 && k < sizeof(sizes) / sizeof(sizes[0]); k++)
        remote += sizes[k] > EAGER_BYTES;
    /* pairs: the even rank's send, vector send and send after the truncated
     * one (a refused message is not counted); the odd rank's Ssend */
    if ((me ^ 1) < np) remote += (me & 1) ? 1 : 3;
    if (expect && !strcmp(expect, "ucx") && ucx != remote)
        FAIL("%lld of %lld sends to another host went through UCX (%lld staged)", ucx, remote, staged);
    if (expect && !strcmp(expect, "mpi") && ucx != 0) FAIL("%lld sends went through UCX with MPCCL_SHIM_NET=mpi", ucx);

    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0)
        printf("test_shim_net: %s (%d failures; %d ranks, %s) in %.1f s\n", all ? "FAILED" : "passed", all, np,
               expect ? expect : "no route expected", MPI_Wtime() - t0);
    if (getenv("MPCCL_TEST_NET_VERBOSE"))
        printf("[rank %d] sends through UCX %lld, staged %lld, to another host %lld\n", me, ucx, staged, remote);
    MPI_Finalize();
    return all ? 1 : 0;
}
