/* How a group's send/recv calls of one GPU communicator are cut into
 * launches when they exceed one launch's call table (group.c).
 *
 * A launch finishes only when all its calls have, so launches cut from
 * program order can wait on each other forever: rank A's first launch holds a
 * send to B whose receive B put in its second launch, while B's first launch
 * holds a send that needs A's second.  The cut below is the same on every
 * rank for the two ends of a message: the k-th send from A to B and the k-th
 * receive at B from A (the calls NCCL pairs) get the same key, made of
 *   k / per_ordinal            which message of the channel, in windows
 *   delta / per_delta          delta = (B - A) mod n, the same at both ends
 * Calls go into launches in increasing key order, one launch per key, so
 * every call's partner is in the launch of the same key on its rank, and by
 * induction on the key every launch finishes.  per_delta and per_ordinal
 * depend on n and the table size only, so all ranks agree; a launch holds at
 * most 2 * per_delta * per_ordinal <= max_calls calls. */
#ifndef MPCCL_P2P_SCHEDULE_H
#define MPCCL_P2P_SCHEDULE_H

#include <stdint.h>

typedef struct mpccl_p2p_call_ref {
    int peer;
    int send; /* 1: send, 0: receive */
} mpccl_p2p_call_ref_t;

/* calls[0..n) in program order on rank `rank` of `nranks`.  Fills order[0..n)
 * with call indices sorted by launch and key[0..n) with each index's launch
 * key (equal keys: one launch, in program order).  Needs max_calls >= 2.
 * Returns the number of launches, or -1 when out of memory. */
int mpccl_p2p_schedule(int rank, int nranks, const mpccl_p2p_call_ref_t *calls, int n, int max_calls, int *order,
                       uint64_t *key);

#endif
