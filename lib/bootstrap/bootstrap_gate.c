/* The gate in front of a job's TCP listeners (see bootstrap_gate.h). */
#define _GNU_SOURCE
#include "bootstrap/bootstrap_gate.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/bootstrap_net.h"
#include "util/stranger_log.h"

#define ACCEPT_PAUSE_MIN_MS 50
#define ACCEPT_PAUSE_MAX_MS 1000

struct mpccl_gate_pending {
    int fd;
    size_t got;
    int64_t deadline_ms;
    unsigned char snonce[MPCCL_GATE_NONCE_BYTES];
    unsigned char answer[MPCCL_GATE_ANSWER_BYTES(MPCCL_GATE_MAX_BODY)];
};

void mpccl_gate_key_from(const void *secret, size_t len, mpccl_gate_key_t *key)
{
    static const char prefix[] = "mpccl job secret v1";
    mpccl_sha256_t s;
    mpccl_sha256_init(&s);
    mpccl_sha256_update(&s, prefix, sizeof(prefix));
    mpccl_sha256_update(&s, secret, len);
    mpccl_sha256_final(&s, key->k);
}

static void answer_proof(const mpccl_gate_key_t *key, const char *label, const unsigned char *snonce,
                         const unsigned char *cnonce, const void *body, size_t body_len,
                         unsigned char out[MPCCL_SHA256_BYTES])
{
    mpccl_bytes_t parts[4] = {{label, strlen(label) + 1},
                              {snonce, MPCCL_GATE_NONCE_BYTES},
                              {cnonce, MPCCL_GATE_NONCE_BYTES},
                              {body, body_len}};
    mpccl_hmac_sha256(key->k, sizeof(key->k), parts, 4, out);
}

void mpccl_gate_listener_proof(const mpccl_gate_key_t *key, const char *label, const unsigned char *snonce,
                               const unsigned char *cnonce, unsigned char proof[MPCCL_SHA256_BYTES])
{
    static const char accepted[] = "accepted";
    mpccl_bytes_t parts[4] = {{label, strlen(label) + 1},
                              {accepted, sizeof(accepted)},
                              {snonce, MPCCL_GATE_NONCE_BYTES},
                              {cnonce, MPCCL_GATE_NONCE_BYTES}};
    mpccl_hmac_sha256(key->k, sizeof(key->k), parts, 4, proof);
}

int mpccl_gate_check_answer(const mpccl_gate_key_t *key, const char *label, const unsigned char *snonce,
                            const void *answer, size_t answer_len, size_t body_len)
{
    if (body_len > MPCCL_GATE_MAX_BODY || answer_len != MPCCL_GATE_ANSWER_BYTES(body_len)) return 0;
    const unsigned char *a = answer;
    unsigned char want[MPCCL_SHA256_BYTES];
    answer_proof(key, label, snonce, a + body_len, a, body_len, want);
    return mpccl_equal_ct(want, a + body_len + MPCCL_GATE_NONCE_BYTES, sizeof(want));
}

mpccl_status_t mpccl_gate_make_answer(const mpccl_gate_key_t *key, const char *label, const unsigned char *snonce,
                                      const void *body, size_t body_len, void *answer)
{
    if (body_len > MPCCL_GATE_MAX_BODY)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "gate %s: a body of %zu bytes (at most %d)", label, body_len,
                          MPCCL_GATE_MAX_BODY);
    unsigned char *a = answer;
    memcpy(a, body, body_len);
    MPCCL_CHECK(mpccl_random_bytes(a + body_len, MPCCL_GATE_NONCE_BYTES));
    answer_proof(key, label, snonce, a + body_len, body, body_len, a + body_len + MPCCL_GATE_NONCE_BYTES);
    return MPCCL_OK;
}

/* ---- listener ---- */

