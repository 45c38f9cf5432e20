/* Handing file descriptors to other processes of this host (see cuda_fdpass.h). */
#define _GNU_SOURCE
#include "cuda/cuda_fdpass.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/config.h"
#include "util/log.h"
#include "util/stranger_log.h"

typedef struct offer {
    struct offer *next;
    uint64_t key;
    int fd;
} offer_t;

/* A process this one's communicators share a machine with: its pid and how
 * many communicators name it. */
typedef struct allowed {
    struct allowed *next;
    pid_t pid;
    int refs;
} allowed_t;

static pthread_mutex_t offers_mu = PTHREAD_MUTEX_INITIALIZER;
static offer_t *offers;
static allowed_t *allowed; /* under offers_mu */
static pthread_mutex_t handler_mu = PTHREAD_MUTEX_INITIALIZER; /* handlers run one at a time */
static int serving; /* connections being served now, under offers_mu */
static int server_fd = -1;
static pid_t server_pid; /* a forked child must start its own server */
static mpccl_fdpass_handler_t handler;

/* An unknown key and an unknown peer get the same answer (REPLY_DENIED), so
 * the server tells nobody which keys exist. */
enum { REPLY_OK = 0, REPLY_DENIED = 2, REPLY_NO_HANDLER = 3 };
#define MAX_SERVING 64      /* connections served at once; more wait in the queue */
#define FIRST_BYTES_S 1     /* an admitted peer sends its request at once */
enum { OP_FETCH = 1, OP_CALL = 2 };

/* Every request starts with this, then len bytes; a descriptor rides on it. */
typedef struct {
    uint32_t op, len;
    uint64_t key;
} request_t;
/* Every reply starts with this, then len bytes (and maybe a descriptor). */
typedef struct {
    int32_t code;
    uint32_t len;
} reply_t;

static pthread_once_t tag_once = PTHREAD_ONCE_INIT;
static uint32_t tag;

static void make_tag(void)
{
    /* This copy's load address (ASLR), the clock and the pid, mixed. */
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t x = (uint64_t)(uintptr_t)&tag ^ ((uint64_t)t.tv_nsec << 20) ^ (uint64_t)t.tv_sec ^ ((uint64_t)getpid() << 40);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    tag = (uint32_t)x ? (uint32_t)x : 1u;
}

uint32_t mpccl_fdpass_tag(void)
{
    pthread_once(&tag_once, make_tag);
    return tag;
}

