/* The proxy's private state, shared by its sources (proxy.c: serving a
 * communicator, attach/detach; proxy_thread.c: the threads;
 * proxy_staging.c: the staging layout).  Nothing else includes it. */
#ifndef MPCCL_PROXY_IMPL_H
#define MPCCL_PROXY_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "proxy/proxy.h"

/* One (remote peer, channel) pair: channels 0..nctas-1 are the CTAs', channel
 * nctas (when present) the one-sided channel.  Counters are piece numbers mod 2^32, the
 * same arithmetic the kernel uses, so they survive wrapping. */
typedef struct proxy_chan {
    uint32_t tx_next;   /* next piece the kernel will raise tx_ready for */
    uint32_t tx_done;   /* pieces sent and acknowledged (the value of tx_ack) */
    uint32_t rx_pub;    /* next piece to hand to the kernel (rx_word) */
    uint32_t rx_posted; /* pieces whose receive has been posted */
    /* Pieces posted engine launches move (mpccl_proxy_post_pieces): added by
     * user threads, read atomically by the lane's thread; the lane polls while
     * tx_next or rx_pub is behind them. */
    uint32_t tx_due, rx_due;
    /* Whole messages (devplan.h), [0] sends and [1] receives: transfers
     * started and finished (the done word's value), and posted (as tx_due). */
    uint32_t whole_seq[2], whole_fin[2], whole_due[2];
} proxy_chan_t;

/* Host views of one remote peer's staging; arrays indexed [g][slot] or [g]. */
typedef struct proxy_peer {
    int rank;
    uint32_t first_chan;  /* 0, or nctas for a peer served for one-sided operations only */
    size_t first_slot;    /* slot_index of its first slot: 0, or nctas * nslots (its staging
                           * and arrays hold the one-sided channel alone) */
    char *cta_tx, *cta_rx; /* the CTAs' slots [g][slot]: the transport's pointers (device
                            * memory with alloc_slots, never read here) */
    char *os_tx, *os_rx;   /* the one-sided channel's slots [slot] (staging) */
    char *os_tx_dev;       /* its device data slots [slot] (GPU-direct puts), else NULL */
    mpccl_req_t *sig_req;  /* [os_nslots] GPU-direct puts: the signal's put of each slot */
    volatile uint32_t *tx_ready, *tx_len, *tx_ack; /* tx_ready / tx_len: the one-sided channel */
    volatile uint64_t *tx_word; /* [g][slot]: the CTAs' raised pieces (devplan.h) */
    volatile uint64_t *rx_word; /* [g][slot]: ready (low half) and length (high half), one store */
    volatile uint32_t *rx_ack;
    const char *os_rx_dev;          /* device view of os_rx (one-sided delivery) */
    volatile uint32_t *rx_ack_dev;  /* device view of rx_ack */
    /* Whole messages (GPU-direct only, else NULL): the kernel's descriptors
     * and the proxy's done words, [dir][g] with dir 0 sends, 1 receives. */
    volatile mpccl_dev_whole_t *whole;
    volatile uint32_t *whole_done;
    mpccl_req_t *whole_req; /* [2][nchan] */
    proxy_chan_t *chan;   /* [nchan] */
    mpccl_req_t *tx_req;  /* [nslot_total]: the CTAs' [g][slot], then the one-sided slots */
    mpccl_req_t *rx_req;  /* [nslot_total] */
} proxy_peer_t;

enum { DETACH_NONE = 0, DETACH_FLUSH = 1, DETACH_FORCE = 2 };

/* One lane of a communicator (proxy.h, lanes): lane 0 (the leader) owns
 * the staging and serves the one-sided channel; lane l serves the channels of
 * CTAs g with g % nlanes == l, through a transport of its own, on its own
 * thread.  The lanes share the staging, the flags and the done counts. */
