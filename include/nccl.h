/* mpccl: the NCCL host API, source- and binary-compatible with NVIDIA's nccl.h
 * of NCCL 2.29 (every type, constant and function it declares, with the same
 * layouts and values), plus ncclCommQueryProperties and its types, which NVIDIA
 * declares in nccl_device/core.h.  Functions whose capability is not built yet
 * exist and fail with ncclInvalidUsage: see doc/UNSUPPORTED.md.
 *
 * Compiles as C (C99 and later) and C++, with or without the CUDA headers. */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h> /* ncclCommProperties_t has bool members, as NVIDIA's */
#endif

/* Like NVIDIA's header, pull in the CUDA runtime and its half/bfloat16/fp8
 * types when they exist, since applications may rely on getting them here.
 * Without CUDA, cudaStream_t is the same opaque pointer type the runtime uses. */
#if defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#define MPCCL_HAVE_CUDA_TYPES 1
#endif
#endif
#ifndef MPCCL_HAVE_CUDA_TYPES
typedef struct CUstream_st *cudaStream_t;
#endif

/* The NCCL API level mpccl implements, host API and device API
 * (nccl_device.h) included: applications test it to decide whether the 2.29
 * device API is there. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 29
#define NCCL_PATCH 7
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22907
/* Before 2.9 the code was X*1000+Y*100+Z; from 2.9 on it is X*10000+Y*100+Z. */
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Handles and identifiers ---------------------------------------------- */

typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t; /* a registered memory window */
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

/* ---- Constants -------------------------------------------------------------- */

/* "Not set by the user" markers for config fields. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_UNDEF_FLOAT -1.0f
/* color for ncclCommSplit: this rank joins no new communicator. */
#define NCCL_SPLIT_NOCOLOR -1

/* The magic word in versioned structs (config, properties): lets the library
 * tell an initialised struct from stack garbage. */
#define NCCL_API_MAGIC 0xcafebeef

/* winFlags of ncclCommWindowRegister. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01 /* same offsets on every rank: symmetric kernels */
#define NCCL_WIN_STRICT_ORDERING 0x02
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* shrinkFlags of ncclCommShrink. */
#define NCCL_SHRINK_DEFAULT 0x00 /* the parent is healthy: shrink it as is */
#define NCCL_SHRINK_ABORT 0x01   /* abort the parent's pending work first (after a failure) */

/* revokeFlags of ncclCommRevoke: no flags defined, must be 0. */
#define NCCL_REVOKE_DEFAULT 0x00

/* flags of ncclCommSuspend. */
#define NCCL_SUSPEND_MEM 0x01 /* give back the communicator's dynamic GPU memory */

/* ---- Versioned structs -------------------------------------------------------- */

/* Communicator configuration.  Start from NCCL_CONFIG_INITIALIZER and set only
 * what you need; size/magic/version let the library accept structs from older
 * and newer headers.  Fields are appended, never reordered. */
