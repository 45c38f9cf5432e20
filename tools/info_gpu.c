/* mpccl-info: the CUDA that mpccl was built with and the driver it finds, the
 * GPUs, which pairs can reach each other (P2P) and each GPU's active NVLinks
 * (from NVML when libnvidia-ml.so.1 loads; no link dependency).  Without a GPU
 * or a driver it says so. */
#include <stdio.h>

#include "build_config.h"
#include "info_parts.h"

#ifdef MPCCL_HAVE_CUDA
#include <dlfcn.h>

#include <cuda_runtime_api.h>

/* Active NVLinks of each GPU, -1 where NVML is missing or does not answer. */
static void nvlink_counts(int ngpus, int *links)
{
    for (int d = 0; d < ngpus; d++) links[d] = -1;
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml) return;
    int (*init)(void) = (int (*)(void))dlsym(nvml, "nvmlInit_v2");
    int (*shutdown)(void) = (int (*)(void))dlsym(nvml, "nvmlShutdown");
    int (*by_bus)(const char *, void **) = (int (*)(const char *, void **))dlsym(nvml, "nvmlDeviceGetHandleByPciBusId_v2");
    int (*link_state)(void *, unsigned, int *) = (int (*)(void *, unsigned, int *))dlsym(nvml, "nvmlDeviceGetNvLinkState");
    if (init && shutdown && by_bus && link_state && init() == 0) {
        for (int d = 0; d < ngpus; d++) {
            char bus[32];
            void *dev;
            if (cudaDeviceGetPCIBusId(bus, sizeof(bus), d) != cudaSuccess || by_bus(bus, &dev) != 0) continue;
            links[d] = 0;
            for (unsigned l = 0; l < 18; l++) { /* NVML_NVLINK_MAX_LINKS */
                int active = 0;
                if (link_state(dev, l, &active) == 0 && active) links[d]++;
            }
        }
        shutdown();
    }
    dlclose(nvml);
}

void info_gpu(info_out_t *o)
{
    char buf[64];
    int runtime = 0, driver = 0, ngpus = 0;
    info_out_object(o, "cuda");
    snprintf(buf, sizeof(buf), "%d.%d", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    info_out_str(o, "build_version", buf);
    cudaRuntimeGetVersion(&runtime);
    snprintf(buf, sizeof(buf), "%d.%d", runtime / 1000, runtime % 1000 / 10);
    info_out_str(o, "runtime_version", buf);
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
        snprintf(buf, sizeof(buf), "%d.%d", driver / 1000, driver % 1000 / 10);
        info_out_str(o, "driver_version", buf);
    } else {
        info_out_str(o, "driver_version", NULL);
    }
    cudaError_t err = cudaGetDeviceCount(&ngpus);
    if (err != cudaSuccess) {
        ngpus = 0;
        snprintf(buf, sizeof(buf), "no GPU usable: %s", cudaGetErrorName(err));
        info_out_str(o, "status", buf);
        (void)cudaGetLastError();
    } else {
        info_out_str(o, "status", ngpus ? "ok" : "no GPU visible");
    }
    info_out_int(o, "gpu_count", ngpus);
    int links[ngpus > 0 ? ngpus : 1];
    if (ngpus > 0) nvlink_counts(ngpus, links);
    info_out_list(o, "gpus");
    for (int d = 0; d < ngpus; d++) {
        struct cudaDeviceProp prop;
        info_out_object(o, NULL);
        info_out_int(o, "index", d);
        if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
            info_out_str(o, "name", prop.name);
            snprintf(buf, sizeof(buf), "%d.%d", prop.major, prop.minor);
            info_out_str(o, "compute_capability", buf);
            info_out_int(o, "memory_mib", (long long)(prop.totalGlobalMem >> 20));
        }
        if (cudaDeviceGetPCIBusId(buf, sizeof(buf), d) == cudaSuccess) info_out_str(o, "pci_bus_id", buf);
        if (links[d] >= 0) info_out_int(o, "nvlinks_active", links[d]);
        else info_out_str(o, "nvlinks_active", NULL);
        /* Several processes on this GPU: with MPS their kernels run together;
         * without it the GPU time-slices them and mpccl's communicators of
         * such processes take the shared-device path (README, "Several ranks
         * per GPU"). */
        int mps = 0;
        if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, d) == cudaSuccess) {
            info_out_bool(o, "mps", mps);
            info_out_str(o, "processes_sharing_it", mps ? "kernels run together (MPS)"
                                                        : "time-sliced: collectives take the shared-device path");
        } else {
            (void)cudaGetLastError();
            info_out_str(o, "mps", NULL);
        }
        info_out_close(o);
    }
    info_out_close(o);
    /* p2p[i][j]: GPU i can load and store GPU j's memory (cudaDeviceCanAccessPeer). */
    info_out_list(o, "p2p");
    for (int i = 0; i < ngpus; i++) {
        info_out_list(o, NULL);
        for (int j = 0; j < ngpus; j++) {
            int can = i == j;
            if (i != j && cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess) can = 0;
            info_out_bool(o, NULL, can);
        }
        info_out_close(o);
    }
    info_out_close(o);
    info_out_close(o);
}

#else

void info_gpu(info_out_t *o)
{
    info_out_object(o, "cuda");
    info_out_str(o, "build_version", NULL);
    info_out_str(o, "status", "built without CUDA: host communicators only");
    info_out_int(o, "gpu_count", 0);
    info_out_close(o);
}

#endif
