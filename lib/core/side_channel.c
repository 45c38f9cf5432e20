/* The side channel (side_channel.h): the process's answering thread, and the
 * requests a rank makes of its peers' threads. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/comm_fail.h"
#include "core/side_channel.h"
#include "util/clock.h"
#include "util/log.h"

#define SIDE_MAGIC 0x5349444543484e4cULL /* "SIDECHNL" */
#define SIDE_FIRST_MS 1000               /* a new connection's first request arrives within this */
#define SIDE_ANSWER_MS 1000              /* an answer leaves within this */
#define SIDE_BODY_MAX (64 * 1024)
#define SIDE_REPORT_MAX MPCCL_SIDE_REPORT_MAX

enum { SIDE_RECORD = 1, SIDE_REPORT = 2, SIDE_CHECK = 3, SIDE_GONE = 4 };

typedef struct side_hdr {
    uint64_t magic;   /* SIDE_MAGIC ^ the communicator's id */
    uint64_t comm_id;
    int32_t to, from; /* ranks in that communicator */
    uint32_t type, len;
    uint32_t kind;    /* SIDE_CHECK: the caller's kind and sequence */
    uint32_t pad;
    uint64_t seq;
} side_hdr_t;

typedef struct inbox_msg {
    int from;
    uint32_t kind;
    uint64_t seq;
    size_t len;
    void *data;
    struct inbox_msg *next;
} inbox_msg_t;

/* Per communicator (comm->side). */
struct mpccl_side_comm {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    inbox_msg_t *inbox;
    char *report;     /* the last hang report, or NULL */
    int *push_fd;     /* nranks: connections to peers' threads, -1: none yet */
};

typedef struct reg {
    struct ncclComm *comm;
    uint64_t id;
    int rank;
    int busy; /* a dump or a watch's act is running on it */
} reg_t;

typedef struct client {
    int fd;
    int authed;
    int64_t deadline_ms; /* before authentication */
    size_t have;
    side_hdr_t hdr;
    unsigned char *body;
} client_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static reg_t *regs;
static int nreg, capreg;
static int listen_fd = -1, wake_fd = -1;
static mpccl_sockaddr_t bound;
static int started;
static pid_t owner_pid;
static volatile sig_atomic_t dump_asked;
static void (*dump_fn)(struct ncclComm *comm);
static int (*watch_due)(struct ncclComm *comm);
static void (*watch_act)(struct ncclComm *comm);
#define WATCH_EVERY_MS 1000

static struct ncclComm *find_locked(uint64_t id, int rank)
{
    for (int i = 0; i < nreg; i++)
        if (regs[i].id == id && regs[i].rank == rank) return regs[i].comm;
    return NULL;
}

void mpccl_side_record_of(struct ncclComm *comm, mpccl_side_record_t *out)
{
    mpccl_progress_t p;
    mpccl_progress_read(&comm->progress, &p);
    memset(out, 0, sizeof(*out));
    out->rank = comm->rank;
    out->pid = (int32_t)getpid();
    out->state = p.state;
    out->ncoll = p.ncoll;
    out->np2p = p.np2p;
    out->cur = p.cur;
    out->coll = p.coll;
    out->done = p.done;
    if (p.state == MPCCL_PROGRESS_RUNNING && p.wait_since > 0) out->wait_s = mpccl_now_seconds() - p.wait_since;
    struct mpccl_side_comm *s = comm->side;
    if (s) {
        pthread_mutex_lock(&s->mu);
        out->has_report = s->report != NULL;
        pthread_mutex_unlock(&s->mu);
    }
    if (comm->exec && comm->exec_ready) comm->exec->describe(comm, out->kernel, sizeof(out->kernel));
}

/* ---- the answering thread ---- */

