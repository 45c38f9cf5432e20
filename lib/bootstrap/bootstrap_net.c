/* TCP helpers for the socket bootstrap (see bootstrap_net.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/config.h"
#include "util/log.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/bootstrap_net.h"

/* ---- settings ---- */

int mpccl_bootstrap_timeout_s(void)
{
    int64_t v = mpccl_config_int("BOOTSTRAP_TIMEOUT");
    if (v < 1) return 120;         /* no "wait forever": a bootstrap must never hang */
    if (v > 7 * 86400) return 7 * 86400; /* keeps deadlines in ms far from overflow */
    return (int)v;
}

const char *mpccl_socket_ifname_setting(void) { return mpccl_config_str("SOCKET_IFNAME"); }
const char *mpccl_comm_id_setting(void) { return mpccl_config_str("COMM_ID"); }

/* ---- addresses ---- */

socklen_t mpccl_sockaddr_len(const mpccl_sockaddr_t *a)
{
    switch (a->sa.sa_family) {
    case AF_INET: return sizeof(struct sockaddr_in);
    case AF_INET6: return sizeof(struct sockaddr_in6);
    default: return 0;
    }
}

const char *mpccl_sockaddr_str(const mpccl_sockaddr_t *a, char *buf)
{
    char host[INET6_ADDRSTRLEN];
    if (a->sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &a->in.sin_addr, host, sizeof(host));
        snprintf(buf, MPCCL_SOCKADDR_STRLEN, "%s:%u", host, ntohs(a->in.sin_port));
    } else if (a->sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &a->in6.sin6_addr, host, sizeof(host));
        if (a->in6.sin6_scope_id)
            snprintf(buf, MPCCL_SOCKADDR_STRLEN, "[%s%%%u]:%u", host, a->in6.sin6_scope_id,
                     ntohs(a->in6.sin6_port));
        else
            snprintf(buf, MPCCL_SOCKADDR_STRLEN, "[%s]:%u", host, ntohs(a->in6.sin6_port));
    } else {
        snprintf(buf, MPCCL_SOCKADDR_STRLEN, "<address family %d>", a->sa.sa_family);
    }
    return buf;
}

mpccl_status_t mpccl_sockaddr_parse(const char *str, mpccl_sockaddr_t *out)
{
    char host[256];
    const char *port;
    int v6 = 0;
    if (str == NULL || *str == '\0')
        return mpccl_fail(MPCCL_ERR_ARG, "empty socket address, expected host:port or [ipv6]:port");
    if (str[0] == '[') {
        const char *close = strchr(str, ']');
        if (close == NULL || close[1] != ':' || (size_t)(close - str - 1) >= sizeof(host))
            return mpccl_fail(MPCCL_ERR_ARG, "socket address '%s': expected [ipv6]:port", str);
        memcpy(host, str + 1, (size_t)(close - str - 1));
        host[close - str - 1] = '\0';
        port = close + 2;
        v6 = 1;
    } else {
        const char *colon = strrchr(str, ':');
        if (colon == NULL || colon != strchr(str, ':') || (size_t)(colon - str) >= sizeof(host))
            return mpccl_fail(MPCCL_ERR_ARG,
                              "socket address '%s': expected host:port (IPv6 as [addr]:port)", str);
        memcpy(host, str, (size_t)(colon - str));
        host[colon - str] = '\0';
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (*port == '\0' || *end != '\0' || p < 1 || p > 65535 || host[0] == '\0')
        return mpccl_fail(MPCCL_ERR_ARG, "socket address '%s': bad host or port (1..65535)", str);

    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = v6 ? AF_INET6 : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL)
        return mpccl_fail(MPCCL_ERR_ARG, "socket address '%s': cannot resolve '%s': %s", str, host,
                          gai_strerror(rc));
    /* Prefer IPv4 for names resolving to both, as the interface choice does. */
    struct addrinfo *pick = res;
    for (struct addrinfo *r = res; r; r = r->ai_next)
        if (r->ai_family == AF_INET) { pick = r; break; }
    memset(out, 0, sizeof(*out));
    memcpy(out, pick->ai_addr, pick->ai_addrlen < sizeof(*out) ? pick->ai_addrlen : sizeof(*out));
    freeaddrinfo(res);
    return MPCCL_OK;
}

