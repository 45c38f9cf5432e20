/* Socket bootstrap (ncclGetUniqueId / NCCL_COMM_ID): every rank tells the root
 * where it listens, the root answers with the address of the rank's ring
 * successor, and the ranks then talk only over the ring.  The root sends O(1)
 * data per rank, so it scales with the number of ranks. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/bootstrap_gate.h"
#include "bootstrap/bootstrap_root.h"
#include "util/config.h"
#include "util/log.h"
#include "util/stranger_log.h"
#include "bootstrap/bootstrap_net.h"

_Static_assert(sizeof(mpccl_socket_id_t) <= 128, "the socket id must fit ncclUniqueId");
_Static_assert(sizeof(mpccl_sockaddr_t) <= sizeof(((mpccl_socket_id_t *)0)->addr),
               "a socket address must fit the id");

/* Refusals from a unique id's root mean it is gone (it listens before the id
 * exists: timed out, formed its communicator, or withdrawn by a failed
 * ncclCommShrink), so they are retried only briefly; a survivor handed the id
 * just before a withdrawal must fail well within the shrink's bound.  With
 * MPCCL_COMM_ID rank 0 may just not have started yet. */
#define MPCCL_REFUSED_RETRY_S 1
/* The ranks wait for the root's answer a little longer than the root waits for
 * them, so that they hear its diagnosis rather than a bare timeout. */
#define MPCCL_ROOT_REPLY_SLACK_MS 5000

typedef struct {
    int next_fd, prev_fd;
    mpccl_gate_key_t key;
    uint32_t seq;   /* collectives so far: detects ranks calling different ones */
    int broken;     /* an earlier collective failed: the ring is out of step */
    char next_str[MPCCL_SOCKADDR_STRLEN], prev_str[MPCCL_SOCKADDR_STRLEN];
} sock_bs_t;

static mpccl_status_t random_magic(uint64_t *out)
{
    uint64_t m = 0;
    MPCCL_CHECK(mpccl_random_bytes(&m, sizeof(m)));
    if (m == 0 || m == MPCCL_COMM_ID_MAGIC) m ^= 0x9e3779b97f4a7c15ull;
    *out = m;
    return MPCCL_OK;
}

/* The gate key of an id: its random secret, or with MPCCL_COMM_ID the job's
 * MPCCL_COMM_SECRET (NCCL_SOCKET_MAGIC), which every rank reads itself. */