static void drop(client_t *c)
{
    if (c->fd >= 0) close(c->fd);
    free(c->body);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

static void answer(client_t *c, uint32_t type, const void *body, size_t len)
{
    if (c->fd < 0) return;
    side_hdr_t h = c->hdr;
    h.type = type;
    h.len = (uint32_t)len;
    int64_t dl = mpccl_socket_now_ms() + SIDE_ANSWER_MS;
    if (mpccl_socket_send_all(c->fd, &h, sizeof(h), dl, "side channel answer") != MPCCL_OK ||
        (len && mpccl_socket_send_all(c->fd, body, len, dl, "side channel answer") != MPCCL_OK))
        drop(c);
}

static void deliver(struct ncclComm *comm, const side_hdr_t *h, unsigned char *body)
{
    struct mpccl_side_comm *s = comm->side;
    inbox_msg_t *m = calloc(1, sizeof(*m));
    if (!m || !s) {
        free(m);
        free(body);
        return;
    }
    *m = (inbox_msg_t){.from = h->from, .kind = h->kind, .seq = h->seq, .len = h->len, .data = body};
    pthread_mutex_lock(&s->mu);
    m->next = s->inbox;
    s->inbox = m;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* One complete request from c. */
static void serve(client_t *c)
{
    side_hdr_t h = c->hdr;
    unsigned char *body = c->body;
    c->body = NULL;
    c->have = 0;
    pthread_mutex_lock(&mu);
    int well_formed = h.magic == (SIDE_MAGIC ^ h.comm_id);
    struct ncclComm *comm = well_formed ? find_locked(h.comm_id, h.to) : NULL;
    if (!comm) {
        pthread_mutex_unlock(&mu);
        free(body);
        /* A communicator this process left (destroyed, aborted): said so to
         * a question, so that a report tells it from an unreachable rank. */
        if (well_formed && (h.type == SIDE_RECORD || h.type == SIDE_REPORT)) answer(c, SIDE_GONE, NULL, 0);
        drop(c); /* a stranger, or a communicator gone */
        return;
    }
    c->authed = 1;
    if (h.type == SIDE_CHECK) {
        deliver(comm, &h, body);
        pthread_mutex_unlock(&mu);
        return;
    }
    free(body);
    if (h.type == SIDE_RECORD) {
        mpccl_side_record_t r;
        mpccl_side_record_of(comm, &r);
        pthread_mutex_unlock(&mu);
        answer(c, SIDE_RECORD, &r, sizeof(r));
        return;
    }
    char *text = NULL;
    if (h.type == SIDE_REPORT && comm->side) {
        pthread_mutex_lock(&comm->side->mu);
        if (comm->side->report) text = strdup(comm->side->report);
        pthread_mutex_unlock(&comm->side->mu);
    }
    pthread_mutex_unlock(&mu);
    answer(c, SIDE_REPORT, text ? text : "", text ? strlen(text) + 1 : 0);
    free(text);
}

/* Receives into dst up to n bytes: 1 when some came, 0 when none is there
 * yet, -1 when the connection ended (dropped). */
static int take_bytes(client_t *c, void *dst, size_t n)
{
    ssize_t r = recv(c->fd, dst, n, 0);
    if (r > 0) {
        c->have += (size_t)r;
        return 1;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    drop(c);
    return -1;
}

/* Reads what c has; serves each complete request. */
static void readable(client_t *c)
{
    for (;;) {
        if (c->have < sizeof(side_hdr_t)) {
            if (take_bytes(c, (char *)&c->hdr + c->have, sizeof(side_hdr_t) - c->have) <= 0) return;
            continue;
        }
        if (c->hdr.len > SIDE_BODY_MAX) {
            drop(c);
            return;
        }
        if (c->hdr.len > 0 && !c->body && !(c->body = malloc(c->hdr.len))) {
            drop(c);
            return;
        }
        size_t total = sizeof(side_hdr_t) + c->hdr.len;
        if (c->have < total) {
            if (take_bytes(c, c->body + (c->have - sizeof(side_hdr_t)), total - c->have) <= 0) return;
            continue;
        }
        serve(c);
        if (c->fd < 0) return;
    }
}

/* fn run on each communicator of list (n of them, each held busy, list
 * malloc'd) by a short-lived thread, which then lets them go. */
typedef struct run_args {
    void (*fn)(struct ncclComm *comm);
    struct ncclComm **list;
    int n;
} run_args_t;

static void *run_main(void *arg)
{
    run_args_t *a = arg;
    for (int i = 0; i < a->n && a->fn; i++) a->fn(a->list[i]);
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nreg; i++)
        for (int k = 0; k < a->n; k++)
            if (regs[i].comm == a->list[k] && regs[i].busy > 0) {
                regs[i].busy--;
                break;
            }
    pthread_cond_broadcast(&idle_cv);
    pthread_mutex_unlock(&mu);
    free(a->list);
    free(a);
    return NULL;
}

/* Called with mu held: marks the n registrations listed in idx busy and
 * starts fn on their communicators; what says what for a warning. */
static void start_run_locked(void (*fn)(struct ncclComm *comm), const int *idx, int n, const char *what)
{
    run_args_t *a = calloc(1, sizeof(*a));
    struct ncclComm **list = calloc((size_t)(n ? n : 1), sizeof(*list));
    if (!a || !list) {
        free(a), free(list);
        MPCCL_WARN(MPCCL_SUB_INIT, "%s: out of memory for the hang report", what);
        return;
    }
    for (int i = 0; i < n; i++) list[i] = regs[idx[i]].comm;
    *a = (run_args_t){.fn = fn, .list = list, .n = n};
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, run_main, a) != 0) {
        MPCCL_WARN(MPCCL_SUB_INIT, "%s: no thread for the hang report", what);
        free(list), free(a);
    } else {
        for (int i = 0; i < n; i++) regs[idx[i]].busy++;
    }
    pthread_attr_destroy(&attr);
}

