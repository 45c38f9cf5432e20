/* Group semantics: several collectives in one group, several communicators in
 * one group, all-pairs point-to-point in one group (must not deadlock), ordering
 * of several sends to one peer, send/recv shapes (odd sizes and offsets, self,
 * CUDA graphs), nesting and misuse (End without Start). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "perf_check.h"
#include "perf_coll.h"

/* A prepared collective with its own buffers and data. */
typedef struct slot {
    perf_call_t c;
    perf_data_t d;
    void *host;
} slot_t;

static void slot_init(slot_t *s, perf_coll_t coll, ncclDataType_t t, perf_op_t op, size_t count, int inplace,
                      int root, ncclComm_t comm, uint64_t seed)
{
    size_t cnt, scnt, rcnt, big;
    int n = 0, me = 0;
    ncclCommCount(comm, &n);
    ncclCommUserRank(comm, &me);
    memset(s, 0, sizeof(*s));
    int block = coll == PERF_ALL_GATHER || coll == PERF_REDUCE_SCATTER || coll == PERF_ALLTOALL;
    perf_coll_counts(coll, n, count * (block ? n : 1), &cnt, &scnt, &rcnt);
    big = (scnt > rcnt ? scnt : rcnt) * perf_type_size(t);
    perf_data_init(&s->d, t, perf_coll_reduces(coll) ? op : PERF_COPY, n, seed);
    s->c.coll = coll, s->c.type = t, s->c.op = perf_op_nccl(op), s->c.root = root, s->c.count = cnt;
    s->c.inplace = inplace, s->c.comm = comm, s->c.rank = me, s->c.nranks = n, s->c.stream = t_mem.stream;
    s->c.sendbase = perf_mem_alloc(&t_mem, big);
    s->c.recvbase = perf_mem_alloc(&t_mem, big);
    s->host = malloc(big ? big : 1);
    T_EXPECT(s->c.sendbase && s->c.recvbase && s->host, "out of memory");
    if (s->host && perf_call_prepare(&s->c, &s->d, &t_mem, s->host, 1)) t_fail(__FILE__, __LINE__, "cannot stage input");
}

static void slot_check_free(slot_t *s, const char *what)
{
    char msg[600] = "";
    size_t wrong = s->host ? perf_call_check(&s->c, &s->d, &t_mem, s->host, msg, sizeof(msg)) : 1;
    T_EXPECT(wrong == 0, "%s: %s %s count %zu: %zu wrong: %s", what, perf_coll_name(s->c.coll),
             perf_type_name(s->c.type), s->c.count, wrong, msg);
    free(s->host);
    perf_mem_free(&t_mem, s->c.sendbase);
    perf_mem_free(&t_mem, s->c.recvbase);
}

START_TEST(test_colls_in_one_group)
{
    enum { N = 6 };
    slot_t s[N];
    int n = t_nranks;
    slot_init(&s[0], PERF_ALLREDUCE, ncclFloat32, PERF_SUM, 1021, 0, -1, t_comm, t_seed + 1);
    slot_init(&s[1], PERF_BROADCAST, ncclInt32, PERF_COPY, 777, 1, 1 % n, t_comm, t_seed + 2);
    slot_init(&s[2], PERF_ALL_GATHER, ncclFloat16, PERF_COPY, 129, 0, -1, t_comm, t_seed + 3);
    slot_init(&s[3], PERF_REDUCE_SCATTER, ncclFloat64, PERF_MAX, 65, 1, -1, t_comm, t_seed + 4);
    slot_init(&s[4], PERF_ALLTOALL, ncclUint8, PERF_COPY, 33, 0, -1, t_comm, t_seed + 5);
    slot_init(&s[5], PERF_SENDRECV, ncclInt64, PERF_COPY, 4099, 0, -1, t_comm, t_seed + 6);
    T_NCCL(ncclGroupStart());
    for (int i = 0; i < N; i++) T_RESULT(perf_call_launch(&s[i].c), ncclSuccess, t_comm);
    T_NCCL(ncclGroupEnd());
    T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
    for (int i = 0; i < N; i++) slot_check_free(&s[i], "grouped collectives");
    T_END();
}
END_TEST

