/* The GPU proxy: progress threads (one per lane, shared by the process's
 * communicators) that carry the device engine's messages to peers on other
 * nodes (link kind MPCCL_LINK_PROXY, see
 * doc/GPU_DESIGN.md and lib/kernels/devplan.h).
 *
 * For each remote peer and CTA g the proxy owns staging memory that both the
 * GPU and the host can reach (the slots may instead be device memory only the
 * GPU and the transport touch, mpccl_proxy_alloc_t.alloc_slots): the kernel
 * writes a piece into a tx slot and raises tx_ready; the proxy sends it with
 * the transport and raises tx_ack when the send completed.  The proxy pre-posts nslots receives per (peer, g) into
 * rx slots, raises rx_word (ready and length) when one completes, and re-posts the slot once the
 * kernel raised rx_ack past it.
 *
 * Ownership of the transport: once a transport is attached, its worker belongs
 * to the proxy thread (it calls t->ops->progress, isend, irecv, cancel) until
 * mpccl_proxy_detach returns.  The caller must not drive the same transport
 * from another thread in between (GPU communicators use it only through the
 * proxy; the host engine is not used on them).
 *
 * Lanes: a communicator may be served through several transports (each its
 * own UCX worker and connections), each driven by its own thread: CTA g's
 * channels go through lane g % nlanes, the one-sided channel through lane 0.
 * Over TCP one connection and one thread copying bytes cap a peer's traffic
 * (ucx_perftest over loopback: 4.6 GB/s with one pair, 19 GB/s with four side
 * by side); lanes multiply it.  Both ends must use the same number of lanes.
 *
 * Tags: mpccl_proxy_tag (core/tags.h, the one bit layout of every tag): the
 * sender's rank, bits 39..38 = 3 (reserved for the proxy), the CTA g, the piece.
 *
 * The one-sided channel (optional, GPU communicators' puts to peers on other
 * nodes, lib/gpu/gpu_win_remote.c): one more channel per remote peer beside the
 * CTAs', tagged g = MPCCL_PROXY_OS_G.  Its tx side follows the CTA protocol
 * (the put kernel fills slots and raises tx_ready); its rx side has no kernel
 * waiting for it, so the proxy hands each arrived piece to os->deliver, which
 * consumes the slot on the device and writes piece + 1 to the channel's rx_ack
 * when done. */
#ifndef MPCCL_PROXY_H
#define MPCCL_PROXY_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/devplan.h"
#include "util/status.h"
#include "core/tags.h"
#include "core/transport.h"
#include "kernels/proxy_due.h"

/* Memory the GPU and the host can both read and write.  alloc returns the host
 * pointer and the device pointer of the same bytes (equal for plain host memory
 * in CPU tests); free gets the host pointer back.  For CUDA builds: pinned host
 * memory, cudaHostAlloc(Mapped|Portable) + cudaHostGetDevicePointer. */
typedef struct mpccl_proxy_alloc {
    mpccl_status_t (*alloc)(void *ctx, size_t bytes, void **host, void **dev);
    void (*free)(void *ctx, void *host);
    void *ctx;
    /* Optional, GPU-direct (the transport moves device memory itself, e.g. UCX
     * with CUDA support): alloc_slots gives the CTA channels' slots memory only
     * the device and the transport touch; the proxy never reads it.  NULL: the
     * slots are part of the staging above.  The one-sided channel's headers
     * stay in the staging (the proxy reads them on the host); with alloc_slots
     * its data also gets device slots there, for GPU-direct puts (below). */
    mpccl_status_t (*alloc_slots)(void *ctx, size_t bytes, void **dev);
    void (*free_slots)(void *ctx, void *dev);
    /* What alloc_slots gives, as the transport is told (region_open):
     * MPCCL_REGION_DEVICE for CUDA memory; MPCCL_REGION_HOST (0, tests). */
    int slots_kind;
    /* Optional, with alloc_slots: bind runs on the proxy thread before it drives
     * the transport for this communicator (makes its device current); flush runs
     * there after receives into those slots completed and before their rx_word
     * is raised (makes writes of a NIC visible to the kernel where the device
     * does not order them). */
    void (*bind)(void *ctx);
    void (*flush)(void *ctx);
} mpccl_proxy_alloc_t;

typedef struct mpccl_proxy_comm mpccl_proxy_comm_t;

/* CTAs a communicator may have: tag g values 0x80 | g carry whole messages
 * (core/tags.h), 0xfe and 0xff serve other purposes. */
#define MPCCL_PROXY_MAX_CTAS 126
/* The tag g of the one-sided channel (0xff: ncclCommShrink's agreement). */
#define MPCCL_PROXY_OS_G 0xfeu

/* A one-sided piece's data starts this far into its slot, after the header
 * (lib/kernels/onesided_remote.h: MPCCL_OS_HDR_BYTES), in the staging and in
 * a device slot alike. */