/* SIGUSR2: dump_fn on every registered communicator. */
static void start_dump(void)
{
    pthread_mutex_lock(&mu);
    int *idx = calloc((size_t)(nreg ? nreg : 1), sizeof(*idx));
    if (idx && dump_fn) {
        for (int i = 0; i < nreg; i++) idx[i] = i;
        start_run_locked(dump_fn, idx, nreg, "SIGUSR2");
    }
    pthread_mutex_unlock(&mu);
    free(idx);
}

/* The watch's look at every registered communicator. */
static void watch_tick(void)
{
    pthread_mutex_lock(&mu);
    int *idx = watch_due && watch_act ? calloc((size_t)(nreg ? nreg : 1), sizeof(*idx)) : NULL;
    int n = 0;
    for (int i = 0; idx && i < nreg; i++)
        if (!regs[i].busy && watch_due(regs[i].comm)) idx[n++] = i;
    if (n) start_run_locked(watch_act, idx, n, "stall watch");
    pthread_mutex_unlock(&mu);
    free(idx);
}

static void *server_main(void *arg)
{
    (void)arg;
    client_t *cl = NULL;
    int ncl = 0;
    struct pollfd *pfd = NULL;
    int64_t next_watch = mpccl_socket_now_ms() + WATCH_EVERY_MS;
    for (;;) {
        struct pollfd *np = realloc(pfd, sizeof(*pfd) * (size_t)(ncl + 2));
        if (!np) {
            sleep(1);
            continue;
        }
        pfd = np;
        pfd[0] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
        int64_t now = mpccl_socket_now_ms(), next = -1;
        for (int i = 0; i < ncl; i++) {
            pfd[i + 2] = (struct pollfd){.fd = cl[i].fd, .events = POLLIN};
            if (!cl[i].authed && cl[i].fd >= 0) {
                int64_t left = cl[i].deadline_ms - now;
                if (left < 0) left = 0;
                if (next < 0 || left < next) next = left;
            }
        }
        if (__atomic_load_n(&watch_due, __ATOMIC_ACQUIRE)) {
            int64_t left = next_watch > now ? next_watch - now : 0;
            if (next < 0 || left < next) next = left;
        }
        int r = poll(pfd, (nfds_t)(ncl + 2), (int)next);
        if (r < 0 && errno != EINTR) sleep(1);
        if (r > 0 && (pfd[0].revents & POLLIN)) {
            uint64_t v;
            if (read(wake_fd, &v, sizeof(v)) < 0) { /* drained already */
            }
            if (dump_asked) {
                dump_asked = 0;
                start_dump();
            }
        }
        for (int i = 0; r > 0 && i < ncl; i++)
            if (cl[i].fd >= 0 && (pfd[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) readable(&cl[i]);
        if (r > 0 && (pfd[1].revents & POLLIN)) {
            int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                client_t *nc = realloc(cl, sizeof(*cl) * (size_t)(ncl + 1));
                if (nc) {
                    cl = nc;
                    cl[ncl++] = (client_t){.fd = fd, .deadline_ms = mpccl_socket_now_ms() + SIDE_FIRST_MS};
                } else {
                    close(fd);
                }
            }
        }
        now = mpccl_socket_now_ms();
        if (__atomic_load_n(&watch_due, __ATOMIC_ACQUIRE) && now >= next_watch) {
            watch_tick();
            next_watch = now + WATCH_EVERY_MS;
        }
        int j = 0;
        for (int i = 0; i < ncl; i++) {
            if (cl[i].fd >= 0 && !cl[i].authed && now >= cl[i].deadline_ms) drop(&cl[i]);
            if (cl[i].fd >= 0) cl[j++] = cl[i];
        }
        ncl = j;
    }
    return NULL;
}

static void on_sigusr2(int sig)
{
    (void)sig;
    int saved = errno;
    dump_asked = 1;
    uint64_t one = 1;
    if (wake_fd >= 0 && write(wake_fd, &one, sizeof(one)) < 0) { /* already awake */
    }
    errno = saved;
}

static void before_fork(void) { pthread_mutex_lock(&mu); }
static void after_fork(void) { pthread_mutex_unlock(&mu); }
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(before_fork, after_fork, after_fork); }

