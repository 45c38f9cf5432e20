/* The proxy thread's sleep and wake-up (see gpu_proxy_wake.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include "gpu/gpu_proxy_wake.h"

static pthread_once_t wake_once = PTHREAD_ONCE_INIT;
static int wake_fd = -1;
static int wake_errno;
static int sleeping;      /* a sleep is announced */
static uint64_t nsleeps;

static void create_fd(void)
{
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) wake_errno = errno;
}

mpccl_status_t mpccl_proxy_wake_init(void)
{
    pthread_once(&wake_once, create_fd);
    if (wake_fd < 0)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "proxy: eventfd for the progress thread's wake-up: %s",
                          strerror(wake_errno));
    return MPCCL_OK;
}

void mpccl_proxy_wake(void)
{
    if (!__atomic_load_n(&sleeping, __ATOMIC_SEQ_CST)) return;
    uint64_t one = 1;
    /* EAGAIN: the counter is full, a wake-up is pending anyway. */
    ssize_t r = write(wake_fd, &one, sizeof(one));
    (void)r;
}

void mpccl_proxy_sleep_announce(void)
{
    __atomic_store_n(&sleeping, 1, __ATOMIC_SEQ_CST);
}

void mpccl_proxy_sleep_cancel(void)
{
    __atomic_store_n(&sleeping, 0, __ATOMIC_SEQ_CST);
}

void mpccl_proxy_sleep(struct pollfd *fds, int n, int64_t timeout_ns)
{
    fds[n].fd = wake_fd;
    fds[n].events = POLLIN;
    for (int i = 0; i <= n; i++) fds[i].revents = 0;
    struct timespec ts = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
    ppoll(fds, (nfds_t)n + 1, timeout_ns < 0 ? NULL : &ts, NULL);
    __atomic_store_n(&sleeping, 0, __ATOMIC_SEQ_CST);
    uint64_t v;
    ssize_t r = read(wake_fd, &v, sizeof(v)); /* EAGAIN when it was not written */
    (void)r;
    __atomic_add_fetch(&nsleeps, 1, __ATOMIC_RELAXED);
}

uint64_t mpccl_proxy_sleeps(void)
{
    return __atomic_load_n(&nsleeps, __ATOMIC_RELAXED);
}

int mpccl_proxy_asleep(void)
{
    return __atomic_load_n(&sleeping, __ATOMIC_SEQ_CST);
}
