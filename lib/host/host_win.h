/* The host half of windows and one-sided operations (host_win.c), behind
 * the host executor's hooks (core/exec.h). */
#ifndef MPCCL_HOST_WIN_H
#define MPCCL_HOST_WIN_H

#include "onesided/onesided_win.h"

/* host_win.c: host communicators (UCX RMA).  Setup functions are
 * collective and agree on failure. */
mpccl_status_t mpccl_host_sig_setup(ncclComm_t comm, mpccl_win_state_t *ws);
void mpccl_host_sig_free(ncclComm_t comm, mpccl_win_state_t *ws);
mpccl_status_t mpccl_host_win_setup(ncclComm_t comm, struct mpccl_win *w);
void mpccl_host_win_free(ncclComm_t comm, struct mpccl_win *w);
/* defer: leave the put in flight (a group); mpccl_host_flush completes it. */
mpccl_status_t mpccl_host_put_signal(ncclComm_t comm, const void *src, size_t bytes, int peer,
                                     struct mpccl_win *w, size_t offset, int sig, int ctx, int defer);
mpccl_status_t mpccl_host_flush(ncclComm_t comm);
/* Detaches and frees puts still in flight (communicator release). */
void mpccl_host_drop(ncclComm_t comm);
mpccl_status_t mpccl_host_wait_signal(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t *descs);
/* The host executor's hooks (core/exec.h): put/signal with group semantics
 * (inside a group the put stays in flight until ncclGroupEnd), waits,
 * dropping a group's puts at release, registrations mapped with UCX. */
mpccl_status_t mpccl_host_put_signal_call(ncclComm_t comm, const void *src, size_t bytes, int peer,
                                          struct mpccl_win *w, size_t offset, int sig, int ctx, cudaStream_t stream);
mpccl_status_t mpccl_host_wait_signal_call(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t *descs,
                                           cudaStream_t stream);
void mpccl_host_win_stop(ncclComm_t comm);
mpccl_status_t mpccl_host_reg_export(ncclComm_t comm, mpccl_reg_t *r);
void mpccl_host_reg_free(ncclComm_t comm, mpccl_reg_t *r);

#endif
