/* Registrations, windows and signal words of a communicator (NCCL 2.29
 * ncclCommRegister, ncclCommWindowRegister, ncclPutSignal/ncclSignal/
 * ncclWaitSignal).  The state hangs off comm->win, created at the first
 * registration and released with the communicator (mpccl_win_release).
 *
 * Signals are per communicator, as in NCCL (ncclSignal names no window): this
 * rank owns MPCCL_WIN_NCTX x MPCCL_WIN_NSIG x nranks 64-bit counters, one per
 * (context, signal index, source rank); a put or signal from rank s adds 1 to
 * counter (ctx, sigIdx, s) at its target.  A wait consumes: it advances a
 * per-counter expected count by opCnt and waits until the counter reaches it.
 * Peers learn where the counters live at the first window registration (a
 * collective point), so ncclSignal/ncclWaitSignal need one window first. */
#ifndef MPCCL_WIN_H
#define MPCCL_WIN_H

#include <pthread.h>
#include <stdint.h>

#include "build_config.h"
#include "core/comm.h"
#include "ucx/ucx_rma.h"

#define MPCCL_WIN_NSIG 1 /* signal indices (NCCL 2.29 accepts only 0) */
#define MPCCL_WIN_NCTX 4 /* contexts: independent signal sets, ordered separately */
#define MPCCL_WIN_MAGIC 0x6d7063636c77696eULL /* "mpcclwin" */
#define MPCCL_REG_MAGIC 0x6d7063636c726567ULL /* "mpcclreg" */
#define MPCCL_OBJ_DEAD 0x6465616464656164ULL

/* Index of the counter (ctx, sig, src) in a rank's signal array. */
static inline size_t mpccl_sig_index(int nranks, int ctx, int sig, int src)
{
    return ((size_t)ctx * MPCCL_WIN_NSIG + (size_t)sig) * (size_t)nranks + (size_t)src;
}

struct mpccl_win_gpu;  /* gpu_win.c */
struct mpccl_wingpu;   /* per-window GPU part, gpu_win.c */

/* A window as the library keeps it.  Users hold its handle: on GPU
 * communicators the device descriptor kernels read (struct ncclWindow_vidmem
 * of nccl_device/core.h, in device memory), on host communicators the address
 * of this struct. */
struct mpccl_win {
    uint64_t magic;
    ncclComm_t comm;
    ncclWindow_t handle;
    uint32_t id;             /* registration ordinal on comm, equal on every rank (puts between nodes name it) */
    struct mpccl_win *gnext; /* every live window of the process (mpccl_win_find_any) */
    void *base;
    size_t size;
    int flags;
    size_t *peer_size;       /* [nranks] each rank's window size */
    /* Host comms, and GPU comms with GPU-direct puts between nodes (gpu_win_rma.c): */
    uint64_t *peer_addr;     /* [nranks] window address in each rank */
    void **peer_rkey;        /* [nranks] unpacked remote keys (GPU: by the proxy thread, at registration) */
    mpccl_ucx_mem_t mem;     /* this rank's registration */
    void *local_region;      /* GPU-direct: this rank's window as a UCX region, so that puts from it
                              * leave from it (mpccl_os_rma_source); NULL: they are copied to a slot */
    unsigned char *peer_keys; /* GPU: the packed keys, key_stride bytes per rank */
    size_t key_stride;
    struct mpccl_wingpu *gpu; /* GPU comms */
    struct mpccl_win *next;
};

/* ncclCommRegister handles point at this. */
typedef struct mpccl_reg {
    uint64_t magic;
    ncclComm_t comm;
    void *base;
    size_t size;
    mpccl_ucx_mem_t mem;     /* host comms */
    void *gpu;               /* GPU comms: IPC export of the allocation (gpu_win_register.c) */
    uint64_t *peer_base;     /* GPU comms with flat kernels: [nranks] the allocation's base in each
                              * peer's address space (0: not mapped there) */
    struct mpccl_reg *next;
} mpccl_reg_t;