START_TEST(test_comms_in_one_group)
{
    ncclComm_t parity = NULL, reversed = NULL;
    slot_t s[3];
    T_NCCL(ncclCommSplit(t_comm, t_rank % 2, t_rank, &parity, NULL));
    T_NCCL(ncclCommSplit(t_comm, 0, t_nranks - t_rank, &reversed, NULL));
    if (parity && reversed) {
        slot_init(&s[0], PERF_ALLREDUCE, ncclInt32, PERF_SUM, 513, 0, -1, t_comm, t_seed + 11);
        slot_init(&s[1], PERF_ALLREDUCE, ncclFloat32, PERF_SUM, 513, 0, -1, parity, t_seed + 12);
        slot_init(&s[2], PERF_ALL_GATHER, ncclInt32, PERF_COPY, 31, 0, -1, reversed, t_seed + 13);
        T_NCCL(ncclGroupStart());
        for (int i = 0; i < 3; i++) T_RESULT(perf_call_launch(&s[i].c), ncclSuccess, s[i].c.comm);
        T_NCCL(ncclGroupEnd());
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
        for (int i = 0; i < 3; i++) slot_check_free(&s[i], "one group over three communicators");
    }
    if (parity) T_NCCL(ncclCommDestroy(parity));
    if (reversed) T_NCCL(ncclCommDestroy(reversed));
    T_END();
}
END_TEST

/* Elements rank src sends to rank dst: varied, sometimes large, sometimes 0. */
static size_t pair_count(int src, int dst)
{
    if (src == 0 && dst == t_nranks - 1) return 70001;
    return (size_t)((src * 7 + dst * 3) % 17) * 13;
}

static uint64_t pair_seed(int src, int dst) { return t_seed * 31 + (uint64_t)src * 1000 + (uint64_t)dst; }

START_TEST(test_all_pairs_p2p)
{
    int n = t_nranks, me = t_rank;
    void **sbuf = calloc((size_t)n, sizeof(void *)), **rbuf = calloc((size_t)n, sizeof(void *));
    perf_data_t d;
    ck_assert(sbuf && rbuf);
    for (int p = 0; p < n; p++) {
        size_t sc = pair_count(me, p), rc = pair_count(p, me);
        unsigned char *h = malloc((sc > rc ? sc : rc) * 8 + 8);
        sbuf[p] = perf_mem_alloc(&t_mem, sc * 8);
        rbuf[p] = perf_mem_alloc(&t_mem, rc * 8);
        T_EXPECT(h && sbuf[p] && rbuf[p], "out of memory");
        perf_data_init(&d, ncclFloat64, PERF_COPY, n, pair_seed(me, p));
        perf_fill(&d, me, 0, sc, h);
        perf_mem_put(&t_mem, sbuf[p], h, sc * 8);
        free(h);
    }
    /* all sends first, then all receives, odd ranks walking peers backwards: only
     * a group that really runs them together gets through */
    T_NCCL(ncclGroupStart());
    for (int i = 0; i < n; i++) {
        int p = me % 2 ? n - 1 - i : i;
        T_RESULT(ncclSend(sbuf[p], pair_count(me, p), ncclFloat64, p, t_comm, t_mem.stream), ncclSuccess, t_comm);
    }
    for (int i = 0; i < n; i++) {
        int p = me % 2 ? i : n - 1 - i;
        T_RESULT(ncclRecv(rbuf[p], pair_count(p, me), ncclFloat64, p, t_comm, t_mem.stream), ncclSuccess, t_comm);
    }
    T_NCCL(ncclGroupEnd());
    T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
    for (int p = 0; p < n; p++) {
        size_t rc = pair_count(p, me), wrong;
        unsigned char *h = malloc(rc * 8 + 8);
        char msg[400] = "";
        perf_mem_get(&t_mem, h, rbuf[p], rc * 8);
        perf_data_init(&d, ncclFloat64, PERF_COPY, n, pair_seed(p, me));
        wrong = perf_check_copy(&d, p, 0, rc, h, msg, sizeof(msg));
        T_EXPECT(wrong == 0, "from rank %d (%zu elements): %zu wrong: %s", p, rc, wrong, msg);
        free(h);
        perf_mem_free(&t_mem, sbuf[p]);
        perf_mem_free(&t_mem, rbuf[p]);
    }
    free(sbuf);
    free(rbuf);
    T_END();
}
END_TEST

/* K messages to the next rank in one group arrive in the order they were posted:
 * first all of one size (only the order tells them apart), then of varied sizes. */
