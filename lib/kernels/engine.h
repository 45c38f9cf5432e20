/* The device engine (engine.cu): one launch runs one rank's device plan
 * (lib/kernels/plan.h) over the links of its communicator (lib/kernels/devplan.h).
 * C linkage; see doc/GPU_DESIGN.md, "One kernel per call". */
#ifndef MPCCL_ENGINE_H
#define MPCCL_ENGINE_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#include "kernels/devplan.h"
#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per CTA of the engine kernel. */
#define MPCCL_ENGINE_THREADS 512

/* Launches the engine with nctas CTAs on stream.  nctas must equal the
 * communicator's G (comm->nctas; the kernel traps otherwise) and every rank of
 * the communicator must launch its part so that all CTAs of all ranks can be
 * resident together.  Launches of one plan must be ordered on one stream (its
 * launch counter gives each launch its epoch); capturing the launch into a CUDA
 * graph and replaying it is fine.  Only enqueues: never synchronises. */
mpccl_status_t mpccl_engine_launch(const mpccl_engine_args_t *args, uint32_t nctas, cudaStream_t stream);
/* The small-call form (engine_small.cu): one CTA runs a plan that
 * mpccl_gpu_plan_small accepts (every message a single LL piece to another
 * node), with the engine's protocol on CTA 0's channels.  A plan is run by
 * one of the two kernels only, chosen once. */
/* overlap: the launch may start while the previous kernel of the stream
 * runs (programmatic dependent launch); it waits for that kernel before it
 * reads anything but its plan. */
mpccl_status_t mpccl_engine_small_launch(const mpccl_engine_args_t *args, cudaStream_t stream, int overlap);
mpccl_status_t mpccl_engine_small_load(void);

/* Loads the engine and prescale kernels of every datatype into the current
 * device's context now (lib/gpu/gpu_kernels_load.c says why). */
mpccl_status_t mpccl_engine_load(void);

/* dst[i] = src[i] * scalar for n elements of dtype (ncclDataType_t), scalar
 * pointing to one host-side element of dtype: the PreMulSum / float-avg copy of
 * the input that the engine then reads as its IN buffer.  dst may equal src. */
mpccl_status_t mpccl_gpu_scale_launch(int dtype, void *dst, const void *src, const void *scalar_elem, uint64_t n,
                                      cudaStream_t stream);
/* The same with the scalar read on the device when the kernel runs (scalar_dev,
 * device-accessible) instead of the host value scalar_elem. */
mpccl_status_t mpccl_gpu_scale_launch_dev(int dtype, void *dst, const void *src, const void *scalar_elem,
                                          const void *scalar_dev, uint64_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
