/* lib/util/keyed_hash.c: SHA-256 against the FIPS 180-4 examples and
 * HMAC-SHA256 against RFC 4231 (short, long and hashed keys), a message in
 * parts hashing as a whole, the constant-time comparison, and randomness
 * that is not constant. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/keyed_hash.h"

static void hex(const unsigned char *d, char *out)
{
    for (int i = 0; i < MPCCL_SHA256_BYTES; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void expect_sha(const void *data, size_t n, const char *want)
{
    unsigned char d[MPCCL_SHA256_BYTES];
    char h[2 * MPCCL_SHA256_BYTES + 1];
    mpccl_sha256(data, n, d);
    hex(d, h);
    ck_assert_str_eq(h, want);
}

START_TEST(sha256_vectors)
{
    expect_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    expect_sha(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    expect_sha(million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* In uneven parts: the same digest. */
    mpccl_sha256_t s;
    unsigned char d[MPCCL_SHA256_BYTES];
    char h[2 * MPCCL_SHA256_BYTES + 1];
    mpccl_sha256_init(&s);
    for (size_t off = 0, step = 1; off < 1000000; off += step, step = step * 3 % 1000 + 1)
        mpccl_sha256_update(&s, million + off, off + step <= 1000000 ? step : 1000000 - off);
    mpccl_sha256_final(&s, d);
    hex(d, h);
    ck_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
}
END_TEST

static void expect_hmac(const void *key, size_t klen, const char *data, const char *want)
{
    unsigned char d[MPCCL_SHA256_BYTES];
    char h[2 * MPCCL_SHA256_BYTES + 1];
    mpccl_bytes_t whole = {data, strlen(data)};
    mpccl_hmac_sha256(key, klen, &whole, 1, d);
    hex(d, h);
    ck_assert_str_eq(h, want);
    /* The same message in three parts. */
    size_t n = strlen(data);
    mpccl_bytes_t parts[3] = {{data, n / 3}, {data + n / 3, n / 3}, {data + 2 * (n / 3), n - 2 * (n / 3)}};
    mpccl_hmac_sha256(key, klen, parts, 3, d);
    hex(d, h);
    ck_assert_str_eq(h, want);
}

START_TEST(hmac_rfc4231)
{
    unsigned char k1[20], k6[131];
    memset(k1, 0x0b, sizeof(k1));
    memset(k6, 0xaa, sizeof(k6));
    expect_hmac(k1, sizeof(k1), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    expect_hmac("Jefe", 4, "what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    expect_hmac(k6, sizeof(k6), "Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}
END_TEST

START_TEST(compare_and_random)
{
    unsigned char a[32], b[32];
    ck_assert_int_eq(mpccl_random_bytes(a, sizeof(a)), MPCCL_OK);
    ck_assert_int_eq(mpccl_random_bytes(b, sizeof(b)), MPCCL_OK);
    ck_assert(memcmp(a, b, sizeof(a)) != 0); /* 2^-256 to fail */
    ck_assert_int_eq(mpccl_equal_ct(a, a, sizeof(a)), 1);
    memcpy(b, a, sizeof(a));
    for (size_t i = 0; i < sizeof(a); i++) {
        b[i] ^= 0x80;
        ck_assert_int_eq(mpccl_equal_ct(a, b, sizeof(a)), 0);
        b[i] ^= 0x80;
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("keyed_hash");
    TCase *tc = tcase_create("keyed_hash");
    tcase_add_test(tc, sha256_vectors);
    tcase_add_test(tc, hmac_rfc4231);
    tcase_add_test(tc, compare_and_random);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
