/* Kernels of one-sided operations with peers on other nodes, on GPU
 * communicators (onesided_remote.cu, host side lib/gpu/gpu_win_remote.c).  The
 * proxy's one-sided channel carries each put in pieces: one slot of pinned
 * host memory per piece, a header followed by up to slot_bytes - header bytes
 * of data.  C linkage; graph-capturable (piece numbers are reserved on the
 * device, nothing is baked in at enqueue time). */
#ifndef MPCCL_KERNELS_ONESIDED_REMOTE_H
#define MPCCL_KERNELS_ONESIDED_REMOTE_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#include "kernels/devplan.h"
#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MPCCL_OS_MSG_MAGIC 0x6f737074u /* "ospt" */
#define MPCCL_OS_NO_WIN 0xffffffffu    /* a signal without data */

/* The first bytes of every piece (64, so the data stays 16-byte aligned). */
typedef struct mpccl_os_msg_hdr {
    uint32_t magic;
    uint32_t win_id;  /* the window's ordinal on the communicator (equal on every rank) */
    uint64_t offset;  /* where this piece's data goes, in bytes from the window's start */
    uint32_t bytes;   /* data bytes after the header */
    uint32_t sig;     /* 0, or 1 + the counter index to add 1 to once the data is in place */
    /* GPU-direct puts from a window of the source: 1 + that window's ordinal,
     * the data then leaves from src_offset in it, not from the piece's slot */
    uint32_t src_win;
    uint32_t pad0;
    uint64_t src_offset;
    uint32_t pad[6];
} mpccl_os_msg_hdr_t;

#define MPCCL_OS_HDR_BYTES 64u

/* A put (or, with bytes = 0 and no window, a signal) to one remote peer. */
typedef struct mpccl_os_remote_put {
    mpccl_dev_link_t link;  /* the peer's one-sided channel: tx_slots, tx_ready, tx_len, tx_ack */
    char *data;             /* GPU-direct puts: the device slots that take the data (the header
                             * stays in tx_slots); NULL: the data follows the header in tx_slots */
    uint32_t *reserve;      /* device: pieces handed out for this peer, ever (atomicAdd) */
    uint32_t nslots, slot_bytes;
    const void *src;
    uint64_t bytes;
    uint64_t offset;
    uint32_t win_id, sig;   /* as in the header; sig set on the last piece only */
    uint32_t src_win;       /* GPU-direct, src inside this rank's window 1 + id (0: none): no copy, */
    uint64_t src_offset;    /* the proxy puts from src_offset (src's place in it) on */
    uint32_t *proxy_count;  /* puts finished (device memory), stored into proxy_done */
    uint32_t *proxy_done;   /* (pinned) once the last piece is raised (lib/proxy/proxy.h) */
    int32_t peer;           /* the rank it goes to (the hang record) */
    mpccl_abort_arg_t ab;   /* the communicator's abort word (kernels/abort.cuh) */
} mpccl_os_remote_put_t;

/* Copies src into the channel's slots piece by piece (waiting for free slots)
 * and raises tx_ready for each; returns once src may be reused.  With data
 * (GPU-direct puts) it returns once the proxy acknowledged every piece: the
 * puts left, and a stream that completed has nothing left in the proxy. */
mpccl_status_t mpccl_os_remote_put_launch(const mpccl_os_remote_put_t *a, cudaStream_t stream);
/* Pieces up to this many bytes are copied into the window by the delivery
 * kernel itself, reading the slot over PCIe; larger ones by cudaMemcpyAsync
 * before it (one launch less against a DMA that a few KB do not need). */
#define MPCCL_OS_DELIVER_KERNEL_BYTES 8192u
/* Receiver side: copies bytes (<= MPCCL_OS_DELIVER_KERNEL_BYTES; 0 when the
 * copy ran before on the stream) from src (the slot's device view) to dst,
 * then adds 1 to *sig (when not NULL), then writes value to *ack (the
 * proxy's rx_ack: the slot may be received into again). */
mpccl_status_t mpccl_os_delivered_launch(void *dst, const void *src, uint32_t bytes, uint64_t *sig,
                                         volatile uint32_t *ack, uint32_t value, cudaStream_t stream);
/* Loads these kernels on the current device now.  With lazy module loading
 * (CUDA's default) the first launch of a kernel may wait for the context to
 * go idle, which never happens while a wait kernel spins for that very
 * kernel's signal. */
mpccl_status_t mpccl_os_remote_preload(void);

#ifdef __cplusplus
}
#endif
#endif