#define MPCCL_PROXY_OS_DATA_OFFSET 64u

/* One piece of a GPU-direct put: its data_bytes go from src (inside the
 * transport region src_region), or when src is NULL from the piece's device
 * slot, to data_addr (remote key data_rkey); then, when sig_addr != 0, after
 * a fence, the 8-byte sig_value to sig_addr (sig_rkey). */
typedef struct mpccl_proxy_rma {
    const void *src;
    void *src_region;
    uint32_t data_bytes;
    uint64_t data_addr;
    void *data_rkey;
    uint64_t sig_addr;
    void *sig_rkey;
    uint64_t sig_value;
} mpccl_proxy_rma_t;

/* Receiver side of the one-sided channel.  deliver is called on the proxy
 * thread, in piece order per sender, once piece `piece` from rank src arrived
 * in a slot (host and device views, len bytes).  It returns 1 when it took the
 * piece (and will have rx_ack, a device pointer, set to piece + 1 once it no
 * longer reads the slot), 0 when it cannot yet (asked again later), or a
 * negative value after mpccl_fail (the proxy stops serving the communicator). */
typedef struct mpccl_proxy_os {
    int (*deliver)(void *ctx, int src, uint32_t piece, const void *host, const void *dev, uint32_t len,
                   volatile uint32_t *rx_ack);
    /* GPU-direct puts (mpccl_proxy_os_rma): where a raised piece to peer goes.
     * hdr is the piece's header in the staging, len the piece's length.
     * Returns 1 with *out filled, or a negative value after mpccl_fail. */
    int (*rma_target)(void *ctx, int peer, const void *hdr, uint32_t len, struct mpccl_proxy_rma *out);
    void *ctx;
    uint32_t nslots; /* slots of the channel per peer, a power of two (0: as many as a CTA's) */
    int rma_slots;   /* with alloc_slots: device data slots for GPU-direct puts (mpccl_proxy_os_rma) */
} mpccl_proxy_os_t;



/* is_remote[] values of mpccl_proxy_attach. */
enum {
    MPCCL_PROXY_REMOTE = 1,        /* another node: the CTAs' channels and the one-sided one */
    MPCCL_PROXY_ONESIDED_ONLY = 2  /* this node without P2P: only the one-sided channel (the
                                    * engine reaches the peer through host memory) */
};

/* Attaches one communicator (transport t, this rank of nranks) to the proxy
 * thread, starting the thread if it is the first.  is_remote[i] != 0 marks the
 * peers reached through the proxy (never rank itself).  Allocates the staging
 * of every such peer and fills links[i] (host copy of the link table, nranks
 * entries) for the MPCCL_PROXY_REMOTE ones: kind = MPCCL_LINK_PROXY and device
 * pointers.  Other entries are left as they are.  nctas <= MPCCL_PROXY_MAX_CTAS, nslots a power of two,
 * slot_bytes a positive multiple of 16.  os != NULL adds the one-sided channel
 * (required by MPCCL_PROXY_ONESIDED_ONLY peers) and fills os_links[i] (nranks
 * entries) for every peer the proxy serves: its tx_* views
 * (arrays of one channel: tx_ready/tx_len [os->nslots], tx_ack one word) and,
 * with alloc_slots, os->rma_slots and MPCCL_PROXY_REMOTE peers, rx_slots: the
 * device data slots of GPU-direct puts (NULL otherwise).  Local:
 * no communication with the peers here; pieces a peer sends before this rank
 * attached wait in the transport. */
mpccl_status_t mpccl_proxy_attach(mpccl_transport_t *t, int rank, int nranks,
                                  const uint8_t *is_remote, uint32_t nctas, uint32_t nslots,
                                  uint32_t slot_bytes, const mpccl_proxy_alloc_t *alloc,
                                  mpccl_dev_link_t *links, const mpccl_proxy_os_t *os,
                                  mpccl_dev_link_t *os_links, mpccl_proxy_comm_t **out);
/* The same over nlanes transports (1..MPCCL_PROXY_MAX_LANES, proxy_wake.h;
 * more than nctas are not used): lanes[0] carries the one-sided channel and
 * is the one mpccl_proxy_run calls on.  The returned pc stands for every lane
 * (post, error, detach). */
mpccl_status_t mpccl_proxy_attach_lanes(mpccl_transport_t *const *lanes, int nlanes, int rank, int nranks,
                                        const uint8_t *is_remote, uint32_t nctas, uint32_t nslots,
                                        uint32_t slot_bytes, const mpccl_proxy_alloc_t *alloc,
                                        mpccl_dev_link_t *links, const mpccl_proxy_os_t *os,
                                        mpccl_dev_link_t *os_links, mpccl_proxy_comm_t **out);

