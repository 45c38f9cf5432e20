/* The gate in front of every TCP listener of a job (bootstrap root and ring,
 * the shrink door): a connection proves that it knows the job's secret before
 * anything it says is believed, and no connection can make the listener wait.
 *
 * On accept the listener sends a challenge (a fresh nonce).  The peer answers
 * with a fixed-size body, its own nonce and HMAC-SHA256(key, label, both
 * nonces, body); the listener checks it and answers with its own proof over
 * both nonces, so each side knows the other holds the key and the secret
 * itself never travels.  Every accepted connection is served at once, all of
 * them in one poll loop; one that has not answered within
 * MPCCL_GATE_FIRST_BYTES_MS, answers garbage or a wrong proof is closed and
 * counted (util/stranger_log.h).  A wrong proof is answered with a refusal
 * first, so a peer of another job fails at once instead of timing out. */
#ifndef MPCCL_BOOTSTRAP_GATE_H
#define MPCCL_BOOTSTRAP_GATE_H

#include <stddef.h>
#include <stdint.h>

#include "util/keyed_hash.h"
#include "util/status.h"

#define MPCCL_GATE_KEY_BYTES 32
#define MPCCL_GATE_NONCE_BYTES 16
#define MPCCL_GATE_MAX_BODY 256
#define MPCCL_GATE_FIRST_BYTES_MS 1000
#define MPCCL_GATE_MAGIC 0x4554414763637025ull /* "%pccGATE": a challenge */

typedef struct mpccl_gate_key {
    unsigned char k[MPCCL_GATE_KEY_BYTES];
} mpccl_gate_key_t;

/* listener -> peer on accept. */
typedef struct mpccl_gate_challenge {
    uint64_t magic;
    unsigned char nonce[MPCCL_GATE_NONCE_BYTES];
} mpccl_gate_challenge_t;

/* The key derived from a secret (any bytes): SHA-256 of a fixed prefix and
 * the secret. */
void mpccl_gate_key_from(const void *secret, size_t len, mpccl_gate_key_t *key);

/* The peer's answer: body_len bytes of body, then its nonce, then the proof.
 * 1 when answer (answer_len bytes) carries a valid proof for challenge nonce
 * snonce under key and label; 0 otherwise (any bytes may come in). */
int mpccl_gate_check_answer(const mpccl_gate_key_t *key, const char *label, const unsigned char *snonce,
                            const void *answer, size_t answer_len, size_t body_len);
/* Fills answer (body_len + nonce + proof bytes) for challenge snonce; the
 * nonce is drawn at random. */
mpccl_status_t mpccl_gate_make_answer(const mpccl_gate_key_t *key, const char *label, const unsigned char *snonce,
                                      const void *body, size_t body_len, void *answer);
/* The listener's proof for an answer (its nonces), and its refusal (zeros). */
void mpccl_gate_listener_proof(const mpccl_gate_key_t *key, const char *label, const unsigned char *snonce,
                               const unsigned char *cnonce, unsigned char proof[MPCCL_SHA256_BYTES]);
#define MPCCL_GATE_ANSWER_BYTES(body_len) ((body_len) + MPCCL_GATE_NONCE_BYTES + MPCCL_SHA256_BYTES)

/* ---- listener ---- */
typedef struct mpccl_gate_pending mpccl_gate_pending_t;
typedef struct mpccl_gate {
    int listen_fd;
    mpccl_gate_key_t key;
    const char *label; /* binds proofs to one kind of listener */
    size_t body_len;
    char what[96]; /* names the listener in warnings */
    mpccl_gate_pending_t *pending;
    int npending, cap;
    int64_t accept_pause_until_ms; /* out of descriptors: accept again from then */
    int64_t accept_pause_ms;
    int wake_fd; /* -1, or a socket whose readiness ends mpccl_gate_next early */
} mpccl_gate_t;

/* A gate over listen_fd (non-blocking; the caller keeps owning it). */
void mpccl_gate_init(mpccl_gate_t *g, int listen_fd, const mpccl_gate_key_t *key, const char *label,
                     size_t body_len, const char *what);
/* Serves the listener and every pending connection until one proves the key
 * (1: *fd is it, non-blocking, its proof sent; body holds body_len bytes) or
 * until deadline_ms or g->wake_fd has something to read (0).  Never fails:
 * strangers are closed and counted. */
int mpccl_gate_next(mpccl_gate_t *g, int64_t deadline_ms, int *fd, void *body);
/* Closes the pending connections (not the listener). */
void mpccl_gate_close(mpccl_gate_t *g);

/* ---- peer ---- */
/* A peer's way through a gate, one non-blocking step at a time, so a rank can
 * pass its successor's gate while it serves its own. */
typedef struct mpccl_gate_entry {
    int fd;
    mpccl_gate_key_t key;
    const char *label;
    size_t body_len;
    int phase; /* 0: reading the challenge, 1: sending the answer, 2: reading the verdict, 3: in */
    size_t done;
    mpccl_gate_challenge_t challenge;
    unsigned char answer[MPCCL_GATE_ANSWER_BYTES(MPCCL_GATE_MAX_BODY)];
    unsigned char verdict[MPCCL_SHA256_BYTES];
    unsigned char body[MPCCL_GATE_MAX_BODY];
} mpccl_gate_entry_t;
void mpccl_gate_entry_init(mpccl_gate_entry_t *e, int fd, const mpccl_gate_key_t *key, const char *label,
                           const void *body, size_t body_len);
/* Moves bytes that can move now.  1: in; 0: not yet (poll e->fd for
 * mpccl_gate_entry_events); -1: failed (an error naming `what` is set;
 * *refused: the listener holds another secret; *closed: the connection broke
 * off before the listener's verdict, so trying again may succeed). */
int mpccl_gate_entry_step(mpccl_gate_entry_t *e, const char *what, int *refused, int *closed);
short mpccl_gate_entry_events(const mpccl_gate_entry_t *e);
/* What a verdict (32 bytes) from the listener means for entry e: 1 in, 0
 * refused, -1 a listener that is not of this job (any bytes). */
int mpccl_gate_verdict(const mpccl_gate_entry_t *e, const unsigned char *verdict);

/* On a connected socket: reads the challenge, answers with body and proof,
 * and checks the listener's proof, all by deadline_ms.  MPCCL_ERR_REMOTE
 * naming `what` when the listener refused (*refused = 1: a different secret)
 * or proved nothing; a closed connection before the challenge sets *closed. */
mpccl_status_t mpccl_gate_enter(int fd, const mpccl_gate_key_t *key, const char *label, const void *body,
                                size_t body_len, int64_t deadline_ms, const char *what, int *refused, int *closed);

#endif
