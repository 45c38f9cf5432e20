/* Collectives on symmetric windows moved by the copy engines.
 *
 * From MPCCL_FLAT_CE_BYTES per rank, a call of 2 ranks that only moves data
 * (allgather, alltoall out of place, broadcast) on NCCL_WIN_COLL_SYMMETRIC
 * windows is a cudaMemcpyAsync copy straight into the peer's window between
 * two one-CTA barrier kernels (flat_win_impl.cuh's enter and exit modes).  The
 * copy engines move 391 GB/s per direction over NVLink with both directions
 * busy where SMs storing into the peer move 364 (2 x H200, mpccl-floor).
 * The own block (out of place) is copied by a small SM kernel beside them.
 * Only symmetric windows: the host must know the peers' addresses when it
 * enqueues a copy, and registered buffers tell theirs only inside the kernel.
 * Only built with CUDA. */
#ifndef MPCCL_GPU_FLAT_CE_H
#define MPCCL_GPU_FLAT_CE_H

#include "cuda/cuda_rt.h"

#ifdef MPCCL_HAVE_CUDA
#include "kernels/flat.h"

/* Side streams beside the user's: with 2 ranks the own block's copy runs on
 * one while the peer's copy runs on the user's stream. */
#define MPCCL_FLAT_CE_STREAMS 1

/* One communicator's copy-engine state; its CUDA objects are made at the
 * first call that uses them. */
typedef struct mpccl_flat_ce {
    int ready;
    cudaStream_t side[MPCCL_FLAT_CE_STREAMS];
    cudaEvent_t fork, join[MPCCL_FLAT_CE_STREAMS];
} mpccl_flat_ce_t;

/* Whether a window call of this mode moves by copies (the same answer on every
 * rank: mode, rank count and size are alike everywhere).  Only between 2
 * ranks, where one copy engine per direction beats the SMs. */
int mpccl_flat_ce_takes(int mode, int nranks, uint64_t bytes_per_rank, uint64_t ce_bytes);

/* Enqueues the call on stream: enter barrier, the copies, exit barrier.  a is
 * filled as for the window kernel with exchange 0 (in/out as this device sees
 * them, count elements of esz bytes per block); a copy whose source is its
 * destination (in place) is skipped. */
mpccl_status_t mpccl_flat_ce_launch(mpccl_flat_ce_t *ce, const mpccl_flat_win_args_t *a, uint64_t esz,
                                    cudaStream_t stream);

void mpccl_flat_ce_destroy(mpccl_flat_ce_t *ce);
#endif
#endif