void mpccl_gate_init(mpccl_gate_t *g, int listen_fd, const mpccl_gate_key_t *key, const char *label,
                     size_t body_len, const char *what)
{
    memset(g, 0, sizeof(*g));
    g->listen_fd = listen_fd;
    g->key = *key;
    g->label = label;
    g->body_len = body_len <= MPCCL_GATE_MAX_BODY ? body_len : MPCCL_GATE_MAX_BODY;
    snprintf(g->what, sizeof(g->what), "%s", what);
    g->wake_fd = -1;
}

static void drop(mpccl_gate_t *g, int i, const char *why)
{
    if (why) mpccl_stranger_note(g->what, why);
    if (g->pending[i].fd >= 0) close(g->pending[i].fd);
    g->pending[i] = g->pending[--g->npending];
}

void mpccl_gate_close(mpccl_gate_t *g)
{
    while (g->npending > 0) drop(g, g->npending - 1, NULL);
    free(g->pending);
    g->pending = NULL;
    g->cap = 0;
}

/* Best effort, never waits: the socket is fresh or its peer has just written,
 * so its send buffer has room for these few bytes. */
static int send_now(int fd, const void *buf, size_t n)
{
    ssize_t k;
    do k = send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    return k == (ssize_t)n ? 0 : -1;
}

static void accept_all(mpccl_gate_t *g, int64_t now)
{
    if (now < g->accept_pause_until_ms) return;
    for (;;) {
        int fd = accept4(g->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The connection stays queued; poll would report it at once, so
                 * back off instead of spinning. */
                g->accept_pause_ms = g->accept_pause_ms ? 2 * g->accept_pause_ms : ACCEPT_PAUSE_MIN_MS;
                if (g->accept_pause_ms > ACCEPT_PAUSE_MAX_MS) g->accept_pause_ms = ACCEPT_PAUSE_MAX_MS;
                g->accept_pause_until_ms = now + g->accept_pause_ms;
                mpccl_stranger_note(g->what, errno == EMFILE || errno == ENFILE
                                                 ? "out of file descriptors: accepting paused"
                                                 : "out of memory: accepting paused");
            }
            return; /* EAGAIN: none left; others: that connection went away */
        }
        g->accept_pause_ms = 0;
        if (g->npending == g->cap) {
            int cap = g->cap ? 2 * g->cap : 16;
            mpccl_gate_pending_t *p = realloc(g->pending, (size_t)cap * sizeof(*p));
            if (p == NULL) {
                close(fd);
                return;
            }
            g->pending = p;
            g->cap = cap;
        }
        mpccl_gate_pending_t *p = &g->pending[g->npending];
        mpccl_gate_challenge_t c = {.magic = MPCCL_GATE_MAGIC};
        if (mpccl_random_bytes(p->snonce, sizeof(p->snonce)) != MPCCL_OK) {
            close(fd);
            continue;
        }
        memcpy(c.nonce, p->snonce, sizeof(c.nonce));
        if (send_now(fd, &c, sizeof(c)) != 0) {
            close(fd); /* gone already */
            continue;
        }
        p->fd = fd;
        p->got = 0;
        p->deadline_ms = now + MPCCL_GATE_FIRST_BYTES_MS;
        g->npending++;
    }
}

/* Reads what pending i has sent.  1: it proved the key (moved to *fd), 0:
 * still incomplete, -1: dropped. */
