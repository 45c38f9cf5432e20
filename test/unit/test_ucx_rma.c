/* The UCX transport's one-sided half: memory registration, remote keys, put,
 * fence, atomic add (lib/ucx/ucx_rma.h, the put/atomic_add ops).  Ranks are
 * threads over the in-process bootstrap.  Each rank puts seeded data into
 * every peer's buffer, fences, adds to a counter there; the counters and the
 * data are checked once every rank passed a barrier. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/bootstrap.h"
#include "core/transport.h"
#include "ucx/ucx.h"
#include "ucx/ucx_rma.h"

#define NR 3
#define PIECE 5003

static unsigned long long seed;
static mpccl_inproc_group_t *group;

static unsigned char byte(int src, int dst, size_t i)
{
    unsigned long long x = seed * 31 + (unsigned long long)src * 7919 + (unsigned long long)dst * 104729 + i * 2654435761u;
    return (unsigned char)((x ^ (x >> 29)) * 0x9e3779b97f4a7c15ULL >> 56);
}

static void wait_req(mpccl_transport_t *t, mpccl_req_t *r)
{
    while (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE))
        if (!t->ops->progress(t)) t->ops->idle(t);
}

typedef struct blob {
    uint64_t addr[2]; /* data, counters */
    uint64_t len[2];
    unsigned char key[2][512];
} blob_t;

static void *rank_main(void *arg)
{
    int me = (int)(intptr_t)arg;
    mpccl_bootstrap_t bs;
    ck_assert_int_eq(mpccl_inproc_bootstrap_create(group, me, &bs), MPCCL_OK);
    mpccl_transport_t *t = NULL;
    ck_assert_int_eq(mpccl_ucx_transport_create(&bs, &t), MPCCL_OK);
    unsigned char *data = calloc(NR, PIECE), *src = malloc((size_t)NR * PIECE);
    uint64_t *counters = calloc(NR, sizeof(uint64_t));
    for (int p = 0; p < NR; p++)
        for (size_t i = 0; i < PIECE; i++) src[(size_t)p * PIECE + i] = byte(me, p, i);
    mpccl_ucx_mem_t mem[2];
    ck_assert_int_eq(mpccl_ucx_mem_map(data, (size_t)NR * PIECE, &mem[0]), MPCCL_OK);
    ck_assert_int_eq(mpccl_ucx_mem_map(counters, NR * sizeof(uint64_t), &mem[1]), MPCCL_OK);
    blob_t *all = calloc(NR, sizeof(blob_t));
    for (int k = 0; k < 2; k++) {
        ck_assert_uint_le(mem[k].packed_len, sizeof(all[me].key[k]));
        all[me].addr[k] = k ? (uint64_t)(uintptr_t)counters : (uint64_t)(uintptr_t)data;
        all[me].len[k] = mem[k].packed_len;
        memcpy(all[me].key[k], mem[k].packed, mem[k].packed_len);
    }
    ck_assert_int_eq(mpccl_bootstrap_allgather(&bs, all, sizeof(blob_t)), MPCCL_OK);
    void *rkey[NR][2];
    for (int p = 0; p < NR; p++)
        for (int k = 0; k < 2; k++) ck_assert_int_eq(mpccl_ucx_rkey_unpack(t, p, all[p].key[k], &rkey[p][k]), MPCCL_OK);
    /* Twice: the second adds go to the same counters (atomic, counts add up). */
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < NR; k++) {
            int p = (me + k) % NR;
            mpccl_req_t put, add;
            memset(&put, 0, sizeof(put));
            memset(&add, 0, sizeof(add));
            ck_assert_int_eq(t->ops->put(t, p, src + (size_t)p * PIECE, PIECE, all[p].addr[0] + (uint64_t)me * PIECE,
                                         rkey[p][0], &put),
                             MPCCL_OK);
            ck_assert_int_eq(mpccl_ucx_fence(t), MPCCL_OK);
            ck_assert_int_eq(t->ops->atomic_add(t, p, 1 + (uint64_t)me, all[p].addr[1] + (uint64_t)me * 8, rkey[p][1], &add),
                             MPCCL_OK);
            wait_req(t, &put);
            wait_req(t, &add);
            ck_assert_int_eq(put.status, MPCCL_OK);
            ck_assert_int_eq(add.status, MPCCL_OK);
        }
    /* Every rank's counters reach 2 * (1 + source) while this rank keeps
     * progressing (UCX may emulate RMA with messages the target handles). */
    for (int s = 0; s < NR; s++)
        while (__atomic_load_n(&counters[s], __ATOMIC_ACQUIRE) < 2 * (1 + (uint64_t)s))
            if (!t->ops->progress(t)) t->ops->idle(t);
    for (int s = 0; s < NR; s++) {
        ck_assert_uint_eq(counters[s], 2 * (1 + (uint64_t)s));
        for (size_t i = 0; i < PIECE; i++)
            ck_assert_msg(data[(size_t)s * PIECE + i] == byte(s, me, i), "rank %d, piece of %d, byte %zu", me, s, i);
    }
    /* Bad peer: refused, request finished with the error. */
    mpccl_req_t bad;
    memset(&bad, 0, sizeof(bad));
    ck_assert_int_ne(t->ops->put(t, NR, src, 1, all[0].addr[0], rkey[0][0], &bad), MPCCL_OK);
    ck_assert_int_eq(bad.done, 1);
    ck_assert_int_ne(mpccl_ucx_rkey_unpack(t, -1, all[0].key[0], &rkey[0][0]), MPCCL_OK);
    ck_assert_int_eq(mpccl_bootstrap_barrier(&bs), MPCCL_OK); /* nobody unmaps while a peer still adds */
    for (int p = 0; p < NR; p++)
        for (int k = 0; k < 2; k++) mpccl_ucx_rkey_destroy(rkey[p][k]);
    t->ops->close(t, 0);
    mpccl_ucx_mem_unmap(&mem[0]);
    mpccl_ucx_mem_unmap(&mem[1]);
    mpccl_bootstrap_close(&bs);
    free(all);
    free(data);
    free(src);
    free(counters);
    return NULL;
}

START_TEST(put_fence_add)
{
    ck_assert_int_eq(mpccl_inproc_group_create(NR, &group), MPCCL_OK);
    pthread_t th[NR];
    for (int r = 0; r < NR; r++) ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r), 0);
    for (int r = 0; r < NR; r++) pthread_join(th[r], NULL);
    mpccl_inproc_group_release(group);
}
END_TEST

int main(void)
{
    const char *s = getenv("MPCCL_TEST_SEED");
    seed = s ? strtoull(s, NULL, 0) : (unsigned long long)time(NULL);
    printf("test_ucx_rma: seed %llu (MPCCL_TEST_SEED to repeat)\n", seed);
    Suite *su = suite_create("ucx_rma");
    TCase *tc = tcase_create("rma");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, put_fence_add);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
