/* How the proxy threads sleep while they have no work, and how they are woken.
 *
 * A proxy thread (one per lane, proxy_thread.c) polls kernel flags in host
 * memory, which cannot wake a thread, so it polls only while posted work is
 * unfinished; otherwise it blocks here, in one ppoll on its lane's eventfd
 * (written by mpccl_proxy_wake) and on the event fds of the transports it
 * drives (traffic nobody announced: one-sided deliveries, a peer's sends
 * arriving before this rank's launch).
 *
 * No lost wake-up: the proxy announces the sleep (mpccl_proxy_sleep_announce),
 * then re-checks for work; a user thread publishes work, then calls
 * mpccl_proxy_wake, which writes the eventfd only while a sleep is announced.
 * Both sides use sequentially consistent atomics, so one of them sees the
 * other. */
#ifndef MPCCL_PROXY_WAKE_H
#define MPCCL_PROXY_WAKE_H

#include <poll.h>
#include <stdint.h>
#include "util/status.h"

/* Proxy threads a process may run: one per lane (proxy.h). */
#define MPCCL_PROXY_MAX_LANES 8

/* Creates the eventfds (once per process). */
mpccl_status_t mpccl_proxy_wake_init(void);

/* User threads (and CUDA graph host nodes): after publishing work.  Wakes
 * every lane's thread that sleeps. */
void mpccl_proxy_wake(void);
/* The same for one lane's thread. */
void mpccl_proxy_wake_lane(int lane);

/* Proxy thread of lane: about to sleep; re-check for work after this. */
void mpccl_proxy_sleep_announce(int lane);
/* Proxy thread of lane: work turned up in the re-check; do not sleep. */
void mpccl_proxy_sleep_cancel(int lane);
/* Proxy thread of lane: sleeps until its eventfd or one of fds[0..n) is
 * readable, or timeout_ns passes (< 0: no limit); fds must have one spare
 * entry at fds[n] for the eventfd.  Ends the announced sleep. */
void mpccl_proxy_sleep(int lane, struct pollfd *fds, int n, int64_t timeout_ns);

/* Times the proxy threads slept and were woken, ever, and whether lane 0's
 * thread is asleep now; the same for one lane (tests). */
uint64_t mpccl_proxy_sleeps(void);
int mpccl_proxy_asleep(void);
uint64_t mpccl_proxy_lane_sleeps(int lane);
int mpccl_proxy_lane_asleep(int lane);

#endif