static int read_answer(mpccl_gate_t *g, int i, int *fd, void *body)
{
    mpccl_gate_pending_t *p = &g->pending[i];
    size_t want = MPCCL_GATE_ANSWER_BYTES(g->body_len);
    for (;;) {
        ssize_t k = recv(p->fd, p->answer + p->got, want - p->got, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (k <= 0) {
            /* Closed before answering: a knock (a liveness probe) when it said
             * nothing, so only a partial answer counts as a stranger. */
            drop(g, i, p->got ? "closed in the middle of its answer" : NULL);
            return -1;
        }
        p->got += (size_t)k;
        if (p->got < want) continue;
        if (!mpccl_gate_check_answer(&g->key, g->label, p->snonce, p->answer, want, g->body_len)) {
            unsigned char refusal[MPCCL_SHA256_BYTES];
            memset(refusal, 0, sizeof(refusal));
            (void)send_now(p->fd, refusal, sizeof(refusal));
            drop(g, i, "wrong proof of the job secret");
            return -1;
        }
        unsigned char proof[MPCCL_SHA256_BYTES];
        mpccl_gate_listener_proof(&g->key, g->label, p->snonce, p->answer + g->body_len, proof);
        if (send_now(p->fd, proof, sizeof(proof)) != 0) {
            drop(g, i, NULL);
            return -1;
        }
        memcpy(body, p->answer, g->body_len);
        *fd = p->fd;
        p->fd = -1;
        drop(g, i, NULL);
        return 1;
    }
}

int mpccl_gate_next(mpccl_gate_t *g, int64_t deadline_ms, int *fd, void *body)
{
    struct pollfd *fds = NULL;
    int cap = 0, got = 0;
    for (;;) {
        int64_t now = mpccl_socket_now_ms();
        int64_t wake = deadline_ms;
        /* An answer that arrived while this process was not running (a loaded
         * machine) still counts: read before dropping. */
        for (int i = g->npending - 1; i >= 0 && !got; i--)
            if (now >= g->pending[i].deadline_ms) {
                int r = read_answer(g, i, fd, body);
                if (r == 1) got = 1;
                else if (r == 0) drop(g, i, g->pending[i].got ? "too slow to answer" : "silent");
            }
        if (got) break;
        for (int i = 0; i < g->npending; i++)
            if (g->pending[i].deadline_ms < wake) wake = g->pending[i].deadline_ms;
        int listening = now >= g->accept_pause_until_ms;
        if (!listening && g->accept_pause_until_ms < wake) wake = g->accept_pause_until_ms;
        if (now >= deadline_ms) break;
        if (g->npending + 2 > cap) {
            cap = 2 * (g->npending + 2);
            struct pollfd *f = realloc(fds, (size_t)cap * sizeof(*f));
            if (f == NULL) break;
            fds = f;
        }
        int np = 0;
        for (int i = 0; i < g->npending; i++) fds[np++] = (struct pollfd){.fd = g->pending[i].fd, .events = POLLIN};
        if (listening) fds[np++] = (struct pollfd){.fd = g->listen_fd, .events = POLLIN};
        int64_t wait = wake - now;
        struct pollfd *w = NULL;
        if (g->wake_fd >= 0) {
            w = &fds[np];
            *w = (struct pollfd){.fd = g->wake_fd, .events = POLLIN};
        }
        int n = poll(fds, (nfds_t)np + (w != NULL), wait < 0 ? 0 : wait > 1000000 ? 1000000 : (int)wait);
        if (n <= 0) continue;
        if (w && w->revents) break;
        /* Pending entries move when dropped: scan from the back. */
        int npend = g->npending;
        for (int i = npend - 1; i >= 0 && !got; i--)
            if (fds[i].revents) got = read_answer(g, i, fd, body) == 1;
        if (got) break;
        if (listening && fds[np - 1].revents) {
            accept_all(g, mpccl_socket_now_ms());
            /* A peer usually answers within microseconds: look before sleeping. */
            for (int i = g->npending - 1; i >= npend && !got; i--) got = read_answer(g, i, fd, body) == 1;
            if (got) break;
        }
    }
    free(fds);
    return got;
}

/* ---- peer ---- */

void mpccl_gate_entry_init(mpccl_gate_entry_t *e, int fd, const mpccl_gate_key_t *key, const char *label,
                           const void *body, size_t body_len)
{
    memset(e, 0, sizeof(*e));
    e->fd = fd;
    e->key = *key;
    e->label = label;
    e->body_len = body_len <= MPCCL_GATE_MAX_BODY ? body_len : MPCCL_GATE_MAX_BODY;
    memcpy(e->body, body, e->body_len);
}

short mpccl_gate_entry_events(const mpccl_gate_entry_t *e) { return e->phase == 1 ? POLLOUT : POLLIN; }

int mpccl_gate_verdict(const mpccl_gate_entry_t *e, const unsigned char *verdict)
{
    unsigned char want[MPCCL_SHA256_BYTES], zero[MPCCL_SHA256_BYTES];
    memset(zero, 0, sizeof(zero));
    if (mpccl_equal_ct(verdict, zero, sizeof(zero))) return 0;
    mpccl_gate_listener_proof(&e->key, e->label, e->challenge.nonce, e->answer + e->body_len, want);
    return mpccl_equal_ct(verdict, want, sizeof(want)) ? 1 : -1;
}

int mpccl_gate_entry_step(mpccl_gate_entry_t *e, const char *what, int *refused, int *closed)
{
    *refused = 0;
    *closed = 0;
    for (;;) {
        size_t want = e->phase == 0 ? sizeof(e->challenge)
                      : e->phase == 1 ? MPCCL_GATE_ANSWER_BYTES(e->body_len)
                      : e->phase == 2 ? sizeof(e->verdict) : 0;
        if (e->phase == 3) return 1;
        unsigned char *buf = e->phase == 0 ? (unsigned char *)&e->challenge : e->phase == 1 ? e->answer : e->verdict;
        ssize_t k = e->phase == 1 ? send(e->fd, buf + e->done, want - e->done, MSG_DONTWAIT | MSG_NOSIGNAL)
                                  : recv(e->fd, buf + e->done, want - e->done, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (k <= 0) {
            *closed = 1;
            mpccl_fail(MPCCL_ERR_REMOTE, "%s: the listener closed the connection before its verdict (%s)", what,
                       k == 0 ? "end of stream" : strerror(errno));
            return -1;
        }
        e->done += (size_t)k;
        if (e->done < want) continue;
        e->done = 0;
        if (e->phase == 0) {
            if (e->challenge.magic != MPCCL_GATE_MAGIC) {
                mpccl_fail(MPCCL_ERR_REMOTE, "%s: the listener is not an mpccl gate (first word 0x%llx)", what,
                           (unsigned long long)e->challenge.magic);
                return -1;
            }
            if (mpccl_gate_make_answer(&e->key, e->label, e->challenge.nonce, e->body, e->body_len, e->answer) !=
                MPCCL_OK)
                return -1;
        } else if (e->phase == 2) {
            int v = mpccl_gate_verdict(e, e->verdict);
            if (v == 0) {
                *refused = 1;
                mpccl_fail(MPCCL_ERR_REMOTE,
                           "%s: refused, the listener holds another secret (a reused or foreign unique id, or "
                           "MPCCL_COMM_SECRET / NCCL_SOCKET_MAGIC differs between the ranks)", what);
                return -1;
            }
            if (v < 0) {
                mpccl_fail(MPCCL_ERR_REMOTE, "%s: the listener could not prove it holds the job's secret: it is "
                           "not a rank of this job", what);
                return -1;
            }
        }
        e->phase++;
    }
}

mpccl_status_t mpccl_gate_enter(int fd, const mpccl_gate_key_t *key, const char *label, const void *body,
                                size_t body_len, int64_t deadline_ms, const char *what, int *refused, int *closed)
{
    mpccl_gate_entry_t e;
    mpccl_gate_entry_init(&e, fd, key, label, body, body_len);
    for (;;) {
        int r = mpccl_gate_entry_step(&e, what, refused, closed);
        if (r > 0) return MPCCL_OK;
        if (r < 0) return MPCCL_ERR_REMOTE;
        if (mpccl_bootstrap_cancelled()) return mpccl_bootstrap_fail_cancelled(what);
        int64_t left = deadline_ms - mpccl_socket_now_ms();
        if (left <= 0) {
            *closed = 1;
            return mpccl_fail(MPCCL_ERR_REMOTE, "timed out after %d s (MPCCL_BOOTSTRAP_TIMEOUT) during %s",
                              mpccl_bootstrap_timeout_s(), what);
        }
        struct pollfd p = {.fd = fd, .events = mpccl_gate_entry_events(&e)};
        (void)poll(&p, 1, left > 20 ? 20 : (int)left);
    }
}