struct mpccl_proxy_comm {
    mpccl_transport_t *t;
    uint32_t lane, nlanes;
    struct mpccl_proxy_comm *lead;       /* lane 0 (NULL in lane 0 itself) */
    struct mpccl_proxy_comm *lanes_next; /* lane 0: lanes 1..nlanes-1, in order */
    int keep_staging;  /* lane 0: another lane's transport may still touch the staging */
    int rank;
    uint32_t nctas, nslots, slot_bytes;
    uint32_t nchan;    /* nctas, plus 1 with the one-sided channel */
    uint32_t os_nslots; /* slots of the one-sided channel */
    size_t nslot_total; /* slots per peer and direction: nctas * nslots + os_nslots */
    mpccl_proxy_os_t os;
    mpccl_proxy_alloc_t alloc;
    /* Posted launches (mpccl_proxy_post) per kind: launches announced by the
     * host, and the count of them the kernels reported done (pinned memory at
     * the end of the staging, one line each; done_dev: device views).  Engine
     * launches post pieces per channel instead (proxy_chan_t's due counts). */
    uint32_t posted[MPCCL_PROXY_WORK_KINDS]; /* lane 0's only: the other lanes read their lead's */
    uint32_t needed[MPCCL_PROXY_WORK_KINDS]; /* posted as of the last launch that uses this lane */
    volatile uint32_t *done[MPCCL_PROXY_WORK_KINDS];
    uint32_t *done_dev[MPCCL_PROXY_WORK_KINDS];
    void *mem;         /* host pointer of the staging of every remote peer */
    void *mem_dev;     /* its device view */
    size_t mem_bytes;
    void *slots;       /* with alloc_slots: the CTAs' slots of every remote peer */
    size_t slots_bytes;
    /* The transport's regions (region_open) of the staging and of the slots:
     * requests on them skip the transport's memory detection, which with
     * device memory would call CUDA on the proxy thread.  NULL: none. */
    void *stage_region, *slots_region;
    void *user_region; /* GPU-direct: any memory of the slots' kind, for whole messages
                        * from and into the launches' buffers (type only) */
    int flushed;       /* this pass flushed the device's received writes already */
    const volatile uint32_t *stop; /* the communicator's kernels stopped when nonzero (or NULL) */
    uint32_t ll_bytes; /* LL pieces carry at most this (devplan.h): after a send, the
                        * span their lines could take is zeroed (0: no LL, nothing) */
    int os_rma;        /* one-sided pieces to remote peers are GPU-direct puts (atomic) */
    mpccl_req_t *sig_reqs; /* [npeers][os_nslots] behind each peer's sig_req */
    int npeers;
    proxy_peer_t *peers;
    proxy_chan_t *chans;
    mpccl_req_t *reqs;
    /* The proxy thread's own state. */
    int started;       /* initial receives posted */
    int failed;        /* stopped serving after an error */
    int detach_phase;  /* 0: not begun, 1: draining sends, 2: receives cancelled */
    int64_t deadline;
    int leak;          /* UCX may still touch the staging: never free it */
    /* Shared, under its lane thread's lock (or atomic). */
    int detach_req;    /* DETACH_*: set by mpccl_proxy_detach */
    int detached;      /* the proxy thread let go of pc */
    int (*call_fn)(void *); /* mpccl_proxy_run: the call to make (atomic), its argument and result */
    void *call_arg;
    int call_ret, call_done;
    mpccl_status_t error;
    char error_msg[256]; /* what failed (written before error is stored) */
    mpccl_proxy_comm_t *next;
};

/* Whether pc's lane serves channel g: CTA channels round robin over the
 * lanes, the one-sided channel on lane 0. */
static inline int chan_served(const mpccl_proxy_comm_t *pc, uint32_t g)
{
    return g < pc->nctas ? g % pc->nlanes == pc->lane : pc->lane == 0;
}

/* Slots of channel g, and the index of its slot s in a peer's [slot] arrays
 * (the CTAs' [g][slot] first, then the one-sided channel's). */
static inline uint32_t chan_slots(const mpccl_proxy_comm_t *pc, uint32_t g)
{
    return g < pc->nctas ? pc->nslots : pc->os_nslots;
}

static inline size_t slot_index(const mpccl_proxy_comm_t *pc, uint32_t g, uint32_t s)
{
    return (size_t)g * pc->nslots + s; /* g = nctas: the one-sided slots follow the CTAs' */
}

/* Index of channel g's slot s in pe's [slot] arrays and staging, and of
 * channel g in its [channel] (ack) arrays. */
static inline size_t peer_slot(const mpccl_proxy_comm_t *pc, const proxy_peer_t *pe, uint32_t g, uint32_t s)
{
    return slot_index(pc, g, s) - pe->first_slot;
}

static inline uint32_t peer_chan(const proxy_peer_t *pe, uint32_t g) { return g - pe->first_chan; }

/* Staging of one peer, offsets from its base; every array on its own 128-byte
 * lines so the GPU's and the proxy's words never share one.  The CTAs' slots
 * are either part of it (cta_tx, cta_rx) or, with alloc_slots, at the same
 * offsets of the peer's slot block (dev_bytes). */
typedef struct layout {
    size_t os_tx, os_rx, cta_tx, cta_rx, tx_ready, tx_len, tx_word, tx_ack, rx_word, rx_ack, whole, whole_done, bytes;
    size_t os_dev;     /* split: the one-sided data slots in the slot block */
    size_t dev_bytes;
} layout_t;