/* GPU-direct one-sided puts to the MPCCL_PROXY_REMOTE peers: instead of
 * sending each raised piece for the target's proxy to deliver, the proxy puts
 * its data from the piece's device slot (os_links[i].rx_slots, which the put
 * kernel fills) straight into the target's window, then fences and puts the
 * signal (os->rma_target says where).  Possible only with alloc_slots, no
 * alloc.flush (the target's device orders a NIC's writes: nothing flushes
 * them there) and a transport with put_region and fence; returns 0 (and
 * changes nothing) where not.  on = 1 asks for it: call before the first put, every peer alike. */
int mpccl_proxy_os_rma(mpccl_proxy_comm_t *pc, int on);

/* Runs fn(arg) on the proxy thread of lane 0, which owns pc's transport (a remote key
 * must be unpacked on its endpoints there), at its next pass, and returns
 * fn's result once it ran; -1 when pc detached first.  A user thread's call;
 * fn must not wait for the device (the proxy serves nothing meanwhile). */
int mpccl_proxy_run(mpccl_proxy_comm_t *pc, int (*fn)(void *), void *arg);

/* Stops serving pc, cancels its pre-posted receives, frees its staging and pc;
 * stops the thread when pc was the last communicator.  force = 0: first waits
 * (at most UCX_CLOSE_TIMEOUT ms) for sends in flight; force = 1 (abort): waits
 * for nothing.  Memory UCX may still touch (a send UCX could not cancel, a
 * receive already matched) is left allocated rather than freed under it. */
void mpccl_proxy_detach(mpccl_proxy_comm_t *pc, int force);

/* Work for the proxy thread, which sleeps while it has none.  Kernel flags in
 * host memory cannot wake it, so it polls them only while the host told it
 * that work is on its way:
 *
 * - An engine launch (or each replay of a CUDA graph holding one) posts the
 *   pieces it will move through each (remote peer, CTA) channel
 *   (mpccl_proxy_post_pieces), counted from its plan on the host as the
 *   engine cuts them.  The channel's lane polls while pieces posted are not
 *   yet sent, or not yet received and handed to the kernel; the kernel
 *   signals nothing at its end (a system-scope release at the end of every
 *   launch cost 1-2 us).  Pieces a graph's kernel raises before its replay
 *   posted them are sent all the same (the counters are modulo 2^32, compared
 *   signed).
 * - A one-sided put kernel (MPCCL_PROXY_WORK_PUT) posts a launch
 *   (mpccl_proxy_post); its last CTA stores the count of launches of that kind
 *   finished so far (a device-side count) into the kind's done word (pinned
 *   host memory): a release store, no atomic over PCIe.  The proxy polls the
 *   one-sided channel while posted exceeds done.
 *
 * Arrivals nobody announced wake it through the transport's arm.  Any
 * thread; cheap (atomics; a write to an eventfd when it sleeps). */
enum { MPCCL_PROXY_WORK_ENGINE = 0, MPCCL_PROXY_WORK_PUT = 1, MPCCL_PROXY_WORK_KINDS = 2 };
/* ctas: how many CTAs of the launches carry pieces (their channels are CTAs
 * 0..ctas-1; MPCCL_PROXY_ALL_CTAS when not known): only the lanes of those
 * channels are woken; the one-sided channel is lane 0's. */
#define MPCCL_PROXY_ALL_CTAS 0xffffffffu
void mpccl_proxy_post(mpccl_proxy_comm_t *pc, int kind, uint32_t launches, uint32_t ctas);

/* Posts `times` launches each moving due[0..n) (times < 0 takes back as many:
 * a launch that failed to enqueue), then wakes the lanes of those channels.
 * Entries naming a rank that is not a remote peer with CTA channels are
 * skipped. */
void mpccl_proxy_post_pieces(mpccl_proxy_comm_t *pc, const mpccl_proxy_due_t *due, uint32_t n, int32_t times);

/* The communicator's stop word (lib/kernels/abort.h: its kernels leave their
 * loops once it is nonzero, having moved only part of what was posted): the
 * pieces posted and unfinished then keep no lane awake.  It must outlive pc.
 * Before the first launch. */
void mpccl_proxy_set_stop_word(mpccl_proxy_comm_t *pc, const volatile uint32_t *stop);

/* The largest LL piece the kernels send (the communicator's proxy_ll_bytes,
 * devplan.h; 0 by default: none).  Before the first launch. */
void mpccl_proxy_set_ll_bytes(mpccl_proxy_comm_t *pc, uint32_t bytes);
/* The done word of kind (device view; NULL when pc has no remote peers);
 * *host, when given, gets its host view. */
uint32_t *mpccl_proxy_done_counter(const mpccl_proxy_comm_t *pc, int kind, volatile uint32_t **host);

/* MPCCL_OK, or the first failure of a send or receive of pc (after which the
 * proxy stopped serving pc: its kernel will not see further progress),
 * recorded and logged on the caller's thread with what failed. */
mpccl_status_t mpccl_proxy_error(mpccl_proxy_comm_t *pc);

#endif