typedef struct mpccl_win_state {
    pthread_mutex_t lock;    /* lists only: data-path calls on one comm are serialised by the user */
    pthread_mutex_t wait_lock; /* waits deferred to ncclGroupEnd run one at a time (they may run in threads) */
    struct mpccl_win *wins;
    uint32_t next_win_id;    /* under lock: windows registered so far (the next one's ordinal) */
    mpccl_reg_t *regs;
    int sig_ready;           /* the signal area is set up and exchanged */
    size_t nsig_words;       /* MPCCL_WIN_NCTX * MPCCL_WIN_NSIG * nranks */
    /* host comms */
    uint64_t *sig;           /* this rank's counters, written by peers */
    uint64_t *expected;      /* per counter: signals consumed by waits so far */
    mpccl_ucx_mem_t sig_mem;
    uint64_t *peer_sig_addr; /* [nranks] */
    void **peer_sig_rkey;    /* [nranks] */
    struct win_job *reg_head, *reg_tail; /* grouped ncclCommWindowRegister calls, in call order (api_win.c) */
    struct mpccl_host_put *host_puts; /* puts of the current group still in flight */
    int flush_queued;        /* a flush of host_puts waits for ncclGroupEnd */
    /* GPU comms */
    struct mpccl_win_gpu *gpu;
} mpccl_win_state_t;

/* comm->win, created on first use (local). */
mpccl_status_t mpccl_win_state(ncclComm_t comm, mpccl_win_state_t **out);
/* Releases every window and registration still live and the signal area
 * (ncclCommDestroy / ncclCommAbort); before the transport closes. */
void mpccl_win_release(ncclComm_t comm);

/* The live window of comm with handle h, else NULL. */
struct mpccl_win *mpccl_win_find(ncclComm_t comm, ncclWindow_t h);
/* The live window with handle h on any communicator of the process, else NULL
 * (ncclGetLsaDevicePointer and friends name no communicator). */
struct mpccl_win *mpccl_win_find_any(ncclWindow_t h);
/* Window ordinal id of ws (another thread than the user's may ask): 1 and
 * its memory when live, 0 when not registered yet, -1 when deregistered. */
int mpccl_win_find_id(mpccl_win_state_t *ws, uint32_t id, void **base, size_t *size);
/* Whether h is a live registration of comm. */
int mpccl_reg_is_live(ncclComm_t comm, const void *h);

/* Collective: registers [buff, buff + size) as a window of comm.  local is
 * this rank's argument check: a rank with bad arguments still takes part, so
 * that every rank returns the error instead of waiting for it. */
mpccl_status_t mpccl_win_register(ncclComm_t comm, void *buff, size_t size, int flags, mpccl_status_t local,
                                  ncclWindow_t *out);
/* Local. */
mpccl_status_t mpccl_win_deregister(ncclComm_t comm, ncclWindow_t w);

/* onesided_register.c */
mpccl_status_t mpccl_reg_register(ncclComm_t comm, void *buff, size_t size, void **handle);
mpccl_status_t mpccl_reg_deregister(ncclComm_t comm, void *handle);
void mpccl_reg_free(ncclComm_t comm, mpccl_reg_t *r);

/* Collective: every rank passes its local status; returns it when it is an
 * error, else the first error of another rank (the same on every rank).  what
 * names the call for the message. */
mpccl_status_t mpccl_win_agree(ncclComm_t comm, mpccl_status_t st, const char *what);
/* Collective: allgathers a variable-length blob per rank (remote keys, IPC
 * descriptions); *all holds nranks slots of *stride bytes, each starting with
 * its length as a uint64_t.  Agreement included (a rank failing to allocate
 * makes every rank fail).  Free *all. */
mpccl_status_t mpccl_win_allgather_blobs(ncclComm_t comm, const void *mine, size_t len, unsigned char **all,
                                         size_t *stride);

/* onesided.c: calls whose arguments api/api_win.c checked (win: the peer's
 * window, NULL for a signal), dispatched to the host or GPU half.  Inside a
 * group a wait runs at ncclGroupEnd (after the group's puts and signals are
 * issued), so ranks that wait before they signal in a group do not deadlock. */
mpccl_status_t mpccl_put_signal(const char *fn, ncclComm_t comm, const void *buf, size_t bytes, int peer,
                                struct mpccl_win *win, size_t offset, int sig, int ctx, cudaStream_t stream);
mpccl_status_t mpccl_wait_signal(int ndesc, const ncclWaitSignalDesc_t *descs, ncclComm_t comm,
                                 cudaStream_t stream);

#endif
