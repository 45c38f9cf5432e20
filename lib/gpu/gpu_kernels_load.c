/* Every kernel mpccl may launch is loaded when the first communicator of a
 * device is set up, not at its first launch.
 *
 * Why: under CUDA's lazy loading (the default since CUDA 12.2) the first
 * launch of a kernel loads its code, and loading may synchronize the context:
 * it waits for the kernels already running on the device.  A collective's
 * kernel that waits for a peer which in turn waits for this rank's next
 * kernel (the second call of a group), or for a copy UCX queues on the device
 * for the proxy (GPU-direct between nodes), then never finishes, and neither
 * does the load.  With GPU-direct this hung test_group's six grouped
 * collectives on 2 x H200 and passed with CUDA_MODULE_LOADING=EAGER
 * (doc/GPU_DESIGN.md).  cudaFuncGetAttributes loads a kernel; NCCL does the
 * same for its own at init. */
#include "build_config.h"

#include <pthread.h>

#include "gpu/gpu_kernels_load.h"
#include "kernels/engine.h"
#include "kernels/flat.h"
#include "kernels/onesided.h"
#include "kernels/onesided_remote.h"
#include "util/clock.h"
#include "util/log.h"

#define MAX_DEVICES 64

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char loaded[MAX_DEVICES];

mpccl_status_t mpccl_gpu_kernels_load(int cuda_dev)
{
    if (cuda_dev < 0 || cuda_dev >= MAX_DEVICES) return MPCCL_OK; /* loaded at first launch, as before */
    pthread_mutex_lock(&load_lock);
    mpccl_status_t st = MPCCL_OK;
    if (!loaded[cuda_dev]) {
        double t0 = mpccl_now_seconds();
        st = mpccl_engine_load();
        if (st == MPCCL_OK) st = mpccl_engine_small_load();
        if (st == MPCCL_OK) st = mpccl_flat_load();
        if (st == MPCCL_OK) st = mpccl_flat_p2p_load();
        if (st == MPCCL_OK) st = mpccl_os_preload();
        if (st == MPCCL_OK) st = mpccl_os_remote_preload();
        if (st == MPCCL_OK) {
            loaded[cuda_dev] = 1;
            MPCCL_INFO(MPCCL_SUB_INIT, "device %d: mpccl's kernels loaded in %.1f ms", cuda_dev,
                       (mpccl_now_seconds() - t0) * 1e3);
        }
    }
    pthread_mutex_unlock(&load_lock);
    return st;
}