/* ---- interface selection ---- */

int mpccl_socket_ifname_match(const char *spec, const char *ifname)
{
    while (*spec == ' ') spec++;
    int exclude = (*spec == '^');
    if (exclude) spec++;
    int exact = (*spec == '=');
    if (exact) spec++;
    int found = 0;
    while (*spec && !found) {
        const char *tok = spec, *comma = strchr(spec, ',');
        size_t len = comma ? (size_t)(comma - spec) : strlen(spec);
        spec = comma ? comma + 1 : spec + len;
        while (len && *tok == ' ') tok++, len--;
        while (len && tok[len - 1] == ' ') len--;
        if (len == 0) continue;
        found = exact ? (strlen(ifname) == len && !strncmp(ifname, tok, len))
                      : !strncmp(ifname, tok, len);
    }
    return exclude ? !found : found;
}

static int spec_empty(const char *spec)
{
    if (spec == NULL) return 1;
    while (*spec == ' ') spec++;
    return *spec == '\0';
}

/* Auto-selection classes, best first. */
static int if_class(const mpccl_ifcand_t *c)
{
    if (c->loopback) return 3;
    if (!strncmp(c->name, "ib", 2)) return 0;
    if (!strncmp(c->name, "docker", 6) || !strncmp(c->name, "virbr", 5)) return 2;
    return 1;
}

int mpccl_socket_pick_interface(const mpccl_ifcand_t *cands, int n, const char *spec)
{
    int filtered = !spec_empty(spec);
    const char *s = spec;
    while (filtered && *s == ' ') s++;
    if (filtered && *s != '^') { /* names the user listed: take them as listed */
        for (int i = 0; i < n; i++)
            if (mpccl_socket_ifname_match(spec, cands[i].name)) return i;
        return -1;
    }
    /* Exclusions only narrow the automatic choice ("^docker" must not pick lo). */
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (filtered && !mpccl_socket_ifname_match(spec, cands[i].name)) continue;
        if (best < 0 || if_class(&cands[i]) < if_class(&cands[best])) best = i;
    }
    return best;
}

#define MPCCL_MAX_IFCANDS 256

mpccl_status_t mpccl_socket_find_interface(mpccl_sockaddr_t *addr, char *name, size_t namelen)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "getifaddrs failed: %s", strerror(errno));
    mpccl_ifcand_t *cands = calloc(MPCCL_MAX_IFCANDS, sizeof(*cands));
    if (cands == NULL) {
        freeifaddrs(ifs);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory listing network interfaces");
    }
    int n = 0;
    /* getifaddrs lists IPv4 before IPv6 addresses, so "first match" prefers IPv4. */
    for (struct ifaddrs *i = ifs; i && n < MPCCL_MAX_IFCANDS; i = i->ifa_next) {
        if (i->ifa_addr == NULL || !(i->ifa_flags & IFF_UP)) continue;
        int fam = i->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        /* Link-local IPv6 needs a scope that means nothing on another host. */
        if (fam == AF_INET6 &&
            IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
            continue;
        snprintf(cands[n].name, sizeof(cands[n].name), "%s", i->ifa_name);
        cands[n].loopback = !!(i->ifa_flags & IFF_LOOPBACK);
        memcpy(&cands[n].addr, i->ifa_addr,
               fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
        n++;
    }
    freeifaddrs(ifs);
    const char *spec = mpccl_socket_ifname_setting();
    int k = mpccl_socket_pick_interface(cands, n, spec);
    if (k < 0) {
        char list[512] = "";
        size_t off = 0;
        for (int i = 0; i < n && off < sizeof(list) - 40; i++) {
            int seen = 0; /* an interface with IPv4 and IPv6 is listed once */
            for (int j = 0; j < i; j++) seen |= !strcmp(cands[j].name, cands[i].name);
            if (!seen)
                off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", off ? ", " : "",
                                        cands[i].name);
        }
        free(cands);
        return mpccl_fail(MPCCL_ERR_SYSTEM,
                          "no usable network interface for the bootstrap (MPCCL_SOCKET_IFNAME or "
                          "NCCL_SOCKET_IFNAME: '%s'); up interfaces: %s",
                          spec ? spec : "", n ? list : "none");
    }
    *addr = cands[k].addr;
    if (addr->sa.sa_family == AF_INET) addr->in.sin_port = 0;
    else addr->in6.sin6_port = 0;
    snprintf(name, namelen, "%s", cands[k].name);
    char s[MPCCL_SOCKADDR_STRLEN];
    mpccl_sockaddr_str(addr, s);
    *strrchr(s, ':') = '\0'; /* the port is not chosen yet */
    MPCCL_INFO(MPCCL_SUB_INIT | MPCCL_SUB_BOOT, "bootstrap: using interface %s, address %s%s%s",
               name, s, spec ? ", selected by SOCKET_IFNAME " : " (automatic choice)",
               spec ? spec : "");
    free(cands);
    return MPCCL_OK;
}

