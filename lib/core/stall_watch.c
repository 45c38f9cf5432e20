/* Stall reports for GPU communicators, made from the side channel's thread
 * (core/stall_watch.h). */
#include "core/stall_watch.h"

#include <stdio.h>

#include "core/comm.h"
#include "core/exec.h"
#include "core/hang_report.h"
#include "core/side_channel.h"
#include "util/config.h"

/* Called with the side channel's registry locked: reads only, never waits. */
static int stall_due(struct ncclComm *comm)
{
    const mpccl_executor_t *e = comm->exec;
    if (!e || !e->stalled) return 0;
    int64_t limit = mpccl_config_int("STALL_REPORT_S");
    return limit > 0 && e->stalled(comm, limit > 1000000 ? 1000000 : (int)limit);
}

/* On a thread of its own, the communicator held registered. */
static void stall_report(struct ncclComm *comm)
{
    char why[160], summary[1024];
    snprintf(why, sizeof(why), "stalled for %lld s (MPCCL_STALL_REPORT_S; no MPCCL_OP_TIMEOUT, the kernels still wait)",
             (long long)mpccl_config_int("STALL_REPORT_S"));
    mpccl_hang_report(comm, why, 1, summary, sizeof(summary));
}

void mpccl_stall_watch_install(void)
{
    mpccl_side_set_watch(stall_due, stall_report);
}
