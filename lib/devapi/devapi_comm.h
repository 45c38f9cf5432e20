/* The device API's host side (devapi_comm.c): device communicators. */
#ifndef MPCCL_DEVCOMM_H
#define MPCCL_DEVCOMM_H

#include "core/comm.h"

/* Releases every device communicator still live (ncclCommDestroy/Abort);
 * kernels still waiting in their barriers are told to give up. */
void mpccl_devcomm_release_all(ncclComm_t comm);
/* Tells kernels waiting in the device communicators' barriers to give up
 * (mpccl_gpu_comm_stop); releases nothing. */
void mpccl_devcomm_stop_all(ncclComm_t comm);

#endif