/* ---- sockets ---- */

int64_t mpccl_socket_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Flags that end this thread's waits (mpccl_bootstrap_set_cancel): a
 * communicator's aborting word, read between poll slices. */
static __thread const int *cancel_flags[2];
#define CANCEL_SLICE_MS 20

void mpccl_bootstrap_set_cancel(const int *flag, const int *flag2)
{
    cancel_flags[0] = flag;
    cancel_flags[1] = flag2;
}

/* A lost member (mpccl_bootstrap_set_watch): remembered once seen. */
static __thread int (*watch_lost)(void *arg);
static __thread void *watch_arg;
static __thread int lost_rank = -1;

void mpccl_bootstrap_set_watch(int (*lost)(void *arg), void *arg)
{
    watch_lost = lost;
    watch_arg = arg;
    lost_rank = -1;
}

int mpccl_bootstrap_cancelled(void)
{
    for (int i = 0; i < 2; i++)
        if (cancel_flags[i] && __atomic_load_n(cancel_flags[i], __ATOMIC_ACQUIRE)) return 1;
    static __thread int in_watch; /* the watch may itself connect (and ask) */
    if (watch_lost && lost_rank < 0 && !in_watch) {
        in_watch = 1;
        lost_rank = watch_lost(watch_arg);
        in_watch = 0;
    }
    return watch_lost && lost_rank >= 0;
}

static int poll_timeout(int64_t deadline_ms)
{
    int64_t left = deadline_ms - mpccl_socket_now_ms();
    if (left < 0) return 0;
    /* With a cancel flag or a watch, wake often enough to see it promptly. */
    if ((cancel_flags[0] || cancel_flags[1] || watch_lost) && left > CANCEL_SLICE_MS) return CANCEL_SLICE_MS;
    return left > 1000000 ? 1000000 : (int)left;
}

mpccl_status_t mpccl_bootstrap_fail_cancelled(const char *what)
{
    if (watch_lost && lost_rank >= 0)
        return mpccl_fail(MPCCL_ERR_REMOTE, "%s: given up, rank %d of the communicator being formed died", what,
                          lost_rank);
    return mpccl_fail(MPCCL_ERR_USAGE, "%s: given up, the communicator was aborted (ncclCommAbort)", what);
}

static mpccl_status_t fail_cancelled(const char *what) { return mpccl_bootstrap_fail_cancelled(what); }

static void set_nodelay(int fd)
{
    int one = 1;
    /* Bootstrap messages are small and latency-bound. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void mpccl_socket_close(int *fd)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static __thread const uint16_t *avoid_ports;
static __thread int n_avoid_ports;

void mpccl_socket_avoid_ports(const uint16_t *ports, int n)
{
    avoid_ports = n > 0 ? ports : NULL;
    n_avoid_ports = n > 0 ? n : 0;
}

uint16_t mpccl_sockaddr_port(const mpccl_sockaddr_t *a)
{
    return ntohs(a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in.sin_port);
}

static int port_avoided(const mpccl_sockaddr_t *a)
{
    for (int i = 0; i < n_avoid_ports; i++)
        if (avoid_ports[i] == mpccl_sockaddr_port(a)) return 1;
    return 0;
}

static mpccl_status_t listen_once(const mpccl_sockaddr_t *addr, int *fd, mpccl_sockaddr_t *bound);

mpccl_status_t mpccl_socket_listen(const mpccl_sockaddr_t *addr, int *fd, mpccl_sockaddr_t *bound)
{
    /* An avoided port stays held while the next is bound, so that the kernel
     * hands out another one. */
    int held[8], nheld = 0;
    mpccl_status_t st;
    for (;;) {
        st = listen_once(addr, fd, bound);
        if (st != MPCCL_OK || mpccl_sockaddr_port(addr) != 0 || !port_avoided(bound) || nheld == 8) break;
        held[nheld++] = *fd;
    }
    for (int i = 0; i < nheld; i++) close(held[i]);
    return st;
}

