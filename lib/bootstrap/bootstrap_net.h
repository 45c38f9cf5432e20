/* TCP helpers for the socket bootstrap: addresses, interface selection, and
 * connect/accept/send/recv that always end by a deadline (poll, never a bare
 * blocking call), survive EINTR and partial transfers, and never raise SIGPIPE. */
#ifndef MPCCL_SOCKET_H
#define MPCCL_SOCKET_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "util/status.h"

typedef union mpccl_sockaddr {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
} mpccl_sockaddr_t;

#define MPCCL_SOCKADDR_STRLEN 80 /* "[v6 address%scope]:port" fits */

/* sizeof the family's sockaddr; 0 for an unknown family. */
socklen_t mpccl_sockaddr_len(const mpccl_sockaddr_t *a);
uint16_t mpccl_sockaddr_port(const mpccl_sockaddr_t *a); /* host order */
/* "1.2.3.4:5" or "[::1]:5" into buf (MPCCL_SOCKADDR_STRLEN); returns buf. */
const char *mpccl_sockaddr_str(const mpccl_sockaddr_t *a, char *buf);
/* "host:port" or "[ipv6]:port" (host may be a name); MPCCL_ERR_ARG when malformed. */
mpccl_status_t mpccl_sockaddr_parse(const char *str, mpccl_sockaddr_t *out);

/* ---- settings read by the bootstrap ---- */
int mpccl_bootstrap_timeout_s(void);       /* MPCCL_BOOTSTRAP_TIMEOUT, default 120 */
const char *mpccl_socket_ifname_setting(void); /* MPCCL/NCCL_SOCKET_IFNAME or NULL */
const char *mpccl_comm_id_setting(void);   /* MPCCL/NCCL_COMM_ID or NULL */

/* ---- interface selection ---- */
typedef struct mpccl_ifcand {
    char name[32];
    int loopback;
    mpccl_sockaddr_t addr;
} mpccl_ifcand_t;

/* NCCL_SOCKET_IFNAME syntax: comma-separated prefixes; a leading '^' makes the
 * list an exclusion list, a following '=' makes the names exact.  Returns 1 when
 * ifname is selected by spec. */
int mpccl_socket_ifname_match(const char *spec, const char *ifname);
/* The candidate to use.  Automatic order: the first ib*, else the first other
 * non-loopback interface but docker* and virbr*, else those, else loopback.  A
 * spec listing names picks the first candidate it selects; an exclusion spec
 * ('^...') removes candidates from the automatic order.  -1 when none fits. */
int mpccl_socket_pick_interface(const mpccl_ifcand_t *cands, int n, const char *spec);
/* Lists the up IPv4/IPv6 (not link-local) interfaces and picks one as above from
 * MPCCL_SOCKET_IFNAME; fills its address (port 0) and name. */
mpccl_status_t mpccl_socket_find_interface(mpccl_sockaddr_t *addr, char *name, size_t namelen);

/* ---- sockets ---- */
int64_t mpccl_socket_now_ms(void); /* CLOCK_MONOTONIC */

/* A non-blocking, close-on-exec listener (SO_REUSEADDR) bound to addr (port 0:
 * any); *bound receives the address peers connect to. */
mpccl_status_t mpccl_socket_listen(const mpccl_sockaddr_t *addr, int *fd,
                                   mpccl_sockaddr_t *bound);
/* Ports that listeners of this thread bound to port 0 must not take (n <= 0 or
 * NULL: none; the array must outlive the setting).  A shrink passes its
 * parent's doors: a door whose process died frees its port, and a new listener
 * there would answer the knocks that are to find that death. */
void mpccl_socket_avoid_ports(const uint16_t *ports, int n);
/* Connects, retrying with backoff while nothing listens yet, until deadline_ms;
 * connection refusals are retried only until refused_deadline_ms (both are
 * mpccl_socket_now_ms() times).  Returns 0 with *fd set,
 * or the errno of the last failure (ETIMEDOUT at the deadline, ECONNREFUSED when
 * refused for too long); the caller describes the failure. */
int mpccl_socket_connect(const mpccl_sockaddr_t *addr, int64_t deadline_ms,
                         int64_t refused_deadline_ms, int *fd);
/* Accepts one connection by deadline_ms; `what` names it in the error message. */
mpccl_status_t mpccl_socket_accept(int listen_fd, int64_t deadline_ms, const char *what, int *fd);
/* Sends sn bytes on sfd while receiving rn bytes on rfd, both progressing at once
 * so that a ring of peers doing the same cannot deadlock on full socket buffers.
 * Either side may be empty (fd -1 or length 0).  A closed peer or the deadline
 * fail with MPCCL_ERR_REMOTE naming `what`. */
mpccl_status_t mpccl_socket_sendrecv(int sfd, const void *sbuf, size_t sn, int rfd, void *rbuf,
                                     size_t rn, int64_t deadline_ms, const char *what);
static inline mpccl_status_t mpccl_socket_send_all(int fd, const void *buf, size_t n,
                                                   int64_t deadline_ms, const char *what)
{
    return mpccl_socket_sendrecv(fd, buf, n, -1, NULL, 0, deadline_ms, what);
}
static inline mpccl_status_t mpccl_socket_recv_all(int fd, void *buf, size_t n,
                                                   int64_t deadline_ms, const char *what)
{
    return mpccl_socket_sendrecv(-1, NULL, 0, fd, buf, n, deadline_ms, what);
}
/* Closes *fd if open and sets it to -1. */
void mpccl_socket_close(int *fd);

#endif
