/* Which buffers are GPU memory, and host bounce buffers for the staged path.
 *
 * A process that never loaded the CUDA driver has no device memory, so the
 * shim asks CUDA nothing there; it notices the driver by watching what the
 * loader has loaded.  Device allocations are cached as address ranges:
 * a range freed and reused by cudaMallocHost would be misread as device memory,
 * which is harmless (mpccl and cudaMemcpy take pinned memory too). */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#ifdef MPCCL_HAVE_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#endif

#ifdef MPCCL_HAVE_CUDA
static int is_libcuda(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    const char *base = strrchr(info->dlpi_name, '/');
    return strncmp(base ? base + 1 : info->dlpi_name, "libcuda.so", 10) == 0;
}

/* The loader's count of objects loaded so far, read from the first object. */
static int loaded_count(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}
#endif

int mpccl_shim_gpu_process(void)
{
    static int cuda_seen;
#ifdef MPCCL_HAVE_CUDA
    static unsigned long long scanned = ~0ULL; /* load count at the last full scan */
#endif
    if (mpccl_shim_settings()->host_mode) return 1;
#ifdef MPCCL_HAVE_CUDA
    if (__atomic_load_n(&cuda_seen, __ATOMIC_RELAXED)) return 1;
    /* A full walk over the loaded objects costs ~25 us under Open MPI (a
     * hundred components); the load counter changes only when something is
     * loaded, so the walk runs only then. */
    unsigned long long adds = 0;
    dl_iterate_phdr(loaded_count, &adds);
    if (adds == __atomic_load_n(&scanned, __ATOMIC_RELAXED)) return 0;
    if (dl_iterate_phdr(is_libcuda, NULL)) {
        __atomic_store_n(&cuda_seen, 1, __ATOMIC_RELAXED);
        return 1;
    }
    __atomic_store_n(&scanned, adds, __ATOMIC_RELAXED);
#endif
    (void)cuda_seen;
    return 0;
}

#ifdef MPCCL_HAVE_CUDA
static PFN_cuPointerGetAttributes_v7000 get_attrs;
static pthread_once_t attrs_once = PTHREAD_ONCE_INIT;

static void attrs_resolve(void)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    void *fn = NULL;
    /* Through the runtime: the shim never links libcuda (it must load where no
     * driver is installed). */
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &fn, 7000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        get_attrs = (PFN_cuPointerGetAttributes_v7000)fn;
    else
        SHIM_WARN("cuPointerGetAttributes is not available: every buffer counts as host memory");
    (void)cudaGetLastError();
}

#define RANGES 16
static struct { uintptr_t start, end; } ranges[RANGES];
static unsigned range_next;
static pthread_mutex_t range_lock = PTHREAD_MUTEX_INITIALIZER;

static int range_hit(uintptr_t a)
{
    int hit = 0;
    pthread_mutex_lock(&range_lock);
    for (int i = 0; i < RANGES && !hit; i++) hit = a >= ranges[i].start && a < ranges[i].end;
    pthread_mutex_unlock(&range_lock);
    return hit;
}

static void range_add(uintptr_t start, size_t size)
{
    pthread_mutex_lock(&range_lock);
    ranges[range_next % RANGES].start = start;
    ranges[range_next % RANGES].end = start + size;
    range_next++;
    pthread_mutex_unlock(&range_lock);
}
#endif

