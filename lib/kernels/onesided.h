/* Kernels of one-sided operations on GPU communicators (onesided.cu).  C
 * linkage; stream-ordered, graph-capturable (no host-side counters: expected
 * counts live in device memory and the wait kernel advances them). */
#ifndef MPCCL_KERNELS_ONESIDED_H
#define MPCCL_KERNELS_ONESIDED_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#include "kernels/abort.h"
#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Descriptors per wait launch (kernel parameter space). */
#define MPCCL_OS_WAIT_MAX 64

typedef struct mpccl_os_wait_args {
    uint64_t *sig;      /* this rank's counters (device memory peers add to) */
    uint64_t *expected; /* this rank's consumed counts, same indexing */
    uint32_t n;
    uint32_t idx[MPCCL_OS_WAIT_MAX]; /* counter index of each descriptor */
    uint32_t cnt[MPCCL_OS_WAIT_MAX]; /* signals to consume */
    int32_t peer[MPCCL_OS_WAIT_MAX]; /* who signals (the hang record) */
    mpccl_abort_arg_t ab;            /* the communicator's abort word (kernels/abort.cuh) */
} mpccl_os_wait_args_t;

/* After everything before it on stream: makes prior writes visible system
 * wide, then adds 1 to *word (a peer's counter, mapped over CUDA IPC). */
mpccl_status_t mpccl_os_signal_launch(uint64_t *word, cudaStream_t stream);
/* Threads per CTA of the put kernel. */
#define MPCCL_OS_PUT_THREADS 512
/* One kernel of nctas CTAs (more than one: a cooperative launch, at most
 * mpccl_os_put_max_ctas): copies bytes from src (this GPU) to dst (a peer's
 * window, over P2P), makes the stores visible system wide, then adds 1 to
 * *word. */
mpccl_status_t mpccl_os_put_signal_launch(void *dst, const void *src, size_t bytes, uint64_t *word,
                                          unsigned nctas, cudaStream_t stream);
/* CTAs of the put kernel that fit on device dev at once (the current device). */
unsigned mpccl_os_put_max_ctas(int dev);
/* Waits on the device until every counter reached its expected count plus
 * its cnt, then advances the expected counts. */
mpccl_status_t mpccl_os_wait_launch(const mpccl_os_wait_args_t *a, cudaStream_t stream);
/* Loads these kernels on the current device now: with lazy module loading the
 * first launch of a signal kernel could wait for the context to go idle while
 * a wait kernel of the same process spins for that signal (several ranks per
 * process). */
mpccl_status_t mpccl_os_preload(void);

#ifdef __cplusplus
}
#endif
#endif