typedef struct ncclConfig_v22800 {
    size_t size;          /* set by the initializer: do not touch */
    unsigned int magic;   /* set by the initializer: do not touch */
    unsigned int version; /* set by the initializer: do not touch */
    int blocking;         /* 0: init and other calls may return ncclInProgress */
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;       /* children of ncclCommSplit share resources with the parent */
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;        /* NCCL_CTA_POLICY_* */
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
    int graphUsageMode;   /* since 2.29 */
    int numRmaCtx;        /* since 2.29: contexts for put/signal/wait */
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER {                                               \
    sizeof(ncclConfig_t),                            /* size */                 \
    NCCL_API_MAGIC,                                  /* magic */                \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */             \
    NCCL_CONFIG_UNDEF_INT,                           /* blocking */             \
    NCCL_CONFIG_UNDEF_INT,                           /* cgaClusterSize */       \
    NCCL_CONFIG_UNDEF_INT,                           /* minCTAs */              \
    NCCL_CONFIG_UNDEF_INT,                           /* maxCTAs */              \
    NCCL_CONFIG_UNDEF_PTR,                           /* netName */              \
    NCCL_CONFIG_UNDEF_INT,                           /* splitShare */           \
    NCCL_CONFIG_UNDEF_INT,                           /* trafficClass */         \
    NCCL_CONFIG_UNDEF_PTR,                           /* commName */             \
    NCCL_CONFIG_UNDEF_INT,                           /* collnetEnable */        \
    NCCL_CONFIG_UNDEF_INT,                           /* CTAPolicy */            \
    NCCL_CONFIG_UNDEF_INT,                           /* shrinkShare */          \
    NCCL_CONFIG_UNDEF_INT,                           /* nvlsCTAs */             \
    NCCL_CONFIG_UNDEF_INT,                           /* nChannelsPerNetPeer */  \
    NCCL_CONFIG_UNDEF_INT,                           /* nvlinkCentricSched */   \
    NCCL_CONFIG_UNDEF_INT,                           /* graphUsageMode */       \
    NCCL_CONFIG_UNDEF_INT,                           /* numRmaCtx */            \
}

/* Filled by ncclGroupSimulateEnd: what the planner expects the group to cost. */
typedef struct ncclSimInfo_v22200 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER {                                             \
    sizeof(ncclSimInfo_t),                           /* size */                 \
    0x74685283,                                      /* magic */                \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */             \
    NCCL_UNDEF_FLOAT                                 /* estimatedTime */        \
}

/* Which GPU-initiated networking a communicator offers.  The values skip 1 on
 * purpose: they equal NVIDIA's network-device codes. */
typedef enum {
    NCCL_GIN_TYPE_NONE = 0,
    NCCL_GIN_TYPE_PROXY = 2,
    NCCL_GIN_TYPE_GDAKI = 3,
    NCCL_GIN_TYPE_GPI = 4
} ncclGinType_t;

/* What ncclCommQueryProperties reports.  (NVIDIA declares this in
 * nccl_device/core.h; mpccl's nccl_device.h will include this header instead
 * of repeating it.) */
typedef struct ncclCommProperties {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int rank;
    int nRanks;
    int cudaDev;
    int nvmlDev;
    bool deviceApiSupport;
    bool multimemSupport;
    ncclGinType_t ginType;
    int nLsaTeams;
    bool hostRmaSupport;
    ncclGinType_t railedGinType;
} ncclCommProperties_t;

/* The outputs start zeroed (as NVIDIA's shorter initializer leaves them),
 * spelled out so that -Wmissing-field-initializers stays quiet. */
#define NCCL_COMM_PROPERTIES_INITIALIZER {                                      \
    sizeof(ncclCommProperties_t),                    /* size */                 \
    NCCL_API_MAGIC,                                  /* magic */                \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */             \
    0, 0, 0, 0,                      /* rank, nRanks, cudaDev, nvmlDev */       \
    false, false,                    /* deviceApiSupport, multimemSupport */    \
    NCCL_GIN_TYPE_NONE, 0, false,    /* ginType, nLsaTeams, hostRmaSupport */   \
    NCCL_GIN_TYPE_NONE               /* railedGinType */                        \
}

/* ncclCommMemStats selectors. */
typedef enum {
    ncclStatGpuMemSuspend = 0,   /* bytes of GPU memory a suspend would release */
    ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
    ncclStatGpuMemPersist = 2,   /* bytes of GPU memory kept across a suspend */
    ncclStatGpuMemTotal = 3      /* all GPU memory the communicator holds, bytes */
} ncclCommMemStat_t;

/* ---- Reduction operators and datatypes ---------------------------------------- */

/* Only exists to size ncclMaxRedOp: an enum that holds 5 is as wide as an int. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    /* Count of built-in operators; operators made by ncclRedOpCreate* start here. */
    ncclNumOps = 5,
    /* Largest operator value that cannot widen the enum (ABI stability). */
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum {
    ncclScalarDevice = 0,       /* device memory, read when the collective runs */
    ncclScalarHostImmediate = 1 /* host memory, read before the create call returns */
} ncclScalarResidence_t;

/* Describes, for ncclWaitSignal, how many signals to expect from one peer on
 * one signal index and context. */
