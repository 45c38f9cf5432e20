/* Per-communicator hooks of the layers above the core (windows, device
 * communicators): what they keep for a communicator is stopped, flushed and
 * released with it, without the core naming them.  A layer adds its hook
 * when it first keeps something for the communicator; hooks run in their
 * order field (lowest first), whatever order they were added in. */
#ifndef MPCCL_COMM_HOOKS_H
#define MPCCL_COMM_HOOKS_H

#include "core/comm.h"

struct mpccl_comm_hook {
    const char *name; /* for the log */
    int order;        /* lowest runs first */
    /* A failure or an abort: tell kernels waiting on this state to give up,
     * releasing nothing; any thread, any number of times.  May be NULL. */
    void (*stop)(ncclComm_t comm);
    /* ncclCommFinalize, before the executor lets go of the transport.  May be NULL. */
    void (*finalize)(ncclComm_t comm);
    /* ncclCommDestroy / ncclCommAbort, before the executor's release and the
     * transport's close.  May be NULL. */
    void (*release)(ncclComm_t comm);
};

/* Adds hook to comm once (adding it again does nothing); thread-safe. */
mpccl_status_t mpccl_comm_hook_add(ncclComm_t comm, const struct mpccl_comm_hook *hook);
void mpccl_comm_hooks_stop(ncclComm_t comm);
void mpccl_comm_hooks_finalize(ncclComm_t comm);
void mpccl_comm_hooks_release(ncclComm_t comm);

#endif