/* Pieces of pe's channel g up to done have completed: acknowledges them to
 * the kernel (which reuses slot p % K once tx_ack > p).  1 when it moved. */
static inline int publish_tx_ack(proxy_peer_t *pe, uint32_t g, uint32_t done)
{
    proxy_chan_t *c = &pe->chan[g];
    if (done == c->tx_done) return 0;
    c->tx_done = done;
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the GPU never sees an ack before what it acknowledges */
    pe->tx_ack[peer_chan(pe, g)] = done;
    return 1;
}

/* proxy.c, on pc's lane thread: one pass serving pc (returns the
 * activity), one step of its detach (mode: DETACH_*), and whether pc needs
 * the thread awake. */
int mpccl_proxy_serve(mpccl_proxy_comm_t *pc);
int mpccl_proxy_detach_step(mpccl_proxy_comm_t *pc, int mode);
int mpccl_proxy_has_work(mpccl_proxy_comm_t *pc);

/* proxy_thread.c: pc's lane thread serves it from now on (started if it is
 * the first); the thread lets go of pc at the end of its detach (_leave);
 * user side: asks each of pcs[0..n) to detach (force: DETACH_FORCE), waits
 * until every one let go, and stops the threads left without work. */
mpccl_status_t mpccl_proxy_thread_add(mpccl_proxy_comm_t *pc);
void mpccl_proxy_thread_leave(mpccl_proxy_comm_t *pc);
void mpccl_proxy_thread_detach(mpccl_proxy_comm_t *const *pcs, int n, int force);

/* The first failure stops the communicator (proxy.c); returns 1. */
int mpccl_proxy_fail(mpccl_proxy_comm_t *pc, mpccl_status_t st, const char *what, uint32_t piece, uint32_t g,
                     int peer);
/* proxy_rma.c: the one-sided channel of pe as GPU-direct puts (instead of
 * serve_tx); returns the activity.  _pending: its signal puts still in flight
 * among the pieces not yet acknowledged (cancel: cancel them too). */
int mpccl_proxy_serve_os_rma(mpccl_proxy_comm_t *pc, proxy_peer_t *pe);
int mpccl_proxy_os_rma_pending(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, int cancel);

/* A send or receive through region (NULL: the transport has none, or pc
 * opened none): with one, the transport detects nothing on this thread. */
static inline mpccl_status_t proxy_isend(mpccl_proxy_comm_t *pc, void *region, int peer, uint64_t tag,
                                         const void *buf, size_t bytes, mpccl_req_t *req)
{
    return region ? pc->t->ops->isend_region(pc->t, peer, tag, buf, bytes, region, req)
                  : pc->t->ops->isend(pc->t, peer, tag, buf, bytes, req);
}

static inline mpccl_status_t proxy_irecv(mpccl_proxy_comm_t *pc, void *region, int peer, uint64_t tag, void *buf,
                                         size_t bytes, mpccl_req_t *req)
{
    return region ? pc->t->ops->irecv_region(pc->t, peer, tag, buf, bytes, region, req)
                  : pc->t->ops->irecv(pc->t, peer, tag, buf, bytes, req);
}

/* proxy_whole.c, whole messages of pe's CTA channel g: one pass
 * (returns the activity); whether a transfer is started and unfinished; the
 * count of requests in flight (sends: dir 0, else receives; cancel: cancel
 * them too). */
int mpccl_proxy_serve_whole(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g);
int mpccl_proxy_whole_busy(const mpccl_proxy_comm_t *pc, const proxy_peer_t *pe, uint32_t g);
int mpccl_proxy_whole_in_flight(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g, int sends, int cancel);

/* The layout of a peer's staging with nchan channels, ncta_slots CTA slots
 * and nos_slots one-sided slots (split: the CTAs' slots in the slot block,
 * and with os_dev the one-sided data slots of GPU-direct puts after them). */
layout_t mpccl_proxy_layout(uint32_t nchan, size_t ncta_slots, size_t nos_slots, uint32_t slot_bytes, int split,
                            int os_dev);
/* Fills pe's host views and the device link(s) of peer k, whose staging starts
 * off bytes into the block (host and device views) and its CTAs' slots soff
 * bytes into the slot block (when split), following layout l. */
void mpccl_proxy_set_views(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, int k, size_t off, char *host, char *dev,
                           size_t soff, const layout_t *l, mpccl_dev_link_t *link, mpccl_dev_link_t *os_link);

#endif
