/* The staging of the proxy's peers: where each array lies (proxy_impl.h). */
#include <string.h>
#include "proxy/proxy_impl.h"

#define ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))


layout_t mpccl_proxy_layout(uint32_t nchan, size_t ncta_slots, size_t nos_slots, uint32_t slot_bytes,
                            int split, int os_dev)
{
    layout_t l;
    size_t nslot_total = ncta_slots + nos_slots;
    size_t os = ALIGN_UP(nos_slots * slot_bytes, 128), cta = ALIGN_UP(ncta_slots * slot_bytes, 128);
    size_t words = ALIGN_UP(nslot_total * 4, 128), acks = ALIGN_UP((size_t)nchan * 4, 128);
    size_t rx_words = ALIGN_UP(nslot_total * 8, 128);
    l.os_tx = 0;
    l.os_rx = os;
    size_t end = 2 * os;
    if (split) { /* the slot block: the CTAs' slots, then the one-sided data slots */
        l.cta_tx = 0;
        l.cta_rx = cta;
        l.os_dev = 2 * cta;
        l.dev_bytes = ALIGN_UP(2 * cta + (os_dev ? os : 0), 4096);
    } else {
        l.cta_tx = end;
        l.cta_rx = end + cta;
        end += 2 * cta;
        l.os_dev = 0;
        l.dev_bytes = 0;
    }
    l.tx_ready = end;
    l.tx_len = l.tx_ready + words;
    l.tx_word = l.tx_len + words;
    l.rx_word = l.tx_word + rx_words;
    l.tx_ack = l.rx_word + rx_words;
    l.rx_ack = l.tx_ack + acks;
    /* whole messages' descriptors and done words [2][nchan] (GPU-direct) */
    l.whole = l.rx_ack + acks;
    l.whole_done = l.whole + (split ? ALIGN_UP(2 * (size_t)nchan * sizeof(mpccl_dev_whole_t), 128) : 0);
    end = l.whole_done + (split ? ALIGN_UP(2 * (size_t)nchan * 4, 128) : 0);
    l.bytes = ALIGN_UP(end, 4096); /* slots page-aligned for registration */
    return l;
}

/* Views of peer k (pe), whose staging starts `off` bytes into the block (host
 * and device views) and its CTAs' slots `soff` bytes into the slot block (when
 * split), following layout l. */
void mpccl_proxy_set_views(mpccl_proxy_comm_t *pc, proxy_peer_t *pe, int k, size_t off, char *host, char *dev,
                      size_t soff, const layout_t *l, mpccl_dev_link_t *link, mpccl_dev_link_t *os_link)
{
    size_t per = pc->nslot_total;
    char *h = host + off, *d = dev + off;
    char *split = pc->slots ? (char *)pc->slots + soff : NULL; /* one view: the proxy never reads it */
    char *cta_h = split ? split : h, *cta_d = split ? split : d;
    pe->cta_tx = cta_h + l->cta_tx;
    pe->cta_rx = cta_h + l->cta_rx;
    pe->os_tx = h + l->os_tx;
    pe->os_rx = h + l->os_rx;
    pe->tx_ready = (volatile uint32_t *)(h + l->tx_ready);
    pe->tx_len = (volatile uint32_t *)(h + l->tx_len);
    pe->tx_ack = (volatile uint32_t *)(h + l->tx_ack);
    pe->tx_word = (volatile uint64_t *)(h + l->tx_word);
    pe->rx_word = (volatile uint64_t *)(h + l->rx_word);
    pe->rx_ack = (volatile uint32_t *)(h + l->rx_ack);
    pe->os_rx_dev = d + l->os_rx;
    /* A one-sided-only peer (first_chan set already) has no slot block. */
    pe->os_tx_dev = split && pe->first_chan == 0 && pc->os.rma_slots ? split + l->os_dev : NULL;
    pe->rx_ack_dev = (volatile uint32_t *)(d + l->rx_ack);
    pe->chan = pc->chans + (size_t)k * pc->nchan;
    pe->tx_req = pc->reqs + (size_t)k * (2 * per + 2 * pc->nchan); /* then rx_req, whole_req */
    pe->rx_req = pe->tx_req + per;
    /* whole messages: CTA channels of a peer with a slot block (split) */
    int whole = split && pe->first_chan == 0;
    pe->whole = whole ? (volatile mpccl_dev_whole_t *)(h + l->whole) : NULL;
    pe->whole_done = whole ? (volatile uint32_t *)(h + l->whole_done) : NULL;
    pe->whole_req = whole ? pe->rx_req + per : NULL;
    memset(link, 0, sizeof(*link));
    link->kind = MPCCL_LINK_PROXY;
    link->tx_slots = cta_d + l->cta_tx;
    link->tx_ready = (volatile uint32_t *)(d + l->tx_ready);
    link->tx_len = (volatile uint32_t *)(d + l->tx_len);
    link->tx_ack = (volatile uint32_t *)(d + l->tx_ack);
    link->rx_slots = cta_d + l->cta_rx;
    link->tx_word = (volatile uint64_t *)(d + l->tx_word);
    link->rx_word = (volatile uint64_t *)(d + l->rx_word);
    link->rx_ack = (volatile uint32_t *)(d + l->rx_ack);
    if (whole) {
        link->tx_whole = (volatile mpccl_dev_whole_t *)(d + l->whole);
        link->rx_whole = link->tx_whole + pc->nchan;
        link->tx_whole_done = (volatile uint32_t *)(d + l->whole_done);
        link->rx_whole_done = link->tx_whole_done + pc->nchan;
    }
    if (os_link) { /* channel nctas: the one-sided put kernel's side */
        size_t c = pc->nctas - pe->first_chan, words = (size_t)pc->nctas * pc->nslots - pe->first_slot;
        memset(os_link, 0, sizeof(*os_link));
        os_link->kind = MPCCL_LINK_PROXY;
        os_link->tx_slots = d + l->os_tx;
        os_link->tx_ready = link->tx_ready + words;
        os_link->tx_len = link->tx_len + words;
        os_link->tx_ack = link->tx_ack + c;
        os_link->rx_slots = pe->os_tx_dev; /* GPU-direct puts' data (proxy.h) */
    }
}
