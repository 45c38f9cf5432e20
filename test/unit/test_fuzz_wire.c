/* Fuzz targets for every parser of bytes that come from another process:
 * the gate's answer and verdict (bootstrap root, ring and shrink door), the
 * root's hello and reply, the ring hello, the allgather header, the shrink
 * door's message, the fd server's request (parsed and served live), the
 * revoke message and the UCX worker address lengths.  Each runs random and
 * mutated inputs (seeded and printed): no crash, no sanitizer report, no
 * hang, and nothing but a valid input is ever accepted.  MPCCL_FUZZ_ITERS
 * sets the count (default 20000; ten times that in a sanitizer build,
 * where the CI runs it).  Beside the live gate: a listener that was not
 * scheduled past a peer's deadline still admits the answer that arrived. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap_gate.h"
#include "bootstrap/bootstrap_net.h"
#include "bootstrap/bootstrap_root.h"
#include "core/comm_fail.h"
#include "core/shrink_door.h"
#include "cuda/cuda_fdpass.h"
#include "ucx/ucx_address_check.h"
#include "util/keyed_hash.h"
#include "util/stranger_log.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_SCALE 10
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_SCALE 10
#endif
#endif
#ifndef FUZZ_SCALE
#define FUZZ_SCALE 1
#endif

/* shrink_door.c asks whether a peer died; the parsers never do. */
int mpccl_comm_peer_dead(ncclComm_t comm, int peer) { return 0; }

static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static long iters(void)
{
    const char *e = getenv("MPCCL_FUZZ_ITERS");
    long n = e ? atol(e) : 20000L * FUZZ_SCALE;
    return n > 0 ? n : 1;
}

/* Fills buf (cap bytes) with a fuzz input derived from valid (vlen bytes):
 * random bytes, a mutation of valid (flipped bytes, truncated, extended,
 * extreme words), or valid itself.  Returns the input's length. */
static size_t make_input(unsigned char *buf, size_t cap, const void *valid, size_t vlen)
{
    size_t n;
    switch (rnd() % 5) {
    case 0: /* random bytes, random length */
        n = rnd() % (cap + 1);
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)rnd();
        return n;
    case 1: /* a few flipped bytes */
        memcpy(buf, valid, vlen);
        for (int k = 1 + (int)(rnd() % 4); k > 0 && vlen; k--) buf[rnd() % vlen] ^= (unsigned char)(1 + rnd() % 255);
        return vlen;
    case 2: /* truncated or extended */
        n = rnd() % (cap + 1);
        memcpy(buf, valid, n < vlen ? n : vlen);
        for (size_t i = vlen; i < n; i++) buf[i] = (unsigned char)rnd();
        return n;
    case 3: { /* an extreme 32-bit word somewhere: lengths, ranks, counts */
        static const uint32_t extreme[] = {0, 1, 0x7fffffff, 0x80000000u, 0xffffffffu, 0xfffffffeu, 1u << 24};
        memcpy(buf, valid, vlen);
        if (vlen >= 4) {
            size_t at = (rnd() % (vlen / 4)) * 4;
            uint32_t w = extreme[rnd() % (sizeof(extreme) / sizeof(extreme[0]))];
            memcpy(buf + at, &w, 4);
        }
        return vlen;
    }
    default:
        memcpy(buf, valid, vlen);
        return vlen;
    }
}

