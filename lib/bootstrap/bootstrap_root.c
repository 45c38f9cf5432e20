/* The socket bootstrap's root thread (see bootstrap_root.h).  One poll loop over
 * the listener and the connections that have not finished their hello (the
 * gate, bootstrap_gate.h), so a slow, silent or foreign connection never holds
 * up the real ranks and none that lacks the id's secret is counted. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/bootstrap_root.h"
#include "util/log.h"

typedef struct {
    int listen_fd;
    mpccl_gate_t gate;
    int timeout_s;
    char addr_str[MPCCL_SOCKADDR_STRLEN];
    /* filled as ranks arrive */
    int nranks; /* -1 until the first valid hello */
    int arrived;
    int *conns;
    mpccl_sockaddr_t *addrs;
    char error[768]; /* set: the communicator cannot form; told to every rank */
} root_t;

/* Best effort: the peer may already be gone, and the root must not wait long. */
static void send_reply(int fd, int32_t status, const void *body, uint32_t len)
{
    char buf[sizeof(mpccl_root_reply_t) + MPCCL_ROOT_MSG_MAX];
    mpccl_root_reply_t h = {.status = status, .len = len};
    if (len > MPCCL_ROOT_MSG_MAX) len = h.len = MPCCL_ROOT_MSG_MAX;
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), body, len);
    size_t n = sizeof(h) + len, off = 0;
    int64_t deadline = mpccl_socket_now_ms() + 2000;
    while (off < n && mpccl_socket_now_ms() < deadline) {
        ssize_t k = send(fd, buf + off, n - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k > 0) {
            off += (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            (void)poll(&p, 1, 100);
        } else {
            break;
        }
    }
}

static void send_error(int fd, const char *msg)
{
    send_reply(fd, 1, msg, (uint32_t)strlen(msg) + 1);
}

const char *mpccl_root_hello_problem(const mpccl_root_hello_t *h, int nranks, char *msg, size_t len)
{
    if (h->version != MPCCL_SOCKET_ID_VERSION)
        snprintf(msg, len, "a hello of version %u (this library speaks %u): ranks of different mpccl builds",
                 h->version, MPCCL_SOCKET_ID_VERSION);
    else if (h->rank == MPCCL_ROOT_WITHDRAW)
        return NULL;
    else if (nranks < 0 && (h->nranks < 1 || h->nranks > MPCCL_BOOTSTRAP_MAX_RANKS))
        snprintf(msg, len, "nranks %d out of range [1,%d]", h->nranks, MPCCL_BOOTSTRAP_MAX_RANKS);
    else if (nranks >= 0 && h->nranks != nranks)
        snprintf(msg, len, "rank %d was started with nranks=%d but the ranks before it with nranks=%d", h->rank,
                 h->nranks, nranks);
    else if (h->rank < 0 || h->rank >= h->nranks)
        snprintf(msg, len, "rank %d out of range [0,%d)", h->rank, h->nranks);
    else if (mpccl_sockaddr_len(&h->listen_addr) == 0 && h->nranks > 1)
        snprintf(msg, len, "rank %d sent no listening address (address family %d)", h->rank,
                 h->listen_addr.sa.sa_family);
    else
        return NULL;
    return msg;
}

int mpccl_ring_hello_ok(const void *body, size_t n, int prev)
{
    mpccl_ring_hello_t h;
    if (n != sizeof(h)) return 0;
    memcpy(&h, body, sizeof(h));
    return h.rank == prev && h.reserved == 0;
}

int mpccl_coll_hdr_ok(const void *hdr, size_t n, uint32_t seq, uint64_t bytes)
{
    mpccl_coll_hdr_t h;
    if (n != sizeof(h)) return 0;
    memcpy(&h, hdr, sizeof(h));
    return h.tag == MPCCL_COLL_TAG && h.seq == seq && h.bytes == bytes;
}

int mpccl_root_reply_parse(const mpccl_root_reply_t *rep, size_t *msg_len)
{
    if (rep->status == 0) return rep->len == sizeof(mpccl_sockaddr_t) ? 0 : -1;
    if (rep->status != 1 || rep->len == 0 || rep->len > MPCCL_ROOT_MSG_MAX) return -1;
    *msg_len = rep->len;
    return 1;
}

/* A hello from the right job: record the rank, or set r->error when it shows the
 * job itself is inconsistent (then every rank must hear about it). */
static void admit(root_t *r, int fd, const mpccl_root_hello_t *h)
{
    char msg[256];
    const char *problem = mpccl_root_hello_problem(h, r->nranks, msg, sizeof(msg));
    if (problem && r->nranks < 0) {
        /* The first rank is wrong on its own: others may still be right. */
        MPCCL_WARN(MPCCL_SUB_BOOT, "bootstrap root %s: rejected a rank: %s", r->addr_str, problem);
        send_error(fd, problem);
        close(fd);
        return;
    }
    if (!problem && r->nranks < 0) {
        r->conns = malloc((size_t)h->nranks * sizeof(int));
        r->addrs = calloc((size_t)h->nranks, sizeof(mpccl_sockaddr_t));
        if (r->conns == NULL || r->addrs == NULL) {
            snprintf(r->error, sizeof(r->error), "the root is out of memory for %d ranks",
                     h->nranks);
            send_error(fd, r->error);
            close(fd);
            return;
        }
        for (int i = 0; i < h->nranks; i++) r->conns[i] = -1;
        r->nranks = h->nranks;
    }
    if (problem)
        snprintf(r->error, sizeof(r->error), "%s", problem);
    else if (r->conns[h->rank] >= 0)
        snprintf(r->error, sizeof(r->error),
                 "rank %d arrived twice (two processes passed the same rank with one id)",
                 h->rank);
    if (r->error[0]) {
        send_error(fd, r->error);
        close(fd);
        return;
    }
    r->conns[h->rank] = fd;
    r->addrs[h->rank] = h->listen_addr;
    r->arrived++;
}