/* Called with mu held. */
static mpccl_status_t start_locked(void)
{
    if (started && owner_pid == getpid()) return MPCCL_OK;
    if (started) { /* a forked child: the parent's thread and communicators are not its own */
        mpccl_socket_close(&listen_fd);
        if (wake_fd >= 0) close(wake_fd);
        wake_fd = -1;
        nreg = 0;
        started = 0;
    }
    mpccl_sockaddr_t where;
    char ifname[32];
    mpccl_status_t st = mpccl_socket_find_interface(&where, ifname, sizeof(ifname));
    if (st == MPCCL_OK) st = mpccl_socket_listen(&where, &listen_fd, &bound);
    if (st != MPCCL_OK) return st;
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) {
        mpccl_socket_close(&listen_fd);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "side channel: eventfd: %s", strerror(errno));
    }
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no signal meant for the application */
    int e = pthread_create(&th, &attr, server_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        mpccl_socket_close(&listen_fd);
        close(wake_fd);
        wake_fd = -1;
        return mpccl_fail(MPCCL_ERR_SYSTEM, "side channel: pthread_create: %s", strerror(e));
    }
    /* SIGUSR2 asks for a report, unless the application has its own use for it. */
    struct sigaction old_sa, sa;
    if (sigaction(SIGUSR2, NULL, &old_sa) == 0 && old_sa.sa_handler == SIG_DFL && !(old_sa.sa_flags & SA_SIGINFO)) {
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_sigusr2;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR2, &sa, NULL);
    }
    started = 1;
    owner_pid = getpid();
    return MPCCL_OK;
}

mpccl_status_t mpccl_side_register(struct ncclComm *comm, mpccl_sockaddr_t *addr)
{
    memset(addr, 0, sizeof(*addr));
    struct mpccl_side_comm *s = calloc(1, sizeof(*s));
    int *fds = calloc((size_t)comm->nranks, sizeof(int));
    if (!s || !fds) {
        free(s);
        free(fds);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the side channel of %d ranks", comm->nranks);
    }
    for (int r = 0; r < comm->nranks; r++) fds[r] = -1;
    s->push_fd = fds;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&mu);
    mpccl_status_t st = start_locked();
    if (st != MPCCL_OK) {
        /* No listener: this rank answers nobody, and its peers say so. */
        MPCCL_INFO(MPCCL_SUB_INIT, "side channel: none (%s); peers will report this rank as not answering",
                   mpccl_last_error());
        st = MPCCL_OK;
    } else {
        *addr = bound;
    }
    if (nreg == capreg) {
        int ncap = capreg ? 2 * capreg : 16;
        reg_t *nr = realloc(regs, sizeof(*regs) * (size_t)ncap);
        if (nr) regs = nr, capreg = ncap;
    }
    if (nreg < capreg) {
        comm->side = s;
        regs[nreg++] = (reg_t){.comm = comm, .id = comm->id, .rank = comm->rank};
    } else {
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory registering a communicator with the side channel");
    }
    pthread_mutex_unlock(&mu);
    if (!comm->side) {
        free(fds);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
    }
    return st;
}

