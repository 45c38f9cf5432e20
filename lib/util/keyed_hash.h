/* SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), small and self-contained:
 * listeners prove that a peer knows the job's secret without sending it, and
 * the library links no crypto library for that.  Also the job's randomness
 * and a constant-time comparison. */
#ifndef MPCCL_KEYED_HASH_H
#define MPCCL_KEYED_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

#define MPCCL_SHA256_BYTES 32

typedef struct mpccl_sha256 {
    uint32_t h[8];
    uint64_t bytes;
    unsigned char block[64];
    size_t fill;
} mpccl_sha256_t;

void mpccl_sha256_init(mpccl_sha256_t *s);
void mpccl_sha256_update(mpccl_sha256_t *s, const void *data, size_t n);
void mpccl_sha256_final(mpccl_sha256_t *s, unsigned char out[MPCCL_SHA256_BYTES]);
void mpccl_sha256(const void *data, size_t n, unsigned char out[MPCCL_SHA256_BYTES]);

/* HMAC-SHA256 over the concatenation of nparts buffers. */
typedef struct mpccl_bytes {
    const void *p;
    size_t n;
} mpccl_bytes_t;
void mpccl_hmac_sha256(const void *key, size_t key_len, const mpccl_bytes_t *parts, int nparts,
                       unsigned char out[MPCCL_SHA256_BYTES]);

/* 1 when a and b (n bytes) are equal; time independent of where they differ. */
int mpccl_equal_ct(const void *a, const void *b, size_t n);

/* n bytes from the kernel's random source (getrandom, else /dev/urandom). */
mpccl_status_t mpccl_random_bytes(void *out, size_t n);

#endif
