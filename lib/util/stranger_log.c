/* Rate-limited warnings about strangers (see stranger_log.h). */
#include "util/stranger_log.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "util/log.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t total, since_warning, warnings;
static int64_t last_warning_ms = -1;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void mpccl_stranger_note(const char *where, const char *why)
{
    char line[256];
    int emit = 0;
    uint64_t n = 0;
    pthread_mutex_lock(&mu);
    total++;
    since_warning++;
    int64_t now = now_ms();
    if (last_warning_ms < 0 || now - last_warning_ms >= MPCCL_STRANGER_LOG_INTERVAL_MS) {
        emit = 1;
        n = since_warning;
        since_warning = 0;
        last_warning_ms = now;
        warnings++;
        snprintf(line, sizeof(line), "%s: %s", where, why);
    }
    pthread_mutex_unlock(&mu);
    if (emit)
        MPCCL_WARN(MPCCL_SUB_BOOT | MPCCL_SUB_NET,
                   "closed %llu connection(s) that did not prove they belong to this job in the last %d s "
                   "(latest: %s); at most one such line per %d s",
                   (unsigned long long)n, MPCCL_STRANGER_LOG_INTERVAL_MS / 1000, line,
                   MPCCL_STRANGER_LOG_INTERVAL_MS / 1000);
}

uint64_t mpccl_stranger_count(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = total;
    pthread_mutex_unlock(&mu);
    return n;
}

uint64_t mpccl_stranger_warnings(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = warnings;
    pthread_mutex_unlock(&mu);
    return n;
}
