/* The proxy threads (see proxy.h): one per lane, each serving the lane's
 * part of every attached communicator (proxy.c serves one communicator
 * per pass).  A thread starts with the first communicator of its lane and
 * stops with the last; while nothing it serves is in flight it sleeps
 * (proxy_wake.h). */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "proxy/proxy_impl.h"
#include "proxy/proxy_wake.h"

/* One lane's thread and the communicators it serves.  life serializes
 * starting and stopping the thread (never taken by the thread); lock guards
 * the list, the detach handshake and calls (held only briefly). */
typedef struct lane_thread {
    pthread_mutex_t life;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    mpccl_proxy_comm_t *list;
    unsigned gen; /* bumped on every list change; read atomically by the thread */
    int stop;
    int running;
    pthread_t thread;
} lane_thread_t;

#define LANE_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0, 0}
static lane_thread_t P[MPCCL_PROXY_MAX_LANES] = {LANE_INIT, LANE_INIT, LANE_INIT, LANE_INIT,
                                                 LANE_INIT, LANE_INIT, LANE_INIT, LANE_INIT};

/* MPCCL_PROXY_SPIN_US (busy polling after the last activity), MPCCL_PROXY_YIELD_US
 * (then sched_yield polling), MPCCL_PROXY_SLEEP_US (then, while posted work is
 * unfinished, sleeps doubling from 1 us up to this; with none, a sleep until
 * woken): lib/util/config.c. */
typedef struct proxy_settings {
    int64_t spin_ns, yield_ns, sleep_ns;
} proxy_settings_t;

static int64_t setting_us(const char *name, int64_t def)
{
    int64_t x = mpccl_config_int(name);
    return (x >= 0 && x <= 1000000) ? x : def;
}

static proxy_settings_t settings(void)
{
    proxy_settings_t s = {setting_us("PROXY_SPIN_US", 20) * 1000, setting_us("PROXY_YIELD_US", 500) * 1000,
                          setting_us("PROXY_SLEEP_US", 100) * 1000};
    return s;
}

/* Spin, then yield, then sleep: with posted work unfinished, a doubling
 * interval (kernel flags in host memory cannot wake us, so the cap bounds
 * latency); with none, until a user thread posts work or a transport has
 * traffic (proxy_wake.h).
 *
 * A transport's event fd can stay readable with nothing for progress to do
 * (seen with UCX: a timerfd of a connection whose peer never progressed its
 * worker).  So a wake that finds nothing goes back to sleep at once, and after
 * QUIET_WAKES such wakes in a row the transports' fds are left out: the proxy
 * then sleeps on its eventfd alone, for a doubling time up to QUIET_MAX_NS,
 * so unannounced arrivals are seen within that; any activity, or a wake that
 * finds work posted, ends it.  (A lane whose CTAs carry nothing for a while,
 * small messages using CTA 0 alone, is woken by every launch but moves
 * nothing; were that quiet, its first pieces after it would wait out a
 * timeout.) */
#define QUIET_WAKES 4
#define QUIET_MAX_NS 100000000LL

typedef struct backoff {
    int lane;
    proxy_settings_t cfg;
    int64_t idle_since; /* 0: active */
    int64_t sleep_ns;
    int quiet_wakes;    /* wakes in a row that found nothing */
    struct pollfd *fds; /* one per communicator, and the eventfd */
    size_t nfds;
} backoff_t;

