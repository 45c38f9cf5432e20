/* Job-wide hang reports: when a call waits too long (MPCCL_OP_TIMEOUT,
 * MPCCL_STALL_REPORT_S), on ncclCommAbort after a stall, on SIGUSR2 or on
 * mpcclCommDumpState, the ranks' progress records (core/progress.h) are
 * gathered over the side channel (core/side_channel.h) and compared with the
 * call this rank waits in: which ranks wait with it, which rank is elsewhere
 * (in another call, in no call, dead, not answering), and where GPU kernels
 * stopped.  One summary line, then the details. */
#ifndef MPCCL_CORE_HANG_REPORT_H
#define MPCCL_CORE_HANG_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "core/comm.h"

/* ncclCommAbort prints a report when a call of the communicator had waited
 * this long (seconds). */
#define MPCCL_ABORT_REPORT_S 1.0
/* How long a gathering waits for the peers' answers. */
#define MPCCL_HANG_GATHER_MS 1500

/* Gathers and analyses.  summary (len bytes): the summary line, naming the
 * ranks to blame and what they do.  The whole report is kept for peers
 * (a rank revoked by this one shows it), and printed at WARN when print is
 * nonzero and this rank is the lowest of those waiting.  Returns 1 when some
 * rank was found to blame. */
int mpccl_hang_report(ncclComm_t comm, const char *why, int print, char *summary, size_t len);
/* A rank failed by peer's revoke: the report peer kept, if any, is appended
 * to this rank's error and printed here when this rank is the lowest waiting
 * one.  Bounded by MPCCL_HANG_GATHER_MS. */
void mpccl_hang_report_from(ncclComm_t comm, int peer);
/* mpcclCommDumpState / SIGUSR2: the job-wide report to out (NULL: the log). */
void mpccl_hang_dump(ncclComm_t comm, FILE *out);

#endif
