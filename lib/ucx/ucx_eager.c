/* The UCX transport's eager limit per endpoint (transport.h, eager_max): a
 * host call drains only the peers it received larger messages from. */
#define _GNU_SOURCE /* open_memstream */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/log.h"
#include "ucx_tp.h"

/* The largest tagged message UCX sends eagerly on peer's endpoint, read from
 * its description (ucp_ep_print_info: "tag_send: 0..<egr/short>..93..
 * <egr/bcopy>..8256..<rndv>..(inf)" in UCX 1.13, rendezvous from 8256
 * bytes).  The peer's endpoint to this rank is alike (same transports and
 * settings).  0 where the line is missing or unlike that (another UCX
 * version's format, an endpoint still connecting): the caller drains after
 * any receive.  Read once per peer (a few tries while connecting). */
size_t mpccl_ucx_parse_eager_max(const char *text)
{
    if (strstr(text, "wireup")) return 0; /* still connecting: its lanes are provisional */
    const char *line = strstr(text, " tag_send:"); /* not tag_send_nbr: or tag_send_sync: */
    if (!line) return 0;
    const char *end = strchr(line, '\n');
    if (!end) end = line + strlen(line);
    const char *rndv = strstr(line, "..<rndv>");
    if (!rndv || rndv > end) { /* no rendezvous at all: every size eager */
        const char *inf = strstr(line, "(inf)");
        return inf && inf < end ? SIZE_MAX : 0;
    }
    const char *p = rndv;
    while (p > line && p[-1] >= '0' && p[-1] <= '9') p--;
    if (p == rndv) return 0;
    unsigned long long from = strtoull(p, NULL, 10);
    return from > 0 ? (size_t)from - 1 : 0;
}

size_t mpccl_ucx_eager_max(mpccl_transport_t *t, int peer)
{
    mpccl_ucx_tp_t *tp = t->impl;
    if (peer < 0 || peer >= t->nranks) return 0;
    mpccl_ucx_peer_t *p = &tp->peers[peer];
    if (p->eager_max || p->eager_tries >= 3 || !p->ep || p->failed) return p->eager_max;
    p->eager_tries++;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return 0;
    ucp_ep_print_info(p->ep, f);
    fclose(f);
    if (text) p->eager_max = mpccl_ucx_parse_eager_max(text);
    free(text);
    if (p->eager_max)
        MPCCL_INFO(MPCCL_SUB_NET, "rank %d: UCX sends up to %zu bytes eagerly to rank %d", t->rank, p->eager_max,
                   peer);
    return p->eager_max;
}
