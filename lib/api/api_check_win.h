/* Argument checks of registration, windows and one-sided calls (the style of
 * api_check.c: each failure names the function, argument, value, expectation). */
#ifndef MPCCL_ARGCHECK_WIN_H
#define MPCCL_ARGCHECK_WIN_H

#include "core/comm.h"

/* Window registration arguments of this rank (buff, size, flags, alignment). */
mpccl_status_t mpccl_check_win_register(const char *fn, ncclComm_t comm, const void *buff, size_t size,
                                        const ncclWindow_t *win, int flags);
/* win is a live window of comm. */
struct mpccl_win;
/* A live window of comm; *out is the library's record of it. */
mpccl_status_t mpccl_check_win(const char *fn, const char *arg, ncclComm_t comm, ncclWindow_t win,
                               struct mpccl_win **out);
/* peer, sigIdx, ctx, flags of ncclPutSignal / ncclSignal; the signal area exists. */
mpccl_status_t mpccl_check_signal(const char *fn, ncclComm_t comm, int peer, int sig, int ctx, unsigned flags);
/* Every argument of ncclPutSignal (comm already checked). */
mpccl_status_t mpccl_check_put(ncclComm_t comm, const void *buf, size_t count, ncclDataType_t dt, int peer,
                               ncclWindow_t win, size_t offset, int sig, int ctx, unsigned flags,
                               struct mpccl_win **out);
/* Every descriptor of ncclWaitSignal (comm already checked). */
mpccl_status_t mpccl_check_wait(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t *descs);

#endif
