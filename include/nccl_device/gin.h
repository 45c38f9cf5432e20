/* mpccl's device API, part 4: GPU-initiated networking (GIN), declared so
 * that kernels written for NCCL's device API compile.  mpccl has no GIN
 * transport: ncclCommQueryProperties reports ginType NCCL_GIN_TYPE_NONE and
 * ncclDevCommCreate refuses GIN requirements with a message, so a correct
 * program never reaches these functions; one that does anyway stops its
 * kernel with a message naming the call. */
#ifndef MPCCL_NCCL_DEVICE_GIN_H
#define MPCCL_NCCL_DEVICE_GIN_H

#include "lsa_barrier.h"

#if defined(__CUDACC__) && defined(__cplusplus)

enum class ncclGinFenceLevel { Relaxed, Release };

struct ncclGin_None {};
struct ncclGin_SignalInc {
    ncclGinSignal_t signal;
};
struct ncclGin_SignalAdd {
    ncclGinSignal_t signal;
    uint64_t value;
};
struct ncclGin_CounterInc {
    ncclGinCounter_t counter;
};

#define MPCCL_NO_GIN(call) mpccl_dev::unavailable(call ": no GIN transport (ginType NCCL_GIN_TYPE_NONE)")

struct ncclGin {
    NCCL_DEVICE_INLINE ncclGin(ncclDevComm const &, int contextIndex)
    {
        (void)contextIndex;
        MPCCL_NO_GIN("ncclGin");
    }
    template <typename RemoteAction = ncclGin_None, typename LocalAction = ncclGin_None,
              typename Coop = ncclCoopThread>
    NCCL_DEVICE_INLINE void put(ncclTeam, int, ncclWindow_t, size_t, ncclWindow_t, size_t, size_t,
                                RemoteAction = RemoteAction{}, LocalAction = LocalAction{}, Coop = Coop{})
    {
        MPCCL_NO_GIN("ncclGin::put");
    }
    template <typename RemoteAction, typename Coop = ncclCoopThread>
    NCCL_DEVICE_INLINE void signal(ncclTeam, int, RemoteAction, Coop = Coop{})
    {
        MPCCL_NO_GIN("ncclGin::signal");
    }
    NCCL_DEVICE_INLINE uint64_t readSignal(ncclGinSignal_t, int = 64,
                                           cuda::memory_order = cuda::memory_order_acquire)
    {
        MPCCL_NO_GIN("ncclGin::readSignal");
        return 0;
    }
    template <typename Coop>
    NCCL_DEVICE_INLINE void waitSignal(Coop, ncclGinSignal_t, uint64_t, int = 64,
                                       cuda::memory_order = cuda::memory_order_acquire)
    {
        MPCCL_NO_GIN("ncclGin::waitSignal");
    }
    NCCL_DEVICE_INLINE void resetSignal(ncclGinSignal_t) { MPCCL_NO_GIN("ncclGin::resetSignal"); }
    NCCL_DEVICE_INLINE uint64_t readCounter(ncclGinCounter_t, int = 56,
                                            cuda::memory_order = cuda::memory_order_acquire)
    {
        MPCCL_NO_GIN("ncclGin::readCounter");
        return 0;
    }
    template <typename Coop>
    NCCL_DEVICE_INLINE void waitCounter(Coop, ncclGinCounter_t, uint64_t, int = 56,
                                        cuda::memory_order = cuda::memory_order_acquire)
    {
        MPCCL_NO_GIN("ncclGin::waitCounter");
    }
    NCCL_DEVICE_INLINE void resetCounter(ncclGinCounter_t) { MPCCL_NO_GIN("ncclGin::resetCounter"); }
    template <typename Coop>
    NCCL_DEVICE_INLINE void flush(Coop, cuda::memory_order = cuda::memory_order_acquire)
    {
        MPCCL_NO_GIN("ncclGin::flush");
    }
};

/* Barriers over the world or rail team: between nodes they need GIN. */
template <typename Coop>
struct ncclBarrierSession {
    NCCL_DEVICE_INLINE ncclBarrierSession(Coop, ncclTeamTagWorld, ncclGin &, uint32_t, bool = false)
    {
        MPCCL_NO_GIN("ncclBarrierSession");
    }
    NCCL_DEVICE_INLINE ncclBarrierSession(Coop, ncclTeamTagRail, ncclGin &, uint32_t)
    {
        MPCCL_NO_GIN("ncclBarrierSession");
    }
    NCCL_DEVICE_INLINE void arrive(Coop, cuda::memory_order, ncclGinFenceLevel = ncclGinFenceLevel::Relaxed)
    {
        MPCCL_NO_GIN("ncclBarrierSession::arrive");
    }
    NCCL_DEVICE_INLINE void wait(Coop, cuda::memory_order, ncclGinFenceLevel = ncclGinFenceLevel::Relaxed)
    {
        MPCCL_NO_GIN("ncclBarrierSession::wait");
    }
    NCCL_DEVICE_INLINE void sync(Coop, cuda::memory_order, ncclGinFenceLevel = ncclGinFenceLevel::Relaxed)
    {
        MPCCL_NO_GIN("ncclBarrierSession::sync");
    }
};

#endif /* __CUDACC__ */
#endif
