/* The stall watch's arithmetic (core/stall_watch.h): from successive looks
 * at a wait record, how long one launch has waited.  Pure: unit tested. */
#include "core/stall_watch.h"

double mpccl_stall_observe(mpccl_stall_track_t *t, uint32_t seq, uint64_t stamp, int64_t now_ms)
{
    if (stamp == 0 || seq == 0) {
        t->seq = 0;
        return 0;
    }
    if (seq != t->seq) { /* another launch waits now: a new wait starts */
        t->seq = seq;
        t->stamp = stamp;
        t->since_ms = t->moved_ms = now_ms;
        return 0;
    }
    if (stamp != t->stamp) {
        t->stamp = stamp;
        t->moved_ms = now_ms;
    } else if (now_ms - t->moved_ms > MPCCL_STALL_STILL_MS) {
        /* Nobody rewrote the record: the launch finished, or moves on without
         * long waits.  A later wait of the same launch starts over. */
        t->since_ms = now_ms;
        return 0;
    }
    return (double)(now_ms - t->since_ms) / 1000.0;
}
