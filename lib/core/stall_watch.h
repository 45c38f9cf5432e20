/* Stall reports for communicators whose calls do not wait on the host (GPU
 * kernels on the user's streams).  A host call reports its own stall from its
 * wait loop (MPCCL_STALL_REPORT_S); a GPU call returns once launched, so the
 * side channel's thread looks at each communicator about once a second and,
 * when its kernels have waited in one launch for MPCCL_STALL_REPORT_S with
 * no MPCCL_OP_TIMEOUT set, has one job-wide report printed (nothing fails). */
#ifndef MPCCL_CORE_STALL_WATCH_H
#define MPCCL_CORE_STALL_WATCH_H

#include <stdint.h>

/* What the watcher saw of one communicator's kernels, kept between looks. */
typedef struct mpccl_stall_track {
    uint32_t seq;      /* launch whose kernel waited at the last look; 0: none */
    uint64_t stamp;    /* the device's time stamp of that wait record */
    int64_t since_ms;  /* host time that launch was first seen waiting */
    int64_t moved_ms;  /* host time the stamp last advanced */
    uint32_t reported; /* launch already reported (one report per stalled launch) */
} mpccl_stall_track_t;

/* How long the record last moved may sit still before the wait counts as
 * over (a waiting kernel rewrites it every few microseconds). */
#define MPCCL_STALL_STILL_MS 2000

/* One look: the kernels' wait record now (seq: its launch, stamp: when a
 * kernel last wrote it, 0 when none ever waited long), and now_ms (host
 * clock).  Returns how long, in seconds, one launch has been seen waiting
 * without a pause, or 0 when no kernel waits. */
double mpccl_stall_observe(mpccl_stall_track_t *t, uint32_t seq, uint64_t stamp, int64_t now_ms);

/* Installs the watch on the side channel (once per process; core/comm.c). */
void mpccl_stall_watch_install(void);

#endif