/* MPCCL_FUZZ_SEED repeats a run. */
static void seed(const char *target)
{
    static uint64_t count;
    const char *e = getenv("MPCCL_FUZZ_SEED");
    rng_state = e ? strtoull(e, NULL, 0)
                  : ((uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid()) + 0x632be59bd9b4e019ull * ++count;
    if (rng_state == 0) rng_state = 1;
    printf("%s: seed %llu, %ld inputs\n", target, (unsigned long long)rng_state, iters());
}

static const char *labels[] = {MPCCL_GATE_LABEL_ROOT, MPCCL_GATE_LABEL_RING, "mpccl shrink door"};

START_TEST(gate_answer)
{
    seed("gate_answer");
    mpccl_gate_key_t key, other;
    ck_assert_int_eq(mpccl_random_bytes(key.k, sizeof(key.k)), MPCCL_OK);
    ck_assert_int_eq(mpccl_random_bytes(other.k, sizeof(other.k)), MPCCL_OK);
    unsigned char valid[MPCCL_GATE_ANSWER_BYTES(MPCCL_GATE_MAX_BODY)], in[sizeof(valid) + 64];
    unsigned char snonce[MPCCL_GATE_NONCE_BYTES], body[MPCCL_GATE_MAX_BODY];
    long accepted = 0;
    for (long i = 0; i < iters(); i++) {
        int li = (int)(rnd() % 3);
        const char *label = labels[li];
        size_t body_len = rnd() % 64;
        for (size_t b = 0; b < sizeof(snonce); b++) snonce[b] = (unsigned char)rnd();
        for (size_t b = 0; b < body_len; b++) body[b] = (unsigned char)rnd();
        ck_assert_int_eq(mpccl_gate_make_answer(&key, label, snonce, body, body_len, valid), MPCCL_OK);
        size_t vlen = MPCCL_GATE_ANSWER_BYTES(body_len);
        size_t n = make_input(in, sizeof(in), valid, vlen);
        int same = n == vlen && memcmp(in, valid, vlen) == 0;
        int ok = mpccl_gate_check_answer(&key, label, snonce, in, n, body_len);
        ck_assert_int_eq(ok, same); /* only the valid answer passes */
        accepted += ok;
        /* Another key, another label, or a bound the gate never uses: never. */
        ck_assert_int_eq(mpccl_gate_check_answer(&other, label, snonce, in, n, body_len), 0);
        ck_assert_int_eq(mpccl_gate_check_answer(&key, labels[(li + 1 + rnd() % 2) % 3], snonce, in, n, body_len), 0);
        ck_assert_int_eq(mpccl_gate_check_answer(&key, label, snonce, in, n, MPCCL_GATE_MAX_BODY + 1 + rnd() % 1000), 0);
    }
    ck_assert_int_gt(accepted, 0);
}
END_TEST

START_TEST(gate_verdict)
{
    seed("gate_verdict");
    mpccl_gate_key_t key;
    ck_assert_int_eq(mpccl_random_bytes(key.k, sizeof(key.k)), MPCCL_OK);
    mpccl_gate_entry_t e;
    mpccl_gate_entry_init(&e, -1, &key, MPCCL_GATE_LABEL_RING, "", 0);
    for (size_t b = 0; b < sizeof(e.challenge.nonce); b++) e.challenge.nonce[b] = (unsigned char)rnd();
    ck_assert_int_eq(mpccl_gate_make_answer(&key, e.label, e.challenge.nonce, "", 0, e.answer), MPCCL_OK);
    unsigned char valid[MPCCL_SHA256_BYTES], in[MPCCL_SHA256_BYTES];
    mpccl_gate_listener_proof(&key, e.label, e.challenge.nonce, e.answer, valid);
    ck_assert_int_eq(mpccl_gate_verdict(&e, valid), 1);
    memset(in, 0, sizeof(in));
    ck_assert_int_eq(mpccl_gate_verdict(&e, in), 0);
    for (long i = 0; i < iters(); i++) {
        make_input(in, sizeof(in), valid, sizeof(valid)); /* verdicts are read whole: 32 bytes */
        int v = mpccl_gate_verdict(&e, in);
        int zero = 1;
        for (size_t b = 0; b < sizeof(in); b++) zero &= in[b] == 0;
        ck_assert_int_eq(v, memcmp(in, valid, sizeof(in)) == 0 ? 1 : zero ? 0 : -1);
    }
}
END_TEST

START_TEST(root_hello_and_reply)
{
    seed("root_hello_and_reply");
    mpccl_root_hello_t valid, h;
    memset(&valid, 0, sizeof(valid));
    valid.version = MPCCL_SOCKET_ID_VERSION;
    valid.rank = 1;
    valid.nranks = 4;
    valid.listen_addr.in.sin_family = AF_INET;
    char msg[256];
    ck_assert_ptr_null(mpccl_root_hello_problem(&valid, -1, msg, sizeof(msg)));
    unsigned char in[sizeof(h) + 32];
    for (long i = 0; i < iters(); i++) {
        size_t n = make_input(in, sizeof(in), &valid, sizeof(valid));
        memset(&h, 0, sizeof(h));
        memcpy(&h, in, n < sizeof(h) ? n : sizeof(h)); /* the gate delivers exactly sizeof(h) */
        int nranks = (int)(rnd() % 3) - 1 + (rnd() % 2 ? 4 : 0);
        const char *p = mpccl_root_hello_problem(&h, nranks, msg, sizeof(msg));
        if (p == NULL && h.rank != MPCCL_ROOT_WITHDRAW) {
            /* accepted: a rank the root can index */
            ck_assert_int_ge(h.rank, 0);
            ck_assert_int_lt(h.rank, h.nranks);
            ck_assert_int_le(h.nranks, MPCCL_BOOTSTRAP_MAX_RANKS);
            if (nranks >= 0) ck_assert_int_eq(h.nranks, nranks);
        }
        mpccl_root_reply_t rep, vrep = {.status = 0, .len = sizeof(mpccl_sockaddr_t)};
        make_input(in, sizeof(in), &vrep, sizeof(vrep));
        memcpy(&rep, in, sizeof(rep));
        size_t msg_len = 0;
        int kind = mpccl_root_reply_parse(&rep, &msg_len);
        ck_assert(kind == -1 || kind == 0 || kind == 1);
        if (kind == 1) ck_assert(msg_len >= 1 && msg_len <= MPCCL_ROOT_MSG_MAX);
        if (kind == 0) ck_assert_uint_eq(rep.len, sizeof(mpccl_sockaddr_t));
    }
}
END_TEST

START_TEST(ring_hello_and_allgather_header)
{
    seed("ring_hello_and_allgather_header");
    mpccl_ring_hello_t vh = {.rank = 3, .reserved = 0};
    mpccl_coll_hdr_t vc = {.tag = MPCCL_COLL_TAG, .seq = 7, .bytes = 24};
    unsigned char in[64];
    ck_assert(mpccl_ring_hello_ok(&vh, sizeof(vh), 3));
    ck_assert(mpccl_coll_hdr_ok(&vc, sizeof(vc), 7, 24));
    for (long i = 0; i < iters(); i++) {
        size_t n = make_input(in, sizeof(in), &vh, sizeof(vh));
        int ok = mpccl_ring_hello_ok(in, n, 3);
        ck_assert_int_eq(ok, n == sizeof(vh) && memcmp(in, &vh, sizeof(vh)) == 0);
        n = make_input(in, sizeof(in), &vc, sizeof(vc));
        ok = mpccl_coll_hdr_ok(in, n, 7, 24);
        ck_assert_int_eq(ok, n == sizeof(vc) && memcmp(in, &vc, sizeof(vc)) == 0);
    }
}
END_TEST

START_TEST(door_message)
{
    seed("door_message");
    struct { int32_t root; uint32_t len; int32_t lost; uint32_t reserved; } valid = {0, 128, -1, 0};
    unsigned char in[64];
    ck_assert_int_eq(mpccl_shrink_door_msg_problem(&valid, sizeof(valid), 0, 128), 0);
    for (long i = 0; i < iters(); i++) {
        size_t n = make_input(in, sizeof(in), &valid, sizeof(valid));
        int bad = mpccl_shrink_door_msg_problem(in, n, 0, 128);
        if (!bad) { /* accepted: root's, and an id of the expected size or a notice */
            ck_assert_uint_eq(n, sizeof(valid));
            memcpy(&valid, in, sizeof(valid));
            ck_assert_int_eq(valid.root, 0);
            ck_assert(valid.len == 0 || valid.len == 128);
            valid = (__typeof__(valid)){0, 128, -1, 0};
        }
    }
}
END_TEST

START_TEST(revoke_and_ucx_address)
{
    seed("revoke_and_ucx_address");
    for (long i = 0; i < iters(); i++) {
        int nranks = 1 + (int)(rnd() % 64), peer = (int)rnd();
        uint64_t id = rnd(), word = rnd() % 2 ? id : rnd();
        if (rnd() % 2) peer = (int)(rnd() % 70) - 3;
        ck_assert_int_eq(mpccl_revoke_names(peer, word, nranks, id), peer >= 0 && peer < nranks && word == id);
        uint64_t lens[16];
        int n = 1 + (int)(rnd() % 16);
        for (int r = 0; r < n; r++)
            lens[r] = rnd() % 4 == 0 ? rnd() : rnd() % 3 == 0 ? 0 : 1 + rnd() % 600;
        size_t max = 0;
        int bad = mpccl_ucx_address_lengths_bad(lens, n, &max);
        if (bad < 0) {
            ck_assert_uint_le(max, MPCCL_UCX_ADDRESS_MAX);
            for (int r = 0; r < n; r++) ck_assert(lens[r] >= 1 && lens[r] <= max);
        } else {
            ck_assert(lens[bad] == 0 || lens[bad] > MPCCL_UCX_ADDRESS_MAX);
        }
    }
}
END_TEST

/* ---- live: random bytes at a real gate and a real fd server ---- */

typedef struct {
    mpccl_gate_t gate;
    int admitted, stop;
} gate_server_t;

static void *serve_gate(void *p)
{
    gate_server_t *g = p;
    while (!__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE)) {
        int fd = -1;
        mpccl_root_hello_t h;
        if (mpccl_gate_next(&g->gate, mpccl_socket_now_ms() + 50, &fd, &h)) {
            __atomic_add_fetch(&g->admitted, 1, __ATOMIC_RELEASE);
            close(fd);
        }
    }
    mpccl_gate_close(&g->gate);
    return NULL;
}

