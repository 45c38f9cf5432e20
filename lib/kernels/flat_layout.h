/* The flat kernels' modes and the layout of their region (see flat.h): plain C
 * without CUDA, shared by the kernels, the host side and the CPU unit tests. */
#ifndef MPCCL_FLAT_LAYOUT_H
#define MPCCL_FLAT_LAYOUT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define MPCCL_FLAT_HD __host__ __device__
#else
#define MPCCL_FLAT_HD
#endif

#define MPCCL_FLAT_MAX_RANKS 16 /* larger single-node communicators use the engine */
#define MPCCL_FLAT_MAX_CTAS 128 /* flags per (parity, source) */
#define MPCCL_FLAT_THREADS 512


/* What one flat launch does.  "Block" is what one rank stores into one peer per
 * chunk; every mode exchanges flags with every peer per chunk, so a rank never
 * runs more than one chunk ahead of any peer (the region's two parities). */
typedef enum {
    MPCCL_FLAT_ALLREDUCE_1 = 0, /* one-shot: the whole input to everyone; everyone reduces all */
    MPCCL_FLAT_ALLREDUCE_2,     /* two-shot: slice j to rank j, j reduces it and stores it to everyone */
    MPCCL_FLAT_REDUCESCATTER,   /* block j of the input to rank j; j reduces */
    MPCCL_FLAT_ALLGATHER,       /* the input to everyone */
    MPCCL_FLAT_ALLTOALL,        /* block j of the input to rank j */
    MPCCL_FLAT_BROADCAST,       /* root's input to everyone */
    MPCCL_FLAT_REDUCE,          /* everyone's input to root; root reduces */
    MPCCL_FLAT_GATHER,          /* everyone's input to root */
    MPCCL_FLAT_SCATTER,         /* root's block j to rank j */
    MPCCL_FLAT_NUM_MODES
} mpccl_flat_mode_t;

