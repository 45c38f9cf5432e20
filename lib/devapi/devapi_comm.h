/* The device API's host side (devapi_comm.c): the LSA team, device communicators. */
#ifndef MPCCL_DEVCOMM_H
#define MPCCL_DEVCOMM_H

#include "core/comm.h"

#ifdef MPCCL_HAVE_CUDA
#include "kernels/devplan.h"
/* Collective, at GPU communicator setup: comm->lsa_first/lsa_size from the
 * links (links[r].kind NVLINK: this GPU loads and stores rank r's memory). */
mpccl_status_t mpccl_lsa_setup(ncclComm_t comm, const mpccl_dev_link_t *links);
#endif

/* Releases every device communicator still live (ncclCommDestroy/Abort);
 * kernels still waiting in their barriers are told to give up. */
void mpccl_devcomm_release_all(ncclComm_t comm);
/* Tells kernels waiting in the device communicators' barriers to give up
 * (mpccl_gpu_comm_stop); releases nothing. */
void mpccl_devcomm_stop_all(ncclComm_t comm);

#endif