static mpccl_status_t listen_once(const mpccl_sockaddr_t *addr, int *fd, mpccl_sockaddr_t *bound)
{
    char s[MPCCL_SOCKADDR_STRLEN];
    int l = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l < 0)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "socket() for a listener at %s: %s",
                          mpccl_sockaddr_str(addr, s), strerror(errno));
    int one = 1;
    /* A fixed port (MPCCL_COMM_ID) must be reusable while old connections linger. */
    (void)setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(l, &addr->sa, mpccl_sockaddr_len(addr)) != 0 || listen(l, SOMAXCONN) != 0) {
        int e = errno;
        close(l);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "cannot listen at %s: %s", mpccl_sockaddr_str(addr, s),
                          strerror(e));
    }
    socklen_t len = sizeof(*bound);
    memset(bound, 0, sizeof(*bound));
    if (getsockname(l, &bound->sa, &len) != 0) {
        int e = errno;
        close(l);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "getsockname of listener: %s", strerror(e));
    }
    *fd = l;
    return MPCCL_OK;
}

static int retryable_connect_error(int e)
{
    return e == ECONNREFUSED || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH ||
           e == ECONNRESET || e == EAGAIN || e == EADDRNOTAVAIL || e == ECONNABORTED;
}

/* Retrying connects to a closed local port in the ephemeral range can make TCP
 * connect a socket to itself (simultaneous open); that is nobody listening. */
static int is_self_connection(int s)
{
    mpccl_sockaddr_t a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    if (getsockname(s, &a.sa, &la) != 0 || getpeername(s, &b.sa, &lb) != 0) return 0;
    return la == lb && !memcmp(&a, &b, la);
}

/* One attempt: 0 with *fd set, or an errno. */
static int connect_once(const mpccl_sockaddr_t *addr, int64_t deadline_ms, int *fd)
{
    int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    int err = 0;
    if (connect(s, &addr->sa, mpccl_sockaddr_len(addr)) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EINTR) {
            struct pollfd p = {.fd = s, .events = POLLOUT};
            int r;
            do r = poll(&p, 1, poll_timeout(deadline_ms));
            while ((r < 0 && errno == EINTR) ||
                   (r == 0 && !mpccl_bootstrap_cancelled() && mpccl_socket_now_ms() < deadline_ms));
            socklen_t len = sizeof(err);
            if (r == 0 && mpccl_bootstrap_cancelled()) err = ECANCELED;
            else if (r == 0) err = ETIMEDOUT;
            else if (r < 0) err = errno;
            else if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
    }
    if (err == 0 && is_self_connection(s)) err = ECONNREFUSED;
    if (err) {
        close(s);
        return err;
    }
    set_nodelay(s);
    *fd = s;
    return 0;
}

int mpccl_socket_connect(const mpccl_sockaddr_t *addr, int64_t deadline_ms,
                         int64_t refused_deadline_ms, int *fd)
{
    int64_t backoff = 5;
    int last = ETIMEDOUT;
    for (;;) {
        if (mpccl_bootstrap_cancelled()) return ECANCELED;
        int e = connect_once(addr, deadline_ms, fd);
        if (e == 0) return 0;
        if (!retryable_connect_error(e)) return e;
        if (!(e == ETIMEDOUT && last == ECONNREFUSED)) last = e;
        int64_t now = mpccl_socket_now_ms();
        if (now >= deadline_ms || (e == ECONNREFUSED && now >= refused_deadline_ms)) return last;
        int64_t nap = backoff < deadline_ms - now ? backoff : deadline_ms - now;
        struct timespec ts = {.tv_sec = nap / 1000, .tv_nsec = (nap % 1000) * 1000000};
        nanosleep(&ts, NULL);
        if (backoff < 500) backoff *= 2;
    }
}

