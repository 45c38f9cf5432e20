/* The monotonic clock every timeout and measurement of the library reads. */
#ifndef MPCCL_UTIL_CLOCK_H
#define MPCCL_UTIL_CLOCK_H

#include <time.h>

/* Seconds since an arbitrary start (CLOCK_MONOTONIC). */
static inline double mpccl_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
