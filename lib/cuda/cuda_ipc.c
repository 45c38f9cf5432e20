/* CUDA IPC between the ranks of one node (see cuda_ipc.h). */
#include "cuda/cuda_ipc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda_fdpass.h"
#include "util/log.h"
#include "core/topo.h"

mpccl_status_t mpccl_ipc_device_uuid(int dev, unsigned char uuid[16])
{
    struct cudaDeviceProp prop;
    MPCCL_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    memcpy(uuid, prop.uuid.bytes, 16);
    return MPCCL_OK;
}

int mpccl_ipc_local_device(const unsigned char uuid[16])
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    for (int d = 0; d < n; d++) {
        unsigned char u[16];
        if (mpccl_ipc_device_uuid(d, u) == MPCCL_OK && memcmp(u, uuid, 16) == 0) return d;
    }
    return -1;
}

mpccl_status_t mpccl_enable_peer_access(int dev, int peer)
{
    if (dev == peer) return MPCCL_OK;
    int saved;
    MPCCL_CHECK(mpccl_cuda_push_device(dev, &saved));
    cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError(); /* not sticky, but leave no trace for the caller's checks */
        e = cudaSuccess;
    }
    mpccl_cuda_restore_device(saved);
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof(what), "cudaDeviceEnablePeerAccess(device %d -> device %d)", dev, peer);
        return mpccl_cuda_error(e, what);
    }
    return MPCCL_OK;
}

/* ---- NVML, for devices this process cannot see ------------------------------------- */

/* The few NVML types used, as NVML's ABI defines them. */
typedef void *nvml_device_t;
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_by_uuid_fn)(const char *uuid, nvml_device_t *dev);
typedef int (*nvml_p2p_fn)(nvml_device_t a, nvml_device_t b, int caps_index, int *status);
enum { NVML_OK = 0, NVML_P2P_READ = 0, NVML_P2P_WRITE = 1, NVML_P2P_STATUS_OK = 0 };

static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static nvml_by_uuid_fn nvml_by_uuid;
static nvml_p2p_fn nvml_p2p;

static void nvml_load(void)
{
    /* The driver installs libnvidia-ml next to libcuda; it is never linked so
     * that libmpccl loads without a driver. */
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) return;
    nvml_init_fn init = (nvml_init_fn)dlsym(h, "nvmlInit_v2");
    nvml_by_uuid_fn by_uuid = (nvml_by_uuid_fn)dlsym(h, "nvmlDeviceGetHandleByUUID");
    nvml_p2p_fn p2p = (nvml_p2p_fn)dlsym(h, "nvmlDeviceGetP2PStatus");
    if (init == NULL || by_uuid == NULL || p2p == NULL || init() != NVML_OK) return;
    nvml_by_uuid = by_uuid;
    nvml_p2p = p2p;
}

