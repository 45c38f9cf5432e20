/* mpccl's device API, part 1: the types a device communicator and its
 * kernels share, the host functions that create them, teams and window
 * pointers.  Names, signatures and the requirement struct follow NCCL 2.29's
 * nccl_device/core.h, so kernels written for NCCL's device API compile
 * against this header unchanged.  The layouts of ncclDevComm and of the
 * window a ncclWindow_t points at are mpccl's own: build device code against
 * this header, not NVIDIA's.
 *
 * The C part (types and host functions) is plain C so the library itself
 * includes it; everything __device__ is C++ for nvcc. */
#ifndef MPCCL_NCCL_DEVICE_CORE_H
#define MPCCL_NCCL_DEVICE_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#ifdef __cplusplus
#define NCCL_DEVICE_EXTERN_C extern "C"
#else
#define NCCL_DEVICE_EXTERN_C
#endif

#if defined(__CUDACC__)
#define NCCL_DEVICE_INLINE __device__ __forceinline__
#define NCCL_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#endif

/* A set of world ranks: nRanks members, this rank is member `rank`, and
 * member i is world rank (my world rank + (i - rank) * stride). */
typedef struct ncclTeam {
    int nRanks, rank, stride;
} ncclTeam_t;

typedef uint32_t ncclDevResourceHandle;
typedef uint32_t ncclDevResourceHandle_t;
typedef uint32_t ncclGinSignal_t;
typedef uint32_t ncclGinCounter_t;

/* A range of the device communicator's barriers. */
typedef struct ncclLsaBarrierHandle {
    uint32_t first, nBarriers;
} ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle {
    uint32_t first, nBarriers;
} ncclGinBarrierHandle_t;
/* NVLink multicast is never used by mpccl: always a NULL base. */
typedef struct ncclMultimemHandle {
    void *mcBase;
} ncclMultimemHandle_t;

typedef enum {
    NCCL_GIN_CONNECTION_NONE = 0,
    NCCL_GIN_CONNECTION_FULL = 1,
    NCCL_GIN_CONNECTION_RAIL = 2
} ncclGinConnectionType_t;

typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclTeamRequirements ncclTeamRequirements_t;

struct ncclDevResourceRequirements {
    ncclDevResourceRequirements_t *next;
    size_t bufferSize, bufferAlign;
    ncclDevResourceHandle_t *outBufferHandle;
    int ginSignalCount;
    int ginCounterCount;
    ncclGinSignal_t *outGinSignalStart;
    ncclGinCounter_t *outGinCounterStart;
};

struct ncclTeamRequirements {
    ncclTeamRequirements_t *next;
    ncclTeam_t team;
    bool multimem;
    ncclMultimemHandle_t *outMultimemHandle;
};

/* What a device communicator must provide (NCCL 2.29 layout; size, magic and
 * version come from the initializer and tell the library which fields the
 * caller knows). */
typedef struct ncclDevCommRequirements {
    size_t size;
    unsigned int magic;
    unsigned int version;
    ncclDevResourceRequirements_t *resourceRequirementsList;
    ncclTeamRequirements_t *teamRequirementsList;
    bool lsaMultimem;
    int barrierCount;        /* world barriers: need GIN between nodes */
    int lsaBarrierCount;     /* LSA barriers (ncclLsaBarrierSession indices) */
    int railGinBarrierCount;
    int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
    bool ginForceEnable;
    int ginContextCount;     /* a hint */
    int ginSignalCount;
    int ginCounterCount;
    ncclGinConnectionType_t ginConnectionType;
    bool ginExclusiveContexts;
    int ginQueueDepth;
    int worldGinBarrierCount;
} ncclDevCommRequirements_t;

#define NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER {                                 \
    sizeof(ncclDevCommRequirements_t), NCCL_API_MAGIC, NCCL_VERSION_CODE,       \
    NULL, NULL,                 /* resource and team requirement lists */       \
    false,                      /* lsaMultimem */                               \
    0, 0, 0,                    /* barrierCount, lsaBarrierCount, railGin... */ \
    0, 0,                       /* lsaLLA2ABlockCount, lsaLLA2ASlotCount */     \
    false,                      /* ginForceEnable */                            \
    4, 0, 0,                    /* ginContextCount, ginSignalCount, ...Counter */ \
    NCCL_GIN_CONNECTION_NONE, false, 0, /* connection, exclusive, queue depth */ \
    0                           /* worldGinBarrierCount */                      \
}

/* What a ncclWindow_t of a GPU communicator points at: device memory that
 * kernels read through ncclGet*Pointer. */
struct ncclWindow_vidmem {
    char *localPtr;          /* this rank's window */
    size_t size;
    int worldRank;           /* this rank in the communicator */
    int lsaRank, lsaSize;    /* LSA team: world ranks worldRank - lsaRank .. + lsaSize - 1 */
    int flags;
    char *const *lsaPtrs;    /* [lsaSize] every LSA member's window as this device sees it */
    uint64_t magic;
};

/* A device communicator, passed to kernels by value.  The LSA team (ranks
 * whose memory this GPU loads and stores directly) is the world ranks
 * rank - lsaRank .. rank - lsaRank + lsaSize - 1. */
