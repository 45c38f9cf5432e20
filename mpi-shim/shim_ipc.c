/* GPU to GPU through CUDA IPC: the sender exports the allocation its buffer
 * lies in, the receiver maps it and copies with the copy engines
 * (cudaMemcpy), so no kernel of either process has to run at the same time
 * as the other's: ranks sharing a GPU without MPS move data at copy speed.
 *
 * Both sides cache: the sender its handles per allocation, the receiver its
 * mappings per (process, allocation).  CUDA gives every allocation an id, so
 * an address freed and allocated again is a new entry, and the receiver
 * closes the older mapping of the same address when the new one arrives;
 * the rest are closed when the cache is full (oldest first) or at
 * MPI_Finalize. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "shim_p2p.h"

#ifdef MPCCL_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

int mpccl_shim_alloc_of(const void *p, shim_alloc_t *a)
{
#ifdef MPCCL_HAVE_CUDA
    unsigned int memtype = 0, managed = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    unsigned long long id = 0;
    int ordinal = -1;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                   CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[] = {&memtype, &managed, &start, &size, &id, &ordinal};
    if (!mpccl_shim_cu_attrs(p, 6, attrs, data) || managed || memtype != CU_MEMORYTYPE_DEVICE || size == 0) return 0;
    a->base = (uint64_t)start;
    a->size = size;
    a->buffer_id = id;
    a->device = ordinal;
    return 1;
#else
    (void)p, (void)a;
    return 0;
#endif
}

#ifdef MPCCL_HAVE_CUDA
#define EXPORTS 64
#define IMPORTS 64
static struct {
    uint64_t base, buffer_id;
    cudaIpcMemHandle_t h;
} exports[EXPORTS];
static unsigned export_next;

static struct {
    int pid;
    uint64_t host, base, buffer_id;
    void *mapped;
} imports[IMPORTS];
static unsigned import_next;
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;

static int export_handle(const shim_alloc_t *a, cudaIpcMemHandle_t *h)
{
    int ok = 0;
    pthread_mutex_lock(&ipc_lock);
    for (int i = 0; i < EXPORTS && !ok; i++)
        if (exports[i].base == a->base && exports[i].buffer_id == a->buffer_id) *h = exports[i].h, ok = 1;
    if (!ok && cudaIpcGetMemHandle(h, (void *)(uintptr_t)a->base) == cudaSuccess) {
        unsigned k = export_next++ % EXPORTS;
        exports[k].base = a->base;
        exports[k].buffer_id = a->buffer_id;
        exports[k].h = *h;
        ok = 1;
    }
    pthread_mutex_unlock(&ipc_lock);
    if (!ok) (void)cudaGetLastError(); /* e.g. cuMem or pool memory: pushed instead */
    return ok;
}

static void import_close(int i)
{
    if (imports[i].mapped) cudaIpcCloseMemHandle(imports[i].mapped);
    (void)cudaGetLastError();
    memset(&imports[i], 0, sizeof(imports[i]));
}

/* The sender's allocation mapped here; NULL when it cannot be. */
static void *import_map(const shim_env_t *e)
{
    void *p = NULL;
    cudaIpcMemHandle_t h;
    pthread_mutex_lock(&ipc_lock);
    for (int i = 0; i < IMPORTS && p == NULL; i++) {
        if (imports[i].mapped == NULL || imports[i].pid != e->pid || imports[i].host != e->hostid ||
            imports[i].base != e->base)
            continue;
        if (imports[i].buffer_id == e->buffer_id) p = imports[i].mapped;
        else import_close(i); /* the sender freed that buffer and got the address again */
    }
    if (p == NULL) {
        memcpy(&h, e->ipc, sizeof(h));
        if (cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess) {
            unsigned k = import_next++ % IMPORTS;
            import_close((int)k);
            imports[k].pid = e->pid;
            imports[k].host = e->hostid;
            imports[k].base = e->base;
            imports[k].buffer_id = e->buffer_id;
            imports[k].mapped = p;
        } else {
            SHIM_INFO("cudaIpcOpenMemHandle of rank %u's buffer failed (%s): the data is pushed instead", e->sender,
                      cudaGetErrorString(cudaGetLastError()));
            p = NULL;
        }
    }
    pthread_mutex_unlock(&ipc_lock);
    return p;
}
#endif

_Static_assert(sizeof(((shim_env_t *)0)->ipc) >= 64, "room for a cudaIpcMemHandle_t");

void mpccl_shim_ipc_export(const void *p, shim_env_t *e)
{
    e->kind = SHIM_ENV_PUSH;
#ifdef MPCCL_HAVE_CUDA
    shim_alloc_t a;
    cudaIpcMemHandle_t h;
    if (mpccl_shim_settings()->host_mode || !mpccl_shim_alloc_of(p, &a)) return;
    e->base = a.base;
    e->offset = (uint64_t)(uintptr_t)p - a.base;
    e->buffer_id = a.buffer_id;
    e->device = a.device;
    if (!export_handle(&a, &h)) return;
    memcpy(e->ipc, &h, sizeof(h));
    e->kind = SHIM_ENV_IPC;
#else
    (void)p;
#endif
}

int mpccl_shim_ipc_pull(const shim_env_t *e, void *dst, size_t bytes)
{
#ifdef MPCCL_HAVE_CUDA
    const char *src;
    if (e->kind != SHIM_ENV_IPC || e->hostid != mpccl_shim_hostid() || mpccl_shim_settings()->host_mode ||
        !mpccl_shim_gpu_process())
        return MPI_ERR_OTHER;
    if (e->pid == (int32_t)getpid()) {
        src = (const char *)(uintptr_t)e->base; /* a message to ourselves */
    } else {
        src = import_map(e);
        if (src == NULL) return MPI_ERR_OTHER;
    }
    /* The copy engines, ordered after our legacy default stream's work (the
     * receive buffer may still be read by an earlier kernel).  A
     * device-to-device cudaMemcpy returns before the copy is done, and the
     * sender reuses its buffer once we answer: wait for it. */
    cudaError_t err = cudaMemcpy(dst, src + e->offset, bytes, cudaMemcpyDefault);
    if (err == cudaSuccess) err = cudaStreamSynchronize(cudaStreamLegacy);
    if (err == cudaSuccess) return MPI_SUCCESS;
    SHIM_WARN("copying %zu bytes from rank %u's GPU buffer failed: %s", bytes, e->sender, cudaGetErrorString(err));
    (void)cudaGetLastError();
    return MPI_ERR_OTHER;
#else
    (void)e, (void)dst, (void)bytes;
    return MPI_ERR_OTHER;
#endif
}

void mpccl_shim_sync_legacy(void)
{
#ifdef MPCCL_HAVE_CUDA
    if (mpccl_shim_settings()->host_mode || !mpccl_shim_gpu_process()) return;
    if (cudaStreamSynchronize(cudaStreamLegacy) != cudaSuccess) (void)cudaGetLastError();
#endif
}

void mpccl_shim_ipc_fini(void)
{
#ifdef MPCCL_HAVE_CUDA
    pthread_mutex_lock(&ipc_lock);
    for (int i = 0; i < IMPORTS; i++)
        if (imports[i].mapped) import_close(i);
    pthread_mutex_unlock(&ipc_lock);
#endif
}