START_TEST(gate_live)
{
    seed("gate_live");
    mpccl_sockaddr_t lo, bound;
    memset(&lo, 0, sizeof(lo));
    lo.in.sin_family = AF_INET;
    lo.in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int l = -1;
    ck_assert_int_eq(mpccl_socket_listen(&lo, &l, &bound), MPCCL_OK);
    mpccl_gate_key_t key;
    ck_assert_int_eq(mpccl_random_bytes(key.k, sizeof(key.k)), MPCCL_OK);
    gate_server_t g = {0};
    mpccl_gate_init(&g.gate, l, &key, MPCCL_GATE_LABEL_ROOT, sizeof(mpccl_root_hello_t), "fuzzed root");
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, serve_gate, &g), 0);
    long n = iters() / 50;
    unsigned char junk[4096];
    for (long i = 0; i < n; i++) {
        int fd = -1;
        ck_assert_int_eq(mpccl_socket_connect(&bound, mpccl_socket_now_ms() + 5000, mpccl_socket_now_ms() + 5000, &fd), 0);
        size_t len = rnd() % 3 == 0 ? rnd() % sizeof(junk) : rnd() % 200;
        for (size_t b = 0; b < len; b++) junk[b] = (unsigned char)rnd();
        (void)send(fd, junk, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(fd, SHUT_WR); /* done talking: the gate sees the end at once */
        close(fd);
    }
    /* The real thing still gets in. */
    int fd = -1, refused = 0, closed = 0;
    mpccl_root_hello_t h = {.version = MPCCL_SOCKET_ID_VERSION, .rank = 0, .nranks = 1};
    ck_assert_int_eq(mpccl_socket_connect(&bound, mpccl_socket_now_ms() + 5000, mpccl_socket_now_ms() + 5000, &fd), 0);
    ck_assert_int_eq(mpccl_gate_enter(fd, &key, MPCCL_GATE_LABEL_ROOT, &h, sizeof(h), mpccl_socket_now_ms() + 10000,
                                      "fuzz", &refused, &closed), MPCCL_OK);
    close(fd);
    int64_t t0 = mpccl_socket_now_ms();
    while (__atomic_load_n(&g.admitted, __ATOMIC_ACQUIRE) < 1 && mpccl_socket_now_ms() - t0 < 10000) usleep(1000);
    __atomic_store_n(&g.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    close(l);
    ck_assert_int_eq(g.admitted, 1); /* junk never, the real answer once */
    printf("gate_live: %ld junk connections, %llu strangers counted\n", n,
           (unsigned long long)mpccl_stranger_count());
}
END_TEST

/* A listener that was not running when a peer's first-bytes deadline passed
 * (a loaded machine) still admits the answer that arrived meanwhile: only a
 * peer that really said nothing in time is dropped. */
START_TEST(gate_late_listener_admits)
{
    mpccl_sockaddr_t lo, bound;
    memset(&lo, 0, sizeof(lo));
    lo.in.sin_family = AF_INET;
    lo.in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int l = -1, c = -1, in = -1;
    ck_assert_int_eq(mpccl_socket_listen(&lo, &l, &bound), MPCCL_OK);
    mpccl_gate_key_t key;
    ck_assert_int_eq(mpccl_random_bytes(key.k, sizeof(key.k)), MPCCL_OK);
    mpccl_gate_t g;
    mpccl_ring_hello_t h = {.rank = 3, .reserved = 0}, got;
    mpccl_gate_init(&g, l, &key, MPCCL_GATE_LABEL_RING, sizeof(h), "test ring listener");
    int64_t now = mpccl_socket_now_ms();
    ck_assert_int_eq(mpccl_socket_connect(&bound, now + 5000, now + 5000, &c), 0);
    /* The listener accepts and challenges; the peer answers. */
    ck_assert_int_eq(mpccl_gate_next(&g, mpccl_socket_now_ms() + 200, &in, &got), 0);
    ck_assert_int_eq(g.npending, 1);
    mpccl_gate_entry_t e;
    mpccl_gate_entry_init(&e, c, &key, MPCCL_GATE_LABEL_RING, &h, sizeof(h));
    int refused = 0, closed = 0, r = 0;
    for (int k = 0; k < 100 && r == 0 && e.phase < 2; k++) {
        r = mpccl_gate_entry_step(&e, "test peer", &refused, &closed);
        if (r == 0 && e.phase < 2) usleep(10000);
    }
    ck_assert_int_eq(r, 0);
    ck_assert_int_eq(e.phase, 2); /* answered, waiting for the verdict */
    usleep((MPCCL_GATE_FIRST_BYTES_MS + 300) * 1000); /* the listener "was not scheduled" */
    ck_assert_int_eq(mpccl_gate_next(&g, mpccl_socket_now_ms() + 200, &in, &got), 1);
    ck_assert(mpccl_ring_hello_ok(&got, sizeof(got), 3));
    for (int k = 0; k < 100 && r == 0; k++) {
        r = mpccl_gate_entry_step(&e, "test peer", &refused, &closed);
        if (r == 0) usleep(10000);
    }
    ck_assert_int_eq(r, 1);
    mpccl_gate_close(&g);
    close(in);
    close(c);
    close(l);
}
END_TEST

static void *serve_fd_once(void *p)
{
    int c = (int)(intptr_t)p;
    mpccl_fdpass_serve_connection(c);
    close(c);
    return NULL;
}

START_TEST(fd_server_request)
{
    seed("fd_server_request");
    struct { uint32_t op, len; uint64_t key; } valid = {1, 0, 0x7000};
    unsigned char in[64];
    for (long i = 0; i < iters(); i++) {
        size_t n = make_input(in, sizeof(in), &valid, sizeof(valid));
        int ok = mpccl_fdpass_request_ok(in, n);
        if (ok) {
            memcpy(&valid, in, sizeof(valid));
            ck_assert(n == sizeof(valid) && ((valid.op == 1 && valid.len == 0) || (valid.op == 2 && valid.len <= MPCCL_FDPASS_MAX_MSG)));
            valid = (__typeof__(valid)){1, 0, 0x7000};
        }
    }
    /* Live: this process is its own peer (socketpair), nothing is offered
     * under the fuzzed keys and no handler is installed: every answer is a
     * refusal and no descriptor ever comes back. */
    long n = iters() / 50;
    for (long i = 0; i < n; i++) {
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, serve_fd_once, (void *)(intptr_t)sv[1]), 0);
        size_t len = make_input(in, sizeof(in), &valid, sizeof(valid));
        (void)send(sv[0], in, len, MSG_NOSIGNAL);
        shutdown(sv[0], SHUT_WR);
        struct pollfd p = {.fd = sv[0], .events = POLLIN};
        ck_assert_int_eq(poll(&p, 1, 10000), 1); /* an answer or the end, never a hang */
        unsigned char reply[16];
        union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } ctl;
        struct iovec iov = {reply, sizeof(reply)};
        struct msghdr m;
        memset(&m, 0, sizeof(m));
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        (void)recvmsg(sv[0], &m, 0);
        ck_assert_ptr_null(CMSG_FIRSTHDR(&m));
        pthread_join(t, NULL);
        close(sv[0]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fuzz_wire");
    TCase *tc = tcase_create("parsers");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, gate_answer);
    tcase_add_test(tc, gate_verdict);
    tcase_add_test(tc, root_hello_and_reply);
    tcase_add_test(tc, ring_hello_and_allgather_header);
    tcase_add_test(tc, door_message);
    tcase_add_test(tc, revoke_and_ucx_address);
    tcase_add_test(tc, gate_live);
    tcase_add_test(tc, gate_late_listener_admits);
    tcase_add_test(tc, fd_server_request);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
