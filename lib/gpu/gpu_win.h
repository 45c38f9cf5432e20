/* The GPU half of windows and one-sided operations (gpu_win.c,
 * gpu_win_register.c), behind the GPU executor's hooks (core/exec.h). */
#ifndef MPCCL_GPU_WIN_H
#define MPCCL_GPU_WIN_H

#include "onesided/onesided_win.h"

/* gpu_win.c: GPU communicators (peers on this node). */
mpccl_status_t mpccl_gpu_sig_setup(ncclComm_t comm, mpccl_win_state_t *ws);
void mpccl_gpu_sig_free(ncclComm_t comm, mpccl_win_state_t *ws);
/* This rank's signal counters (device memory). */
uint64_t *mpccl_gpu_sig_area(ncclComm_t comm);
/* Collective: maps the peers' windows and builds the device descriptor, whose
 * address becomes w->handle. */
mpccl_status_t mpccl_gpu_win_setup(ncclComm_t comm, struct mpccl_win *w);
/* Window pointer for the device of comm: lsa index i (NULL when i is out of range). */
void *mpccl_gpu_win_lsa_ptr(ncclComm_t comm, struct mpccl_win *w, int lsa_index);
void mpccl_gpu_win_free(ncclComm_t comm, struct mpccl_win *w);
/* Collectives on windows: 1 when [p, p + bytes) lies in a window of comm
 * registered with NCCL_WIN_COLL_SYMMETRIC that every rank's kernels reach;
 * peers[r] is then the same offset in rank r's window (as this device sees
 * it).  0 otherwise. */
int mpccl_gpu_win_sym_peers(ncclComm_t comm, const void *p, size_t bytes, char **peers);
mpccl_status_t mpccl_gpu_put_signal(ncclComm_t comm, const void *src, size_t bytes, int peer,
                                    struct mpccl_win *w, size_t offset, int sig, int ctx,
                                    cudaStream_t stream);
mpccl_status_t mpccl_gpu_wait_signal(ncclComm_t comm, int ndesc, const ncclWaitSignalDesc_t *descs,
                                     cudaStream_t stream);
/* Before windows go: deliveries from other nodes stop (gpu_win_remote.c). */
void mpccl_gpu_win_stop(ncclComm_t comm);
/* gpu_win_register.c: exports r's allocation and, on communicators with flat
 * kernels, maps it into every peer process. */
mpccl_status_t mpccl_gpu_reg_export(ncclComm_t comm, mpccl_reg_t *r);
void mpccl_gpu_reg_free(ncclComm_t comm, mpccl_reg_t *r);
/* Collectives on registered buffers: 1 when [p, p + bytes) lies in a
 * registration of comm that every peer has mapped; peers[r] is then p as
 * rank r's device sees it.  0 otherwise. */
int mpccl_gpu_reg_peers(ncclComm_t comm, const void *p, size_t bytes, char **peers);

#endif
