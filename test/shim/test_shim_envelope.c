/* The shim's envelope parser (mpi-shim/shim_envelope.c) takes bytes from
 * other processes: a sealed envelope parses back field for field; every
 * single-byte change, every other length and random or mutated bytes are
 * refused; nothing crashes (random inputs, seeded and printed: rerun with
 * MPCCL_TEST_SEED).  Needs no MPI run and no GPU. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim_p2p.h"

static unsigned long long seed = 20261206ULL;

static uint64_t next_rand(void)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
}

static shim_env_t sample(void)
{
    shim_env_t e;
    memset(&e, 0, sizeof(e));
    e.kind = SHIM_ENV_IPC;
    e.sender = 3;
    e.bytes = 1u << 20;
    e.tag = 42;
    e.pid = 4242;
    e.hostid = 0x1234567890abcdefULL;
    e.base = 0x7f0000000000ULL;
    e.offset = 4096;
    e.buffer_id = 77;
    e.device = 0;
    for (size_t i = 0; i < sizeof(e.ipc); i++) e.ipc[i] = (unsigned char)(i * 13 + 1);
    mpccl_shim_env_seal(&e);
    return e;
}

START_TEST(sealed_parses)
{
    shim_env_t e = sample(), out;
    ck_assert(mpccl_shim_env_parse(&e, sizeof(e), &out));
    ck_assert_int_eq(memcmp(&e, &out, sizeof(e)), 0);
    /* from an unaligned copy, as from a user's buffer */
    unsigned char *raw = malloc(sizeof(e) + 1);
    memcpy(raw + 1, &e, sizeof(e));
    ck_assert(mpccl_shim_env_parse(raw + 1, sizeof(e), &out));
    free(raw);
}
END_TEST

START_TEST(any_changed_byte_refused)
{
    shim_env_t e = sample(), out;
    unsigned char *p = (unsigned char *)&e;
    for (size_t i = 0; i < sizeof(e); i++)
        for (int bit = 0; bit < 8; bit++) {
            p[i] ^= (unsigned char)(1u << bit);
            ck_assert_msg(!mpccl_shim_env_parse(&e, sizeof(e), &out), "byte %zu bit %d", i, bit);
            p[i] ^= (unsigned char)(1u << bit);
        }
}
END_TEST

START_TEST(other_lengths_refused)
{
    shim_env_t e = sample(), out;
    for (size_t n = 0; n < 2 * sizeof(e); n++)
        if (n != sizeof(e)) ck_assert(!mpccl_shim_env_parse(&e, n, &out));
    ck_assert(!mpccl_shim_env_parse(NULL, sizeof(e), &out));
}
END_TEST

START_TEST(bad_fields_refused_even_when_sealed)
{
    shim_env_t e, out;
    e = sample(), e.kind = 9, mpccl_shim_env_seal(&e);
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample(), e.tag = 0, mpccl_shim_env_seal(&e);
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample(), e.tag = 43, mpccl_shim_env_seal(&e); /* odd tags are pushed data's */
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample(), e.offset = UINT64_MAX - 10, mpccl_shim_env_seal(&e); /* offset + bytes wraps */
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
}
END_TEST

/* Between hosts: the UCX kind's mode, key size and chunk are checked. */
static shim_env_t sample_ucx(uint32_t flags, int32_t key_bytes, uint64_t chunk)
{
    shim_env_t e = sample();
    e.kind = SHIM_ENV_UCX;
    e.reserved0 = flags;
    e.device = key_bytes;
    e.offset = chunk;
    e.buffer_id = 0;
    mpccl_shim_env_seal(&e);
    return e;
}

START_TEST(ucx_envelopes)
{
    shim_env_t e, out;
    e = sample_ucx(SHIM_UCX_GET, 12, 0);
    ck_assert(mpccl_shim_env_parse(&e, sizeof(e), &out));
    ck_assert_int_eq(memcmp(&e, &out, sizeof(e)), 0);
    e = sample_ucx(SHIM_UCX_GET | SHIM_UCX_KEY_AHEAD, 4000, 0);
    ck_assert(mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample_ucx(SHIM_UCX_STREAM, 0, 4u << 20);
    ck_assert(mpccl_shim_env_parse(&e, sizeof(e), &out));
    /* refused: no mode, an unknown flag, a key that cannot be inline, a key
     * size of 0, a stream with a key or without a chunk, an odd tag */
    e = sample_ucx(0, 12, 0);
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample_ucx(SHIM_UCX_GET | 0x10000, 12, 0);
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample_ucx(SHIM_UCX_GET, SHIM_ENV_RKEY_INLINE + 1, 0);
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample_ucx(SHIM_UCX_GET, 0, 0);
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample_ucx(SHIM_UCX_STREAM, 12, 4u << 20);
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample_ucx(SHIM_UCX_STREAM, 0, 0);
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
    e = sample_ucx(SHIM_UCX_STREAM, 0, 4u << 20);
    e.tag = 43, mpccl_shim_env_seal(&e);
    ck_assert(!mpccl_shim_env_parse(&e, sizeof(e), &out));
}
END_TEST

START_TEST(random_and_mutated_bytes)
{
    unsigned char buf[SHIM_ENV_BYTES];
    shim_env_t out, e = sample();
    int accepted = 0;
    for (int round = 0; round < 200000; round++) {
        if (round % 2) {
            for (size_t i = 0; i < sizeof(buf); i++) buf[i] = (unsigned char)next_rand();
            if (round % 4 == 1) memcpy(buf, &e, 8); /* the magic alone */
        } else {
            memcpy(buf, &e, sizeof(buf));
            int k = 1 + (int)(next_rand() % 4);
            for (int j = 0; j < k; j++) buf[next_rand() % sizeof(buf)] ^= (unsigned char)(1 + next_rand() % 255);
            if (memcmp(buf, &e, sizeof(buf)) == 0) continue; /* two changes undid each other */
        }
        accepted += mpccl_shim_env_parse(buf, sizeof(buf), &out);
    }
    ck_assert_int_eq(accepted, 0);
}
END_TEST

int main(void)
{
    const char *s = getenv("MPCCL_TEST_SEED");
    if (s && *s) seed = strtoull(s, NULL, 0);
    if (seed == 0) seed = 1;
    printf("test_shim_envelope: seed %llu (MPCCL_TEST_SEED)\n", seed);
    Suite *suite = suite_create("shim_envelope");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, sealed_parses);
    tcase_add_test(tc, any_changed_byte_refused);
    tcase_add_test(tc, other_lengths_refused);
    tcase_add_test(tc, bad_fields_refused_even_when_sealed);
    tcase_add_test(tc, ucx_envelopes);
    tcase_add_test(tc, random_and_mutated_bytes);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