static void ordered_round(int varied)
{
    enum { K = 8 };
    int n = t_nranks, next = (t_rank + 1) % n, prev = (t_rank + n - 1) % n;
    void *sbuf[K], *rbuf[K];
    perf_data_t d;
    size_t cnt[K];
    for (int k = 0; k < K; k++) {
        cnt[k] = varied ? (size_t)k * 37 + 1 : 64;
        unsigned char *h = malloc(cnt[k] * 4);
        sbuf[k] = perf_mem_alloc(&t_mem, cnt[k] * 4);
        rbuf[k] = perf_mem_alloc(&t_mem, cnt[k] * 4);
        T_EXPECT(h && sbuf[k] && rbuf[k], "out of memory");
        perf_data_init(&d, ncclInt32, PERF_COPY, n, t_seed + 100 + (uint64_t)k);
        perf_fill(&d, t_rank, 0, cnt[k], h);
        perf_mem_put(&t_mem, sbuf[k], h, cnt[k] * 4);
        free(h);
    }
    T_NCCL(ncclGroupStart());
    for (int k = 0; k < K; k++) {
        T_RESULT(ncclSend(sbuf[k], cnt[k], ncclInt32, next, t_comm, t_mem.stream), ncclSuccess, t_comm);
        T_RESULT(ncclRecv(rbuf[k], cnt[k], ncclInt32, prev, t_comm, t_mem.stream), ncclSuccess, t_comm);
    }
    T_NCCL(ncclGroupEnd());
    T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
    for (int k = 0; k < K; k++) {
        unsigned char *h = malloc(cnt[k] * 4);
        char msg[400] = "";
        size_t wrong;
        perf_mem_get(&t_mem, h, rbuf[k], cnt[k] * 4);
        perf_data_init(&d, ncclInt32, PERF_COPY, n, t_seed + 100 + (uint64_t)k);
        wrong = perf_check_copy(&d, prev, 0, cnt[k], h, msg, sizeof(msg));
        T_EXPECT(wrong == 0, "message %d of %d from rank %d (%s sizes): %zu wrong: %s", k, K, prev,
                 varied ? "varied" : "equal", wrong, msg);
        free(h);
        perf_mem_free(&t_mem, sbuf[k]);
        perf_mem_free(&t_mem, rbuf[k]);
    }
}

START_TEST(test_p2p_order)
{
    ordered_round(0);
    ordered_round(1);
    T_END();
}
END_TEST

/* More calls in one group than a GPU launch holds (61), each message larger
 * than the staging between a pair: all K sends to the next rank first, then
 * all K receives from the previous one.  Cut into launches in program order,
 * every rank's first launch would hold only sends whose receives sit in the
 * peers' second launches (p2p_schedule.h). */
START_TEST(test_many_p2p)
{
    enum { K = 40 };
    size_t cnt = t_level >= 2 ? (256u << 10) : (64u << 10); /* floats: 1 MB or 256 KB */
    int n = t_nranks, next = (t_rank + 1) % n, prev = (t_rank + n - 1) % n;
    void *sbuf[K], *rbuf[K];
    perf_data_t d;
    unsigned char *h = malloc(cnt * 4);
    T_EXPECT(h != NULL, "out of memory");
    for (int k = 0; k < K; k++) {
        sbuf[k] = perf_mem_alloc(&t_mem, cnt * 4);
        rbuf[k] = perf_mem_alloc(&t_mem, cnt * 4);
        T_EXPECT(sbuf[k] && rbuf[k], "out of memory");
        perf_data_init(&d, ncclFloat32, PERF_COPY, n, t_seed + 500 + (uint64_t)k);
        perf_fill(&d, t_rank, 0, cnt, h);
        perf_mem_put(&t_mem, sbuf[k], h, cnt * 4);
    }
    T_NCCL(ncclGroupStart());
    for (int k = 0; k < K; k++)
        T_RESULT(ncclSend(sbuf[k], cnt, ncclFloat32, next, t_comm, t_mem.stream), ncclSuccess, t_comm);
    for (int k = 0; k < K; k++)
        T_RESULT(ncclRecv(rbuf[k], cnt, ncclFloat32, prev, t_comm, t_mem.stream), ncclSuccess, t_comm);
    T_NCCL(ncclGroupEnd());
    T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
    for (int k = 0; k < K; k++) {
        char msg[400] = "";
        perf_mem_get(&t_mem, h, rbuf[k], cnt * 4);
        perf_data_init(&d, ncclFloat32, PERF_COPY, n, t_seed + 500 + (uint64_t)k);
        size_t wrong = perf_check_copy(&d, prev, 0, cnt, h, msg, sizeof(msg));
        T_EXPECT(wrong == 0, "message %d of %d from rank %d: %zu wrong: %s", k, K, prev, wrong, msg);
        perf_mem_free(&t_mem, sbuf[k]);
        perf_mem_free(&t_mem, rbuf[k]);
    }
    free(h);
    T_END();
}
END_TEST

