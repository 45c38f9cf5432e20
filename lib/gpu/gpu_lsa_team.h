/* The LSA team rule (device API), as pure arithmetic so the unit tests can
 * check it: a rank's candidate is the run of consecutive ranks around it that
 * its GPU reaches by P2P; the team is the candidate when every member found
 * the same run, else the rank alone.  The teams of all ranks then partition
 * the communicator, whatever each rank saw. */
#ifndef MPCCL_LSA_TEAM_H
#define MPCCL_LSA_TEAM_H

#include <stdint.h>

/* reach[r] != 0: this rank's GPU loads and stores rank r's memory (me
 * included or not: me is always in the run).  *lo..*hi, inclusive. */
void mpccl_lsa_candidate(int n, int me, const unsigned char *reach, int32_t *lo, int32_t *hi);
/* runs: every rank's candidate, [2 * n] as (lo, hi).  The team of rank me. */
void mpccl_lsa_pick(int n, int me, const int32_t *runs, int *first, int *size);

#endif