/* "\0mpccl-fd-<pid>-<tag>": abstract, so nothing is left in the file system. */
static socklen_t socket_name(pid_t pid, uint32_t t, struct sockaddr_un *a, char *name, size_t name_len)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    snprintf(name, name_len, "mpccl-fd-%d-%08x", (int)pid, t);
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "%s", name);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void set_timeout(int s, int seconds)
{
    struct timeval tv = {seconds, 0};
    (void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Sends head and body as one message, with fd (>= 0) attached. */
static int send_msg(int c, const void *head, size_t head_len, const void *body, size_t body_len, int fd)
{
    struct iovec iov[2] = {{(void *)head, head_len}, {(void *)body, body_len}};
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = iov;
    m.msg_iovlen = body_len ? 2 : 1;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    if (fd >= 0) {
        memset(&ctl, 0, sizeof(ctl));
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &fd, sizeof(int));
    }
    return sendmsg(c, &m, MSG_NOSIGNAL) == (ssize_t)(head_len + body_len) ? 0 : -1;
}

/* Receives head (exactly head_len bytes) and the descriptor riding on it
 * (*fd = -1 when none).  Returns 0 on success. */
static int recv_head(int c, void *head, size_t head_len, int *fd)
{
    *fd = -1;
    struct iovec iov = {head, head_len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof(ctl.buf);
    ssize_t n = recvmsg(c, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
    struct cmsghdr *h = n > 0 ? CMSG_FIRSTHDR(&m) : NULL;
    if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(h), sizeof(int));
    if (n == (ssize_t)head_len) return 0;
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return -1;
}

static int recv_body(int c, void *body, uint32_t len)
{
    return len == 0 || recv(c, body, len, MSG_WAITALL) == (ssize_t)len ? 0 : -1;
}

static void serve_fetch(int c, uint64_t key)
{
    pthread_mutex_lock(&offers_mu);
    int fd = -1;
    for (offer_t *o = offers; o; o = o->next)
        if (o->key == key) fd = o->fd;
    /* Sent while holding the lock, so a withdraw cannot close fd meanwhile;
     * the kernel gives the peer its own descriptor. */
    reply_t r = {fd >= 0 ? REPLY_OK : REPLY_DENIED, 0};
    (void)send_msg(c, &r, sizeof(r), NULL, 0, fd);
    pthread_mutex_unlock(&offers_mu);
}

static void serve_call(int c, const request_t *q, int fd)
{
    char req[MPCCL_FDPASS_MAX_MSG], out[MPCCL_FDPASS_MAX_MSG];
    if (!mpccl_fdpass_request_ok(q, sizeof(*q)) || recv_body(c, req, q->len) != 0) {
        if (fd >= 0) close(fd);
        return;
    }
    reply_t r = {REPLY_NO_HANDLER, 0};
    pthread_mutex_lock(&offers_mu);
    mpccl_fdpass_handler_t h = handler;
    pthread_mutex_unlock(&offers_mu);
    if (h) {
        pthread_mutex_lock(&handler_mu);
        r.code = h(req, q->len, fd, out, &r.len);
        pthread_mutex_unlock(&handler_mu);
        if (r.len > sizeof(out)) r.len = 0;
    } else if (fd >= 0) {
        close(fd);
    }
    (void)send_msg(c, &r, sizeof(r), out, r.len, -1);
}

int mpccl_fdpass_request_ok(const void *req, size_t n)
{
    request_t q;
    if (n != sizeof(q)) return 0;
    memcpy(&q, req, sizeof(q));
    if (q.op == OP_FETCH) return q.len == 0;
    return q.op == OP_CALL && q.len <= MPCCL_FDPASS_MAX_MSG;
}

int mpccl_fdpass_peer_allowed(pid_t pid, uid_t uid)
{
    if (uid != geteuid()) return 0;
    if (pid == getpid()) return 1;
    /* Ranks in separate PID namespaces (containers sharing the network
     * namespace) see each other under other pids: only the user can be
     * checked there. */
    const char *who = mpccl_config_str("FD_PEERS");
    if (who && strcmp(who, "user") == 0) return 1;
    pthread_mutex_lock(&offers_mu);
    int ok = 0;
    for (allowed_t *a = allowed; a && !ok; a = a->next) ok = a->pid == pid;
    pthread_mutex_unlock(&offers_mu);
    return ok;
}

mpccl_status_t mpccl_fdpass_allow(pid_t pid)
{
    pthread_mutex_lock(&offers_mu);
    allowed_t *a = allowed;
    while (a && a->pid != pid) a = a->next;
    if (a == NULL && (a = calloc(1, sizeof(*a))) != NULL) {
        a->pid = pid;
        a->next = allowed;
        allowed = a;
    }
    if (a) a->refs++;
    pthread_mutex_unlock(&offers_mu);
    return a ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "fd server: out of memory allowing process %d", (int)pid);
}

void mpccl_fdpass_forget(pid_t pid)
{
    pthread_mutex_lock(&offers_mu);
    for (allowed_t **pp = &allowed; *pp; pp = &(*pp)->next) {
        if ((*pp)->pid != pid) continue;
        allowed_t *a = *pp;
        if (--a->refs == 0) {
            *pp = a->next;
            free(a);
        }
        break;
    }
    pthread_mutex_unlock(&offers_mu);
}

void mpccl_fdpass_serve_connection(int c)
{
    /* Who it is comes from the kernel, before a byte is read: a stranger is
     * answered at once and costs nothing. */
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || !mpccl_fdpass_peer_allowed(cred.pid, cred.uid)) {
        reply_t r = {REPLY_DENIED, 0};
        (void)send_msg(c, &r, sizeof(r), NULL, 0, -1);
        mpccl_stranger_note("fd server", "a process that is not a peer of this process's communicators");
        return;
    }
    set_timeout(c, FIRST_BYTES_S);
    request_t q;
    int fd;
    if (recv_head(c, &q, sizeof(q), &fd) != 0) return;
    set_timeout(c, 5);
    if (q.op == OP_CALL) {
        serve_call(c, &q, fd);
        return;
    }
    if (fd >= 0) close(fd);
    if (mpccl_fdpass_request_ok(&q, sizeof(q))) serve_fetch(c, q.key);
    else {
        reply_t r = {REPLY_DENIED, 0};
        (void)send_msg(c, &r, sizeof(r), NULL, 0, -1);
    }
}

