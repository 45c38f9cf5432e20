/* mpccl's device API, part 3: the LSA barrier.  ncclLsaBarrierSession lets
 * the members of a team inside the LSA team (GPUs that load and store each
 * other's memory) wait for each other from a kernel, with the memory order
 * the caller names.  NCCL 2.29's interface (nccl_device/lsa_barrier.h).
 *
 * How: barrier b of a device communicator has, in every member's memory, one
 * 32-bit inbox per member.  Arriving stores epoch + 1 into this rank's slot of
 * every other member's inbox (a release store at system scope when the order
 * asks for release); waiting reads this rank's inbox until every other
 * member's slot reaches epoch + 1 (acquire when asked).  The epoch lives in
 * device memory between kernels (saved when the barrier session ends), so the same
 * barrier index is reused by kernel after kernel. */
#ifndef MPCCL_NCCL_DEVICE_LSA_BARRIER_H
#define MPCCL_NCCL_DEVICE_LSA_BARRIER_H

#include "core.h"
#include "coop.h"

#if defined(__CUDACC__) && defined(__cplusplus)

#include <stdio.h>

#include <cuda/atomic>

namespace mpccl_dev {
/* A device API feature this communicator does not have: say which and stop
 * the kernel (the host sees cudaErrorLaunchFailure or similar). */
NCCL_DEVICE_INLINE void unavailable(const char *what)
{
    printf("mpccl device API: %s (block %d thread %d)\n", what, (int)blockIdx.x, (int)threadIdx.x);
    __trap();
}
NCCL_DEVICE_INLINE cuda::memory_order release_part(cuda::memory_order o)
{
    return o == cuda::memory_order_release || o == cuda::memory_order_acq_rel || o == cuda::memory_order_seq_cst
               ? cuda::memory_order_release
               : cuda::memory_order_relaxed;
}
NCCL_DEVICE_INLINE cuda::memory_order acquire_part(cuda::memory_order o)
{
    return o == cuda::memory_order_acquire || o == cuda::memory_order_acq_rel || o == cuda::memory_order_seq_cst ||
                   o == cuda::memory_order_consume
               ? cuda::memory_order_acquire
               : cuda::memory_order_relaxed;
}
/* Whether any thread of the group has flag set (every thread gets the answer). */
template <int N>
NCCL_DEVICE_INLINE bool coop_any(ncclCoopTile<N> c, bool flag) { return __any_sync(c.laneMask(), flag); }
NCCL_DEVICE_INLINE bool coop_any(ncclCoopLanes c, bool flag) { return __any_sync(c.lmask, flag); }
NCCL_DEVICE_INLINE bool coop_any(ncclCoopCta, bool flag) { return __syncthreads_or(flag) != 0; }
NCCL_DEVICE_INLINE bool coop_any(ncclCoopWarpSpan c, bool flag)
{
    uint32_t in = flag, out;
    asm volatile("{ .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q; }"
                 : "=r"(out)
                 : "r"(in), "r"(1 + (int)c.id), "r"(32 * (int)c.nWarps)
                 : "memory");
    return out != 0;
}
} // namespace mpccl_dev

template <typename Coop>
struct ncclLsaBarrierSession {
    NCCL_DEVICE_INLINE ncclLsaBarrierSession(Coop coop, ncclDevComm const &comm, ncclTeam team,
                                             ncclLsaBarrierHandle handle, uint32_t index, bool multimem = false,
                                             ncclMultimemHandle mmHandle = {})
        : coop_(coop), inbox_(comm.lsaInbox), epochs_(comm.lsaEpoch), abort_(comm.abortFlag), team_(team),
          lsaRank_(comm.lsaRank), lsaSize_(comm.lsaSize), bar_(handle.first + index)
    {
        (void)mmHandle;
        if (multimem) mpccl_dev::unavailable("multimem barriers need NVLink multicast, which mpccl never uses");
        if (index >= handle.nBarriers || bar_ >= comm.nLsaBarriers)
            mpccl_dev::unavailable("LSA barrier index beyond the device communicator's lsaBarrierCount");
        epoch_ = epochs_[bar_];
    }
    NCCL_DEVICE_INLINE ncclLsaBarrierSession(Coop coop, ncclDevComm const &comm, ncclTeamTagLsa, uint32_t index,
                                             bool multimem = false)
        : ncclLsaBarrierSession(coop, comm, ncclTeamLsa(comm), comm.lsaBarrier, index, multimem)
    {
    }
    ncclLsaBarrierSession(ncclLsaBarrierSession const &) = delete;
    NCCL_DEVICE_INLINE ~ncclLsaBarrierSession()
    {
        if (coop_.thread_rank() == 0) epochs_[bar_] = epoch_;
        coop_.sync();
    }