typedef struct {
    int opCnt;
    int peer;
    int sigIdx;
    int ctx;
} ncclWaitSignalDesc_t;

/* ---- Functions ------------------------------------------------------------------
 * Each ncclX has a pncclX twin (same behaviour, exported under both names) so
 * that profilers can interpose ncclX and forward to pncclX. */

/* Memory suited to registration and windows (granularity may round size up). */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t pncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);
ncclResult_t pncclMemFree(void *ptr);

/* Library version as NCCL_VERSION_CODE. */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t pncclGetVersion(int *version);

/* An id made on one rank and given to all before ncclCommInitRank*. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId);

/* Communicator creation.  InitRank* are collective over nranks callers (one
 * per thread or process, or grouped); InitAll makes ndev communicators in one
 * process (devlist NULL: devices 0..ndev-1). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t *config);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
/* Like InitRankConfig with nId ids (same ids, same order on every rank) to
 * spread the bootstrap load. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId *commIds, ncclConfig_t *config);

/* Teardown: Finalize completes outstanding work collectively, Destroy frees
 * locally, Abort frees without waiting for anything. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);
/* Stops in-flight work so that destroy/split/shrink can proceed; revokeFlags
 * must be NCCL_REVOKE_DEFAULT. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* New communicators from an existing one. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config);
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                             ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
/* Growing: the existing root makes an id with ncclCommGetUniqueId (one unused
 * id at a time), then existing ranks call ncclCommGrow(comm, n, id or NULL, -1,
 * ...) and new ranks ncclCommGrow(NULL, n, id, rank, ...). */
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                          ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                           ncclComm_t *newcomm, ncclConfig_t *config);

/* Errors. */
const char *ncclGetErrorString(ncclResult_t result);
const char *pncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
const char *pncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

/* Re-reads the logging environment.  Deprecated by NVIDIA (not part of the API). */
__attribute__((deprecated("ncclResetDebugInit is not part of the NCCL API and will be removed")))
void ncclResetDebugInit(void);
__attribute__((deprecated("pncclResetDebugInit is not part of the NCCL API and will be removed")))
void pncclResetDebugInit(void);

/* Queries. */
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank);
/* props must come from NCCL_COMM_PROPERTIES_INITIALIZER.  (No pncclX in NVIDIA's
 * headers, but its library exports one, and so does mpccl.) */
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t *props);

/* Buffer registration for zero-copy transfers. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle);

/* Suspend gives back resources (flags: NCCL_SUSPEND_MEM); the communicator is
 * unusable until Resume. */
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);

/* Windows: collective registration of a buffer that peers may address
 * (winFlags: NCCL_WIN_*; buff aligned to NCCL_WIN_REQUIRED_ALIGNMENT). */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                     int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);

/* Reduction operator sum(scalar * x): scalar of the given datatype, usable only
 * with comm and that datatype; destroy once no call using it is pending. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* Collectives: called by every rank of comm; they return once the work is
 * enqueued on stream.  sendbuff == recvbuff (or the matching slice of it for
 * ReduceScatter/AllGather/Gather/Scatter) means in place. */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);
/* In-place broadcast (older form of ncclBroadcast). */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);
/* sendbuff holds nranks * recvcount elements. */
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);
/* recvbuff holds nranks * sendcount elements, rank i's at i * sendcount. */
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* count elements per peer: block j of sendbuff goes to rank j. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Point to point: the peer posts the matching call with the same count and
 * datatype; several must be grouped to progress together. */
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

/* One-sided: write count elements into peer's window at peerWinOffset bytes and
 * then bump the peer's signal sigIdx (context ctx); flags must be 0. */
ncclResult_t ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                           unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                            unsigned int flags, ncclComm_t comm, cudaStream_t stream);
/* A signal without data. */
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                         cudaStream_t stream);
/* Stream waits until every descriptor's count of signals has arrived. */
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                             cudaStream_t stream);

/* Groups: calls between Start and End are collected and launched together at
 * End (which returns once they are enqueued).  SimulateEnd plans the group
 * without running it and reports the estimate. */
ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

#ifdef __cplusplus
}
#endif
#endif
