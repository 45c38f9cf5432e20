/* Reading a caller's ncclDevCommRequirements_t by its version
 * (devapi_reqs.h says why the layouts differ). */
#include "devapi/devapi_reqs.h"

#include <string.h>

/* NCCL 2.30's layout and the fields 2.31 and 2.32 appended (generated NCCL
 * 2.32 bindings pass 120 bytes).  Kept private: mpccl's own header stays
 * at 2.29's layout, which programs built against it rely on. */
struct reqs_v2_30 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    ncclDevResourceRequirements_t *resourceRequirementsList;
    ncclTeamRequirements_t *teamRequirementsList;
    bool lsaMultimem;
    int barrierCount, lsaBarrierCount, railGinBarrierCount;
    int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
    bool ginForceEnable;
    int ginContextCount, ginSignalCount, ginCounterCount;
    int ginConnectionType;
    bool ginExclusiveContexts;
    int ginQueueDepth;
    int ginTrafficClass; /* 2.30: a network hint; no GIN, ignored */
    int worldGinBarrierCount;
    bool ginStrongSignalsRequired, ginVaSignalsRequired; /* 2.30 ends here (96 bytes) */
    int ginCustomStride;  /* 2.31: only with a custom-stride GIN connection */
    int ginType;
    bool useRuntimeVersion; /* mpccl has one ncclDevComm layout: always its own */
    int cftCaps;          /* 2.32 */
    int cftBarrierCount;
};

_Static_assert(offsetof(struct reqs_v2_30, ginTrafficClass) == 84, "NCCL 2.30 layout");
_Static_assert(offsetof(struct reqs_v2_30, worldGinBarrierCount) == 88, "NCCL 2.30 layout");
_Static_assert(offsetof(struct reqs_v2_30, ginCustomStride) == 96, "NCCL 2.31 layout");
_Static_assert(offsetof(struct reqs_v2_30, cftBarrierCount) == 112, "NCCL 2.32 layout");
_Static_assert(sizeof(struct reqs_v2_30) == 120, "NCCL 2.32 layout");
_Static_assert(offsetof(ncclDevCommRequirements_t, worldGinBarrierCount) == 84, "mpccl's 2.29 layout");

/* Whether a struct of `size` bytes (the caller's) holds all of `field`. */
#define FITS(size, type, field) ((size) >= offsetof(type, field) + sizeof(((type *)0)->field))
#define GET(src, size, type, field, dflt) (FITS(size, type, field) ? (src)->field : (dflt))

/* The fields both layouts have, by name (r, n and T as in GET). */
#define GET_COMMON(r, n, T, o)                                                              \
    do {                                                                                     \
        (o)->resourceRequirementsList = GET(r, n, T, resourceRequirementsList, NULL);        \
        (o)->teamRequirementsList = GET(r, n, T, teamRequirementsList, NULL);                \
        (o)->lsaMultimem = GET(r, n, T, lsaMultimem, false);                                 \
        (o)->barrierCount = GET(r, n, T, barrierCount, 0);                                   \
        (o)->lsaBarrierCount = GET(r, n, T, lsaBarrierCount, 0);                             \
        (o)->railGinBarrierCount = GET(r, n, T, railGinBarrierCount, 0);                     \
        (o)->lsaLLA2ABlockCount = GET(r, n, T, lsaLLA2ABlockCount, 0);                       \
        (o)->lsaLLA2ASlotCount = GET(r, n, T, lsaLLA2ASlotCount, 0);                         \
        (o)->ginForceEnable = GET(r, n, T, ginForceEnable, false);                           \
        (o)->ginSignalCount = GET(r, n, T, ginSignalCount, 0);                               \
        (o)->ginCounterCount = GET(r, n, T, ginCounterCount, 0);                             \
    } while (0)

static void read_2_29(const ncclDevCommRequirements_t *r, struct mpccl_devcomm_reqs *o)
{
    size_t n = r->size;
    typedef ncclDevCommRequirements_t T;
    GET_COMMON(r, n, T, o);
    o->ginConnectionType = (int)GET(r, n, T, ginConnectionType, NCCL_GIN_CONNECTION_NONE);
    o->worldGinBarrierCount = GET(r, n, T, worldGinBarrierCount, 0);
}

static void read_2_30(const ncclDevCommRequirements_t *reqs, struct mpccl_devcomm_reqs *o)
{
    const struct reqs_v2_30 *r = (const struct reqs_v2_30 *)(const void *)reqs;
    size_t n = r->size;
    typedef struct reqs_v2_30 T;
    GET_COMMON(r, n, T, o);
    o->ginConnectionType = GET(r, n, T, ginConnectionType, NCCL_GIN_CONNECTION_NONE);
    o->worldGinBarrierCount = GET(r, n, T, worldGinBarrierCount, 0);
    o->ginType = GET(r, n, T, ginType, 0);
    o->cftCaps = GET(r, n, T, cftCaps, 0);
    o->cftBarrierCount = GET(r, n, T, cftBarrierCount, 0);
}

int mpccl_devcomm_reqs_read(const ncclDevCommRequirements_t *reqs, struct mpccl_devcomm_reqs *out)
{
    memset(out, 0, sizeof(*out));
    out->size = reqs->size;
    out->version = reqs->version;
    if (reqs->magic != NCCL_API_MAGIC || !FITS(reqs->size, ncclDevCommRequirements_t, lsaBarrierCount)) return -1;
    out->newer_layout = reqs->version >= MPCCL_REQS_VERSION_2_30;
    if (out->newer_layout)
        read_2_30(reqs, out);
    else
        read_2_29(reqs, out);
    return 0;
}
