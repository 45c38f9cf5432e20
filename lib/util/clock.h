/* The monotonic clock every timeout and measurement of the library reads. */
#ifndef MPCCL_UTIL_CLOCK_H
#define MPCCL_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Seconds since an arbitrary start (CLOCK_MONOTONIC). */
static inline double mpccl_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Nanoseconds since an arbitrary start (CLOCK_MONOTONIC), for deadlines. */
static inline int64_t mpccl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