mpccl_status_t mpccl_socket_accept(int listen_fd, int64_t deadline_ms, const char *what, int *fd)
{
    for (;;) {
        if (mpccl_bootstrap_cancelled()) return fail_cancelled(what);
        struct pollfd p = {.fd = listen_fd, .events = POLLIN};
        int r = poll(&p, 1, poll_timeout(deadline_ms));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return mpccl_fail(MPCCL_ERR_SYSTEM, "poll while accepting %s: %s", what,
                                     strerror(errno));
        if (r == 0 && mpccl_socket_now_ms() >= deadline_ms)
            return mpccl_fail(MPCCL_ERR_REMOTE,
                              "timed out after %d s (MPCCL_BOOTSTRAP_TIMEOUT) waiting for %s",
                              mpccl_bootstrap_timeout_s(), what);
        if (r == 0) continue;
        int s = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (s >= 0) {
            set_nodelay(s);
            *fd = s;
            return MPCCL_OK;
        }
        /* The connection may have gone between poll and accept: wait for the next. */
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED ||
            errno == EPROTO)
            continue;
        return mpccl_fail(MPCCL_ERR_SYSTEM, "accept while waiting for %s: %s", what,
                          strerror(errno));
    }
}

/* Moves bytes on one ready socket; returns 0, or an errno (EPIPE-like) / -1 for EOF. */
static int progress(int fd, int sending, char *buf, size_t n, size_t *done)
{
    while (*done < n) {
        ssize_t k = sending ? send(fd, buf + *done, n - *done, MSG_DONTWAIT | MSG_NOSIGNAL)
                            : recv(fd, buf + *done, n - *done, MSG_DONTWAIT);
        if (k > 0) {
            *done += (size_t)k;
            continue;
        }
        if (k == 0 && !sending) return -1;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        return k < 0 ? errno : EIO;
    }
    return 0;
}

mpccl_status_t mpccl_socket_sendrecv(int sfd, const void *sbuf, size_t sn, int rfd, void *rbuf,
                                     size_t rn, int64_t deadline_ms, const char *what)
{
    size_t sent = 0, got = 0;
    if (sfd < 0) sn = 0;
    if (rfd < 0) rn = 0;
    while (sent < sn || got < rn) {
        if (mpccl_bootstrap_cancelled()) return fail_cancelled(what);
        struct pollfd p[2];
        int np = 0, si = -1, ri = -1;
        if (sent < sn) {
            p[np] = (struct pollfd){.fd = sfd, .events = POLLOUT};
            si = np++;
        }
        if (got < rn) {
            if (si >= 0 && sfd == rfd) {
                p[si].events |= POLLIN;
                ri = si;
            } else {
                p[np] = (struct pollfd){.fd = rfd, .events = POLLIN};
                ri = np++;
            }
        }
        int r = poll(p, (nfds_t)np, poll_timeout(deadline_ms));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return mpccl_fail(MPCCL_ERR_SYSTEM, "poll during %s: %s", what, strerror(errno));
        if (r == 0) {
            if (mpccl_socket_now_ms() < deadline_ms) continue;
            return mpccl_fail(MPCCL_ERR_REMOTE,
                              "timed out after %d s (MPCCL_BOOTSTRAP_TIMEOUT) during %s "
                              "(sent %zu of %zu bytes, received %zu of %zu)",
                              mpccl_bootstrap_timeout_s(), what, sent, sn, got, rn);
        }
        /* On POLLERR/POLLHUP the send or recv itself reports what happened. */
        if (si >= 0 && p[si].revents && sent < sn) {
            int e = progress(sfd, 1, (char *)(uintptr_t)sbuf, sn, &sent);
            if (e)
                return mpccl_fail(MPCCL_ERR_REMOTE, "%s: send failed: %s (the peer exited?)",
                                  what, strerror(e));
        }
        if (ri >= 0 && p[ri].revents && got < rn) {
            int e = progress(rfd, 0, rbuf, rn, &got);
            if (e == -1)
                return mpccl_fail(MPCCL_ERR_REMOTE,
                                  "%s: the peer closed the connection after %zu of %zu bytes "
                                  "(it exited or failed)",
                                  what, got, rn);
            if (e)
                return mpccl_fail(MPCCL_ERR_REMOTE, "%s: recv failed: %s", what, strerror(e));
        }
    }
    return MPCCL_OK;
}
