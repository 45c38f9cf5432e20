/* The host side of the device API (include/nccl_device.h, doc/DEVICE_API.md):
 * the LSA team of a communicator, teams, device communicators and their LSA
 * barrier memory, and window pointers for kernels.
 *
 * A device communicator owns one device allocation per rank, exported to the
 * LSA team over CUDA IPC: the barrier inboxes [nBarriers][lsaSize] (written
 * by the peers) followed by this rank's epochs [nBarriers].  Its device
 * pointer table lists every LSA member's inboxes as this GPU sees them.  A
 * host-mapped abort word lets ncclCommAbort and ncclCommDestroy stop kernels
 * that wait in a barrier for a peer that will not come. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/api_check.h"
#include "core/comm.h"
#include "core/comm_hooks.h"
#include "devapi/devapi_comm.h"
#include "core/group.h"
#include "util/log.h"
#include "devapi/devapi_reqs.h"
#include "nccl_device/core.h"
#include "onesided/onesided_win.h"

#ifdef MPCCL_HAVE_CUDA
#include "cuda/cuda_rt.h"
#include "gpu/gpu_comm.h"
#include "cuda/cuda_ipc.h"
#include "gpu/gpu_win.h"
#endif

#define MPCCL_DEVCOMM_MAGIC 0x6d7063636c646576ULL /* "mpccldev" */
#define MPCCL_MAX_LSA_BARRIERS (1 << 20)

struct mpccl_devcomm {
    uint64_t magic;
    struct mpccl_devcomm *next;
    uint32_t nbarriers;
    void *area;                 /* device: inboxes then epochs (NULL without barriers) */
    uint32_t **peer_inbox;      /* device: [lsa_size] */
    uint32_t *abort_word;       /* pinned, mapped */
#ifdef MPCCL_HAVE_CUDA
    mpccl_ipc_desc_t *desc;     /* [nranks] */
    unsigned char *imported;    /* [nranks] */
#endif
};


static ncclTeam_t team_or_self(ncclComm_t comm, int first, int size, int stride)
{
    ncclTeam_t t = {1, 0, 1};
    if (mpccl_check_comm("ncclTeam", comm) != MPCCL_OK) return t;
    t.nRanks = size;
    t.rank = (comm->rank - first) / stride;
    t.stride = stride;
    return t;
}

MPCCL_API(ncclTeam_t, ncclTeamWorld, ncclComm_t comm)
{
    return team_or_self(comm, 0, comm ? comm->nranks : 1, 1);
}

MPCCL_API(ncclTeam_t, ncclTeamLsa, ncclComm_t comm)
{
    return team_or_self(comm, comm ? comm->lsa_first : 0, comm ? comm->lsa_size : 1, 1);
}

/* The ranks with this rank's LSA index in every LSA team; when the LSA teams
 * differ in size there are no rails, and the team is this rank alone. */
MPCCL_API(ncclTeam_t, ncclTeamRail, ncclComm_t comm)
{
    if (mpccl_check_comm("ncclTeamRail", comm) != MPCCL_OK || !comm->lsa_uniform)
        return team_or_self(comm, comm ? comm->rank : 0, 1, 1);
    int s = comm->lsa_size, idx = comm->rank - comm->lsa_first;
    return team_or_self(comm, idx, comm->nranks / s, s);
}

MPCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam_t team, int rank)
{
    if (mpccl_check_comm("ncclTeamRankToWorld", comm) != MPCCL_OK) return -1;
    int w = comm->rank + (rank - team.rank) * team.stride;
    return w >= 0 && w < comm->nranks ? w : -1;
}

MPCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam_t team, int rank)
{
    int w = pncclTeamRankToWorld(comm, team, rank);
    if (w < 0) return -1;
    int i = w - comm->lsa_first;
    return i >= 0 && i < comm->lsa_size ? i : -1;
}

/* ---- window pointers for kernels ----------------------------------------------------------- */

static mpccl_status_t window_for_pointer(const char *fn, ncclWindow_t window, size_t offset, void **outPtr,
                                         struct mpccl_win **out)
{
    MPCCL_CHECK(mpccl_check_ptr(fn, "outPtr", outPtr));
    *outPtr = NULL;
    if (window == NULL) return mpccl_fail(MPCCL_ERR_ARG, "%s: argument window is NULL", fn);
    *out = mpccl_win_find_any(window);
    if (*out == NULL)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument window = %p is not a live window", fn, (void *)window);
    if (offset > (*out)->size)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: argument offset = %zu is past the window's end (%zu bytes)", fn, offset,
                          (*out)->size);
    return MPCCL_OK;
}

