/* mpccl-info's sections (tools/mpccl_info.c runs them in order). */
#ifndef MPCCL_INFO_PARTS_H
#define MPCCL_INFO_PARTS_H

#include "info_out.h"

void info_ucx(info_out_t *o);      /* info_ucx.c: UCX versions, CUDA support, transports */
void info_gpu(info_out_t *o);      /* info_gpu.c: CUDA versions, GPUs, P2P and NVLink */
void info_settings(info_out_t *o); /* mpccl_info.c: the settings table with sources */

#endif
