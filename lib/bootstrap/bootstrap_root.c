/* The socket bootstrap's root thread (see bootstrap_root.h).  One poll loop over
 * the listener and the connections that have not finished their hello, so a
 * slow, silent or foreign connection never holds up the real ranks. */
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
    int fd;
    size_t got;
    int64_t deadline_ms;
    mpccl_root_hello_t hello;
} pending_t;

typedef struct {
    int listen_fd;
    uint64_t magic;
    int timeout_s;
    char addr_str[MPCCL_SOCKADDR_STRLEN];
    /* filled as ranks arrive */
    int nranks; /* -1 until the first valid hello */
    int arrived;
    int *conns;
    mpccl_sockaddr_t *addrs;
    pending_t *pending;
    int npending, cap_pending;
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

static void drop_pending(root_t *r, int i)
{
    if (r->pending[i].fd >= 0) close(r->pending[i].fd);
    r->pending[i] = r->pending[--r->npending];
}

/* A hello from the right job: record the rank, or set r->error when it shows the
 * job itself is inconsistent (then every rank must hear about it). */
static void admit(root_t *r, int fd, const mpccl_root_hello_t *h)
{
    if (r->nranks < 0) {
        if (h->nranks < 1 || h->nranks > MPCCL_BOOTSTRAP_MAX_RANKS) {
            char msg[160];
            snprintf(msg, sizeof(msg), "nranks %d out of range [1,%d]", h->nranks,
                     MPCCL_BOOTSTRAP_MAX_RANKS);
            MPCCL_WARN(MPCCL_SUB_BOOT, "bootstrap root %s: rejected a rank: %s", r->addr_str, msg);
            send_error(fd, msg);
            close(fd);
            return;
        }
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
    if (h->nranks != r->nranks)
        snprintf(r->error, sizeof(r->error),
                 "rank %d was started with nranks=%d but the ranks before it with nranks=%d",
                 h->rank, h->nranks, r->nranks);
    else if (h->rank < 0 || h->rank >= r->nranks)
        snprintf(r->error, sizeof(r->error), "rank %d out of range [0,%d)", h->rank, r->nranks);
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
    if (h->magic != r->magic || h->version != MPCCL_SOCKET_ID_VERSION) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "the unique id does not match the root listening at %s (%s): the id was "
                 "reused, corrupted, or belongs to another communicator",
                 r->addr_str, h->magic != r->magic ? "magic differs" : "version differs");
        MPCCL_WARN(MPCCL_SUB_BOOT,
                   "bootstrap root %s: rejected a connection claiming rank %d of %d: %s",
                   r->addr_str, h->rank, h->nranks, h->magic != r->magic ? "wrong magic"
                                                                         : "wrong version");
        send_error(fd, msg);
        close(fd);
        return;
    }
    if (h->rank == MPCCL_ROOT_WITHDRAW) {
        snprintf(r->error, sizeof(r->error), "the rank that made the unique id withdrew it before the communicator "
                 "formed (the shrink that made it failed: a survivor died)");
        close(fd);
        return;
    }
    admit(r, fd, h);
}

static void accept_new(root_t *r, int64_t now)
{
    for (;;) {
        int fd = accept4(r->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN: none left; others: the connection went away */
        if (r->npending == r->cap_pending) {
            int cap = r->cap_pending ? 2 * r->cap_pending : 64;
            pending_t *p = realloc(r->pending, (size_t)cap * sizeof(*p));
            if (p == NULL) {
                close(fd);
                return;
            }
            r->pending = p;
            r->cap_pending = cap;
        }
        r->pending[r->npending++] =
            (pending_t){.fd = fd, .got = 0, .deadline_ms = now + MPCCL_BOOTSTRAP_HELLO_MS};
    }
}

/* Reads what is there of pending hello i; returns 1 when it was consumed. */
static int read_hello(root_t *r, int i)
{
    pending_t *p = &r->pending[i];
    char *dst = (char *)&p->hello;
    for (;;) {
        ssize_t k = recv(p->fd, dst + p->got, sizeof(p->hello) - p->got, MSG_DONTWAIT);
        if (k > 0) {
            p->got += (size_t)k;
            if (p->got < sizeof(p->hello)) continue;
            int fd = p->fd;
            mpccl_root_hello_t h = p->hello;
            p->fd = -1; /* ownership moves on */
            drop_pending(r, i);
            hello_complete(r, fd, &h);
            return 1;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        drop_pending(r, i); /* closed or reset before saying who it is */
        return 1;
    }
}

/* Waits until all ranks arrived, the job proved inconsistent, or the deadline. */
static void gather(root_t *r)
{
    int64_t deadline = mpccl_socket_now_ms() + (int64_t)r->timeout_s * 1000;
    struct pollfd *fds = NULL;
    int cap = 0, clock_restarted = 0;
    while (!r->error[0] && (r->nranks < 0 || r->arrived < r->nranks)) {
        int64_t now = mpccl_socket_now_ms();
        if (now >= deadline) break;
        for (int i = 0; i < r->npending; i++)
            if (now >= r->pending[i].deadline_ms) {
                MPCCL_WARN(MPCCL_SUB_BOOT,
                           "bootstrap root %s: dropped a connection that sent no hello in %d s",
                           r->addr_str, MPCCL_BOOTSTRAP_HELLO_MS / 1000);
                drop_pending(r, i--);
            }
        if (r->npending + 1 > cap) {
            cap = 2 * (r->npending + 1);
            struct pollfd *f = realloc(fds, (size_t)cap * sizeof(*f));
            if (f == NULL) {
                snprintf(r->error, sizeof(r->error), "the root is out of memory");
                break;
            }
            fds = f;
        }
        fds[0] = (struct pollfd){.fd = r->listen_fd, .events = POLLIN};
        for (int i = 0; i < r->npending; i++)
            fds[i + 1] = (struct pollfd){.fd = r->pending[i].fd, .events = POLLIN};
        int np = r->npending;
        int64_t wait = deadline - now;
        if (wait > 1000) wait = 1000; /* re-check hello deadlines now and then */
        int n = poll(fds, (nfds_t)np + 1, (int)wait);
        if (n <= 0) continue;
        /* Pending entries move when dropped: scan from the back so indices stay valid. */
        for (int i = np - 1; i >= 0; i--)
            if (fds[i + 1].revents) read_hello(r, i);
        if (fds[0].revents) accept_new(r, mpccl_socket_now_ms());
        if (!clock_restarted && r->arrived > 0) {
            /* An id may be made well before it is used, so the ranks' clock starts
             * with the first of them: none waits here longer than the timeout. */
            clock_restarted = 1;
            deadline = mpccl_socket_now_ms() + (int64_t)r->timeout_s * 1000;
        }
    }
    free(fds);
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
    mpccl_socket_close(&r->listen_fd);
    for (int i = 0; i < r->npending; i++) close(r->pending[i].fd);
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
    free(r->pending);
    free(r);
    return NULL;
}

mpccl_status_t mpccl_bootstrap_root_start(const mpccl_sockaddr_t *addr, uint64_t magic,
                                          mpccl_sockaddr_t *bound)
{
    root_t *r = calloc(1, sizeof(*r));
    if (r == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the bootstrap root");
    r->listen_fd = -1;
    r->magic = magic;
    r->nranks = -1;
    r->timeout_s = mpccl_bootstrap_timeout_s();
    mpccl_status_t st = mpccl_socket_listen(addr, &r->listen_fd, bound);
    if (st != MPCCL_OK) {
        free(r);
        return st;
    }
    mpccl_sockaddr_str(bound, r->addr_str);
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