static void hello_complete(root_t *r, int fd, const mpccl_root_hello_t *h)
{
    if (h->rank == MPCCL_ROOT_WITHDRAW && h->version == MPCCL_SOCKET_ID_VERSION) {
        snprintf(r->error, sizeof(r->error), "the rank that made the unique id withdrew it before the communicator "
                 "formed (the shrink that made it failed: a survivor died)");
        close(fd);
        return;
    }
    admit(r, fd, h);
}

/* Waits until all ranks arrived, the job proved inconsistent, or the deadline.
 * The gate serves every connection at once: a stranger costs no rank time. */
static void gather(root_t *r)
{
    int64_t deadline = mpccl_socket_now_ms() + (int64_t)r->timeout_s * 1000;
    int clock_restarted = 0;
    while (!r->error[0] && (r->nranks < 0 || r->arrived < r->nranks)) {
        if (mpccl_socket_now_ms() >= deadline) break;
        int fd = -1;
        mpccl_root_hello_t h;
        if (!mpccl_gate_next(&r->gate, deadline, &fd, &h)) continue;
        hello_complete(r, fd, &h);
        if (!clock_restarted && r->arrived > 0) {
            /* An id may be made well before it is used, so the ranks' clock starts
             * with the first of them: none waits here longer than the timeout. */
            clock_restarted = 1;
            deadline = mpccl_socket_now_ms() + (int64_t)r->timeout_s * 1000;
        }
    }
    if (!r->error[0] && r->nranks > 0 && r->arrived < r->nranks) {
        char missing[160] = "";
        size_t off = 0;
        int shown = 0;
        for (int i = 0; i < r->nranks && shown < 8; i++)
            if (r->conns[i] < 0) {
                off += (size_t)snprintf(missing + off, sizeof(missing) - off, "%s%d",
                                        shown ? "," : "", i);
                shown++;
            }
        snprintf(r->error, sizeof(r->error),
                 "only %d of %d ranks arrived at the bootstrap root %s within %d s "
                 "(MPCCL_BOOTSTRAP_TIMEOUT); timed out waiting for rank(s) %s%s",
                 r->arrived, r->nranks, r->addr_str, r->timeout_s, missing,
                 r->nranks - r->arrived > shown ? ",..." : "");
    }
}

static void *root_main(void *arg)
{
    root_t *r = arg;
    gather(r);
    /* No listener from here on: a reused id gets "connection refused" at once. */
    mpccl_gate_close(&r->gate);
    mpccl_socket_close(&r->listen_fd);
    if (r->nranks < 0 && !r->error[0]) {
        MPCCL_INFO(MPCCL_SUB_BOOT,
                   "bootstrap root %s: no rank arrived within %d s; the unique id expired",
                   r->addr_str, r->timeout_s);
    } else if (r->error[0]) {
        MPCCL_WARN(MPCCL_SUB_BOOT, "bootstrap root %s: %s", r->addr_str, r->error);
        for (int i = 0; i < r->nranks; i++)
            if (r->conns[i] >= 0) send_error(r->conns[i], r->error);
    } else {
        for (int i = 0; i < r->nranks; i++)
            send_reply(r->conns[i], 0, &r->addrs[(i + 1) % r->nranks], sizeof(mpccl_sockaddr_t));
        MPCCL_INFO(MPCCL_SUB_BOOT, "bootstrap root %s: all %d ranks arrived", r->addr_str,
                   r->nranks);
    }
    for (int i = 0; i < r->nranks; i++)
        if (r->conns[i] >= 0) close(r->conns[i]);
    free(r->conns);
    free(r->addrs);
    free(r);
    return NULL;
}

mpccl_status_t mpccl_bootstrap_root_start(const mpccl_sockaddr_t *addr, const mpccl_gate_key_t *key,
                                          mpccl_sockaddr_t *bound)
{
    root_t *r = calloc(1, sizeof(*r));
    if (r == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the bootstrap root");
    r->listen_fd = -1;
    r->nranks = -1;
    r->timeout_s = mpccl_bootstrap_timeout_s();
    mpccl_status_t st = mpccl_socket_listen(addr, &r->listen_fd, bound);
    if (st != MPCCL_OK) {
        free(r);
        return st;
    }
    mpccl_sockaddr_str(bound, r->addr_str);
    char what[MPCCL_SOCKADDR_STRLEN + 32];
    snprintf(what, sizeof(what), "bootstrap root %s", r->addr_str);
    mpccl_gate_init(&r->gate, r->listen_fd, key, MPCCL_GATE_LABEL_ROOT, sizeof(mpccl_root_hello_t), what);
    pthread_attr_t attr;
    pthread_t tid;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&tid, &attr, root_main, r);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        mpccl_socket_close(&r->listen_fd);
        free(r);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "cannot start the bootstrap root thread: %s",
                          strerror(e));
    }
    MPCCL_INFO(MPCCL_SUB_BOOT, "bootstrap root listening at %s", r->addr_str);
    return MPCCL_OK;
}
