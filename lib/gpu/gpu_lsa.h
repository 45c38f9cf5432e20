/* The LSA team of a GPU communicator (device API), agreed at setup. */
#ifndef MPCCL_GPU_LSA_H
#define MPCCL_GPU_LSA_H

#include "core/comm.h"
#include "kernels/devplan.h"

/* Collective, at GPU communicator setup: comm->lsa_first/lsa_size from the
 * links (links[r].kind NVLINK: this GPU loads and stores rank r's memory). */
mpccl_status_t mpccl_lsa_setup(ncclComm_t comm, const mpccl_dev_link_t *links);

#endif
