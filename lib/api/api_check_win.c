/* Argument checks of registration, windows and one-sided operations.  A call
 * that fails here has written nothing anywhere. */
#include <stdint.h>
#include <stdio.h>

#include "api/api_check.h"
#include "api/api_check_win.h"
#include "util/datatype.h"
#include "onesided/onesided_win.h"

#define WIN_FLAGS_KNOWN (NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING)

mpccl_status_t mpccl_check_win_register(const char *fn, ncclComm_t comm, const void *buff, size_t size,
                                        const ncclWindow_t *win, int flags)
{
    (void)comm;
    MPCCL_CHECK(mpccl_check_ptr(fn, "win", win));
    if (buff == NULL && size)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument buff is NULL with size = %zu, expected a buffer", fn, size);
    if ((uintptr_t)buff % NCCL_WIN_REQUIRED_ALIGNMENT)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument buff = %p is not aligned to NCCL_WIN_REQUIRED_ALIGNMENT (%d bytes); "
                          "allocate it with ncclMemAlloc, cudaMalloc or posix_memalign",
                          fn, buff, NCCL_WIN_REQUIRED_ALIGNMENT);
    if (flags & ~WIN_FLAGS_KNOWN)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument winFlags = %#x has unknown bits %#x (expected NCCL_WIN_DEFAULT, "
                          "NCCL_WIN_COLL_SYMMETRIC, NCCL_WIN_STRICT_ORDERING)",
                          fn, (unsigned)flags, (unsigned)(flags & ~WIN_FLAGS_KNOWN));
    return MPCCL_OK;
}

mpccl_status_t mpccl_check_win(const char *fn, const char *arg, ncclComm_t comm, ncclWindow_t win,
                               struct mpccl_win **out)
{
    if (win == NULL) return mpccl_fail(MPCCL_ERR_ARG, "%s: argument %s is NULL, expected a window", fn, arg);
    if (!(*out = mpccl_win_find(comm, win)))
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument %s = %p is not a live window of comm %p (deregistered, or registered on "
                          "another communicator)",
                          fn, arg, (void *)win, (void *)comm);
    return MPCCL_OK;
}

/* pfx names where the fields come from: "argument " or "signalDescs[i]." */
static mpccl_status_t check_fields(const char *fn, const char *pfx, ncclComm_t comm, int peer, int sig, int ctx)
{
    if (peer < 0 || peer >= comm->nranks)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: %speer = %d, expected a rank in [0, %d)", fn, pfx, peer, comm->nranks);
    if (sig < 0 || sig >= MPCCL_WIN_NSIG)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: %ssigIdx = %d, expected a value in [0, %d)", fn, pfx, sig,
                          MPCCL_WIN_NSIG);
    if (ctx < 0 || ctx >= MPCCL_WIN_NCTX)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: %sctx = %d, expected a value in [0, %d)", fn, pfx, ctx, MPCCL_WIN_NCTX);
    return MPCCL_OK;
}

static mpccl_status_t check_sig_ready(const char *fn, ncclComm_t comm)
{
    if (!comm->win || !comm->win->sig_ready)
        return mpccl_fail(MPCCL_ERR_USAGE,
                          "%s: comm %p has no window yet; signal areas are exchanged by the first "
                          "ncclCommWindowRegister",
                          fn, (void *)comm);
    return MPCCL_OK;
}

mpccl_status_t mpccl_check_signal(const char *fn, ncclComm_t comm, int peer, int sig, int ctx, unsigned flags)
{
    MPCCL_CHECK(check_fields(fn, "argument ", comm, peer, sig, ctx));
    if (flags != 0)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument flags = %#x, expected 0 (no flags are defined)", fn, flags);
    return check_sig_ready(fn, comm);
}

mpccl_status_t mpccl_check_put(ncclComm_t comm, const void *buf, size_t count, ncclDataType_t dt, int peer,
                               ncclWindow_t h, size_t offset, int sig, int ctx, unsigned flags, struct mpccl_win **out)
{
    static const char fn[] = "ncclPutSignal";
    MPCCL_CHECK(mpccl_check_dtype(fn, dt));
    if (buf == NULL && count)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument localbuff is NULL with count = %zu", fn, count);
    MPCCL_CHECK(mpccl_check_signal(fn, comm, peer, sig, ctx, flags));
    MPCCL_CHECK(mpccl_check_win(fn, "peerWin", comm, h, out));
    struct mpccl_win *win = *out;
    size_t esize = mpccl_dtype_size(dt);
    size_t wsize = win->peer_size[peer];
    if (count > SIZE_MAX / esize || offset > wsize || count * esize > wsize - offset)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument peerWinOffset = %zu plus count = %zu elements of %s runs past the end "
                          "of rank %d's window (%zu bytes)",
                          fn, offset, count, mpccl_dtype_name(dt), peer, wsize);
    return MPCCL_OK;
}

mpccl_status_t mpccl_check_wait(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t *descs)
{
    static const char fn[] = "ncclWaitSignal";
    if (ndesc < 0) return mpccl_fail(MPCCL_ERR_ARG, "%s: argument nDesc = %d, expected >= 0", fn, ndesc);
    if (ndesc > 0 && descs == NULL)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument signalDescs is NULL with nDesc = %d", fn, ndesc);
    for (int i = 0; i < ndesc; i++) {
        char pfx[40];
        snprintf(pfx, sizeof(pfx), "signalDescs[%d].", i);
        if (descs[i].opCnt < 0)
            return mpccl_fail(MPCCL_ERR_ARG, "%s: %sopCnt = %d, expected >= 0", fn, pfx, descs[i].opCnt);
        MPCCL_CHECK(check_fields(fn, pfx, comm, descs[i].peer, descs[i].sigIdx, descs[i].ctx));
    }
    return ndesc ? check_sig_ready(fn, comm) : MPCCL_OK;
}