static void uuid_string(const unsigned char u[16], char out[48])
{
    snprintf(out, 48, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

static int nvml_p2p_both_ways(const unsigned char a[16], const unsigned char b[16])
{
    pthread_once(&nvml_once, nvml_load);
    if (nvml_by_uuid == NULL) return -1;
    char sa[48], sb[48];
    uuid_string(a, sa);
    uuid_string(b, sb);
    nvml_device_t da, db;
    if (nvml_by_uuid(sa, &da) != NVML_OK || nvml_by_uuid(sb, &db) != NVML_OK) return -1;
    int caps[2] = {NVML_P2P_READ, NVML_P2P_WRITE};
    for (int i = 0; i < 2; i++) {
        int s1 = -1, s2 = -1;
        if (nvml_p2p(da, db, caps[i], &s1) != NVML_OK || nvml_p2p(db, da, caps[i], &s2) != NVML_OK) return -1;
        if (s1 != NVML_P2P_STATUS_OK || s2 != NVML_P2P_STATUS_OK) return 0;
    }
    return 1;
}

mpccl_status_t mpccl_ipc_p2p(int mine, const unsigned char mine_uuid[16], const unsigned char peer_uuid[16],
                             int *ok, const char **how)
{
    if (memcmp(mine_uuid, peer_uuid, 16) == 0) {
        *ok = 1;
        *how = "same device";
        return MPCCL_OK;
    }
    int peer = mpccl_ipc_local_device(peer_uuid);
    if (peer >= 0) {
        int ab = 0, ba = 0;
        MPCCL_CUDA_CHECK(cudaDeviceCanAccessPeer(&ab, mine, peer));
        MPCCL_CUDA_CHECK(cudaDeviceCanAccessPeer(&ba, peer, mine));
        *ok = ab && ba;
        *how = "cudaDeviceCanAccessPeer";
        return MPCCL_OK;
    }
    int r = nvml_p2p_both_ways(mine_uuid, peer_uuid);
    *ok = r == 1;
    *how = r < 0 ? "peer device not visible and NVML unavailable" : "NVML P2P status";
    return MPCCL_OK;
}

/* ---- export / import ------------------------------------------------------------------ */

mpccl_status_t mpccl_ipc_export(void *base, size_t size, mpccl_ipc_desc_t *out)
{
    const mpccl_cu_fns_t *cu;
    MPCCL_CHECK(mpccl_cu_get(&cu));
    memset(out, 0, sizeof(*out));
    CUdeviceptr abase = 0;
    size_t asize = 0;
    CUresult r = cu->cuMemGetAddressRange(&abase, &asize, (CUdeviceptr)(uintptr_t)base);
    if (r != CUDA_SUCCESS) return mpccl_cu_error(r, "cuMemGetAddressRange (IPC export)");
    if ((uintptr_t)abase != (uintptr_t)base || size > asize)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "IPC export of %p (%zu bytes): the allocation spans 0x%llx + %zu",
                          base, size, (unsigned long long)abase, asize);
    struct cudaPointerAttributes attr;
    MPCCL_CUDA_CHECK(cudaPointerGetAttributes(&attr, base));
    if (attr.type != cudaMemoryTypeDevice)
        return mpccl_fail(MPCCL_ERR_INTERNAL, "IPC export of %p: not device memory", base);
    CUmemGenericAllocationHandle h;
    if (cu->cuMemRetainAllocationHandle(&h, base) == CUDA_SUCCESS) {
        /* cuMem memory: cudaIpcGetMemHandle refuses it; it travels as a file
         * descriptor, if it was created with that handle type. */
        int fd = -1;
        r = cu->cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        (void)cu->cuMemRelease(h);
        if (r != CUDA_SUCCESS)
            return mpccl_fail(MPCCL_ERR_ARG,
                              "the cuMem allocation at %p cannot be shared with other processes (it was created "
                              "without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; ncclMemAlloc memory can be)",
                              base);
        mpccl_status_t st = mpccl_fdpass_offer((uint64_t)(uintptr_t)base, fd);
        close(fd);
        MPCCL_CHECK(st);
        out->vmm = 1;
    } else {
        MPCCL_CUDA_CHECK(cudaIpcGetMemHandle(&out->handle, base));
    }
    MPCCL_CHECK(mpccl_ipc_device_uuid(attr.device, out->uuid));
    out->host_hash = mpccl_topo_host_hash();
    out->pid = (int32_t)getpid();
    out->fd_tag = mpccl_fdpass_tag();
    out->dev = attr.device;
    out->base = (uint64_t)(uintptr_t)base;
    out->size = size;
    return MPCCL_OK;
}

void mpccl_ipc_unexport(const mpccl_ipc_desc_t *d)
{
    if (d->vmm && d->pid == (int32_t)getpid()) mpccl_fdpass_withdraw(d->base);
}

/* Lets device dev load and store the cuMem mapping [va, va + size). */
static mpccl_status_t vmm_grant(const mpccl_cu_fns_t *cu, int dev, uint64_t va, uint64_t size)
{
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUresult r = cu->cuMemSetAccess((CUdeviceptr)va, (size_t)size, &acc, 1);
    return r == CUDA_SUCCESS ? MPCCL_OK : mpccl_cu_error(r, "cuMemSetAccess (peer's ncclMemAlloc memory)");
}

/* Maps the cuMem allocation d describes into this process for device dev;
 * fd is its shareable handle (consumed). */
static mpccl_status_t vmm_import(const mpccl_ipc_desc_t *d, int dev, int fd, void **out)
{
    const mpccl_cu_fns_t *cu;
    mpccl_status_t st = mpccl_cu_get(&cu);
    if (st != MPCCL_OK) {
        close(fd);
        return st;
    }
    CUmemGenericAllocationHandle h;
    CUresult r = cu->cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r != CUDA_SUCCESS) return mpccl_cu_error(r, "cuMemImportFromShareableHandle (peer's ncclMemAlloc memory)");
    CUdeviceptr va = 0;
    r = cu->cuMemAddressReserve(&va, (size_t)d->size, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
        st = mpccl_cu_error(r, "cuMemAddressReserve (peer's ncclMemAlloc memory)");
    } else if ((r = cu->cuMemMap(va, (size_t)d->size, 0, h, 0)) != CUDA_SUCCESS) {
        st = mpccl_cu_error(r, "cuMemMap (peer's ncclMemAlloc memory)");
        (void)cu->cuMemAddressFree(va, (size_t)d->size);
    } else if ((st = vmm_grant(cu, dev, (uint64_t)va, d->size)) != MPCCL_OK) {
        (void)cu->cuMemUnmap(va, (size_t)d->size);
        (void)cu->cuMemAddressFree(va, (size_t)d->size);
    }
    (void)cu->cuMemRelease(h); /* the mapping holds its own reference */
    if (st == MPCCL_OK) *out = (void *)(uintptr_t)va;
    return st;
}

