/* Rate-limited warnings about connections that are not from this job (port
 * scanners, monitoring agents, other users' processes): one line with a count
 * per interval, never one per connection, so a flood cannot fill a log. */
#ifndef MPCCL_STRANGER_LOG_H
#define MPCCL_STRANGER_LOG_H

#include <stdint.h>

#define MPCCL_STRANGER_LOG_INTERVAL_MS 10000

/* Counts one closed connection at `where` (a listener's name) for `why`;
 * warns at most once per interval for the whole process, with the count since
 * the last warning and the latest reason. */
void mpccl_stranger_note(const char *where, const char *why);
/* Connections counted since the process started (tests). */
uint64_t mpccl_stranger_count(void);
/* Warning lines written so far (tests). */
uint64_t mpccl_stranger_warnings(void);

#endif
