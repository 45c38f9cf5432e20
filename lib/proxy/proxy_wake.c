/* The proxy threads' sleep and wake-up (see proxy_wake.h): one eventfd
 * and one announced-sleep flag per lane, so a wake-up reaches every sleeping
 * thread (one eventfd shared by several sleepers would be read by the first
 * one awake and lost for the others). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include "proxy/proxy_wake.h"

static pthread_once_t wake_once = PTHREAD_ONCE_INIT;
static int wake_fd[MPCCL_PROXY_MAX_LANES];
static int wake_errno;
static int sleeping[MPCCL_PROXY_MAX_LANES]; /* a sleep is announced */
static uint64_t nsleeps[MPCCL_PROXY_MAX_LANES];

static void create_fds(void)
{
    for (int l = 0; l < MPCCL_PROXY_MAX_LANES; l++) {
        wake_fd[l] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (wake_fd[l] < 0 && wake_errno == 0) wake_errno = errno;
    }
}

mpccl_status_t mpccl_proxy_wake_init(void)
{
    pthread_once(&wake_once, create_fds);
    if (wake_errno != 0)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "proxy: eventfd for the progress threads' wake-up: %s",
                          strerror(wake_errno));
    return MPCCL_OK;
}

void mpccl_proxy_wake_lane(int lane)
{
    if (!__atomic_load_n(&sleeping[lane], __ATOMIC_SEQ_CST)) return;
    uint64_t one = 1;
    /* EAGAIN: the counter is full, a wake-up is pending anyway. */
    ssize_t r = write(wake_fd[lane], &one, sizeof(one));
    (void)r;
}

void mpccl_proxy_wake(void)
{
    for (int l = 0; l < MPCCL_PROXY_MAX_LANES; l++) mpccl_proxy_wake_lane(l);
}

void mpccl_proxy_sleep_announce(int lane)
{
    __atomic_store_n(&sleeping[lane], 1, __ATOMIC_SEQ_CST);
}

void mpccl_proxy_sleep_cancel(int lane)
{
    __atomic_store_n(&sleeping[lane], 0, __ATOMIC_SEQ_CST);
}

void mpccl_proxy_sleep(int lane, struct pollfd *fds, int n, int64_t timeout_ns)
{
    fds[n].fd = wake_fd[lane];
    fds[n].events = POLLIN;
    for (int i = 0; i <= n; i++) fds[i].revents = 0;
    struct timespec ts = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
    ppoll(fds, (nfds_t)n + 1, timeout_ns < 0 ? NULL : &ts, NULL);
    __atomic_store_n(&sleeping[lane], 0, __ATOMIC_SEQ_CST);
    uint64_t v;
    ssize_t r = read(wake_fd[lane], &v, sizeof(v)); /* EAGAIN when it was not written */
    (void)r;
    __atomic_add_fetch(&nsleeps[lane], 1, __ATOMIC_RELAXED);
}

uint64_t mpccl_proxy_lane_sleeps(int lane)
{
    return __atomic_load_n(&nsleeps[lane], __ATOMIC_RELAXED);
}

uint64_t mpccl_proxy_sleeps(void)
{
    uint64_t n = 0;
    for (int l = 0; l < MPCCL_PROXY_MAX_LANES; l++) n += mpccl_proxy_lane_sleeps(l);
    return n;
}

int mpccl_proxy_lane_asleep(int lane)
{
    return __atomic_load_n(&sleeping[lane], __ATOMIC_SEQ_CST);
}

int mpccl_proxy_asleep(void)
{
    return mpccl_proxy_lane_asleep(0);
}