static void *serve_thread(void *arg)
{
    int c = (int)(intptr_t)arg;
    mpccl_fdpass_serve_connection(c);
    close(c);
    pthread_mutex_lock(&offers_mu);
    serving--;
    pthread_mutex_unlock(&offers_mu);
    return NULL;
}

/* Each connection on a thread of its own, so a slow peer holds up nobody. */
static void serve_concurrently(int c)
{
    pthread_mutex_lock(&offers_mu);
    int busy = serving >= MAX_SERVING;
    if (!busy) serving++;
    pthread_mutex_unlock(&offers_mu);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int e = busy ? EAGAIN : pthread_create(&t, &attr, serve_thread, (void *)(intptr_t)c);
    pthread_attr_destroy(&attr);
    if (e == 0) return;
    if (!busy) {
        pthread_mutex_lock(&offers_mu);
        serving--;
        pthread_mutex_unlock(&offers_mu);
    }
    /* No thread to spare: serve it here, after the credential check that costs
     * a stranger nothing (an admitted peer answers within FIRST_BYTES_S). */
    mpccl_fdpass_serve_connection(c);
    close(c);
}

static void *server_main(void *arg)
{
    int s = (int)(intptr_t)arg;
    int pause_ms = 0;
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The connection stays queued: back off instead of spinning. */
                pause_ms = pause_ms ? (pause_ms < 500 ? 2 * pause_ms : 1000) : 50;
                mpccl_stranger_note("fd server", "out of file descriptors or memory: accepting paused");
                struct timespec ts = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000};
                nanosleep(&ts, NULL);
                continue;
            }
            MPCCL_WARN(MPCCL_SUB_P2P, "fd server: accept failed (%s); peers can no longer map this process's "
                       "ncclMemAlloc memory", strerror(errno));
            return NULL;
        }
        pause_ms = 0;
        serve_concurrently(c);
    }
}

/* Called with offers_mu held. */
static mpccl_status_t start_server(void)
{
    if (server_fd >= 0 && server_pid == getpid()) return MPCCL_OK;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return mpccl_fail(MPCCL_ERR_SYSTEM, "fd server: socket: %s", strerror(errno));
    struct sockaddr_un a;
    char name[64];
    socklen_t alen = socket_name(getpid(), mpccl_fdpass_tag(), &a, name, sizeof(name));
    if (bind(s, (struct sockaddr *)&a, alen) != 0 || listen(s, 128) != 0) {
        int e = errno;
        close(s);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "fd server: cannot listen on the abstract socket %s: %s", name,
                          strerror(e));
    }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &attr, server_main, (void *)(intptr_t)s);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        close(s);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "fd server: pthread_create: %s", strerror(e));
    }
    server_fd = s;
    server_pid = getpid();
    return MPCCL_OK;
}

mpccl_status_t mpccl_fdpass_offer(uint64_t key, int fd)
{
    offer_t *o = calloc(1, sizeof(*o));
    if (o == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "fd offer: out of memory");
    o->key = key;
    o->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (o->fd < 0) {
        free(o);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "fd offer: dup: %s", strerror(errno));
    }
    pthread_mutex_lock(&offers_mu);
    mpccl_status_t st = start_server();
    if (st == MPCCL_OK) {
        o->next = offers;
        offers = o;
    }
    pthread_mutex_unlock(&offers_mu);
    if (st != MPCCL_OK) {
        close(o->fd);
        free(o);
    }
    return st;
}

void mpccl_fdpass_withdraw(uint64_t key)
{
    pthread_mutex_lock(&offers_mu);
    for (offer_t **pp = &offers; *pp; pp = &(*pp)->next) {
        if ((*pp)->key != key) continue;
        offer_t *o = *pp;
        *pp = o->next;
        close(o->fd);
        free(o);
        break;
    }
    pthread_mutex_unlock(&offers_mu);
}