/* The region every rank allocates (same geometry everywhere, agreed at setup):
 *   data  [parity 2][source nranks][slice_bytes]
 *   flags [phase 2][parity 2][source nranks][MPCCL_FLAT_MAX_CTAS] uint32
 *   ctr   [2] uint32: chunks completed ever, CTAs finished in this launch
 *   ll    [parity 2][source nranks][ll_area] LL units (ll_area: twice the largest
 *         LL block, plus rounding room for every CTA)
 * A source's slice of one parity is cut into per-CTA areas of `stride` bytes
 * (two-shot: the first half of the slice for phase 1, the second for phase 2).
 *
 * LL ("low latency", small calls of one chunk): data travels in 16-byte units
 * {4 data bytes, seq, 4 data bytes, seq}, so the receiver polls the data itself
 * and no fence or separate flag is needed; a pair with no data for this call
 * exchanges a token in the flags instead, so nobody runs ahead. */
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_flags_off(int nranks, uint64_t slice_bytes)
{
    return 2ull * (uint64_t)nranks * slice_bytes;
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_ctr_off(int nranks, uint64_t slice_bytes)
{
    return mpccl_flat_flags_off(nranks, slice_bytes) + 4ull * nranks * MPCCL_FLAT_MAX_CTAS * sizeof(uint32_t);
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_ll_off(int nranks, uint64_t slice_bytes)
{
    return mpccl_flat_ctr_off(nranks, slice_bytes) + 256;
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_ll_area(uint64_t ll_max)
{
    return ll_max ? 2ull * ll_max + 32ull * MPCCL_FLAT_MAX_CTAS : 0;
}
/* Point-to-point (a group's send/recv calls of one communicator) has its own
 * part after the LL area: pairs talk without the other ranks, so they count
 * their own chunks and the receiver acknowledges each one.
 *   data   [source N][parity 2][p2p_slice]
 *   ready  [source N][parity 2][CTA] uint32   raised by the source (chunk number)
 *   ack    [destination N][CTA] uint32        raised by the destination in my region
 *   tx, rx [peer N][CTA] uint32               chunks sent to / received from each peer (mine)
 *   direct [source N][CTA] 2 x u64            raised by the source before a direct message:
 *                                             {its receive buffer as I see it or 0, first chunk}
 *   pull   [source N][CTA] 2 x u64            raised by the sender of a direct message:
 *                                             {its send buffer as I see it or 0, first chunk}
 * then the LL part (small messages: data and flag travel together, so there is
 * no ready flag and no fence; own counters, so LL and staged messages mix):
 *   ll_ack [destination N][CTA] uint32        raised by the destination in my region: LL
 *                                             chunks it consumed (written when it awaits the next)
 *   ll_tx, ll_rx [peer N][CTA] uint32         LL chunks sent to / received from each peer (mine)
 *   ll     [source N][parity 2][lane][2 * MPCCL_FLAT_P2P_LL_LANE]  LL units */
#define MPCCL_FLAT_P2P_LL_LANES (MPCCL_FLAT_MAX_CTAS / 2) /* p2p lanes per direction (at most half the grid) */
#define MPCCL_FLAT_P2P_LL_LANE 4096                       /* data bytes per lane and LL chunk */
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_p2p_off(int nranks, uint64_t slice_bytes, uint64_t ll_max)
{
    return mpccl_flat_ll_off(nranks, slice_bytes) + 2ull * (uint64_t)nranks * mpccl_flat_ll_area(ll_max);
}
/* The LL part, from the start of the p2p part. */
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_p2p_ll_off(int nranks, uint64_t p2p_slice)
{
    return 2ull * (uint64_t)nranks * p2p_slice + 5ull * (uint64_t)nranks * MPCCL_FLAT_MAX_CTAS * sizeof(uint32_t) +
           4ull * (uint64_t)nranks * MPCCL_FLAT_MAX_CTAS * sizeof(uint64_t);
}
/* The LL units, from the start of the LL part. */
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_p2p_ll_units_off(int nranks)
{
    return 3ull * (uint64_t)nranks * MPCCL_FLAT_MAX_CTAS * sizeof(uint32_t);
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_p2p_bytes(int nranks, uint64_t p2p_slice)
{
    return mpccl_flat_p2p_ll_off(nranks, p2p_slice) + mpccl_flat_p2p_ll_units_off(nranks) +
           2ull * (uint64_t)nranks * MPCCL_FLAT_P2P_LL_LANES * 2 * MPCCL_FLAT_P2P_LL_LANE;
}
/* Window collectives (calls whose buffers lie in symmetric windows or in
 * registered buffers, flat.h) move no data through the region, only a barrier
 * per call and CTA:
 *   flags  [source N][CTA] uint32   raised by the source: 2k+1 entered call k, 2k+2 done
 *   epoch  [CTA] uint32              calls this CTA index has run (mine)
 *   ptrs   [source N][CTA] 2 x u64   registered calls: the source's input and output
 *                                    as this rank sees them, written before its 2k+1 */
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_win_off(int nranks, uint64_t slice_bytes, uint64_t ll_max,
                                                       uint64_t p2p_slice)
{
    return mpccl_flat_p2p_off(nranks, slice_bytes, ll_max) + mpccl_flat_p2p_bytes(nranks, p2p_slice);
}
/* Offset of the ptrs part in the barrier area (a multiple of 16). */
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_win_ptrs_off(int nranks)
{
    return (((uint64_t)nranks + 1) * MPCCL_FLAT_MAX_CTAS * sizeof(uint32_t) + 15) & ~(uint64_t)15;
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_win_bytes(int nranks)
{
    return mpccl_flat_win_ptrs_off(nranks) + (uint64_t)nranks * MPCCL_FLAT_MAX_CTAS * 2 * sizeof(uint64_t);
}
static inline MPCCL_FLAT_HD uint64_t mpccl_flat_region_bytes(int nranks, uint64_t slice_bytes, uint64_t ll_max,
                                                            uint64_t p2p_slice)
{
    return mpccl_flat_win_off(nranks, slice_bytes, ll_max, p2p_slice) + mpccl_flat_win_bytes(nranks);
}

#ifdef __cplusplus
}
#endif
#endif