void mpccl_side_unregister(struct ncclComm *comm)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nreg; i++) {
        if (regs[i].comm != comm) continue;
        while (regs[i].busy) pthread_cond_wait(&idle_cv, &mu);
        regs[i] = regs[--nreg];
        break;
    }
    struct mpccl_side_comm *s = comm->side;
    comm->side = NULL;
    pthread_mutex_unlock(&mu);
    if (!s) return;
    for (inbox_msg_t *m = s->inbox, *n; m; m = n) {
        n = m->next;
        free(m->data);
        free(m);
    }
    for (int r = 0; r < comm->nranks; r++)
        if (s->push_fd[r] >= 0) close(s->push_fd[r]);
    free(s->push_fd);
    free(s->report);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

void mpccl_side_set_report(struct ncclComm *comm, const char *text)
{
    struct mpccl_side_comm *s = comm->side;
    if (!s) return;
    size_t n = strlen(text);
    if (n >= SIDE_REPORT_MAX) n = SIDE_REPORT_MAX - 1; /* what a peer takes */
    char *copy = strndup(text, n);
    pthread_mutex_lock(&s->mu);
    free(s->report);
    s->report = copy;
    pthread_mutex_unlock(&s->mu);
}

void mpccl_side_set_dump(void (*dump)(struct ncclComm *comm))
{
    pthread_mutex_lock(&mu);
    dump_fn = dump;
    pthread_mutex_unlock(&mu);
}