static void *lsa_pointer(struct mpccl_win *w, int lsa_index, size_t offset)
{
    ncclComm_t comm = w->comm;
    if (lsa_index < 0 || lsa_index >= comm->lsa_size) return NULL;
    if (lsa_index == comm->rank - comm->lsa_first) return (char *)w->base + offset;
#ifdef MPCCL_HAVE_CUDA
    char *p = mpccl_gpu_win_lsa_ptr(comm, w, lsa_index);
    return p ? p + offset : NULL;
#else
    return NULL;
#endif
}

MPCCL_API(ncclResult_t, ncclGetLsaDevicePointer, ncclWindow_t window, size_t offset, int lsaRank, void **outPtr)
{
    static const char fn[] = "ncclGetLsaDevicePointer";
    struct mpccl_win *w;
    mpccl_status_t st = window_for_pointer(fn, window, offset, outPtr, &w);
    if (st == MPCCL_OK && (lsaRank < 0 || lsaRank >= w->comm->lsa_size))
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: argument lsaRank = %d, expected [0, %d) (the LSA team's size)", fn,
                        lsaRank, w->comm->lsa_size);
    if (st == MPCCL_OK) *outPtr = lsa_pointer(w, lsaRank, offset);
    return mpccl_result(st);
}

MPCCL_API(ncclResult_t, ncclGetPeerDevicePointer, ncclWindow_t window, size_t offset, int peer, void **outPtr)
{
    static const char fn[] = "ncclGetPeerDevicePointer";
    struct mpccl_win *w;
    mpccl_status_t st = window_for_pointer(fn, window, offset, outPtr, &w);
    if (st == MPCCL_OK && (peer < 0 || peer >= w->comm->nranks))
        st = mpccl_fail(MPCCL_ERR_ARG, "%s: argument peer = %d, expected a rank in [0, %d)", fn, peer,
                        w->comm->nranks);
    if (st == MPCCL_OK) *outPtr = lsa_pointer(w, peer - w->comm->lsa_first, offset); /* NULL outside the team */
    return mpccl_result(st);
}

MPCCL_API(ncclResult_t, ncclGetLsaMultimemDevicePointer, ncclWindow_t window, size_t offset, void **outPtr)
{
    struct mpccl_win *w;
    /* NVLink multicast is never used: no multicast address exists. */
    return mpccl_result(window_for_pointer("ncclGetLsaMultimemDevicePointer", window, offset, outPtr, &w));
}

MPCCL_API(ncclResult_t, ncclGetMultimemDevicePointer, ncclWindow_t window, size_t offset,
          ncclMultimemHandle_t multimem, void **outPtr)
{
    struct mpccl_win *w;
    (void)multimem;
    return mpccl_result(window_for_pointer("ncclGetMultimemDevicePointer", window, offset, outPtr, &w));
}

/* ---- device communicators -------------------------------------------------------------------- */

/* The caller's requirements, read by their version (devapi_reqs.c), then
 * checked against what mpccl provides: LSA barriers only. */
