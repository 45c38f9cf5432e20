/* Reading a caller's ncclDevCommRequirements_t whatever NCCL header built it.
 *
 * The struct is versioned (size, magic, version from
 * NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER).  mpccl's header has the NCCL 2.29
 * layout; NCCL 2.30 inserted ginTrafficClass before worldGinBarrierCount and
 * later releases appended fields, so the same offset means different fields
 * depending on the caller's version.  Programs built against newer headers
 * (nccl4py's bindings are generated from NCCL 2.32) pass the longer layout:
 * its known prefix is read, fields beyond it are ignored, as NCCL reads
 * older, shorter structs. */
#ifndef MPCCL_DEVAPI_REQS_H
#define MPCCL_DEVAPI_REQS_H

#include <stdbool.h>
#include <stddef.h>

#include "nccl.h"
#include "nccl_device/core.h"

/* The first version whose layout has ginTrafficClass (NCCL 2.30.0). */
#define MPCCL_REQS_VERSION_2_30 NCCL_VERSION(2, 30, 0)

/* Every requirement mpccl looks at, in one layout; fields the caller's
 * struct does not have are their initializer defaults. */
struct mpccl_devcomm_reqs {
    unsigned int version;
    size_t size;
    bool newer_layout; /* the NCCL >= 2.30 layout */
    ncclDevResourceRequirements_t *resourceRequirementsList;
    ncclTeamRequirements_t *teamRequirementsList;
    bool lsaMultimem;
    int barrierCount, lsaBarrierCount, railGinBarrierCount;
    int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
    bool ginForceEnable;
    int ginSignalCount, ginCounterCount;
    int ginConnectionType;
    int worldGinBarrierCount;
    int ginType;          /* NCCL >= 2.31: 0 (NONE) accepts any transport */
    int cftCaps;          /* NCCL >= 2.32: Compute Fabric Transport */
    int cftBarrierCount;
};

/* Fills *out from reqs.  Returns 0, or -1 when reqs does not start with an
 * initializer's magic or is too short to hold lsaBarrierCount. */
int mpccl_devcomm_reqs_read(const ncclDevCommRequirements_t *reqs, struct mpccl_devcomm_reqs *out);

#endif
