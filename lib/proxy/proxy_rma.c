/* The one-sided channel as GPU-direct puts (proxy.h, mpccl_proxy_os_rma).
 *
 * The put kernel raises pieces as it does for the staged channel: the header
 * in the staging, but the data in the piece's device slot -- or, when the
 * put's source lies in a window of this rank, nowhere: the data then leaves
 * from the window itself (the header says where).  For each raised
 * piece, in piece order, the proxy asks the one-sided layer where it goes
 * (os->rma_target: the window's address and remote key at the target, the
 * signal word and the value it must hold), then puts the data from the device
 * slot (or the source window) into the target's window, fences, and puts the
 * signal's value from the header's last 8 bytes.  Nothing runs at the target:
 * UCX writes its memory.  A slot is acknowledged (tx_ack) once both puts completed locally:
 * the kernel may then fill it again. */
#include <string.h>

#include "proxy/proxy_impl.h"
#include "util/log.h"

/* The header's last 8 bytes hold the signal's value while its put is in
 * flight (the kernel writes the fields before them only). */
#define SIG_CELL_OFFSET (MPCCL_PROXY_OS_DATA_OFFSET - 8u)

static void done_now(mpccl_req_t *r)
{
    r->status = MPCCL_OK;
    r->impl = NULL;
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
}

int mpccl_proxy_os_rma(mpccl_proxy_comm_t *pc, int on)
{
    const struct mpccl_transport_ops *o = pc ? pc->t->ops : NULL;
    /* No proxy runs at the target to flush a NIC's writes before the waiter
     * reads them: only where the device orders them itself (alloc.flush unset). */
    int can = pc && pc->npeers > 0 && pc->slots && pc->slots_region && pc->stage_region && pc->os.rma_target &&
              !pc->alloc.flush && o->put_region && o->fence;
    for (int k = 0; can && k < pc->npeers; k++)
        if (pc->peers[k].first_chan == 0 && pc->peers[k].os_tx_dev == NULL) can = 0;
    if (can && on) __atomic_store_n(&pc->os_rma, 1, __ATOMIC_RELEASE);
    return can;
}

int mpccl_proxy_serve_os_rma(mpccl_proxy_comm_t *pc, proxy_peer_t *pe)
{
    const uint32_t g = pc->nctas, K = pc->os_nslots;
    const struct mpccl_transport_ops *o = pc->t->ops;
    proxy_chan_t *c = &pe->chan[g];
    int act = 0;
    while (c->tx_next - c->tx_done < K) {
        uint32_t p = c->tx_next, s = p % K;
        size_t i = peer_slot(pc, pe, g, s);
        if (pe->tx_ready[i] != p + 1) break;
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* len and header after ready */
        uint32_t len = pe->tx_len[i];
        char *hdr = pe->os_tx + (size_t)s * pc->slot_bytes;
        mpccl_proxy_rma_t r;
        memset(&r, 0, sizeof(r));
        if (len > pc->slot_bytes)
            return mpccl_proxy_fail(pc, MPCCL_ERR_INTERNAL, "putting (the kernel gave a length over the slot size)",
                                    p, g, pe->rank);
        if (pc->os.rma_target(pc->os.ctx, pe->rank, hdr, len, &r) < 0)
            return mpccl_proxy_fail(pc, MPCCL_ERR_INTERNAL, "putting", p, g, pe->rank);
        mpccl_req_t *dq = &pe->tx_req[i], *sq = &pe->sig_req[s];
        mpccl_status_t st = MPCCL_OK;
        const char *data = pe->os_tx_dev + (size_t)s * pc->slot_bytes + MPCCL_PROXY_OS_DATA_OFFSET;
        if (r.data_bytes)
            st = o->put_region(pc->t, pe->rank, r.src ? r.src : data, r.data_bytes,
                               r.src ? r.src_region : pc->slots_region, r.data_addr, r.data_rkey, dq);
        else
            done_now(dq);
        if (st == MPCCL_OK && r.sig_addr) {
            uint64_t *cell = (uint64_t *)(hdr + SIG_CELL_OFFSET);
            *cell = r.sig_value;
            st = o->fence(pc->t); /* the data (and every earlier put) lands before the count moves */
            if (st == MPCCL_OK)
                st = o->put_region(pc->t, pe->rank, cell, sizeof(*cell), pc->stage_region, r.sig_addr, r.sig_rkey,
                                   sq);
        } else {
            done_now(sq);
        }
        if (st != MPCCL_OK) return mpccl_proxy_fail(pc, st, "putting", p, g, pe->rank);
        MPCCL_TRACE(MPCCL_SUB_NET, "proxy: rank %d: one-sided piece %u to rank %d: %u bytes put%s", pc->rank, p,
                    pe->rank, r.data_bytes, r.sig_addr ? ", signal put" : "");
        c->tx_next++;
        act++;
    }
    uint32_t done = c->tx_done;
    while (done != c->tx_next) {
        uint32_t s = done % K;
        mpccl_req_t *dq = &pe->tx_req[peer_slot(pc, pe, g, s)], *sq = &pe->sig_req[s];
        if (!__atomic_load_n(&dq->done, __ATOMIC_ACQUIRE) || !__atomic_load_n(&sq->done, __ATOMIC_ACQUIRE)) break;
        mpccl_status_t st = dq->status != MPCCL_OK ? dq->status : sq->status;
        if (st != MPCCL_OK) return mpccl_proxy_fail(pc, st, "putting", done, g, pe->rank);
        done++;
    }
    return act + publish_tx_ack(pe, g, done);
}

int mpccl_proxy_os_rma_pending(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, int cancel)
{
    proxy_chan_t *c = &pe->chan[pc->nctas];
    int n = 0;
    for (uint32_t p = c->tx_done; p != c->tx_next; p++) {
        mpccl_req_t *r = &pe->sig_req[p % pc->os_nslots];
        if (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) continue;
        if (cancel) pc->t->ops->cancel(pc->t, r);
        n++;
    }
    return n;
}