/* Sleeps until woken; returns early (0) when the re-check finds work. */
static int sleep_until_woken(backoff_t *b, mpccl_proxy_comm_t **snap, size_t nsnap, unsigned seen)
{
    if (b->nfds < nsnap + 1) {
        struct pollfd *f = realloc(b->fds, (nsnap + 1) * sizeof(*f));
        if (f == NULL) return 0; /* keep polling */
        b->fds = f;
        b->nfds = nsnap + 1;
    }
    mpccl_proxy_sleep_announce(b->lane);
    int n = 0, quiet = b->quiet_wakes >= QUIET_WAKES;
    int64_t timeout = -1;
    if (quiet) {
        int shift = b->quiet_wakes - QUIET_WAKES;
        timeout = shift < 20 && (1000000LL << shift) < QUIET_MAX_NS ? 1000000LL << shift : QUIET_MAX_NS;
    }
    for (size_t i = 0; i < nsnap; i++) {
        mpccl_proxy_comm_t *pc = snap[i];
        if (mpccl_proxy_has_work(pc)) goto busy;
        if (pc->failed || quiet) continue;
        int fd = pc->t->ops->arm ? pc->t->ops->arm(pc->t) : MPCCL_ARM_NONE;
        if (fd == MPCCL_ARM_BUSY) goto busy;
        if (fd == MPCCL_ARM_NONE) timeout = b->cfg.sleep_ns > 0 ? b->cfg.sleep_ns : 1000; /* cannot be told: poll */
        else b->fds[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
    }
    if (__atomic_load_n(&P[b->lane].gen, __ATOMIC_SEQ_CST) != seen) goto busy;
    mpccl_proxy_sleep(b->lane, b->fds, n, timeout);
    return 1;
busy:
    mpccl_proxy_sleep_cancel(b->lane);
    return 0;
}

static void backoff(backoff_t *b, int act, mpccl_proxy_comm_t **snap, size_t nsnap, unsigned seen)
{
    if (act) {
        b->idle_since = 0;
        b->sleep_ns = 0;
        b->quiet_wakes = 0;
        return;
    }
    int64_t now = mpccl_now_ns();
    if (b->idle_since == 0) b->idle_since = now;
    int64_t idle = now - b->idle_since;
    if (idle < b->cfg.spin_ns) return;
    if (idle < b->cfg.spin_ns + b->cfg.yield_ns || b->cfg.sleep_ns == 0) {
        sched_yield();
        return;
    }
    int work = 0;
    for (size_t i = 0; i < nsnap && !work; i++) work = mpccl_proxy_has_work(snap[i]);
    if (!work) {
        if (!sleep_until_woken(b, snap, nsnap, seen)) return;
        b->quiet_wakes++; /* until a wake or a pass finds something */
        for (size_t i = 0; i < nsnap && !work; i++) work = mpccl_proxy_has_work(snap[i]);
        if (work) { /* work posted: spin for it (not a quiet wake); else sleep again at once */
            b->idle_since = 0;
            b->quiet_wakes = 0;
        }
        return;
    }
    b->sleep_ns = b->sleep_ns ? b->sleep_ns * 2 : 1000;
    if (b->sleep_ns > b->cfg.sleep_ns) b->sleep_ns = b->cfg.sleep_ns;
    struct timespec ts = {(time_t)(b->sleep_ns / 1000000000), (long)(b->sleep_ns % 1000000000)};
    nanosleep(&ts, NULL);
}

/* A call a user thread asked for (mpccl_proxy_run), on this thread. */
static int run_call(mpccl_proxy_comm_t *pc)
{
    int (*fn)(void *) = __atomic_load_n(&pc->call_fn, __ATOMIC_ACQUIRE);
    if (fn == NULL || pc->call_done) return 0;
    if (pc->slots && pc->alloc.bind) pc->alloc.bind(pc->alloc.ctx);
    int r = fn(pc->call_arg);
    lane_thread_t *L = &P[pc->lane];
    pthread_mutex_lock(&L->lock);
    pc->call_ret = r;
    pc->call_done = 1;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->lock);
    return 1;
}

static void *proxy_main(void *arg)
{
    int lane = (int)(intptr_t)arg;
    lane_thread_t *L = &P[lane];
    mpccl_proxy_comm_t **snap = NULL;
    size_t nsnap = 0, cap = 0;
    unsigned seen = __atomic_load_n(&L->gen, __ATOMIC_ACQUIRE) - 1;
    backoff_t b = {lane, settings(), 0, 0, 0, NULL, 0};
    for (;;) {
        if (__atomic_load_n(&L->gen, __ATOMIC_ACQUIRE) != seen) {
            pthread_mutex_lock(&L->lock);
            seen = L->gen;
            int stop = L->stop;
            nsnap = 0;
            for (mpccl_proxy_comm_t *pc = L->list; pc && !stop; pc = pc->next) {
                if (nsnap == cap) {
                    size_t nc = cap ? 2 * cap : 16;
                    mpccl_proxy_comm_t **ns = realloc(snap, nc * sizeof(*ns));
                    if (ns == NULL) break; /* serve those we have; retried next change */
                    snap = ns;
                    cap = nc;
                }
                snap[nsnap++] = pc;
            }
            pthread_mutex_unlock(&L->lock);
            if (stop) break;
        }
        int act = 0;
        for (size_t i = 0; i < nsnap; i++) {
            mpccl_proxy_comm_t *pc = snap[i];
            act += run_call(pc);
            int mode = __atomic_load_n(&pc->detach_req, __ATOMIC_ACQUIRE);
            act += mode != DETACH_NONE ? mpccl_proxy_detach_step(pc, mode) : mpccl_proxy_serve(pc);
        }
        backoff(&b, act, snap, nsnap, seen);
    }
    free(b.fds);
    free(snap);
    return NULL;
}