/* Send/recv shapes around the LL path: byte counts from 1 past the LL
 * threshold (256 KB) and a lane's share (4 KB), buffers at odd offsets, to
 * the next and the previous rank and to itself in one group (with an empty
 * message among them); each receive lands between guard bytes that must stay
 * untouched.  check-gpu runs it with LL forced on for every size
 * (MPCCL_FLAT_P2P_LL_BYTES huge) and off. */
enum { P2P_DIRS = 3, P2P_GUARD = 24 };
static const size_t p2p_shape_bytes[] = {1, 3, 8, 13, 100, 4095, 4097, 65541, 262144, 262147};
#define P2P_SHAPES (sizeof(p2p_shape_bytes) / sizeof(p2p_shape_bytes[0]))

/* Message d of round i (d: 0 to the next rank, 1 to the previous, 2 to
 * myself); round 0, direction 2 is empty. */
static size_t p2p_bytes(size_t i, int d) { return i == 0 && d == 2 ? 0 : p2p_shape_bytes[(i + (size_t)d * 4) % P2P_SHAPES]; }
static uint64_t p2p_seed(size_t i, int d, int rep) { return t_seed * 131 + i * 7 + (uint64_t)d * 1000 + (uint64_t)rep * 100000; }

typedef struct p2p_round {
    unsigned char *sbase[P2P_DIRS], *rbase[P2P_DIRS];
    size_t soff[P2P_DIRS], roff[P2P_DIRS];
} p2p_round_t;

static void p2p_round_alloc(p2p_round_t *r, size_t i)
{
    for (int d = 0; d < P2P_DIRS; d++) {
        size_t b = p2p_bytes(i, d);
        r->soff[d] = (i * 3 + (size_t)d) % 8;
        r->roff[d] = (i * 5 + (size_t)d + 1) % 8;
        r->sbase[d] = perf_mem_alloc(&t_mem, r->soff[d] + b + 1);
        r->rbase[d] = perf_mem_alloc(&t_mem, r->roff[d] + b + P2P_GUARD);
        T_EXPECT(r->sbase[d] && r->rbase[d], "out of memory");
    }
}

static void p2p_round_free(p2p_round_t *r)
{
    for (int d = 0; d < P2P_DIRS; d++) {
        perf_mem_free(&t_mem, r->sbase[d]);
        perf_mem_free(&t_mem, r->rbase[d]);
    }
}

/* New send data for replay rep, guards around the receive buffers. */
static void p2p_round_fill(p2p_round_t *r, size_t i, int rep)
{
    perf_data_t d;
    for (int k = 0; k < P2P_DIRS; k++) {
        size_t b = p2p_bytes(i, k), rb = r->roff[k] + b + P2P_GUARD;
        unsigned char *h = malloc(rb > b ? rb : b + 1);
        T_EXPECT(h != NULL, "out of memory");
        if (!h) continue;
        perf_data_init(&d, ncclUint8, PERF_COPY, t_nranks, p2p_seed(i, k, rep));
        perf_fill(&d, t_rank, 0, b, h);
        T_EXPECT(perf_mem_put(&t_mem, r->sbase[k] + r->soff[k], h, b) == 0, "upload");
        memset(h, 0xa5, rb);
        T_EXPECT(perf_mem_put(&t_mem, r->rbase[k], h, rb) == 0, "upload");
        free(h);
    }
}

/* Receives in the order the peers send: from the previous rank its message
 * to its next (d 0), from the next rank its message to its previous (d 1),
 * from myself (d 2); with 2 ranks both peers are one, whose sends come in
 * that order too. */
static void p2p_round_launch(p2p_round_t *r, size_t i)
{
    int n = t_nranks, next = (t_rank + 1) % n, prev = (t_rank + n - 1) % n;
    const int to[P2P_DIRS] = {next, prev, t_rank}, from[P2P_DIRS] = {prev, next, t_rank};
    T_NCCL(ncclGroupStart());
    for (int d = 0; d < P2P_DIRS; d++)
        T_RESULT(ncclSend(r->sbase[d] + r->soff[d], p2p_bytes(i, d), ncclUint8, to[d], t_comm, t_mem.stream),
                 ncclSuccess, t_comm);
    for (int d = 0; d < P2P_DIRS; d++)
        T_RESULT(ncclRecv(r->rbase[d] + r->roff[d], p2p_bytes(i, d), ncclUint8, from[d], t_comm, t_mem.stream),
                 ncclSuccess, t_comm);
    T_NCCL(ncclGroupEnd());
}