static void id_key(const mpccl_socket_id_t *id, mpccl_gate_key_t *key)
{
    if (id->magic != MPCCL_COMM_ID_MAGIC) {
        unsigned char s[sizeof(id->magic) + sizeof(id->secret)];
        memcpy(s, &id->magic, sizeof(id->magic));
        memcpy(s + sizeof(id->magic), id->secret, sizeof(id->secret));
        mpccl_gate_key_from(s, sizeof(s), key);
        return;
    }
    const char *secret = mpccl_config_str("COMM_SECRET");
    static int warned;
    if (secret == NULL && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        MPCCL_WARN(MPCCL_SUB_INIT | MPCCL_SUB_BOOT,
                   "bootstrap: MPCCL_COMM_ID (NCCL_COMM_ID) is set without MPCCL_COMM_SECRET (NCCL_SOCKET_MAGIC): "
                   "any process that reaches the root can join the communicator; give every rank the same secret");
    mpccl_gate_key_from(secret ? secret : "", secret ? strlen(secret) : 0, key);
}

static void fill_id(void *id128, uint64_t magic, const unsigned char *secret, const mpccl_sockaddr_t *addr)
{
    mpccl_socket_id_t id;
    memset(&id, 0, sizeof(id));
    id.magic = magic;
    if (secret) memcpy(id.secret, secret, sizeof(id.secret));
    id.version = MPCCL_SOCKET_ID_VERSION;
    id.addrlen = mpccl_sockaddr_len(addr);
    memcpy(id.addr, addr, sizeof(*addr));
    memset(id128, 0, 128);
    memcpy(id128, &id, sizeof(id));
}

mpccl_status_t mpccl_socket_get_unique_id(void *id128)
{
    if (id128 == NULL) return mpccl_fail(MPCCL_ERR_ARG, "unique id pointer is NULL");
    mpccl_sockaddr_t addr, bound;
    const char *env = mpccl_comm_id_setting();
    if (env) {
        MPCCL_CHECK(mpccl_sockaddr_parse(env, &addr));
        MPCCL_INFO(MPCCL_SUB_INIT | MPCCL_SUB_BOOT,
                   "bootstrap: MPCCL_COMM_ID=%s: rank 0 will start the root there", env);
        fill_id(id128, MPCCL_COMM_ID_MAGIC, NULL, &addr);
        return MPCCL_OK;
    }
    mpccl_socket_id_t id;
    mpccl_gate_key_t key;
    char ifname[32];
    memset(&id, 0, sizeof(id));
    MPCCL_CHECK(random_magic(&id.magic));
    MPCCL_CHECK(mpccl_random_bytes(id.secret, sizeof(id.secret)));
    id_key(&id, &key);
    MPCCL_CHECK(mpccl_socket_find_interface(&addr, ifname, sizeof(ifname)));
    MPCCL_CHECK(mpccl_bootstrap_root_start(&addr, &key, &bound));
    fill_id(id128, id.magic, id.secret, &bound);
    return MPCCL_OK;
}

static mpccl_status_t read_id(const void *id128, mpccl_socket_id_t *id, mpccl_sockaddr_t *root)
{
    memcpy(id, id128, sizeof(*id));
    memset(root, 0, sizeof(*root));
    memcpy(root, id->addr, sizeof(*root));
    if (id->version != MPCCL_SOCKET_ID_VERSION || id->addrlen == 0 ||
        id->addrlen != mpccl_sockaddr_len(root))
        return mpccl_fail(MPCCL_ERR_ARG,
                          "invalid unique id (version %u, address length %u): it was not made "
                          "by ncclGetUniqueId of this library, or it was corrupted in transit",
                          id->version, id->addrlen);
    return MPCCL_OK;
}

/* Connects to `to` and passes its gate with body.  A listener that dropped
 * the connection before its verdict (this process was slow to answer, on a
 * loaded machine) is tried again until deadline.  A connect failure returns
 * MPCCL_ERR_REMOTE with *connect_errno set and nothing logged: the caller
 * knows what it means. */
static mpccl_status_t connect_through_gate(const mpccl_sockaddr_t *to, const mpccl_gate_key_t *key,
                                           const char *label, const void *body, size_t len, int64_t deadline,
                                           int64_t refused_deadline, const char *what, int *fd, int *connect_errno)
{
    *connect_errno = 0;
    for (;;) {
        int e = mpccl_socket_connect(to, deadline, refused_deadline, fd);
        if (e) {
            *connect_errno = e;
            return MPCCL_ERR_REMOTE;
        }
        int refused = 0, closed = 0;
        mpccl_status_t st = mpccl_gate_enter(*fd, key, label, body, len, deadline, what, &refused, &closed);
        if (st == MPCCL_OK) return MPCCL_OK;
        mpccl_socket_close(fd);
        if (!closed || st == MPCCL_ERR_USAGE || mpccl_socket_now_ms() >= deadline) return st;
        struct timespec nap = {0, 20 * 1000000};
        nanosleep(&nap, NULL);
    }
}

/* Connects to the root, introduces this rank, and returns the successor's address. */
static mpccl_status_t meet_root(const mpccl_socket_id_t *id, const mpccl_sockaddr_t *root,
                                int rank, int nranks, const mpccl_sockaddr_t *my_addr,
                                mpccl_sockaddr_t *next)
{
    int timeout_s = mpccl_bootstrap_timeout_s(), fd = -1;
    int env_id = id->magic == MPCCL_COMM_ID_MAGIC;
    int64_t now = mpccl_socket_now_ms(), deadline = now + (int64_t)timeout_s * 1000;
    int refused_s = env_id || timeout_s < MPCCL_REFUSED_RETRY_S ? timeout_s : MPCCL_REFUSED_RETRY_S;
    char rs[MPCCL_SOCKADDR_STRLEN], what[256];
    mpccl_sockaddr_str(root, rs);
    mpccl_root_hello_t h;
    memset(&h, 0, sizeof(h));
    h.version = MPCCL_SOCKET_ID_VERSION;
    h.rank = rank;
    h.nranks = nranks;
    h.listen_addr = *my_addr;
    mpccl_gate_key_t key;
    id_key(id, &key);
    snprintf(what, sizeof(what), "rank %d's hello to the bootstrap root at %s", rank, rs);
    int e = 0;
    mpccl_status_t st = connect_through_gate(root, &key, MPCCL_GATE_LABEL_ROOT, &h, sizeof(h), deadline,
                                             now + (int64_t)refused_s * 1000, what, &fd, &e);
    if (st != MPCCL_OK && e == 0) return st;
    if (e == ECANCELED) {
        snprintf(what, sizeof(what), "rank %d: connecting to the bootstrap root at %s", rank, rs);
        return mpccl_bootstrap_fail_cancelled(what);
    }
    if (e == ECONNREFUSED && env_id)
        return mpccl_fail(MPCCL_ERR_REMOTE,
                          "no bootstrap root listening at %s (MPCCL_COMM_ID) within %d s: rank 0 "
                          "did not start it, or it already formed its communicator",
                          rs, refused_s);
    if (e == ECONNREFUSED)
        return mpccl_fail(MPCCL_ERR_REMOTE,
                          "no bootstrap root listening at %s (connection refused for %d s): the "
                          "unique id was already used, its root timed out, or its process exited",
                          rs, refused_s);
    if (e)
        return mpccl_fail(MPCCL_ERR_REMOTE, "cannot connect to the bootstrap root at %s: %s", rs,
                          strerror(e));

    mpccl_root_reply_t rep;
    /* The root answers once all ranks arrived, at most its timeout after the first. */
    deadline = mpccl_socket_now_ms() + (int64_t)timeout_s * 1000 + MPCCL_ROOT_REPLY_SLACK_MS;
    snprintf(what, sizeof(what), "rank %d waiting for the other ranks at the bootstrap root %s",
             rank, rs);
    MPCCL_CHECK_GOTO(mpccl_socket_recv_all(fd, &rep, sizeof(rep), deadline, what), st, out);
    size_t n = 0;
    int kind = mpccl_root_reply_parse(&rep, &n);
    if (kind == 1) {
        char msg[MPCCL_ROOT_MSG_MAX + 1];
        MPCCL_CHECK_GOTO(mpccl_socket_recv_all(fd, msg, n, deadline, what), st, out);
        msg[n] = '\0';
        st = mpccl_fail(MPCCL_ERR_REMOTE, "bootstrap root at %s failed rank %d of %d: %s", rs,
                        rank, nranks, msg);
        goto out;
    }
    if (kind != 0) {
        st = mpccl_fail(MPCCL_ERR_REMOTE, "bootstrap root at %s sent a malformed answer (status %d, %u bytes)",
                        rs, rep.status, rep.len);
        goto out;
    }
    st = mpccl_socket_recv_all(fd, next, sizeof(*next), deadline, what);
out:
    mpccl_socket_close(&fd);
    return st;
}

mpccl_status_t mpccl_socket_withdraw_unique_id(const void *id128)
{
    mpccl_socket_id_t id;
    mpccl_sockaddr_t root;
    mpccl_gate_key_t key;
    MPCCL_CHECK(read_id(id128, &id, &root));
    id_key(&id, &key);
    mpccl_root_hello_t h;
    memset(&h, 0, sizeof(h));
    h.version = MPCCL_SOCKET_ID_VERSION;
    h.rank = MPCCL_ROOT_WITHDRAW;
    int64_t now = mpccl_socket_now_ms();
    int fd = -1, e = 0;
    mpccl_status_t st = connect_through_gate(&root, &key, MPCCL_GATE_LABEL_ROOT, &h, sizeof(h), now + 2000, now,
                                             "withdrawing a unique id at its root", &fd, &e);
    if (e) return mpccl_fail(MPCCL_ERR_REMOTE, "withdrawing a unique id: its root does not answer (%s)", strerror(e));
    mpccl_socket_close(&fd);
    return st;
}

/* rank+1's gate: connects (again, when the gate dropped a slow answer) and
 * starts the way through it. */
static mpccl_status_t ring_connect(sock_bs_t *s, const mpccl_sockaddr_t *next, int rank, int n, int64_t deadline,
                                   int64_t refused_deadline, mpccl_gate_entry_t *entry)
{
    char what[256];
    int e = mpccl_socket_connect(next, deadline, refused_deadline, &s->next_fd);
    if (e == ECANCELED) {
        snprintf(what, sizeof(what), "bootstrap rank %d: connecting to rank %d at %s", rank, n, s->next_str);
        return mpccl_bootstrap_fail_cancelled(what);
    }
    if (e)
        return mpccl_fail(MPCCL_ERR_REMOTE, "bootstrap rank %d: cannot connect to rank %d at %s: %s", rank, n,
                          s->next_str, strerror(e));
    mpccl_ring_hello_t h = {.rank = rank, .reserved = 0};
    mpccl_gate_entry_init(entry, s->next_fd, &s->key, MPCCL_GATE_LABEL_RING, &h, sizeof(h));
    return MPCCL_OK;
}

/* Passes rank+1's gate while serving this rank's own: each rank of the ring
 * does both at once, so neither can wait for the other.  Only the
 * predecessor that proves the secret is taken; strangers are closed. */
static mpccl_status_t form_ring(sock_bs_t *s, int listen_fd, int rank, int nranks,
                                const mpccl_sockaddr_t *next)
{
    int timeout_s = mpccl_bootstrap_timeout_s();
    int64_t now = mpccl_socket_now_ms(), deadline = now + (int64_t)timeout_s * 1000;
    int n = (rank + 1) % nranks, p = (rank + nranks - 1) % nranks;
    char what[256], gate_what[96];
    mpccl_sockaddr_str(next, s->next_str);
    /* rank+1 listened before it met the root, so a refusal means it is gone. */
    int refused_s = timeout_s < MPCCL_REFUSED_RETRY_S ? timeout_s : MPCCL_REFUSED_RETRY_S;
    int64_t refused_deadline = now + (int64_t)refused_s * 1000;
    mpccl_gate_entry_t entry;
    MPCCL_CHECK(ring_connect(s, next, rank, n, deadline, refused_deadline, &entry));
    snprintf(what, sizeof(what), "rank %d's ring hello to rank %d at %s", rank, n, s->next_str);
    snprintf(gate_what, sizeof(gate_what), "bootstrap rank %d's ring listener", rank);
    mpccl_gate_t gate;
    mpccl_gate_init(&gate, listen_fd, &s->key, MPCCL_GATE_LABEL_RING, sizeof(mpccl_ring_hello_t), gate_what);
    mpccl_status_t st = MPCCL_OK;
    int in = 0;
    while (!in || s->prev_fd < 0) {
        if (mpccl_bootstrap_cancelled()) {
            st = mpccl_bootstrap_fail_cancelled(what);
            break;
        }
        now = mpccl_socket_now_ms();
        if (now >= deadline) {
            st = mpccl_fail(MPCCL_ERR_REMOTE, "timed out after %d s (MPCCL_BOOTSTRAP_TIMEOUT) during %s",
                            timeout_s, in ? gate_what : what);
            if (in) mpccl_fail(MPCCL_ERR_REMOTE, "bootstrap rank %d: timed out after %d s (MPCCL_BOOTSTRAP_TIMEOUT) "
                               "waiting for rank %d's ring connection", rank, timeout_s, p);
            break;
        }
        if (!in) {
            int refused = 0, closed = 0, r = mpccl_gate_entry_step(&entry, what, &refused, &closed);
            if (r > 0) {
                in = 1;
            } else if (r < 0 && closed) { /* dropped while this process was slow: again */
                mpccl_socket_close(&s->next_fd);
                if ((st = ring_connect(s, next, rank, n, deadline, refused_deadline, &entry)) != MPCCL_OK) break;
            } else if (r < 0) {
                st = MPCCL_ERR_REMOTE;
                break;
            }
        }
        int64_t slice = now + 100 < deadline ? now + 100 : deadline; /* re-check the abort flags */
        if (s->prev_fd < 0) {
            gate.wake_fd = in ? -1 : s->next_fd;
            int c = -1;
            mpccl_ring_hello_t h;
            if (!mpccl_gate_next(&gate, slice, &c, &h)) continue;
            if (mpccl_ring_hello_ok(&h, sizeof(h), p)) {
                s->prev_fd = c;
            } else {
                mpccl_stranger_note(gate_what, "a rank of this job that is not this rank's predecessor");
                close(c);
            }
        } else if (!in) {
            struct pollfd pf = {.fd = s->next_fd, .events = mpccl_gate_entry_events(&entry)};
            (void)poll(&pf, 1, (int)(slice - now));
        }
    }
    mpccl_gate_close(&gate);
    if (st != MPCCL_OK) return st;
    mpccl_sockaddr_t pa;
    socklen_t len = sizeof(pa);
    memset(&pa, 0, sizeof(pa));
    if (getpeername(s->prev_fd, &pa.sa, &len) == 0) mpccl_sockaddr_str(&pa, s->prev_str);
    else snprintf(s->prev_str, sizeof(s->prev_str), "?");
    return MPCCL_OK;
}

static mpccl_status_t sock_allgather(mpccl_bootstrap_t *bs, void *buf, size_t bytes)
{
    sock_bs_t *s = bs->impl;
    int rank = bs->rank, n = bs->nranks;
    if (n == 1) return MPCCL_OK;
    if (s->broken)
        return mpccl_fail(MPCCL_ERR_REMOTE,
                          "bootstrap rank %d: unusable after an earlier failed collective", rank);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    int64_t step_ms = (int64_t)mpccl_bootstrap_timeout_s() * 1000;
    char what[384];
    mpccl_status_t st;
    mpccl_coll_hdr_t mine = {.tag = MPCCL_COLL_TAG, .seq = s->seq++, .bytes = bytes}, theirs;
    snprintf(what, sizeof(what),
             "bootstrap allgather #%u on rank %d (to rank %d at %s, from rank %d at %s)", mine.seq,
             rank, next, s->next_str, prev, s->prev_str);
    s->broken = 1; /* until proven otherwise */
    MPCCL_CHECK(mpccl_socket_sendrecv(s->next_fd, &mine, sizeof(mine), s->prev_fd, &theirs,
                                      sizeof(theirs), mpccl_socket_now_ms() + step_ms, what));
    if (!mpccl_coll_hdr_ok(&theirs, sizeof(theirs), mine.seq, mine.bytes))
        return mpccl_fail(MPCCL_ERR_USAGE,
                          "bootstrap collectives out of step: rank %d is in collective #%u with "
                          "%zu bytes per rank, rank %d in #%u with %llu bytes",
                          rank, mine.seq, bytes, prev, theirs.seq,
                          (unsigned long long)theirs.bytes);
    /* Step k forwards the slot that arrived in step k-1: each slot travels n-1 hops. */
    for (int k = 0; k < n - 1 && bytes > 0; k++) {
        int sslot = (rank - k + n) % n, rslot = (rank - k - 1 + n) % n;
        st = mpccl_socket_sendrecv(s->next_fd, (char *)buf + (size_t)sslot * bytes, bytes,
                                   s->prev_fd, (char *)buf + (size_t)rslot * bytes, bytes,
                                   mpccl_socket_now_ms() + step_ms, what);
        if (st != MPCCL_OK) return st;
    }
    s->broken = 0;
    return MPCCL_OK;
}

static mpccl_status_t sock_barrier(mpccl_bootstrap_t *bs)
{
    /* After n-1 ring steps every rank has heard (transitively) from every other. */
    char *tmp = calloc((size_t)bs->nranks, 1);
    if (tmp == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory in bootstrap barrier");
    mpccl_status_t st = sock_allgather(bs, tmp, 1);
    free(tmp);
    return st;
}

static void sock_close(mpccl_bootstrap_t *bs)
{
    sock_bs_t *s = bs->impl;
    if (s) {
        mpccl_socket_close(&s->next_fd);
        mpccl_socket_close(&s->prev_fd);
        free(s);
    }
    bs->impl = NULL;
    bs->ops = NULL;
}

static const struct mpccl_bootstrap_ops sock_ops = {
    .allgather = sock_allgather, .barrier = sock_barrier, .close = sock_close};

mpccl_status_t mpccl_socket_bootstrap_create(const void *id128, int rank, int nranks,
                                             mpccl_bootstrap_t *out)
{
    if (id128 == NULL || out == NULL)
        return mpccl_fail(MPCCL_ERR_ARG, "socket bootstrap: NULL %s", id128 ? "output" : "id");
    if (nranks < 1 || nranks > MPCCL_BOOTSTRAP_MAX_RANKS || rank < 0 || rank >= nranks)
        return mpccl_fail(MPCCL_ERR_ARG, "socket bootstrap: rank %d / nranks %d, expected "
                                         "0 <= rank < nranks <= %d",
                          rank, nranks, MPCCL_BOOTSTRAP_MAX_RANKS);
    mpccl_socket_id_t id;
    mpccl_sockaddr_t root, my_addr, next;
    MPCCL_CHECK(read_id(id128, &id, &root));
    int64_t t0 = mpccl_socket_now_ms();
    sock_bs_t *s = calloc(1, sizeof(*s));
    if (s == NULL) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the socket bootstrap");
    s->next_fd = s->prev_fd = -1;
    id_key(&id, &s->key);
    int listen_fd = -1;
    mpccl_status_t st = MPCCL_OK;
    memset(&my_addr, 0, sizeof(my_addr));
    if (nranks > 1) {
        char ifname[32];
        mpccl_sockaddr_t local;
        MPCCL_CHECK_GOTO(mpccl_socket_find_interface(&local, ifname, sizeof(ifname)), st, fail);
        MPCCL_CHECK_GOTO(mpccl_socket_listen(&local, &listen_fd, &my_addr), st, fail);
    }
    if (id.magic == MPCCL_COMM_ID_MAGIC && rank == 0) {
        mpccl_sockaddr_t bound;
        MPCCL_CHECK_GOTO(mpccl_bootstrap_root_start(&root, &s->key, &bound), st, fail);
    }
    MPCCL_CHECK_GOTO(meet_root(&id, &root, rank, nranks, &my_addr, &next), st, fail);
    if (nranks > 1) MPCCL_CHECK_GOTO(form_ring(s, listen_fd, rank, nranks, &next), st, fail);
    mpccl_socket_close(&listen_fd);
    out->rank = rank;
    out->nranks = nranks;
    out->ops = &sock_ops;
    out->impl = s;
    MPCCL_INFO(MPCCL_SUB_INIT | MPCCL_SUB_BOOT,
               "bootstrap: rank %d of %d connected (next %s, prev %s) in %lld ms", rank, nranks,
               nranks > 1 ? s->next_str : "-", nranks > 1 ? s->prev_str : "-",
               (long long)(mpccl_socket_now_ms() - t0));
    return MPCCL_OK;
fail:
    mpccl_socket_close(&listen_fd);
    mpccl_socket_close(&s->next_fd);
    mpccl_socket_close(&s->prev_fd);
    free(s);
    return st;
}