static void vmm_unmap(void *ptr, uint64_t size)
{
    const mpccl_cu_fns_t *cu;
    if (mpccl_cu_get(&cu) != MPCCL_OK) return;
    (void)cu->cuMemUnmap((CUdeviceptr)(uintptr_t)ptr, (size_t)size);
    (void)cu->cuMemAddressFree((CUdeviceptr)(uintptr_t)ptr, (size_t)size);
}

/* One opened region per (host, owner pid, base) in this process: CUDA allows a
 * handle to be opened once per device per exporting process, so every user of
 * the region shares the mapping and the last release closes it. */
typedef struct import_entry {
    struct import_entry *next;
    uint64_t host_hash, base, size;
    int32_t pid, vmm;
    int refs;
    void *ptr;
} import_entry_t;

static pthread_mutex_t import_mu = PTHREAD_MUTEX_INITIALIZER;
static import_entry_t *imports;

static int same_process(const mpccl_ipc_desc_t *d)
{
    return d->pid == (int32_t)getpid() && d->host_hash == mpccl_topo_host_hash();
}

static import_entry_t **find_import(const mpccl_ipc_desc_t *d)
{
    import_entry_t **pp = &imports;
    while (*pp && !((*pp)->pid == d->pid && (*pp)->base == d->base && (*pp)->host_hash == d->host_hash))
        pp = &(*pp)->next;
    return pp;
}

mpccl_status_t mpccl_ipc_import(const mpccl_ipc_desc_t *d, int my_dev, void **out)
{
    return mpccl_ipc_import_fd(d, my_dev, -1, out);
}

static int is_imported(const mpccl_ipc_desc_t *d)
{
    pthread_mutex_lock(&import_mu);
    int found = *find_import(d) != NULL;
    pthread_mutex_unlock(&import_mu);
    return found;
}