static mpccl_status_t check_requirements(const char *fn, ncclComm_t comm, const ncclDevCommRequirements_t *reqs,
                                         struct mpccl_devcomm_reqs *r)
{
    if (mpccl_devcomm_reqs_read(reqs, r) != 0)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "%s: argument reqs does not start with NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER's size and "
                          "magic (size %zu, magic %#x)",
                          fn, reqs->size, reqs->magic);
    if (comm->cuda_dev < 0)
        return mpccl_fail(MPCCL_ERR_USAGE,
                          "%s: comm %p is a host communicator; device communicators need a GPU communicator", fn,
                          (void *)comm);
    int lsa = r->lsaBarrierCount;
    if (lsa < 0 || lsa > MPCCL_MAX_LSA_BARRIERS)
        return mpccl_fail(MPCCL_ERR_ARG, "%s: reqs->lsaBarrierCount = %d, expected 0..%d", fn, lsa,
                          MPCCL_MAX_LSA_BARRIERS);
    if (r->lsaMultimem)
        return mpccl_fail(MPCCL_ERR_USAGE,
                          "%s: reqs->lsaMultimem = true, but mpccl never uses NVLink multicast "
                          "(ncclCommQueryProperties reports multimemSupport = 0)",
                          fn);
    struct {
        const char *name;
        int value;
    } gin[] = {{"barrierCount", r->barrierCount},
               {"railGinBarrierCount", r->railGinBarrierCount},
               {"worldGinBarrierCount", r->worldGinBarrierCount},
               {"ginSignalCount", r->ginSignalCount},
               {"ginCounterCount", r->ginCounterCount},
               {"ginForceEnable", (int)r->ginForceEnable},
               {"ginConnectionType", r->ginConnectionType},
               {"ginType", r->ginType},
               {"lsaLLA2ABlockCount", r->lsaLLA2ABlockCount},
               {"cftCaps", r->cftCaps},
               {"cftBarrierCount", r->cftBarrierCount}};
    for (size_t i = 0; i < sizeof(gin) / sizeof(gin[0]); i++)
        if (gin[i].value != 0)
            return mpccl_fail(MPCCL_ERR_USAGE,
                              "%s: reqs->%s = %d (requirements of NCCL version %u, %zu bytes) asks for %s, which "
                              "mpccl does not provide (ncclCommQueryProperties reports ginType = "
                              "NCCL_GIN_TYPE_NONE)",
                              fn, gin[i].name, gin[i].value, r->version, r->size,
                              i == 8   ? "LL all-to-all buffers"
                              : i >= 9 ? "the Compute Fabric Transport"
                                       : "GPU-initiated networking (GIN)");
    for (const ncclTeamRequirements_t *t = r->teamRequirementsList; t; t = t->next)
        if (t->multimem)
            return mpccl_fail(MPCCL_ERR_USAGE, "%s: a team requirement asks for multimem; mpccl never uses NVLink "
                              "multicast", fn);
    if (r->resourceRequirementsList)
        return mpccl_fail(MPCCL_ERR_USAGE,
                          "%s: reqs->resourceRequirementsList is not supported by mpccl (kernels keep their own "
                          "buffers in windows)",
                          fn);
    return MPCCL_OK;
}

#ifdef MPCCL_HAVE_CUDA

static void devcomm_free(ncclComm_t comm, struct mpccl_devcomm *d)
{
    if (!d) return;
    if (d->abort_word) *(volatile uint32_t *)d->abort_word = 1; /* kernels still waiting give up */
    /* On abort a kernel may still run on this memory: it stays mapped and
     * allocated, as the communicator's other device memory does. */
    for (int r = 0; d->imported && r < comm->nranks && !comm->aborting; r++)
        if (d->imported[r]) mpccl_ipc_release(&d->desc[r]);
    if (d->area && !comm->aborting) mpccl_ipc_unexport(&d->desc[comm->rank]);
    if (!comm->aborting) {
        if (d->area) cudaFree(d->area);
        if (d->peer_inbox) cudaFree(d->peer_inbox);
        if (d->abort_word) cudaFreeHost(d->abort_word);
        (void)cudaGetLastError();
    }
    free(d->desc);
    free(d->imported);
    d->magic = MPCCL_OBJ_DEAD;
    free(d);
}

/* Allocates, zeroes and exports this rank's barrier memory; maps the LSA
 * members'.  Collective over comm. */