/* Connects to server (owner, t); *s = -1 on failure (an error is set). */
static mpccl_status_t connect_to(pid_t owner, uint32_t t, int *s)
{
    *s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*s < 0) return mpccl_fail(MPCCL_ERR_SYSTEM, "fd server client: socket: %s", strerror(errno));
    set_timeout(*s, 30);
    struct sockaddr_un a;
    char name[64];
    socklen_t alen = socket_name(owner, t, &a, name, sizeof(name));
    if (connect(*s, (struct sockaddr *)&a, alen) == 0) return MPCCL_OK;
    int e = errno;
    close(*s);
    *s = -1;
    return mpccl_fail(MPCCL_ERR_SYSTEM,
                      "cannot reach process %d's fd server (abstract socket %s: %s); processes that "
                      "share GPU memory must run on one host in one network namespace",
                      (int)owner, name, strerror(e));
}

static const char *reply_text(int32_t code)
{
    return code == REPLY_DENIED ? "refused: this process is not a peer of the owner's communicators (another user, "
                                  "or outside the job), or nothing is offered under that key (freed or deregistered?)"
           : code == REPLY_NO_HANDLER ? "the process serves no calls"
                                      : "reply without a descriptor";
}

mpccl_status_t mpccl_fdpass_fetch(pid_t owner, uint32_t t, uint64_t key, int *fd)
{
    *fd = -1;
    int s;
    MPCCL_CHECK(connect_to(owner, t, &s));
    mpccl_status_t st = MPCCL_OK;
    request_t q = {OP_FETCH, 0, key};
    reply_t r = {-1, 0};
    /* A refused process is answered before it has written: read the answer
     * even when the request found the connection closed. */
    int sent = send_msg(s, &q, sizeof(q), NULL, 0, -1) == 0, e = errno;
    if (recv_head(s, &r, sizeof(r), fd) != 0 && !sent) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "fd fetch from process %d: send: %s", (int)owner, strerror(e));
    } else if (r.code != REPLY_OK || *fd < 0) {
        if (*fd >= 0) close(*fd);
        *fd = -1;
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "fd fetch from process %d (key 0x%llx): %s", (int)owner,
                        (unsigned long long)key, r.code == -1 ? "no reply" : reply_text(r.code));
    }
    close(s);
    return st;
}

mpccl_status_t mpccl_fdpass_serve(mpccl_fdpass_handler_t h)
{
    pthread_mutex_lock(&offers_mu);
    handler = h;
    mpccl_status_t st = start_server();
    pthread_mutex_unlock(&offers_mu);
    return st;
}

mpccl_status_t mpccl_fdpass_call(pid_t owner, uint32_t t, const void *req, uint32_t len, int fd, void *reply, uint32_t *reply_len,
                                 int32_t *code, const char *what)
{
    *reply_len = 0;
    *code = -1;
    if (len > MPCCL_FDPASS_MAX_MSG)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "%s: request of %u bytes (at most %d)", what, len, MPCCL_FDPASS_MAX_MSG);
    int s;
    MPCCL_CHECK(connect_to(owner, t, &s));
    mpccl_status_t st = MPCCL_OK;
    request_t q = {OP_CALL, len, 0};
    reply_t r = {-1, 0};
    int rfd = -1;
    int sent = send_msg(s, &q, sizeof(q), req, len, fd) == 0, e = errno;
    int head = recv_head(s, &r, sizeof(r), &rfd) == 0;
    if (!head && !sent) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "%s: sending to process %d: %s", what, (int)owner, strerror(e));
    } else if (!head || r.len > MPCCL_FDPASS_MAX_MSG || recv_body(s, reply, r.len) != 0) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "%s: no reply from process %d", what, (int)owner);
    } else if (r.code == REPLY_DENIED || r.code == REPLY_NO_HANDLER) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "%s: process %d: %s", what, (int)owner, reply_text(r.code));
    } else {
        *code = r.code;
        *reply_len = r.len;
    }
    if (rfd >= 0) close(rfd);
    close(s);
    return st;
}
