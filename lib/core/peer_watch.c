/* The process-wide peer watcher thread (peer_watch.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/peer_watch.h"
#include "util/log.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every architecture */
#endif

typedef struct watch {
    ncclComm_t comm;
    int rank, pid, fd; /* fd: the pidfd, or -1 (kill(pid, 0) ticks) */
    int fired;
    mpccl_peer_dead_fn dead;
} watch_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static watch_t *watches;
static int nwatch, capwatch;
static int wake_fd = -1;   /* eventfd: the list changed */
static int started;
static int no_pidfd;       /* pidfd_open failed with ENOSYS: tick instead */
static pid_t owner_pid;    /* a forked child starts its own thread */
static unsigned gen;       /* bumped by every change of the list */

static void wake(void)
{
    uint64_t one = 1;
    if (wake_fd >= 0 && write(wake_fd, &one, sizeof(one)) < 0) { /* full counter: already awake */
    }
}

static void *watcher_main(void *arg)
{
    (void)arg;
    struct pollfd *pfd = NULL;
    int *idx = NULL, cap = 0;
    for (;;) {
        pthread_mutex_lock(&mu);
        if (cap < nwatch + 1) {
            cap = 2 * (nwatch + 1);
            struct pollfd *np = realloc(pfd, (size_t)cap * sizeof(*pfd));
            int *ni = realloc(idx, (size_t)cap * sizeof(*idx));
            if (np) pfd = np;
            if (ni) idx = ni;
            if (!np || !ni) cap = 0;
        }
        int n = 0, ticking = 0;
        unsigned polled_gen = gen;
        if (cap > 0) {
            pfd[n++] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
            for (int i = 0; i < nwatch; i++) {
                if (watches[i].fired) continue;
                if (watches[i].fd < 0) {
                    ticking = 1;
                    continue;
                }
                idx[n] = i;
                pfd[n++] = (struct pollfd){.fd = watches[i].fd, .events = POLLIN};
            }
        }
        pthread_mutex_unlock(&mu);
        if (cap == 0) { /* out of memory: try again later */
            sleep(1);
            continue;
        }
        int r = poll(pfd, (nfds_t)n, ticking ? 1000 : -1);
        if (r < 0 && errno != EINTR) sleep(1);
        if (r > 0 && (pfd[0].revents & POLLIN)) {
            uint64_t v;
            if (read(wake_fd, &v, sizeof(v)) < 0) { /* drained by someone: fine */
            }
        }
        pthread_mutex_lock(&mu);
        /* A list changed since poll started may have reused an fd number: poll
         * again (a dead process's pidfd stays readable, nothing is lost). */
        if (gen != polled_gen) r = 0, ticking = 0;
        for (int k = 1; r > 0 && k < n; k++) {
            if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int i = idx[k];
            if (!watches[i].fired) {
                watches[i].fired = 1;
                watches[i].dead(watches[i].comm, watches[i].rank);
            }
        }
        for (int i = 0; ticking && i < nwatch; i++)
            if (watches[i].fd < 0 && !watches[i].fired && kill(watches[i].pid, 0) != 0 && errno == ESRCH) {
                watches[i].fired = 1;
                watches[i].dead(watches[i].comm, watches[i].rank);
            }
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* fork() while the watcher holds the lock would leave it locked forever in
 * the child: take it around fork. */
static void before_fork(void) { pthread_mutex_lock(&mu); }
static void after_fork(void) { pthread_mutex_unlock(&mu); }
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(before_fork, after_fork, after_fork); }

/* Called with mu held. */
static mpccl_status_t start_locked(void)
{
    if (started && owner_pid == getpid()) return MPCCL_OK;
    /* After fork the parent's thread is gone from the child: start afresh,
     * forgetting the parent's watches (their communicators are the parent's). */
    if (started) {
        if (wake_fd >= 0) close(wake_fd);
        for (int i = 0; i < nwatch; i++)
            if (watches[i].fd >= 0) close(watches[i].fd);
        nwatch = 0;
        started = 0;
    }
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) return mpccl_fail(MPCCL_ERR_SYSTEM, "peer watcher: eventfd: %s", strerror(errno));
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    /* The thread must not take signals meant for the application. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&th, &attr, watcher_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        close(wake_fd);
        wake_fd = -1;
        return mpccl_fail(MPCCL_ERR_SYSTEM, "peer watcher: pthread_create: %s", strerror(e));
    }
    started = 1;
    owner_pid = getpid();
    return MPCCL_OK;
}

mpccl_status_t mpccl_peer_watch_add(ncclComm_t comm, int rank, int pid, mpccl_peer_dead_fn dead)
{
    int fd = -1;
    if (!no_pidfd) {
        fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
        if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
            no_pidfd = 1;
            MPCCL_INFO(MPCCL_SUB_INIT, "pidfd_open unavailable (%s): peer processes are checked once a second",
                       strerror(errno));
        } else if (fd < 0 && errno == ESRCH) {
            /* Already gone: the first tick reports it. */
        } else if (fd < 0) {
            return mpccl_fail(MPCCL_ERR_SYSTEM, "peer watcher: pidfd_open(pid %d of rank %d): %s", pid, rank,
                              strerror(errno));
        }
    }
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&mu);
    mpccl_status_t st = start_locked();
    if (st == MPCCL_OK && nwatch == capwatch) {
        int ncap = capwatch ? 2 * capwatch : 16;
        watch_t *nw = realloc(watches, (size_t)ncap * sizeof(*nw));
        if (nw) {
            watches = nw;
            capwatch = ncap;
        } else {
            st = mpccl_fail(MPCCL_ERR_SYSTEM, "peer watcher: out of memory for %d watches", ncap);
        }
    }
    if (st == MPCCL_OK) {
        watches[nwatch++] = (watch_t){.comm = comm, .rank = rank, .pid = pid, .fd = fd, .dead = dead};
        gen++;
        wake();
    } else if (fd >= 0) {
        close(fd);
    }
    pthread_mutex_unlock(&mu);
    return st;
}

void mpccl_peer_watch_remove(ncclComm_t comm)
{
    pthread_mutex_lock(&mu);
    int j = 0, removed = 0;
    for (int i = 0; i < nwatch; i++) {
        if (watches[i].comm == comm) {
            if (watches[i].fd >= 0) close(watches[i].fd);
            removed++;
            continue;
        }
        watches[j++] = watches[i];
    }
    nwatch = j;
    if (removed) {
        gen++;
        wake();
    }
    pthread_mutex_unlock(&mu);
}

int mpccl_peer_watch_count(int *uses_pidfd)
{
    pthread_mutex_lock(&mu);
    int n = nwatch;
    if (uses_pidfd) *uses_pidfd = !no_pidfd;
    pthread_mutex_unlock(&mu);
    return n;
}
