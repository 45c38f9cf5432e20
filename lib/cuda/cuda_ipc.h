/* Sharing device allocations between the ranks of one node.  A region is
 * described by a fixed-size struct that a bootstrap allgather carries; peers in
 * another process open it through CUDA IPC (once per process, cached by owner
 * pid and allocation base), peers in the same process use the pointer directly
 * after enabling peer access.
 *
 * Two kinds of regions: cudaMalloc memory travels as a cudaIpcMemHandle;
 * cuMem (VMM) allocations such as ncclMemAlloc memory travel as a POSIX file
 * descriptor, which the owner offers through its fd server (cuda_fdpass.h) and a
 * peer fetches at import.  Only built with CUDA. */
#ifndef MPCCL_IPC_H
#define MPCCL_IPC_H

#include "cuda/cuda_rt.h"

#ifdef MPCCL_HAVE_CUDA

#include <stdint.h>

typedef struct mpccl_ipc_desc {
    uint64_t host_hash;       /* mpccl_topo_host_hash() of the owner */
    int32_t pid;              /* owner process */
    int32_t dev;              /* owner's device ordinal, in the owner's numbering */
    int32_t vmm;              /* 1: cuMem allocation shared by file descriptor (key: base) */
    uint32_t fd_tag;          /* owner's fd server tag (cuda_fdpass.h), beside pid */
    unsigned char uuid[16];   /* owner's device, comparable across processes */
    uint64_t base;            /* allocation base in the owner's address space */
    uint64_t size;            /* bytes */
    cudaIpcMemHandle_t handle;
} mpccl_ipc_desc_t;

/* Describes the allocation starting at base (base must be the start of the
 * allocation; size its length): cudaMalloc memory, or a cuMem allocation made
 * exportable as a POSIX file descriptor (ncclMemAlloc does).  A VMM export
 * stays offered to peers until mpccl_ipc_unexport. */
mpccl_status_t mpccl_ipc_export(void *base, size_t size, mpccl_ipc_desc_t *out);
/* Ends an export (peers that imported keep their mappings). */
void mpccl_ipc_unexport(const mpccl_ipc_desc_t *d);
/* A pointer usable by device my_dev to the region d describes.  Pair every
 * successful import with one mpccl_ipc_release(d). */
mpccl_status_t mpccl_ipc_import(const mpccl_ipc_desc_t *d, int my_dev, void **out);
void mpccl_ipc_release(const mpccl_ipc_desc_t *d);
/* mpccl_ipc_import with the cuMem allocation's file descriptor in hand (fd,
 * consumed; -1: fetch it from the owner). */
mpccl_status_t mpccl_ipc_import_fd(const mpccl_ipc_desc_t *d, int my_dev, int fd, void **out);

/* cuda_ipc_push.c: this process serves pushes (starts its fd server); once per
 * process before peers may push to it. */
mpccl_status_t mpccl_ipc_serve(void);
/* Has process peer_pid map the region d describes (exported by this process)
 * for its device peer_uuid; *peer_ptr is the region's base there.  Pair with
 * mpccl_ipc_push_release. */
mpccl_status_t mpccl_ipc_push(const mpccl_ipc_desc_t *d, int32_t peer_pid, uint32_t peer_tag, const unsigned char peer_uuid[16],
                              uint64_t *peer_ptr);
/* Undoes one push (a peer process that is gone is fine). */
void mpccl_ipc_push_release(const mpccl_ipc_desc_t *d, int32_t peer_pid, uint32_t peer_tag);

/* The UUID of local device dev. */
mpccl_status_t mpccl_ipc_device_uuid(int dev, unsigned char uuid[16]);
/* The local ordinal of the device with that UUID, -1 when it is not visible
 * to this process (CUDA_VISIBLE_DEVICES). */
int mpccl_ipc_local_device(const unsigned char uuid[16]);
/* Whether kernels on device `mine` (local ordinal, UUID mine_uuid) and on the
 * device with peer_uuid can write into each other's memory: same device, or
 * P2P both ways.  A peer device hidden from this process is asked about
 * through NVML (loaded at run time); without NVML the answer is no.  *how
 * names the source of the answer for the log. */
mpccl_status_t mpccl_ipc_p2p(int mine, const unsigned char mine_uuid[16], const unsigned char peer_uuid[16],
                             int *ok, const char **how);
/* Lets device dev access peer's memory (already enabled is fine). */
mpccl_status_t mpccl_enable_peer_access(int dev, int peer);

#endif /* MPCCL_HAVE_CUDA */
#endif
