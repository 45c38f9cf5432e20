/* What ncclGroupSimulateEnd reports: the modelled time of a group's calls. */
#ifndef MPCCL_ESTIMATE_H
#define MPCCL_ESTIMATE_H

#include "core/group.h"

/* Seconds the model expects call to take: on a GPU communicator with flat
 * kernels, a launch plus its bus bytes at the flat kernels' measured
 * bandwidth; elsewhere the planner's cost of the algorithm it would pick. */
double mpccl_call_estimate(const mpccl_call_t *call);
/* The group's time: calls of one communicator run one after another,
 * communicators side by side (the slowest one counts). */
double mpccl_group_estimate(const mpccl_call_t *ops);

#endif
