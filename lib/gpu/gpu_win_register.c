/* ncclCommRegister on GPU communicators.  The allocation holding the buffer is
 * exported over CUDA IPC; when the communicator has flat kernels (one node,
 * P2P between all ranks) it is also mapped into every peer's process right
 * away (cuda_ipc_push.c), so that a collective whose input and output are
 * registered on every rank -- NCCL's condition for using registrations --
 * reads and writes the peers' buffers directly: each rank's kernel tells each
 * peer where its buffer lies in that peer's address space, and no byte goes
 * through the region (lib/kernels/flat_win_impl.cuh). */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <stdlib.h>

#include "gpu/gpu_flat.h"
#include "gpu/gpu_launch.h"
#include "cuda/cuda_ipc.h"
#include "util/log.h"
#include "gpu/gpu_win.h"

/* Undoes the pushes of r (those with a peer base). */
static void unpush(ncclComm_t comm, mpccl_reg_t *r)
{
    const mpccl_ipc_desc_t *d = r->gpu;
    mpccl_flat_comm_t *f = mpccl_gpu_flat(comm);
    for (int j = 0; r->peer_base && j < comm->nranks; j++)
        if (j != comm->rank && r->peer_base[j]) mpccl_ipc_push_release(d, mpccl_flat_reg_peer(f, j)->pid, mpccl_flat_reg_peer(f, j)->fd_tag);
    free(r->peer_base);
    r->peer_base = NULL;
}

/* Maps r's allocation into every peer process.  All or nothing: a registration
 * that some peer cannot reach is refused, because the peers decide to use it
 * without asking this rank. */
static mpccl_status_t push_to_peers(ncclComm_t comm, mpccl_reg_t *r)
{
    mpccl_flat_comm_t *f = mpccl_gpu_flat(comm);
    if (!mpccl_flat_reg_peer(f, comm->rank)) return MPCCL_OK;
    r->peer_base = calloc((size_t)comm->nranks, sizeof(uint64_t));
    if (!r->peer_base) return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclCommRegister: out of memory");
    const mpccl_ipc_desc_t *d = r->gpu;
    for (int j = 0; j < comm->nranks; j++) {
        if (j == comm->rank) continue;
        const mpccl_ipc_desc_t *peer = mpccl_flat_reg_peer(f, j);
        uint64_t base = 0;
        mpccl_status_t st = mpccl_ipc_push(d, peer->pid, peer->fd_tag, peer->uuid, &base);
        if (st != MPCCL_OK) {
            unpush(comm, r);
            return mpccl_fail(st, "ncclCommRegister: rank %d (process %d) cannot map buffer %p: %s", j,
                              (int)peer->pid, r->base, mpccl_last_error());
        }
        r->peer_base[j] = base;
    }
    MPCCL_INFO(MPCCL_SUB_P2P, "comm 0x%llx: registered %p (%zu bytes) is mapped by every peer; collectives on it "
               "from MPCCL_FLAT_WIN_BYTES skip the region", (unsigned long long)comm->id, r->base, r->size);
    return MPCCL_OK;
}

mpccl_status_t mpccl_gpu_reg_export(ncclComm_t comm, mpccl_reg_t *r)
{
    MPCCL_CHECK(mpccl_check_gpu_buffer("ncclCommRegister", "buff", r->base, r->size, comm->cuda_dev));
    const mpccl_cu_fns_t *cu;
    MPCCL_CHECK(mpccl_cu_get(&cu));
    CUdeviceptr abase = 0;
    size_t asize = 0;
    CUresult cr = cu->cuMemGetAddressRange(&abase, &asize, (CUdeviceptr)(uintptr_t)r->base);
    if (cr != CUDA_SUCCESS) return mpccl_cu_error(cr, "cuMemGetAddressRange (ncclCommRegister)");
    mpccl_ipc_desc_t *d = calloc(1, sizeof(*d));
    if (!d) return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclCommRegister: out of memory");
    mpccl_status_t st = mpccl_ipc_export((void *)(uintptr_t)abase, asize, d);
    if (st != MPCCL_OK) {
        free(d);
        return st;
    }
    r->gpu = d;
    st = push_to_peers(comm, r);
    if (st != MPCCL_OK) {
        mpccl_ipc_unexport(d);
        free(d);
        r->gpu = NULL;
    }
    return st;
}

void mpccl_gpu_reg_free(ncclComm_t comm, mpccl_reg_t *r)
{
    if (r->gpu) {
        unpush(comm, r);
        mpccl_ipc_unexport(r->gpu);
    }
    free(r->gpu);
    r->gpu = NULL;
}

int mpccl_gpu_reg_peers(ncclComm_t comm, const void *p, size_t bytes, char **peers)
{
    mpccl_win_state_t *ws = comm->win;
    if (!ws || !p || !bytes) return 0;
    int found = 0;
    pthread_mutex_lock(&ws->lock);
    for (mpccl_reg_t *r = ws->regs; r && !found; r = r->next) {
        const char *b = r->base;
        if (!r->peer_base || (const char *)p < b) continue;
        size_t off = (size_t)((const char *)p - b);
        if (off > r->size || bytes > r->size - off) continue;
        uint64_t from_alloc = (uint64_t)(uintptr_t)p - ((const mpccl_ipc_desc_t *)r->gpu)->base;
        for (int j = 0; j < comm->nranks; j++)
            peers[j] = j == comm->rank ? (char *)p : (char *)(uintptr_t)(r->peer_base[j] + from_alloc);
        found = 1;
    }
    pthread_mutex_unlock(&ws->lock);
    return found;
}
#endif