typedef struct ncclDevComm {
    int rank, nRanks;
    int lsaRank, lsaSize;
    ncclLsaBarrierHandle_t lsaBarrier;
    ncclGinBarrierHandle_t railGinBarrier, worldGinBarrier; /* empty: no GIN transport */
    ncclMultimemHandle_t lsaMultimem;                        /* NULL: no multicast */
    int ginContextCount, ginSignalCount, ginCounterCount;    /* 0 */
    uint32_t nLsaBarriers;
    uint32_t *const *lsaInbox;       /* [lsaSize] member i's inbox [nLsaBarriers][lsaSize] */
    uint32_t *lsaEpoch;              /* [nLsaBarriers] this rank's barrier epochs */
    const volatile uint32_t *abortFlag; /* nonzero once the communicator is aborted or destroyed */
    uint64_t magic;
    void *owner;                     /* the library's record of this device communicator */
} ncclDevComm_t;

NCCL_DEVICE_EXTERN_C ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const *reqs,
                                                    ncclDevComm_t *outDevComm);
NCCL_DEVICE_EXTERN_C ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const *devComm);

/* Host-side window pointers for kernels.  A peer outside the LSA team gives
 * *outPtr = NULL; multicast pointers are always NULL (never used). */
NCCL_DEVICE_EXTERN_C ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void **outPtr);
NCCL_DEVICE_EXTERN_C ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                                               ncclMultimemHandle_t multimem, void **outPtr);
NCCL_DEVICE_EXTERN_C ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                                          void **outPtr);
NCCL_DEVICE_EXTERN_C ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                                           void **outPtr);

/* Teams of a host communicator. */
NCCL_DEVICE_EXTERN_C ncclTeam_t ncclTeamWorld(ncclComm_t comm);
NCCL_DEVICE_EXTERN_C ncclTeam_t ncclTeamLsa(ncclComm_t comm);
NCCL_DEVICE_EXTERN_C ncclTeam_t ncclTeamRail(ncclComm_t comm);
NCCL_DEVICE_EXTERN_C int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
NCCL_DEVICE_EXTERN_C int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);

#if defined(__CUDACC__) && defined(__cplusplus)

struct ncclTeamTagWorld {};
struct ncclTeamTagLsa {};
struct ncclTeamTagRail {};

NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamWorld(ncclDevComm const &c) { return ncclTeam{c.nRanks, c.rank, 1}; }
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamLsa(ncclDevComm const &c) { return ncclTeam{c.lsaSize, c.lsaRank, 1}; }
/* The ranks with this rank's LSA index in every LSA team.  Meaningful when
 * all LSA teams have the same size (one node, or nodes with equal P2P
 * groups); the host ncclTeamRail(comm) says so by returning this rank alone
 * otherwise. */
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamRail(ncclDevComm const &c)
{
    return ncclTeam{c.nRanks / c.lsaSize, c.rank / c.lsaSize, c.lsaSize};
}

/* Whether member bPeer of team b is a member of team a (both teams of this
 * rank), and its index there (-1 when it is not). */
NCCL_HOST_DEVICE_INLINE int ncclTeamRankToTeam(ncclTeam a, ncclTeam b, int bPeer)
{
    int delta = (bPeer - b.rank) * b.stride;
    if (delta % a.stride != 0) return -1;
    int i = a.rank + delta / a.stride;
    return i >= 0 && i < a.nRanks ? i : -1;
}
NCCL_HOST_DEVICE_INLINE bool ncclTeamRankIsMember(ncclTeam a, ncclTeam b, int bPeer)
{
    return ncclTeamRankToTeam(a, b, bPeer) >= 0;
}
NCCL_HOST_DEVICE_INLINE int ncclTeamRankToWorld(ncclDevComm const &c, ncclTeam t, int rank)
{
    return c.rank + (rank - t.rank) * t.stride;
}
NCCL_HOST_DEVICE_INLINE int ncclTeamRankToLsa(ncclDevComm const &c, ncclTeam t, int rank)
{
    return ncclTeamRankToWorld(c, t, rank) - (c.rank - c.lsaRank);
}
/* Blocks of innerSize consecutive members (inner) and the teams across them (outer). */
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamInnerFactor(ncclTeam p, int innerSize)
{
    return ncclTeam{innerSize, p.rank % innerSize, p.stride};
}
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamOuterFactor(ncclTeam p, int innerSize)
{
    return ncclTeam{p.nRanks / innerSize, p.rank / innerSize, p.stride * innerSize};
}

NCCL_DEVICE_INLINE void *ncclGetLocalPointer(ncclWindow_t w, size_t offset) { return w->localPtr + offset; }
/* peer: an LSA index, 0 .. lsaSize - 1. */
NCCL_DEVICE_INLINE void *ncclGetLsaPointer(ncclWindow_t w, size_t offset, int peer)
{
    return w->lsaPtrs[peer] + offset;
}
/* peer: a world rank; NULL outside the LSA team. */
NCCL_DEVICE_INLINE void *ncclGetPeerPointer(ncclWindow_t w, size_t offset, int peer)
{
    int i = peer - (w->worldRank - w->lsaRank);
    return i >= 0 && i < w->lsaSize ? (void *)(w->lsaPtrs[i] + offset) : nullptr;
}
NCCL_DEVICE_INLINE void *ncclGetPeerPointer(ncclWindow_t w, size_t offset, ncclTeam t, int peer)
{
    return ncclGetPeerPointer(w, offset, w->worldRank + (peer - t.rank) * t.stride);
}
NCCL_DEVICE_INLINE void *ncclGetMultimemPointer(ncclWindow_t, size_t, ncclMultimemHandle) { return nullptr; }
NCCL_DEVICE_INLINE void *ncclGetLsaMultimemPointer(ncclWindow_t, size_t, ncclDevComm const &) { return nullptr; }

#endif /* __CUDACC__ */

#endif
