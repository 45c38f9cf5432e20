/* ncclCommRegister / ncclCommDeregister: handles owned by the communicator.
 * Host communicators register the memory with UCX (remote access by
 * one-sided operations); GPU communicators export it over CUDA IPC and map
 * it into the peer processes, so that flat collectives on registered buffers
 * skip the region (gpu_win_register.c). */
#include <stdlib.h>

#include "util/log.h"
#include "onesided/onesided_win.h"

void mpccl_reg_free(ncclComm_t comm, mpccl_reg_t *r)
{
    if (!r) return;
    comm->exec->reg_free(comm, r);
    mpccl_ucx_mem_unmap(&r->mem);
    r->magic = MPCCL_OBJ_DEAD;
    free(r);
}

mpccl_status_t mpccl_reg_register(ncclComm_t comm, void *buff, size_t size, void **handle)
{
    mpccl_win_state_t *ws;
    MPCCL_CHECK(mpccl_win_state(comm, &ws));
    mpccl_reg_t *r = calloc(1, sizeof(*r));
    if (!r) return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclCommRegister: out of memory");
    r->magic = MPCCL_REG_MAGIC;
    r->comm = comm;
    r->base = buff;
    r->size = size;
    mpccl_status_t st;
    MPCCL_CHECK_GOTO(comm->exec->reg_export(comm, r), st, fail);
    pthread_mutex_lock(&ws->lock);
    r->next = ws->regs;
    ws->regs = r;
    pthread_mutex_unlock(&ws->lock);
    MPCCL_INFO(MPCCL_SUB_P2P, "comm 0x%llx: registered %p (%zu bytes) as handle %p", (unsigned long long)comm->id,
               buff, size, (void *)r);
    *handle = r;
    return MPCCL_OK;
fail:
    mpccl_reg_free(comm, r);
    return st;
}

mpccl_status_t mpccl_reg_deregister(ncclComm_t comm, void *handle)
{
    mpccl_win_state_t *ws = comm->win;
    mpccl_reg_t *r = NULL;
    if (ws) {
        pthread_mutex_lock(&ws->lock);
        for (mpccl_reg_t **pp = &ws->regs; *pp; pp = &(*pp)->next)
            if ((void *)*pp == handle) {
                r = *pp;
                *pp = r->next;
                break;
            }
        pthread_mutex_unlock(&ws->lock);
    }
    if (!r)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "ncclCommDeregister: argument handle = %p is not a live registration of comm %p "
                          "(deregistered already, or from another communicator)",
                          handle, (void *)comm);
    mpccl_reg_free(comm, r);
    return MPCCL_OK;
}