int mpccl_shim_cu_attrs(const void *p, unsigned n, void *attrs, void **data)
{
#ifdef MPCCL_HAVE_CUDA
    if (!mpccl_shim_gpu_process()) return 0;
    pthread_once(&attrs_once, attrs_resolve);
    if (get_attrs == NULL) return 0;
    return get_attrs(n, (CUpointer_attribute *)attrs, data, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS;
#else
    (void)p, (void)n, (void)attrs, (void)data;
    return 0;
#endif
}

int mpccl_shim_is_device(const void *p)
{
    if (p == NULL) return 0;
    if (mpccl_shim_settings()->host_mode) return 1;
#ifdef MPCCL_HAVE_CUDA
    if (!mpccl_shim_gpu_process()) return 0;
    if (range_hit((uintptr_t)p)) return 1;
    pthread_once(&attrs_once, attrs_resolve);
    if (get_attrs == NULL) return 0;
    unsigned int memtype = 0, managed = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[] = {&memtype, &managed, &start, &size};
    /* Pageable host memory is no error: the driver reports memory type 0. */
    if (get_attrs(4, attrs, data, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) return 0;
    if (managed) return 1; /* MPI could read it, slowly; mpccl is the fast way */
    if (memtype != CU_MEMORYTYPE_DEVICE) return 0;
    if (size) range_add((uintptr_t)start, size);
    return 1;
#else
    return 0;
#endif
}

static void *bounce_alloc(size_t bytes)
{
#ifdef MPCCL_HAVE_CUDA
    void *p = NULL;
    /* Pinned so the copies run at full speed; plain memory in host test mode. */
    if (!mpccl_shim_settings()->host_mode) {
        if (cudaMallocHost(&p, bytes) == cudaSuccess) return p;
        (void)cudaGetLastError();
    }
#endif
    return malloc(bytes);
}

static void bounce_free(void *p)
{
#ifdef MPCCL_HAVE_CUDA
    if (!mpccl_shim_settings()->host_mode) {
        if (cudaFreeHost(p) == cudaSuccess) return;
        (void)cudaGetLastError();
    }
#endif
    free(p);
}

/* Bounces are kept: pinning is slow (milliseconds for large buffers); a
 * staged collective uses two, point-to-point one per message in flight. */
#define POOL 32
static struct { void *p; size_t bytes; int busy; } pool[POOL];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

void *mpccl_shim_bounce_get(size_t bytes)
{
    int best = -1, victim = -1;
    if (bytes == 0) bytes = 1;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL; i++) {
        if (pool[i].busy) continue;
        if (pool[i].p && pool[i].bytes >= bytes && (best < 0 || pool[i].bytes < pool[best].bytes)) best = i;
        if (victim < 0 || !pool[i].p || (pool[victim].p && pool[i].bytes < pool[victim].bytes)) victim = i;
    }
    if (best >= 0) {
        pool[best].busy = 1;
        pthread_mutex_unlock(&pool_lock);
        return pool[best].p;
    }
    void *old = NULL;
    if (victim >= 0) { /* replace the smallest idle one with a larger one */
        old = pool[victim].p;
        pool[victim].p = NULL;
        pool[victim].busy = 1;
    }
    pthread_mutex_unlock(&pool_lock);
    if (old) bounce_free(old);
    void *p = bounce_alloc(bytes);
    pthread_mutex_lock(&pool_lock);
    if (victim >= 0) {
        pool[victim].p = p;
        pool[victim].bytes = p ? bytes : 0;
        pool[victim].busy = p != NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    return p;
}

void mpccl_shim_bounce_put(void *p)
{
    if (p == NULL) return;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL; i++)
        if (pool[i].p == p) {
            pool[i].busy = 0;
            pthread_mutex_unlock(&pool_lock);
            return;
        }
    pthread_mutex_unlock(&pool_lock);
    bounce_free(p); /* all slots were busy (many threads): not pooled */
}

static int copy(void *dst, const void *src, size_t bytes, int wait)
{
    if (bytes == 0) return MPI_SUCCESS;
#ifdef MPCCL_HAVE_CUDA
    if (!mpccl_shim_settings()->host_mode) {
        cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
        if (e == cudaSuccess && wait) e = cudaStreamSynchronize(cudaStreamLegacy);
        if (e == cudaSuccess) return MPI_SUCCESS;
        SHIM_WARN("staging copy of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return MPI_ERR_OTHER;
    }
#endif
    (void)wait;
    memcpy(dst, src, bytes);
    return MPI_SUCCESS;
}

int mpccl_shim_copy(void *dst, const void *src, size_t bytes)
{
    return copy(dst, src, bytes, 0);
}

int mpccl_shim_copy_done(void *dst, const void *src, size_t bytes)
{
    return copy(dst, src, bytes, 1);
}