mpccl_status_t mpccl_proxy_thread_add(mpccl_proxy_comm_t *pc)
{
    MPCCL_CHECK(mpccl_proxy_wake_init());
    lane_thread_t *L = &P[pc->lane];
    pthread_mutex_lock(&L->life);
    if (!L->running) {
        L->stop = 0;
        int e = pthread_create(&L->thread, NULL, proxy_main, (void *)(intptr_t)pc->lane);
        if (e != 0) {
            pthread_mutex_unlock(&L->life);
            return mpccl_fail(MPCCL_ERR_SYSTEM, "proxy: cannot start the progress thread of lane %u: %s", pc->lane,
                              strerror(e));
        }
        L->running = 1;
    }
    pthread_mutex_lock(&L->lock);
    pc->next = L->list;
    L->list = pc;
    __atomic_add_fetch(&L->gen, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&L->lock);
    mpccl_proxy_wake();
    pthread_mutex_unlock(&L->life);
    return MPCCL_OK;
}

void mpccl_proxy_thread_leave(mpccl_proxy_comm_t *pc)
{
    lane_thread_t *L = &P[pc->lane];
    pthread_mutex_lock(&L->lock);
    mpccl_proxy_comm_t **pp = &L->list;
    while (*pp && *pp != pc) pp = &(*pp)->next;
    if (*pp) *pp = pc->next;
    __atomic_add_fetch(&L->gen, 1, __ATOMIC_ACQ_REL);
    pc->detached = 1;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->lock);
}

/* The last communicator out stops its lane's thread, unless an attach came in between. */
static void stop_if_unused(lane_thread_t *L)
{
    pthread_mutex_lock(&L->life);
    pthread_mutex_lock(&L->lock);
    int last = L->running && L->list == NULL;
    if (last) {
        L->stop = 1;
        __atomic_add_fetch(&L->gen, 1, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&L->lock);
    if (last) {
        mpccl_proxy_wake();
        pthread_join(L->thread, NULL);
        L->running = 0;
    }
    pthread_mutex_unlock(&L->life);
}

void mpccl_proxy_thread_detach(mpccl_proxy_comm_t *const *pcs, int n, int force)
{
    /* Every lane is asked first, so their flushes run side by side. */
    for (int i = 0; i < n; i++) {
        lane_thread_t *L = &P[pcs[i]->lane];
        pthread_mutex_lock(&L->lock);
        __atomic_store_n(&pcs[i]->detach_req, force ? DETACH_FORCE : DETACH_FLUSH, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&L->lock);
    }
    mpccl_proxy_wake();
    for (int i = 0; i < n; i++) {
        lane_thread_t *L = &P[pcs[i]->lane];
        pthread_mutex_lock(&L->lock);
        while (!pcs[i]->detached) pthread_cond_wait(&L->cv, &L->lock);
        pthread_mutex_unlock(&L->lock);
    }
    for (int i = 0; i < n; i++) stop_if_unused(&P[pcs[i]->lane]);
}

int mpccl_proxy_run(mpccl_proxy_comm_t *pc, int (*fn)(void *), void *arg)
{
    if (pc == NULL || fn == NULL) return -1;
    if (pc->npeers == 0) return fn(arg); /* no thread: nobody else drives the transport */
    lane_thread_t *L = &P[pc->lane];
    pthread_mutex_lock(&L->lock);
    while (pc->call_fn && !pc->detached) pthread_cond_wait(&L->cv, &L->lock); /* one call at a time */
    int r = -1;
    if (!pc->detached) {
        pc->call_arg = arg;
        pc->call_done = 0;
        __atomic_store_n(&pc->call_fn, fn, __ATOMIC_SEQ_CST);
        mpccl_proxy_wake();
        while (!pc->call_done && !pc->detached) pthread_cond_wait(&L->cv, &L->lock);
        r = pc->call_done ? pc->call_ret : -1;
        __atomic_store_n(&pc->call_fn, NULL, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&L->cv);
    }
    pthread_mutex_unlock(&L->lock);
    return r;
}