mpccl_status_t mpccl_ipc_import_fd(const mpccl_ipc_desc_t *d, int my_dev, int fd, void **out)
{
    if (same_process(d)) {
        if (fd >= 0) close(fd);
        /* Same address space: the pointer is valid as is; the device only
         * needs the right to touch the owner device's memory. */
        if (d->vmm) {
            const mpccl_cu_fns_t *cu;
            MPCCL_CHECK(mpccl_cu_get(&cu));
            if (my_dev != d->dev) MPCCL_CHECK(vmm_grant(cu, my_dev, d->base, d->size));
            *out = (void *)(uintptr_t)d->base;
            return MPCCL_OK;
        }
        MPCCL_CHECK(mpccl_enable_peer_access(my_dev, d->dev));
        *out = (void *)(uintptr_t)d->base;
        return MPCCL_OK;
    }
    /* The descriptor is fetched before import_mu is taken: no thread waits
     * on another process while holding it (that process's server thread may
     * need the same lock of ours to answer a call of its own). */
    if (d->vmm && fd < 0 && !is_imported(d)) MPCCL_CHECK(mpccl_fdpass_fetch(d->pid, d->fd_tag, d->base, &fd));
    mpccl_status_t st = MPCCL_OK;
    pthread_mutex_lock(&import_mu);
    import_entry_t **pp = find_import(d);
    if (*pp) {
        (*pp)->refs++;
        *out = (*pp)->ptr;
        pthread_mutex_unlock(&import_mu);
        if (fd >= 0) close(fd);
        /* Opened by another device of this process: this one needs its own
         * peer access to the owner's device, when this process can see it. */
        int owner = mpccl_ipc_local_device(d->uuid);
        const mpccl_cu_fns_t *cu = NULL;
        if (d->vmm) {
            st = mpccl_cu_get(&cu);
            if (st == MPCCL_OK) st = vmm_grant(cu, my_dev, (uint64_t)(uintptr_t)*out, d->size);
            if (st != MPCCL_OK) {
                mpccl_ipc_release(d);
                *out = NULL;
            }
        } else if (owner >= 0 && (st = mpccl_enable_peer_access(my_dev, owner)) != MPCCL_OK) {
            mpccl_ipc_release(d);
            *out = NULL;
        }
        return st;
    }
    import_entry_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        pthread_mutex_unlock(&import_mu);
        if (fd >= 0) close(fd);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "IPC import: out of memory");
    }
    int saved;
    st = mpccl_cuda_push_device(my_dev, &saved);
    if (st == MPCCL_OK && d->vmm) {
        st = vmm_import(d, my_dev, fd, &e->ptr);
        fd = -1;
        mpccl_cuda_restore_device(saved);
    } else if (st == MPCCL_OK) {
        cudaError_t ce = cudaIpcOpenMemHandle(&e->ptr, d->handle, cudaIpcMemLazyEnablePeerAccess);
        mpccl_cuda_restore_device(saved);
        if (ce != cudaSuccess) {
            char what[128];
            snprintf(what, sizeof(what), "cudaIpcOpenMemHandle (region of pid %d on its device %d, %llu bytes)",
                     (int)d->pid, (int)d->dev, (unsigned long long)d->size);
            st = mpccl_cuda_error(ce, what);
        }
    }
    if (fd >= 0) close(fd);
    if (st != MPCCL_OK) {
        pthread_mutex_unlock(&import_mu);
        free(e);
        return st;
    }
    e->host_hash = d->host_hash;
    e->base = d->base;
    e->size = d->size;
    e->vmm = d->vmm;
    e->pid = d->pid;
    e->refs = 1;
    e->next = imports;
    imports = e;
    *out = e->ptr;
    pthread_mutex_unlock(&import_mu);
    return MPCCL_OK;
}

void mpccl_ipc_release(const mpccl_ipc_desc_t *d)
{
    if (same_process(d)) return;
    pthread_mutex_lock(&import_mu);
    import_entry_t **pp = find_import(d), *e = *pp;
    if (e && --e->refs == 0) {
        *pp = e->next;
        cudaError_t ce = e->vmm ? cudaSuccess : cudaIpcCloseMemHandle(e->ptr);
        if (e->vmm) vmm_unmap(e->ptr, e->size);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            MPCCL_WARN(MPCCL_SUB_INIT, "cudaIpcCloseMemHandle(%p) of pid %d: %s", e->ptr, (int)e->pid,
                       cudaGetErrorString(ce));
        }
        free(e);
    }
    pthread_mutex_unlock(&import_mu);
}