static mpccl_status_t devcomm_build(ncclComm_t comm, uint32_t nb, struct mpccl_devcomm *d)
{
    int n = comm->nranks, ls = comm->lsa_size, first = comm->lsa_first;
    size_t inbox_bytes = (size_t)nb * (size_t)ls * sizeof(uint32_t);
    size_t bytes = inbox_bytes + (size_t)nb * sizeof(uint32_t);
    d->desc = calloc((size_t)n, sizeof(*d->desc));
    d->imported = calloc((size_t)n, 1);
    uint32_t **ptrs = calloc((size_t)ls, sizeof(*ptrs));
    mpccl_status_t st = d->desc && d->imported && ptrs ? MPCCL_OK
                                                      : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a device communicator");
    cudaStream_t s = NULL;
    cudaError_t e = cudaSuccess;
    if (st == MPCCL_OK) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaHostAlloc((void **)&d->abort_word, sizeof(uint32_t), cudaHostAllocMapped);
    if (e == cudaSuccess && nb) e = cudaMalloc(&d->area, bytes);
    if (e == cudaSuccess && nb) e = cudaMemsetAsync(d->area, 0, bytes, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (st == MPCCL_OK && e != cudaSuccess) st = mpccl_cuda_error(e, "device communicator memory");
    if (st == MPCCL_OK) *d->abort_word = 0;
    if (st == MPCCL_OK && nb) st = mpccl_ipc_export(d->area, bytes, &d->desc[comm->rank]);
    MPCCL_CHECK_GOTO(mpccl_win_agree(comm, st, "ncclDevCommCreate"), st, out);
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&comm->bs, d->desc, sizeof(*d->desc)), st, out);
    for (int i = 0; i < ls && nb && st == MPCCL_OK; i++) {
        void *p = NULL;
        st = mpccl_ipc_import(&d->desc[first + i], comm->cuda_dev, &p);
        if (st == MPCCL_OK) d->imported[first + i] = 1;
        ptrs[i] = p;
    }
    if (st == MPCCL_OK) {
        e = cudaMalloc((void **)&d->peer_inbox, (size_t)ls * sizeof(*ptrs));
        if (e == cudaSuccess) e = cudaMemcpyAsync(d->peer_inbox, ptrs, (size_t)ls * sizeof(*ptrs),
                                                  cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) st = mpccl_cuda_error(e, "device communicator pointer table");
    }
    st = mpccl_win_agree(comm, st, "ncclDevCommCreate");
out:
    if (s) cudaStreamDestroy(s);
    free(ptrs);
    d->nbarriers = nb;
    return st;
}

typedef struct devcomm_job {
    ncclComm_t comm;
    mpccl_status_t local;
    uint32_t nbarriers;
    ncclDevComm_t *out;
} devcomm_job_t;

/* Device communicators go first when their communicator is released, and
 * kernels waiting in their barriers are told to give up when it fails
 * (comm_hooks.h). */
static const struct mpccl_comm_hook devcomm_hook = {
    .name = "device communicators", .order = 10, .stop = mpccl_devcomm_stop_all, .release = mpccl_devcomm_release_all};

static mpccl_status_t devcomm_create(ncclComm_t comm, mpccl_status_t local, uint32_t nb, ncclDevComm_t *out)
{
    static const char fn[] = "ncclDevCommCreate";
    mpccl_status_t st = mpccl_win_agree(comm, local, fn);
    if (st != MPCCL_OK) return st;
    /* The barrier count must match: every rank indexes the others' inboxes. */
    uint32_t *counts = calloc((size_t)comm->nranks, sizeof(uint32_t));
    st = counts ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory");
    st = mpccl_win_agree(comm, st, fn);
    if (st != MPCCL_OK) {
        free(counts);
        return st;
    }
    counts[comm->rank] = nb;
    st = mpccl_bootstrap_allgather(&comm->bs, counts, sizeof(uint32_t));
    for (int r = 0; r < comm->nranks && st == MPCCL_OK; r++)
        if (counts[r] != nb)
            st = mpccl_fail(MPCCL_ERR_ARG,
                            "%s: reqs->lsaBarrierCount = %u on rank %d but %u on rank %d; every rank must ask for "
                            "the same number",
                            fn, nb, comm->rank, counts[r], r);
    free(counts);
    if (st != MPCCL_OK) return st;
    int saved;
    MPCCL_CHECK(mpccl_cuda_push_device(comm->cuda_dev, &saved));
    struct mpccl_devcomm *d = calloc(1, sizeof(*d));
    st = mpccl_win_agree(comm, d ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory"), fn);
    if (st == MPCCL_OK) st = devcomm_build(comm, nb, d);
    mpccl_cuda_restore_device(saved);
    if (st != MPCCL_OK) {
        devcomm_free(comm, d);
        return st;
    }
    st = mpccl_comm_hook_add(comm, &devcomm_hook);
    if (st != MPCCL_OK) {
        devcomm_free(comm, d);
        return st;
    }
    d->magic = MPCCL_DEVCOMM_MAGIC;
    d->next = comm->devcomms;
    comm->devcomms = d;

    ncclDevComm_t dc;
    memset(&dc, 0, sizeof(dc));
    dc.rank = comm->rank;
    dc.nRanks = comm->nranks;
    dc.lsaRank = comm->rank - comm->lsa_first;
    dc.lsaSize = comm->lsa_size;
    dc.lsaBarrier.first = 0;
    dc.lsaBarrier.nBarriers = nb;
    dc.nLsaBarriers = nb;
    dc.lsaInbox = d->peer_inbox;
    dc.lsaEpoch = nb ? (uint32_t *)((char *)d->area + (size_t)nb * (size_t)comm->lsa_size * sizeof(uint32_t)) : NULL;
    void *abort_dev = NULL;
    if (cudaHostGetDevicePointer(&abort_dev, d->abort_word, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        abort_dev = d->abort_word; /* UVA: the host address works on the device */
    }
    dc.abortFlag = (const volatile uint32_t *)abort_dev;
    dc.magic = MPCCL_DEVCOMM_MAGIC;
    dc.owner = d;
    *out = dc;
    MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx: device communicator with %u LSA barriers (LSA team %d ranks)",
               (unsigned long long)comm->id, nb, comm->lsa_size);
    return MPCCL_OK;
}

static mpccl_status_t run_devcomm_job(void *arg)
{
    devcomm_job_t *j = arg;
    mpccl_status_t st = mpccl_comm_enter_device(j->comm->cuda_dev); /* a thread of ncclGroupEnd */
    st = devcomm_create(j->comm, st == MPCCL_OK ? j->local : st, j->nbarriers, j->out);
    free(j);
    return st;
}

#endif /* MPCCL_HAVE_CUDA */

MPCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, ncclDevCommRequirements_t const *reqs,
          ncclDevComm_t *outDevComm)
{
    static const char fn[] = "ncclDevCommCreate";
    mpccl_status_t st = mpccl_check_comm_live(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "reqs", reqs);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "outDevComm", outDevComm);
    if (st != MPCCL_OK) return mpccl_result(st);
    /* Collective: a rank with bad requirements still joins, so all fail. */
    struct mpccl_devcomm_reqs r;
    mpccl_status_t local = check_requirements(fn, comm, reqs, &r);
