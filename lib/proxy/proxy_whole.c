/* Whole messages between nodes (lib/kernels/devplan.h): with GPU-direct, a
 * CTA's part of a large message goes in one transfer from the launch's
 * source buffer straight into the peer's destination buffer -- no copy into
 * or out of slots, and the transport sees the whole message at once (UCX's
 * rendezvous moves it with one zero-copy transfer where it can).
 *
 * Per (remote peer, CTA channel) and direction one transfer at a time: the
 * kernel writes a descriptor {address, bytes} and raises its seq (the
 * channel's transfers so far + 1); the proxy starts the send or receive,
 * tagged with the channel and that seq (core/tags.h), and once it completed
 * stores seq into the channel's done word, which the kernel waits for. */
#include <stdio.h>
#include <string.h>
#include "proxy/proxy_impl.h"
#include "util/log.h"

static const char *const dir_name[2] = {"sending a whole message", "receiving a whole message"};

/* Starts the transfer whose descriptor the kernel raised, if any. */
static int start_whole(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g, int dir)
{
    proxy_chan_t *c = &pe->chan[g];
    volatile mpccl_dev_whole_t *d = &pe->whole[(size_t)dir * pc->nchan + g];
    uint32_t seq = __atomic_load_n(&d->seq, __ATOMIC_ACQUIRE); /* the address and length after it */
    if (seq != c->whole_seq[dir] + 1) return 0;
    void *buf = (void *)(uintptr_t)d->addr;
    uint32_t bytes = d->bytes;
    if (buf == NULL || bytes == 0 || bytes > MPCCL_PROXY_WHOLE_MAX) {
        char what[96];
        snprintf(what, sizeof(what), "%s (the kernel gave %u bytes at %p)", dir_name[dir], bytes, buf);
        return mpccl_proxy_fail(pc, MPCCL_ERR_INTERNAL, what, seq - 1, g, pe->rank);
    }
    mpccl_req_t *r = &pe->whole_req[(size_t)dir * pc->nchan + g];
    uint64_t tag = mpccl_proxy_whole_tag(dir == 0 ? pc->rank : pe->rank, g, seq - 1); /* the sender's */
    mpccl_status_t st = dir == 0 ? proxy_isend(pc, pc->user_region, pe->rank, tag, buf, bytes, r)
                                 : proxy_irecv(pc, pc->user_region, pe->rank, tag, buf, bytes, r);
    if (st != MPCCL_OK) return mpccl_proxy_fail(pc, st, dir_name[dir], seq - 1, g, pe->rank);
    MPCCL_TRACE(MPCCL_SUB_NET, "proxy: rank %d: whole message %u of channel %u (%u bytes) %s rank %d posted",
                pc->rank, seq - 1, g, bytes, dir ? "from" : "to", pe->rank);
    c->whole_seq[dir] = seq;
    return 1;
}

/* Tells the kernel that the transfer in flight finished, once it did. */
static int finish_whole(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g, int dir)
{
    proxy_chan_t *c = &pe->chan[g];
    size_t i = (size_t)dir * pc->nchan + g;
    mpccl_req_t *r = &pe->whole_req[i];
    if (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) return 0;
    uint32_t seq = c->whole_seq[dir];
    if (r->status != MPCCL_OK) return mpccl_proxy_fail(pc, r->status, dir_name[dir], seq - 1, g, pe->rank);
    if (dir == 1 && r->bytes != pe->whole[i].bytes) {
        /* A peer whose communicator was aborted, or schedules that disagree. */
        char what[112];
        snprintf(what, sizeof(what), "%s (%zu bytes arrived, %u expected)", dir_name[dir], r->bytes,
                 pe->whole[i].bytes);
        return mpccl_proxy_fail(pc, MPCCL_ERR_REMOTE, what, seq - 1, g, pe->rank);
    }
    if (dir == 1 && pc->alloc.flush) pc->alloc.flush(pc->alloc.ctx); /* a NIC's writes before the word */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    pe->whole_done[i] = seq;
    c->whole_fin[dir] = seq;
    MPCCL_TRACE(MPCCL_SUB_NET, "proxy: rank %d: whole message %u of channel %u %s rank %d done", pc->rank, seq - 1,
                g, dir ? "from" : "to", pe->rank);
    return 1;
}

int mpccl_proxy_serve_whole(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g)
{
    int act = 0;
    for (int dir = 0; dir < 2 && !pc->failed; dir++) {
        proxy_chan_t *c = &pe->chan[g];
        if (c->whole_seq[dir] != c->whole_fin[dir]) act += finish_whole(pc, pe, g, dir);
        if (!pc->failed && c->whole_seq[dir] == c->whole_fin[dir]) act += start_whole(pc, pe, g, dir);
    }
    return act;
}

int mpccl_proxy_whole_busy(const mpccl_proxy_comm_t *pc, const proxy_peer_t *pe, uint32_t g)
{
    if (pc->stop && __atomic_load_n(pc->stop, __ATOMIC_RELAXED)) return 0; /* no kernel waits for it */
    const proxy_chan_t *c = &pe->chan[g];
    return c->whole_seq[0] != c->whole_fin[0] || c->whole_seq[1] != c->whole_fin[1];
}

int mpccl_proxy_whole_in_flight(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, uint32_t g, int sends, int cancel)
{
    int dir = sends ? 0 : 1;
    proxy_chan_t *c = &pe->chan[g];
    mpccl_req_t *r = &pe->whole_req[(size_t)dir * pc->nchan + g];
    if (c->whole_seq[dir] == c->whole_fin[dir] || __atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) return 0;
    if (cancel) pc->t->ops->cancel(pc->t, r);
    return 1;
}
