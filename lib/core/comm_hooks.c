/* Per-communicator hooks of the layers above the core (comm_hooks.h). */
#include "core/comm_hooks.h"
#include "util/log.h"

mpccl_status_t mpccl_comm_hook_add(ncclComm_t comm, const struct mpccl_comm_hook *hook)
{
    mpccl_status_t st = MPCCL_OK;
    pthread_mutex_lock(&comm->hook_lock);
    int i = 0;
    while (i < comm->nhooks && comm->hooks[i] != hook) i++;
    if (i == comm->nhooks) {
        if (comm->nhooks == MPCCL_COMM_MAX_HOOKS) {
            st = mpccl_fail(MPCCL_ERR_INTERNAL, "comm 0x%llx: no room for the %s hook (%d hooks at most)",
                            (unsigned long long)comm->id, hook->name, MPCCL_COMM_MAX_HOOKS);
        } else {
            /* Kept sorted by order: insert before the first with a higher one. */
            int at = comm->nhooks;
            while (at > 0 && comm->hooks[at - 1]->order > hook->order) {
                comm->hooks[at] = comm->hooks[at - 1];
                at--;
            }
            comm->hooks[at] = hook;
            comm->nhooks++;
        }
    }
    pthread_mutex_unlock(&comm->hook_lock);
    return st;
}

/* Hooks are added by user threads while the communicator lives and run by the
 * thread that stops, finalizes or releases it: a copy taken under the lock. */
static int hooks_now(ncclComm_t comm, const struct mpccl_comm_hook **out)
{
    pthread_mutex_lock(&comm->hook_lock);
    int n = comm->nhooks;
    for (int i = 0; i < n; i++) out[i] = comm->hooks[i];
    pthread_mutex_unlock(&comm->hook_lock);
    return n;
}

void mpccl_comm_hooks_stop(ncclComm_t comm)
{
    const struct mpccl_comm_hook *h[MPCCL_COMM_MAX_HOOKS];
    int n = hooks_now(comm, h);
    for (int i = 0; i < n; i++)
        if (h[i]->stop) h[i]->stop(comm);
}

void mpccl_comm_hooks_finalize(ncclComm_t comm)
{
    const struct mpccl_comm_hook *h[MPCCL_COMM_MAX_HOOKS];
    int n = hooks_now(comm, h);
    for (int i = 0; i < n; i++)
        if (h[i]->finalize) h[i]->finalize(comm);
}

void mpccl_comm_hooks_release(ncclComm_t comm)
{
    const struct mpccl_comm_hook *h[MPCCL_COMM_MAX_HOOKS];
    int n = hooks_now(comm, h);
    for (int i = 0; i < n; i++)
        if (h[i]->release) h[i]->release(comm);
}