static void p2p_round_check(p2p_round_t *r, size_t i, int rep)
{
    int n = t_nranks, next = (t_rank + 1) % n, prev = (t_rank + n - 1) % n;
    const int from[P2P_DIRS] = {prev, next, t_rank};
    perf_data_t d;
    for (int k = 0; k < P2P_DIRS; k++) {
        size_t b = p2p_bytes(i, k), rb = r->roff[k] + b + P2P_GUARD, guards = 0, wrong;
        unsigned char *h = malloc(rb);
        char msg[400] = "";
        T_EXPECT(h && perf_mem_get(&t_mem, h, r->rbase[k], rb) == 0, "download");
        if (!h) continue;
        perf_data_init(&d, ncclUint8, PERF_COPY, n, p2p_seed(i, k, rep));
        wrong = perf_check_copy(&d, from[k], 0, b, h + r->roff[k], msg, sizeof(msg));
        for (size_t j = 0; j < rb; j++)
            if ((j < r->roff[k] || j >= r->roff[k] + b) && h[j] != 0xa5) guards++;
        T_EXPECT(wrong == 0 && guards == 0,
                 "replay %d: %zu bytes from rank %d (send offset %zu there, receive offset %zu): %zu wrong, %zu guard "
                 "bytes changed: %s", rep, b, from[k], r->soff[k], r->roff[k], wrong, guards, msg);
        free(h);
    }
}

START_TEST(test_p2p_shapes)
{
    for (size_t i = 0; i < P2P_SHAPES; i++) {
        p2p_round_t r;
        p2p_round_alloc(&r, i);
        p2p_round_fill(&r, i, 0);
        p2p_round_launch(&r, i);
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
        p2p_round_check(&r, i, 0);
        p2p_round_free(&r);
    }
    T_END();
}
END_TEST

/* The same groups captured into CUDA graphs (GPU buffers) and replayed with
 * new data each time: nothing a replay depends on may be baked in at capture
 * (counters and parities live on the device). */
START_TEST(test_p2p_graph)
{
    static const size_t rounds[] = {1, 4, 7, 9};
    for (size_t k = 0; k < sizeof(rounds) / sizeof(rounds[0]) && t_mem.gpu; k++) {
        size_t i = rounds[k];
        p2p_round_t r;
        p2p_round_alloc(&r, i);
        T_EXPECT(perf_mem_capture_begin(&t_mem) == 0, "begin capture");
        p2p_round_launch(&r, i);
        void *graph = perf_mem_capture_end(&t_mem);
        T_EXPECT(graph != NULL, "end capture / instantiate");
        for (int rep = 0; rep < 3 && graph; rep++) {
            p2p_round_fill(&r, i, rep + 1);
            T_EXPECT(perf_mem_graph_launch(&t_mem, graph) == 0, "graph launch");
            /* an eager group between replays shares the counters */
            if (rep == 1) p2p_round_launch(&r, i);
            T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
            p2p_round_check(&r, i, rep + 1);
        }
        if (graph) perf_mem_graph_free(graph);
        p2p_round_free(&r);
    }
    T_END();
}
END_TEST

START_TEST(test_group_usage)
{
    slot_t s;
    /* End without Start is a usage error, and leaves nothing behind */
    T_RESULT(ncclGroupEnd(), ncclInvalidUsage, NULL);
    T_NCCL(ncclGroupStart());
    T_NCCL(ncclGroupEnd());
    /* nested groups: the work runs at the outermost End */
    slot_init(&s, PERF_ALLREDUCE, ncclInt64, PERF_SUM, 100, 1, -1, t_comm, t_seed + 21);
    T_NCCL(ncclGroupStart());
    T_NCCL(ncclGroupStart());
    T_RESULT(perf_call_launch(&s.c), ncclSuccess, t_comm);
    T_NCCL(ncclGroupEnd());
    T_NCCL(ncclGroupEnd());
    T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream synchronize failed");
    slot_check_free(&s, "nested group");
    T_EXPECT(t_comm_works(t_comm, &t_mem) == 0, "communicator broken after the group tests");
    T_END();
}
END_TEST

static Suite *group_suite(void)
{
    Suite *s = suite_create("group");
    TCase *tc = t_tcase("group");
    tcase_add_test(tc, test_colls_in_one_group);
    tcase_add_test(tc, test_comms_in_one_group);
    tcase_add_test(tc, test_all_pairs_p2p);
    tcase_add_test(tc, test_p2p_order);
    tcase_add_test(tc, test_many_p2p);
    tcase_add_test(tc, test_p2p_shapes);
    tcase_add_test(tc, test_p2p_graph);
    tcase_add_test(tc, test_group_usage);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) { return t_main(argc, argv, group_suite); }
