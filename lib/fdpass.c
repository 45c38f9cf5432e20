/* Handing file descriptors to other processes of this host (see fdpass.h). */
#define _GNU_SOURCE
#include "fdpass.h"

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
#include <unistd.h>

#include "log.h"

typedef struct offer {
    struct offer *next;
    uint64_t key;
    int fd;
} offer_t;

static pthread_mutex_t offers_mu = PTHREAD_MUTEX_INITIALIZER;
static offer_t *offers;
static int server_fd = -1;
static pid_t server_pid; /* a forked child must start its own server */

enum { REPLY_OK = 0, REPLY_UNKNOWN = 1, REPLY_DENIED = 2 };

/* "\0mpccl-fd-<pid>": abstract, so nothing is left in the file system. */
static socklen_t socket_name(pid_t pid, struct sockaddr_un *a)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "mpccl-fd-%d", (int)pid);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void set_timeout(int s, int seconds)
{
    struct timeval tv = {seconds, 0};
    (void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int send_reply(int c, int32_t code, int fd)
{
    struct iovec iov = {&code, sizeof(code)};
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
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
    return sendmsg(c, &m, MSG_NOSIGNAL) == (ssize_t)sizeof(code) ? 0 : -1;
}

static void serve_one(int c)
{
    set_timeout(c, 5);
    uint64_t key;
    if (recv(c, &key, sizeof(key), MSG_WAITALL) != (ssize_t)sizeof(key)) return;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) {
        (void)send_reply(c, REPLY_DENIED, -1);
        return;
    }
    pthread_mutex_lock(&offers_mu);
    int fd = -1;
    for (offer_t *o = offers; o; o = o->next)
        if (o->key == key) fd = o->fd;
    /* Sent while holding the lock, so a withdraw cannot close fd meanwhile;
     * the kernel gives the peer its own descriptor. */
    (void)send_reply(c, fd >= 0 ? REPLY_OK : REPLY_UNKNOWN, fd);
    pthread_mutex_unlock(&offers_mu);
}

static void *server_main(void *arg)
{
    int s = (int)(intptr_t)arg;
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            MPCCL_WARN(MPCCL_SUB_P2P, "fd server: accept failed (%s); peers can no longer map this process's "
                       "ncclMemAlloc memory", strerror(errno));
            return NULL;
        }
        serve_one(c);
        close(c);
    }
}

/* Called with offers_mu held. */
static mpccl_status_t start_server(void)
{
    if (server_fd >= 0 && server_pid == getpid()) return MPCCL_OK;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return mpccl_fail(MPCCL_ERR_SYSTEM, "fd server: socket: %s", strerror(errno));
    struct sockaddr_un a;
    socklen_t alen = socket_name(getpid(), &a);
    if (bind(s, (struct sockaddr *)&a, alen) != 0 || listen(s, 128) != 0) {
        int e = errno;
        close(s);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "fd server: cannot listen on the abstract socket mpccl-fd-%d: %s",
                          (int)getpid(), strerror(e));
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

mpccl_status_t mpccl_fdpass_fetch(pid_t owner, uint64_t key, int *fd)
{
    *fd = -1;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return mpccl_fail(MPCCL_ERR_SYSTEM, "fd fetch: socket: %s", strerror(errno));
    set_timeout(s, 30);
    struct sockaddr_un a;
    socklen_t alen = socket_name(owner, &a);
    mpccl_status_t st = MPCCL_OK;
    if (connect(s, (struct sockaddr *)&a, alen) != 0) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM,
                        "cannot reach process %d's fd server (abstract socket mpccl-fd-%d: %s); processes that "
                        "share ncclMemAlloc memory must run on one host in one network namespace",
                        (int)owner, (int)owner, strerror(errno));
        goto out;
    }
    if (send(s, &key, sizeof(key), MSG_NOSIGNAL) != (ssize_t)sizeof(key)) {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "fd fetch from process %d: send: %s", (int)owner, strerror(errno));
        goto out;
    }
    int32_t code = -1;
    struct iovec iov = {&code, sizeof(code)};
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
    ssize_t n = recvmsg(s, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
    struct cmsghdr *h = n == (ssize_t)sizeof(code) ? CMSG_FIRSTHDR(&m) : NULL;
    if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(h), sizeof(int));
    if (code == REPLY_OK && *fd >= 0) goto out;
    if (*fd >= 0) close(*fd);
    *fd = -1;
    st = mpccl_fail(MPCCL_ERR_SYSTEM, "fd fetch from process %d (key 0x%llx): %s", (int)owner,
                    (unsigned long long)key,
                    n != (ssize_t)sizeof(code) ? "no reply"
                    : code == REPLY_UNKNOWN    ? "nothing offered under that key (freed or deregistered?)"
                    : code == REPLY_DENIED     ? "refused: the processes belong to different users"
                                               : "reply without a descriptor");
out:
    close(s);
    return st;
}