    NCCL_DEVICE_INLINE void arrive(Coop, cuda::memory_order order)
    {
        coop_.sync();
        cuda::memory_order o = mpccl_dev::release_part(order);
        for (int i = coop_.thread_rank(); i < team_.nRanks; i += coop_.size()) {
            if (i == team_.rank) continue;
            cuda::atomic_ref<uint32_t, cuda::thread_scope_system> slot(inbox_[lsa(i)][slot_of(lsaRank_)]);
            slot.store(epoch_ + 1, o);
        }
    }
    NCCL_DEVICE_INLINE void wait(Coop c, cuda::memory_order order) { (void)wait_until(c, order, 0); }
    NCCL_DEVICE_INLINE void sync(Coop c, cuda::memory_order order)
    {
        arrive(c, order);
        wait(c, order);
    }
    /* timeoutCycles (clock64 cycles) > 0: ncclInProgress when some member
     * has not arrived in time (the epoch stays, so waiting again is fine);
     * ncclInvalidUsage when the communicator was aborted meanwhile. */
    NCCL_DEVICE_INLINE ncclResult_t wait(Coop c, cuda::memory_order order, uint64_t timeoutCycles)
    {
        return wait_until(c, order, timeoutCycles);
    }
    NCCL_DEVICE_INLINE ncclResult_t sync(Coop c, cuda::memory_order order, uint64_t timeoutCycles)
    {
        arrive(c, order);
        return wait_until(c, order, timeoutCycles);
    }

  private:
    NCCL_DEVICE_INLINE int lsa(int member) const { return lsaRank_ + (member - team_.rank) * team_.stride; }
    NCCL_DEVICE_INLINE uint32_t slot_of(int lsaSrc) const { return bar_ * (uint32_t)lsaSize_ + (uint32_t)lsaSrc; }

    NCCL_DEVICE_INLINE ncclResult_t wait_until(Coop, cuda::memory_order order, uint64_t timeout)
    {
        cuda::memory_order o = mpccl_dev::acquire_part(order);
        uint32_t want = epoch_ + 1;
        long long t0 = timeout ? clock64() : 0;
        bool late = false, aborted = false;
        for (int i = coop_.thread_rank(); i < team_.nRanks && !late && !aborted; i += coop_.size()) {
            if (i == team_.rank) continue;
            cuda::atomic_ref<uint32_t, cuda::thread_scope_system> slot(inbox_[lsaRank_][slot_of(lsa(i))]);
            for (uint32_t spins = 1; (int32_t)(slot.load(o) - want) < 0; spins++) {
                if ((spins & 1023) == 0) {
                    if (abort_ && *abort_) aborted = true;
                    if (timeout && (uint64_t)(clock64() - t0) > timeout) late = true;
                    if (late || aborted) break;
                }
            }
        }
        aborted = mpccl_dev::coop_any(coop_, aborted);
        late = mpccl_dev::coop_any(coop_, late);
        if (aborted) return ncclInvalidUsage;
        if (late) return ncclInProgress;
        epoch_ = want;
        coop_.sync();
        return ncclSuccess;
    }

    Coop coop_;
    uint32_t *const *inbox_;
    uint32_t *epochs_;
    const volatile uint32_t *abort_;
    ncclTeam team_;
    int lsaRank_, lsaSize_;
    uint32_t bar_, epoch_;
};

#endif /* __CUDACC__ */
#endif
