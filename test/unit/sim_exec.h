/* Simulated executor for the unit tests: N ranks in one process over a fake
 * transport (message queues keyed by source, destination and tag), each running
 * the real schedule engine (exec_host.c). */
#ifndef MPCCL_SIM_EXEC_H
#define MPCCL_SIM_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include "host/host_exec.h"

typedef struct sim_world sim_world_t;

/* seed drives the order in which posted messages get matched. */
sim_world_t *sim_create(int nranks, uint64_t seed);
void sim_destroy(sim_world_t *w);
mpccl_transport_t *sim_transport(sim_world_t *w, int rank);
/* Makes the nth send posted from now on (0-based, world-wide) fail. */
void sim_fail_send(sim_world_t *w, long nth);

/* Starts tasks[i] on rank ranks[i] in array order (so several tasks of one rank
 * take their message sequence numbers in that order) and drives all engines round
 * robin until every task is done.  Returns MPCCL_OK, an engine's error, or
 * MPCCL_ERR_INTERNAL on a deadlock; msg (len bytes) describes what went wrong,
 * including the steps that were stuck. */
mpccl_status_t sim_run(sim_world_t *w, const mpccl_task_t *tasks, const int *ranks, int ntasks, char *msg,
                       size_t len);

/* Static data-race check of one schedule: every two steps that touch
 * overlapping elements, one of them writing, must be ordered by dependencies.
 * IN and OUT are the same memory when alias is set, IN element x being OUT
 * element x + in_off (in_off may be negative).  Returns 0 when clean. */
int sim_check_races(const mpccl_sched_t *s, int alias, int64_t in_off, char *msg, size_t len);

#endif
