/* Registration, windows, one-sided operations and communicator properties
 * (NCCL 2.29): argument checks, then lib/onesided/onesided_win.c, onesided_register.c, onesided.c. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/api_check.h"
#include "api/api_check_win.h"
#include "core/group.h"
#include "util/datatype.h"
#include "onesided/onesided_win.h"

MPCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size, void **handle)
{
    static const char fn[] = "ncclCommRegister";
    mpccl_status_t st = mpccl_check_comm_live(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "buff", buff);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "handle", handle);
    if (st == MPCCL_OK && size == 0)
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: argument size = 0, expected the buffer's length in bytes", fn);
    if (st == MPCCL_OK) st = mpccl_reg_register(comm, buff, size, handle);
    return mpccl_result(st);
}

MPCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle)
{
    static const char fn[] = "ncclCommDeregister";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "handle", handle);
    if (st == MPCCL_OK) st = mpccl_reg_deregister(comm, handle);
    return mpccl_result(st);
}

typedef struct win_job {
    ncclComm_t comm;
    void *buff;
    size_t size;
    int flags;
    mpccl_status_t local;
    ncclWindow_t *win;
    struct win_job *next;
} win_job_t;

/* Inside a group the registration runs at ncclGroupEnd, beside the group's
 * other registrations (each in its own thread): one thread may register a
 * window on several ranks of one communicator, as with NCCL.  Registrations
 * of one communicator are collective in call order, which is the same on
 * every rank, but their threads reach the lock in any order: each thread
 * runs whichever of them is first in line (every queued job has a thread, so
 * all of them run).  So the thread's argument is the communicator, never a
 * job another thread may have run and freed already. */
static mpccl_status_t run_win_job(void *arg)
{
    ncclComm_t comm = arg;
    mpccl_win_state_t *ws = comm->win;
    pthread_mutex_lock(&ws->wait_lock);
    pthread_mutex_lock(&ws->lock);
    win_job_t *j = ws->reg_head;
    ws->reg_head = j->next;
    if (!ws->reg_head) ws->reg_tail = NULL;
    pthread_mutex_unlock(&ws->lock);
    ncclWindow_t w = NULL;
    /* A thread of ncclGroupEnd: the driver calls of a GPU window need the
     * communicator's device current here. */
    if (j->comm->cuda_dev >= 0) {
        mpccl_status_t st = mpccl_comm_enter_device(j->comm->cuda_dev);
        if (st != MPCCL_OK) j->local = st;
    }
    /* (wait_lock: deferred waits of the same group may drive this
     * communicator's worker in another thread meanwhile.) */
    mpccl_status_t st = mpccl_win_register(j->comm, j->buff, j->size, j->flags, j->local, &w);
    pthread_mutex_unlock(&ws->wait_lock);
    if (st == MPCCL_OK) *j->win = w;
    free(j);
    return st;
}

MPCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
          int winFlags)
{
    static const char fn[] = "ncclCommWindowRegister";
    mpccl_status_t st = mpccl_check_comm_live(fn, comm);
    if (st != MPCCL_OK) return mpccl_result(st);
    /* Collective: a rank with bad arguments still joins, so all ranks fail. */
    mpccl_status_t local = mpccl_check_win_register(fn, comm, buff, size, win, winFlags);
    if (mpccl_group_depth() > 0) {
        mpccl_win_state_t *ws;
        MPCCL_CHECK_GOTO(mpccl_win_state(comm, &ws), st, out); /* holds the lock the job takes */
        win_job_t *j = malloc(sizeof(*j));
        if (!j) return mpccl_result(mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn));
        *j = (win_job_t){.comm = comm, .buff = buff, .size = size, .flags = winFlags, .local = local, .win = win};
        pthread_mutex_lock(&ws->lock);
        if (ws->reg_tail) ws->reg_tail->next = j;
        else ws->reg_head = j;
        ws->reg_tail = j;
        pthread_mutex_unlock(&ws->lock);
        st = mpccl_group_defer_init(run_win_job, comm);
        if (st != MPCCL_OK) { /* not queued to run: take it out of the line again (it is the last) */
            pthread_mutex_lock(&ws->lock);
            win_job_t **pp = &ws->reg_head, *prev = NULL;
            while (*pp && *pp != j) prev = *pp, pp = &(*pp)->next;
            if (*pp) *pp = j->next;
            if (ws->reg_tail == j) ws->reg_tail = prev;
            pthread_mutex_unlock(&ws->lock);
            free(j);
        }
        return mpccl_result(st);
    }
    ncclWindow_t w = NULL;
    st = mpccl_win_register(comm, buff, size, winFlags, local, &w);
    if (st == MPCCL_OK) *win = w;
out:
    return mpccl_result(st);
}

MPCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win)
{
    static const char fn[] = "ncclCommWindowDeregister";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "win", win);
    if (st == MPCCL_OK) st = mpccl_win_deregister(comm, win);
    return mpccl_result(st);
}

MPCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void **outUserPtr)
{
    static const char fn[] = "ncclWinGetUserPtr";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "outUserPtr", outUserPtr);
    struct mpccl_win *w = NULL;
    if (st == MPCCL_OK) st = mpccl_check_win(fn, "win", comm, win, &w);
    if (st == MPCCL_OK) *outUserPtr = w->base;
    return mpccl_result(st);
}

/* The checks of ncclPutSignal (has_data) and ncclSignal, then the call. */
static mpccl_status_t put_signal(const char *fn, int has_data, const void *buf, size_t count, ncclDataType_t dt,
                                 int peer, ncclWindow_t handle, size_t offset, int sig, int ctx, unsigned flags,
                                 ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_CHECK(mpccl_check_comm_live(fn, comm));
    struct mpccl_win *win = NULL;
    if (has_data) MPCCL_CHECK(mpccl_check_put(comm, buf, count, dt, peer, handle, offset, sig, ctx, flags, &win));
    else MPCCL_CHECK(mpccl_check_signal(fn, comm, peer, sig, ctx, flags));
    size_t bytes = has_data ? count * mpccl_dtype_size(dt) : 0;
    return mpccl_put_signal(fn, comm, buf, bytes, peer, win, offset, sig, ctx, stream);
}

static mpccl_status_t wait_signal(int ndesc, const ncclWaitSignalDesc_t *descs, ncclComm_t comm, cudaStream_t stream)
{
    MPCCL_CHECK(mpccl_check_comm_live("ncclWaitSignal", comm));
    MPCCL_CHECK(mpccl_check_wait(comm, ndesc, descs));
    return mpccl_wait_signal(ndesc, descs, comm, stream);
}

MPCCL_API(ncclResult_t, ncclPutSignal, const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
          ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
          cudaStream_t stream)
{
    return mpccl_result(put_signal("ncclPutSignal", 1, localbuff, count, datatype, peer, peerWin,
                                         peerWinOffset, sigIdx, ctx, flags, comm, stream));
}

MPCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
          cudaStream_t stream)
{
    return mpccl_result(
        put_signal("ncclSignal", 0, NULL, 0, ncclInt8, peer, NULL, 0, sigIdx, ctx, flags, comm, stream));
}

MPCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
          cudaStream_t stream)
{
    return mpccl_result(wait_signal(nDesc, signalDescs, comm, stream));
}

/* Fields beyond the caller's size (an older header) are left alone. */
#define PROP_FITS(p, field) ((p)->size >= offsetof(ncclCommProperties_t, field) + sizeof((p)->field))

MPCCL_API(ncclResult_t, ncclCommQueryProperties, ncclComm_t comm, ncclCommProperties_t *props)
{
    static const char fn[] = "ncclCommQueryProperties";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "props", props);
    if (st == MPCCL_OK && props->magic != NCCL_API_MAGIC)
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: props->magic = %#x, expected NCCL_API_MAGIC (%#x): initialise props "
                                       "with NCCL_COMM_PROPERTIES_INITIALIZER",
                        fn, props->magic, (unsigned)NCCL_API_MAGIC);
    if (st == MPCCL_OK && props->size < offsetof(ncclCommProperties_t, cudaDev) + sizeof(int))
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: props->size = %zu is too small for an ncclCommProperties_t", fn,
                        props->size);
    if (st != MPCCL_OK) return mpccl_result(st);
    props->rank = comm->rank;
    props->nRanks = comm->nranks;
    props->cudaDev = comm->cuda_dev;
    if (PROP_FITS(props, nvmlDev)) props->nvmlDev = comm->cuda_dev; /* NVML numbers devices as CUDA does without CUDA_VISIBLE_DEVICES */
    /* nccl_device.h: device communicators on GPU communicators. */
    if (PROP_FITS(props, deviceApiSupport)) props->deviceApiSupport = comm->exec->device_api != 0;
    if (PROP_FITS(props, multimemSupport)) props->multimemSupport = false;   /* NVLink multicast is never used */
    if (PROP_FITS(props, ginType)) props->ginType = NCCL_GIN_TYPE_NONE;
    /* Load/store (LSA) teams: consecutive ranks whose GPUs reach each other
     * by P2P (devapi_comm.c); every rank is its own team on host communicators. */
    if (PROP_FITS(props, nLsaTeams)) props->nLsaTeams = comm->nranks / comm->lsa_size;
    /* ncclPutSignal/ncclSignal/ncclWaitSignal reach every peer: on host
     * communicators through UCX RMA; on GPU communicators through peer stores
     * within a node and the proxy's one-sided channel between nodes (and to
     * peers of the node without P2P). */
    if (PROP_FITS(props, hostRmaSupport)) props->hostRmaSupport = comm->exec->rma_reaches_all(comm) != 0;
    if (PROP_FITS(props, railedGinType)) props->railedGinType = NCCL_GIN_TYPE_NONE;
    return ncclSuccess;
}
