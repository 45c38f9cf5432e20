/* What UCX's description of an endpoint (ucp_ep_print_info) tells the
 * transport: the eager limit (transport.h, eager_max: a host call drains only
 * the peers it received larger messages from) and whether every lane is local
 * (transport.h, drains: a flush over a network lane waits for the peer). */
#define _GNU_SOURCE /* open_memstream */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/log.h"
#include "ucx_tp.h"

/* The largest tagged message UCX sends eagerly on peer's endpoint, read from
 * its description ("tag_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..
 * (inf)" in UCX 1.13, rendezvous from 8256 bytes).  The peer's endpoint to
 * this rank is alike (same transports and settings).  0 where the line is
 * missing or unlike that (another UCX version's format, an endpoint still
 * connecting): the caller drains after any receive. */
size_t mpccl_ucx_parse_eager_max(const char *text)
{
    /* Still connecting (its lanes are provisional), or over tcp, whose
     * endpoints keep their wireup lane: unknown.  Tcp peers are never drained
     * anyway (mpccl_ucx_parse_lanes_local). */
    if (strstr(text, "wireup")) return 0;
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

/* Transports that never leave the machine: a flush over them completes
 * without the peer's progress. */
static const char *const local_tls[] = {"self", "posix", "sysv", "xpmem", "cma", "knem", "cuda_copy", "cuda_ipc",
                                        "gdr_copy", "rocm_copy", "rocm_ipc", "rocm_gdr", "ze_copy", "ze_ipc"};

/* The lines "lane[0]:  3:sysv/memory.0 md[2] ..." (UCX 1.13-1.22): 1 when
 * every lane's transport is local, 0 when one is not (tcp, rc, ud, dc...), -1
 * when no lane is listed.  A lane marked "wireup" (the one carrying the
 * handshake) counts like the others: a tcp endpoint keeps that mark. */
int mpccl_ucx_parse_lanes_local(const char *text)
{
    int lanes = 0;
    for (const char *l = strstr(text, "lane["); l; l = strstr(l + 1, "lane[")) {
        const char *p = strstr(l, "]:");
        if (!p) return -1;
        p += 2;
        while (*p == ' ') p++;
        while (*p >= '0' && *p <= '9') p++;
        if (*p++ != ':') return -1;
        size_t n = strcspn(p, "/ \n");
        int local = 0;
        for (size_t i = 0; i < sizeof(local_tls) / sizeof(local_tls[0]) && !local; i++)
            local = strlen(local_tls[i]) == n && strncmp(p, local_tls[i], n) == 0;
        if (!local) return 0;
        lanes++;
    }
    return lanes ? 1 : -1;
}

/* Reads peer's description while something is unknown, a few tries (an
 * endpoint still connecting describes provisional lanes). */
static void describe(mpccl_ucx_tp_t *tp, int peer)
{
    mpccl_ucx_peer_t *p = &tp->peers[peer];
    if ((p->eager_max && p->lanes_local >= 0) || p->info_tries >= 3 || !p->ep || p->failed) return;
    p->info_tries++;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return;
    ucp_ep_print_info(p->ep, f);
    fclose(f);
    if (text) {
        if (!p->eager_max) {
            p->eager_max = mpccl_ucx_parse_eager_max(text);
            if (p->eager_max)
                MPCCL_INFO(MPCCL_SUB_NET, "rank %d: UCX sends up to %zu bytes eagerly to rank %d", tp->pub.rank,
                           p->eager_max, peer);
        }
        if (p->lanes_local < 0) {
            p->lanes_local = mpccl_ucx_parse_lanes_local(text);
            if (p->lanes_local == 0 && p->err_mode == UCP_ERR_HANDLING_MODE_NONE)
                MPCCL_INFO(MPCCL_SUB_NET, "rank %d: UCX reaches rank %d, on this machine, over a network "
                           "transport: host calls do not wait for what it owes this rank", tp->pub.rank, peer);
        }
    }
    free(text);
}

size_t mpccl_ucx_eager_max(mpccl_transport_t *t, int peer)
{
    mpccl_ucx_tp_t *tp = t->impl;
    if (peer < 0 || peer >= t->nranks) return 0;
    describe(tp, peer);
    return tp->peers[peer].eager_max;
}

int mpccl_ucx_lanes_local(mpccl_ucx_tp_t *tp, int peer)
{
    if (peer < 0 || peer >= tp->pub.nranks) return -1;
    describe(tp, peer);
    return tp->peers[peer].lanes_local;
}