void mpccl_side_set_watch(int (*due)(struct ncclComm *comm), void (*act)(struct ncclComm *comm))
{
    pthread_mutex_lock(&mu);
    watch_act = act;
    __atomic_store_n(&watch_due, due, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
}

/* ---- requests to peers ---- */

/* Whether rank lives in this process (its record is read directly). */
static struct ncclComm *local_peer(struct ncclComm *comm, int rank)
{
    const mpccl_peer_info_t *p = mpccl_comm_peer_info(comm, rank);
    if (rank == comm->rank) return comm;
    if (!p || p->pid != (int32_t)getpid() || p->machine != mpccl_comm_peer_info(comm, comm->rank)->machine) return NULL;
    pthread_mutex_lock(&mu);
    struct ncclComm *c = find_locked(comm->id, rank);
    pthread_mutex_unlock(&mu);
    return c;
}

typedef struct query {
    int rank, fd;
    int phase; /* 0 connecting, 1 sending, 2 reading, 3 done, 4 failed */
    side_hdr_t out, in;
    size_t moved;
    void *body;
    size_t body_max;
} query_t;

static void query_start(struct ncclComm *comm, query_t *q, uint32_t type)
{
    q->fd = -1;
    q->phase = 4;
    const mpccl_peer_info_t *p = mpccl_comm_peer_info(comm, q->rank);
    if (!p || mpccl_sockaddr_len(&p->side) == 0) return;
    q->out = (side_hdr_t){.magic = SIDE_MAGIC ^ comm->id, .comm_id = comm->id, .to = q->rank, .from = comm->rank,
                          .type = type};
    q->fd = socket(p->side.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (q->fd < 0) return;
    int r = connect(q->fd, &p->side.sa, mpccl_sockaddr_len(&p->side));
    if (r == 0) q->phase = 1;
    else if (errno == EINPROGRESS) q->phase = 0;
    else mpccl_socket_close(&q->fd);
}

/* One step of q after poll said it is ready. */
static void query_step(query_t *q, short revents)
{
    if (revents & (POLLERR | POLLNVAL)) goto fail;
    if (q->phase == 0) {
        int err = 0;
        socklen_t l = sizeof(err);
        if (getsockopt(q->fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err != 0) goto fail;
        q->phase = 1;
    }
    if (q->phase == 1) {
        ssize_t w = send(q->fd, (char *)&q->out + q->moved, sizeof(q->out) - q->moved, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR) goto fail;
        if (w > 0) q->moved += (size_t)w;
        if (q->moved == sizeof(q->out)) q->phase = 2, q->moved = 0;
        return;
    }
    if (q->phase == 2) {
        size_t want = sizeof(q->in) + (q->moved >= sizeof(q->in) ? q->in.len : 0);
        void *dst = q->moved < sizeof(q->in) ? (char *)&q->in + q->moved
                                             : (char *)q->body + (q->moved - sizeof(q->in));
        if (q->moved >= sizeof(q->in) && q->in.len > q->body_max) goto fail;
        ssize_t r = recv(q->fd, dst, want - q->moved, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) goto fail;
        if (r > 0) q->moved += (size_t)r;
        if (q->moved == sizeof(q->in) && q->in.len == 0) q->phase = 3;
        else if (q->moved > sizeof(q->in) && q->moved == sizeof(q->in) + q->in.len) q->phase = 3;
        if (q->phase == 3) mpccl_socket_close(&q->fd);
    }
    return;
fail:
    mpccl_socket_close(&q->fd);
    q->phase = 4;
}

/* Runs the queries qs[0..n) to completion or deadline_ms. */
static void run_queries(query_t *qs, int n, int64_t deadline_ms)
{
    struct pollfd *pfd = calloc((size_t)(n ? n : 1), sizeof(*pfd));
    int *idx = calloc((size_t)(n ? n : 1), sizeof(int));
    for (;;) {
        int m = 0;
        for (int i = 0; pfd && idx && i < n; i++) {
            if (qs[i].phase >= 3) continue;
            idx[m] = i;
            pfd[m++] = (struct pollfd){.fd = qs[i].fd, .events = qs[i].phase == 2 ? POLLIN : POLLOUT};
        }
        int64_t left = deadline_ms - mpccl_socket_now_ms();
        if (m == 0 || left <= 0) break;
        int r = poll(pfd, (nfds_t)m, (int)left);
        if (r < 0 && errno != EINTR) break;
        for (int k = 0; r > 0 && k < m; k++)
            if (pfd[k].revents) query_step(&qs[idx[k]], pfd[k].revents);
    }
    for (int i = 0; i < n; i++) {
        mpccl_socket_close(&qs[i].fd);
        if (qs[i].phase != 3) qs[i].phase = 4;
    }
    free(pfd);
    free(idx);
}

#define QUERY_BATCH 256 /* connections open at once */

void mpccl_side_fetch_records(struct ncclComm *comm, mpccl_side_record_t *recs, unsigned char *got,
                              int64_t deadline_ms)
{
    int n = comm->nranks;
    memset(got, 0, (size_t)n);
    memset(recs, 0, sizeof(*recs) * (size_t)n);
    query_t *qs = calloc(QUERY_BATCH, sizeof(*qs));
    int nq = 0;
    for (int r = 0; r <= n; r++) {
        if (r < n) {
            struct ncclComm *local = local_peer(comm, r);
            if (local) {
                mpccl_side_record_of(local, &recs[r]);
                got[r] = MPCCL_SIDE_GOT;
                continue;
            }
            if (!qs) continue;
            qs[nq] = (query_t){.rank = r, .body = &recs[r], .body_max = sizeof(recs[r])};
            query_start(comm, &qs[nq], SIDE_RECORD);
            nq++;
        }
        if (qs && nq > 0 && (nq == QUERY_BATCH || r == n)) {
            run_queries(qs, nq, deadline_ms);
            for (int i = 0; i < nq; i++) {
                if (qs[i].phase != 3) continue;
                if (qs[i].in.type == SIDE_RECORD && qs[i].in.len == sizeof(mpccl_side_record_t))
                    got[qs[i].rank] = MPCCL_SIDE_GOT;
                else if (qs[i].in.type == SIDE_GONE)
                    got[qs[i].rank] = MPCCL_SIDE_GONE;
            }
            nq = 0;
        }
    }
    free(qs);
}

mpccl_status_t mpccl_side_fetch_report(struct ncclComm *comm, int rank, char *buf, size_t len, int64_t deadline_ms)
{
    buf[0] = '\0';
    struct ncclComm *local = local_peer(comm, rank);
    if (local) {
        int found = 0;
        if (local->side) {
            pthread_mutex_lock(&local->side->mu);
            if (local->side->report) snprintf(buf, len, "%s", local->side->report), found = 1;
            pthread_mutex_unlock(&local->side->mu);
        }
        return found ? MPCCL_OK : MPCCL_ERR_REMOTE;
    }
    query_t q = {.rank = rank, .body = buf, .body_max = len - 1};
    query_start(comm, &q, SIDE_REPORT);
    run_queries(&q, 1, deadline_ms);
    if (q.phase != 3 || q.in.len == 0) return MPCCL_ERR_REMOTE;
    buf[q.in.len < len ? q.in.len : len - 1] = '\0';
    return MPCCL_OK;
}

/* ---- check mode's messages ---- */

mpccl_status_t mpccl_side_push(struct ncclComm *comm, int peer, uint32_t kind, uint64_t seq, const void *data,
                               size_t len)
{
    struct mpccl_side_comm *s = comm->side;
    if (!s) return mpccl_fail(MPCCL_ERR_INTERNAL, "side channel: comm 0x%llx is not registered",
                              (unsigned long long)comm->id);
    side_hdr_t h = {.magic = SIDE_MAGIC ^ comm->id, .comm_id = comm->id, .to = peer, .from = comm->rank,
                    .type = SIDE_CHECK, .len = (uint32_t)len, .kind = kind, .seq = seq};
    struct ncclComm *local = local_peer(comm, peer);
    if (local) {
        void *copy = malloc(len ? len : 1);
        if (!copy) return mpccl_fail(MPCCL_ERR_SYSTEM, "side channel: out of memory for %zu bytes", len);
        memcpy(copy, data, len);
        pthread_mutex_lock(&mu);
        if (find_locked(comm->id, peer) == local) deliver(local, &h, copy);
        else free(copy);
        pthread_mutex_unlock(&mu);
        return MPCCL_OK;
    }
    const mpccl_peer_info_t *p = mpccl_comm_peer_info(comm, peer);
    if (!p || mpccl_sockaddr_len(&p->side) == 0)
        return mpccl_fail(MPCCL_ERR_REMOTE, "check mode: rank %d has no side channel to receive rank %d's call",
                          peer, comm->rank);
    int64_t now = mpccl_socket_now_ms();
    if (s->push_fd[peer] < 0) {
        int e = mpccl_socket_connect(&p->side, now + 5000, now + 2000, &s->push_fd[peer]);
        if (e != 0)
            return mpccl_fail(MPCCL_ERR_REMOTE, "check mode: cannot reach rank %d (host %s, pid %d): %s", peer, p->host,
                              (int)p->pid, strerror(e));
        int one = 1; /* small messages, each awaited: no Nagle delay */
        setsockopt(s->push_fd[peer], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    /* One write per message: header and body leave in one segment. */
    unsigned char *msg = malloc(sizeof(h) + len);
    if (!msg) return mpccl_fail(MPCCL_ERR_SYSTEM, "side channel: out of memory for %zu bytes", sizeof(h) + len);
    memcpy(msg, &h, sizeof(h));
    if (len) memcpy(msg + sizeof(h), data, len);
    mpccl_status_t st = mpccl_socket_send_all(s->push_fd[peer], msg, sizeof(h) + len, now + 5000, "check mode message");
    free(msg);
    if (st != MPCCL_OK) mpccl_socket_close(&s->push_fd[peer]);
    return st;
}

mpccl_status_t mpccl_side_take(struct ncclComm *comm, int peer, uint32_t kind, uint64_t seq, void **data,
                               size_t *len, mpccl_status_t (*stop)(void *arg), void *arg)
{
    struct mpccl_side_comm *s = comm->side;
    *data = NULL;
    *len = 0;
    if (!s) return mpccl_fail(MPCCL_ERR_INTERNAL, "side channel: comm 0x%llx is not registered",
                              (unsigned long long)comm->id);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        for (inbox_msg_t **pm = &s->inbox; *pm; pm = &(*pm)->next) {
            inbox_msg_t *m = *pm;
            if (m->from != peer || m->kind != kind || m->seq != seq) continue;
            *pm = m->next;
            pthread_mutex_unlock(&s->mu);
            *data = m->data;
            *len = m->len;
            free(m);
            return MPCCL_OK;
        }
        pthread_mutex_unlock(&s->mu);
        mpccl_status_t st = stop(arg);
        if (st != MPCCL_OK) return st;
        pthread_mutex_lock(&s->mu);
        /* Sleep until a message comes, or a few milliseconds to look at stop(). */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 5 * 1000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
}