#ifdef MPCCL_HAVE_CUDA
    if (comm->cuda_dev >= 0) {
        uint32_t nb = local == MPCCL_OK ? (uint32_t)r.lsaBarrierCount : 0;
        if (mpccl_group_depth() > 0) {
            devcomm_job_t *j = malloc(sizeof(*j));
            if (!j) return mpccl_result(mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory", fn));
            *j = (devcomm_job_t){.comm = comm, .local = local, .nbarriers = nb, .out = outDevComm};
            st = mpccl_group_defer_init(run_devcomm_job, j);
            if (st != MPCCL_OK) free(j);
            return mpccl_result(st);
        }
        return mpccl_result(devcomm_create(comm, local, nb, outDevComm));
    }
#endif
    return mpccl_result(local); /* a host communicator: refused by check_requirements */
}

MPCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, ncclDevComm_t const *devComm)
{
    static const char fn[] = "ncclDevCommDestroy";
    mpccl_status_t st = mpccl_check_comm(fn, comm);
    if (st == MPCCL_OK) st = mpccl_check_ptr(fn, "devComm", devComm);
    if (st != MPCCL_OK) return mpccl_result(st);
    struct mpccl_devcomm **pp = &comm->devcomms;
    while (*pp && (void *)*pp != devComm->owner) pp = &(*pp)->next;
    if (*pp == NULL || devComm->magic != MPCCL_DEVCOMM_MAGIC)
        return mpccl_result(mpccl_fail(MPCCL_ERR_ARG,
                                       "%s: argument devComm (owner %p) is not a live device communicator of comm %p "
                                       "(destroyed already, or created on another communicator)",
                                       fn, devComm->owner, (void *)comm));
    struct mpccl_devcomm *d = *pp;
    *pp = d->next;
#ifdef MPCCL_HAVE_CUDA
    int saved;
    if (mpccl_cuda_push_device(comm->cuda_dev, &saved) == MPCCL_OK) {
        devcomm_free(comm, d);
        mpccl_cuda_restore_device(saved);
    }
#else
    free(d);
#endif
    return ncclSuccess;
}

void mpccl_devcomm_stop_all(ncclComm_t comm)
{
    for (struct mpccl_devcomm *d = comm->devcomms; d; d = d->next)
        if (d->abort_word) __atomic_store_n(d->abort_word, 1u, __ATOMIC_RELEASE);
}

void mpccl_devcomm_release_all(ncclComm_t comm)
{
    while (comm->devcomms) {
        struct mpccl_devcomm *d = comm->devcomms;
        comm->devcomms = d->next;
#ifdef MPCCL_HAVE_CUDA
        devcomm_free(comm, d);
#else
        free(d);
#endif
    }
}
