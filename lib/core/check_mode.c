/* Check mode (check_mode.h): describe a group's calls, exchange, compare. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check_mode.h"
#include "core/comm_fail.h"
#include "core/hang_report.h"
#include "core/side_channel.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/datatype.h"
#include "util/log.h"

#define CHECK_CALLS_MAX 1024 /* calls of one group compared one by one (more: their number only) */

enum { KIND_GROUP = 1, KIND_PAIR = 2 };

struct mpccl_check_state {
    uint64_t *pair_seq; /* nranks: send/recv-only groups exchanged with each peer */
};

/* One call on the wire. */
typedef struct check_call {
    int32_t coll, dt, op, root; /* send/recv: root is the partner */
    uint64_t count, seq;
} check_call_t;

typedef struct check_msg {
    uint32_t ncoll, np2p;       /* in the group (the arrays may hold fewer) */
    uint32_t coll_sent, p2p_sent;
} check_msg_t;

/* This rank's part of one communicator's group. */
typedef struct comm_part {
    ncclComm_t comm;
    check_call_t *colls, *p2p;
    uint32_t ncoll, np2p;
    int *peers, npeers;  /* whom it exchanges with */
    uint64_t *seqs;      /* per entry of peers: the exchange's sequence */
    uint32_t kind;
} comm_part_t;

mpccl_status_t mpccl_check_setup(ncclComm_t comm)
{
    comm->check = NULL;
    if (mpccl_config_int("CHECK_MODE") == 0) return MPCCL_OK;
    struct mpccl_check_state *c = calloc(1, sizeof(*c));
    if (c) c->pair_seq = calloc((size_t)comm->nranks, sizeof(uint64_t));
    if (!c || !c->pair_seq) {
        free(c);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "check mode: out of memory for %d ranks", comm->nranks);
    }
    comm->check = c;
    if (comm->rank == 0)
        MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx: check mode on (every call is compared with its peers' first)",
                   (unsigned long long)comm->id);
    return MPCCL_OK;
}

void mpccl_check_release(ncclComm_t comm)
{
    if (!comm->check) return;
    free(comm->check->pair_seq);
    free(comm->check);
    comm->check = NULL;
}

static int is_p2p(int coll) { return coll == MPCCL_COLL_SEND || coll == MPCCL_COLL_RECV; }

/* The words of a call ("allreduce call 6 (4096 float32 sum)"). */
static const char *words(const check_call_t *c, char *buf, size_t len)
{
    mpccl_call_rec_t r = {.seq = c->seq, .count = c->count, .coll = c->coll, .dt = c->dt, .op = c->op,
                          .root = c->root, .group = 1};
    return mpccl_call_rec_str(&r, buf, len);
}

static int has_root(int coll)
{
    return coll == MPCCL_COLL_BROADCAST || coll == MPCCL_COLL_REDUCE || coll == MPCCL_COLL_GATHER ||
           coll == MPCCL_COLL_SCATTER;
}

static int has_op(int coll)
{
    return coll == MPCCL_COLL_ALLREDUCE || coll == MPCCL_COLL_REDUCE || coll == MPCCL_COLL_REDUCESCATTER;
}

/* The first argument in which a differs from b, worded with both values;
 * NULL when they agree. */
static const char *differs(const check_call_t *a, const check_call_t *b, char *buf, size_t len)
{
    char x[160], y[160];
    if (a->coll != b->coll) {
        snprintf(buf, len, "the operation (%s vs %s)", words(a, x, sizeof(x)), words(b, y, sizeof(y)));
    } else if (a->seq != b->seq) {
        snprintf(buf, len, "the sequence (call %llu vs call %llu)", (unsigned long long)a->seq, (unsigned long long)b->seq);
    } else if (a->count != b->count) {
        snprintf(buf, len, "count (%llu vs %llu)", (unsigned long long)a->count, (unsigned long long)b->count);
    } else if (a->dt != b->dt) {
        snprintf(buf, len, "datatype (%s vs %s)", mpccl_dtype_name((ncclDataType_t)a->dt),
                 mpccl_dtype_name((ncclDataType_t)b->dt));
    } else if (has_op(a->coll) && a->op != b->op) {
        static const char *names[] = {"sum", "prod", "max", "min", "avg"};
        char oa[24], ob[24];
        snprintf(oa, sizeof(oa), "%s", a->op >= 0 && a->op < (int)ncclNumOps ? names[a->op] : "premulsum");
        snprintf(ob, sizeof(ob), "%s", b->op >= 0 && b->op < (int)ncclNumOps ? names[b->op] : "premulsum");
        snprintf(buf, len, "op (%s vs %s)", oa, ob);
    } else if (has_root(a->coll) && a->root != b->root) {
        snprintf(buf, len, "root (%d vs %d)", a->root, b->root);
    } else {
        return NULL;
    }
    return buf;
}

static void free_part(comm_part_t *p)
{
    free(p->colls);
    free(p->p2p);
    free(p->peers);
    free(p->seqs);
}

/* Describes comm's calls of the list into p, and whom to exchange with. */
static mpccl_status_t describe(ncclComm_t comm, mpccl_call_t *calls, comm_part_t *p)
{
    memset(p, 0, sizeof(*p));
    p->comm = comm;
    uint32_t nc = 0, np = 0;
    for (mpccl_call_t *c = calls; c; c = c->next)
        if (c->comm == comm) *(is_p2p((int)c->desc.coll) ? &np : &nc) += 1;
    p->colls = calloc(nc ? nc : 1, sizeof(*p->colls));
    p->p2p = calloc(np ? np : 1, sizeof(*p->p2p));
    p->peers = calloc((size_t)comm->nranks, sizeof(int));
    p->seqs = calloc((size_t)comm->nranks, sizeof(uint64_t));
    if (!p->colls || !p->p2p || !p->peers || !p->seqs)
        return mpccl_fail(MPCCL_ERR_SYSTEM, "check mode: out of memory for a group of %u calls", nc + np);
    /* The records entered last are this group's: their numbers count back. */
    uint64_t cseq = comm->progress.ncoll - nc + 1, pseq = comm->progress.np2p - np + 1;
    for (mpccl_call_t *c = calls; c; c = c->next) {
        if (c->comm != comm) continue;
        int p2p = is_p2p((int)c->desc.coll);
        check_call_t *e = p2p ? &p->p2p[p->np2p++] : &p->colls[p->ncoll++];
        /* The op as the user passed it is gone (mapped); the record keeps it. */
        *e = (check_call_t){.coll = (int32_t)c->desc.coll, .dt = (int32_t)c->task.dt, .op = c->user_op,
                            .root = c->desc.root, .count = c->desc.count, .seq = p2p ? pseq++ : cseq++};
    }
    if (p->ncoll > 0) { /* every rank takes part */
        p->kind = KIND_GROUP;
        for (int r = 0; r < comm->nranks; r++)
            if (r != comm->rank) {
                p->seqs[p->npeers] = p->colls[0].seq;
                p->peers[p->npeers++] = r;
            }
        return MPCCL_OK;
    }
    p->kind = KIND_PAIR;
    unsigned char *mark = calloc((size_t)comm->nranks, 1);
    if (!mark) return mpccl_fail(MPCCL_ERR_SYSTEM, "check mode: out of memory for %d ranks", comm->nranks);
    for (uint32_t i = 0; i < p->np2p; i++) {
        int r = p->p2p[i].root;
        if (r < 0 || r >= comm->nranks || r == comm->rank || mark[r]) continue;
        mark[r] = 1;
        p->seqs[p->npeers] = ++comm->check->pair_seq[r];
        p->peers[p->npeers++] = r;
    }
    free(mark);
    return MPCCL_OK;
}

/* The message to peer: the group's collectives, and its sends/receives with peer. */
static mpccl_status_t push_to(comm_part_t *p, int peer, uint64_t seq)
{
    uint32_t mine = 0;
    for (uint32_t i = 0; i < p->np2p; i++) mine += p->p2p[i].root == peer;
    check_msg_t h = {.ncoll = p->ncoll, .np2p = mine};
    h.coll_sent = p->ncoll < CHECK_CALLS_MAX ? p->ncoll : CHECK_CALLS_MAX;
    h.p2p_sent = mine < CHECK_CALLS_MAX ? mine : CHECK_CALLS_MAX;
    size_t len = sizeof(h) + sizeof(check_call_t) * (h.coll_sent + h.p2p_sent);
    unsigned char *buf = malloc(len);
    if (!buf) return mpccl_fail(MPCCL_ERR_SYSTEM, "check mode: out of memory for %zu bytes", len);
    memcpy(buf, &h, sizeof(h));
    check_call_t *e = (check_call_t *)(buf + sizeof(h));
    memcpy(e, p->colls, sizeof(*e) * h.coll_sent);
    uint32_t k = 0;
    for (uint32_t i = 0; i < p->np2p && k < h.p2p_sent; i++)
        if (p->p2p[i].root == peer) e[h.coll_sent + k++] = p->p2p[i];
    mpccl_status_t st = mpccl_side_push(p->comm, peer, p->kind, seq, buf, len);
    free(buf);
    return st;
}

typedef struct wait_ctx {
    ncclComm_t comm;
    int peer;
    double start;
    int64_t timeout, stall;
    int stall_done;
} wait_ctx_t;

/* While waiting for a peer's description: a failure, an abort, the peer's
 * death, MPCCL_OP_TIMEOUT (with a hang report), MPCCL_STALL_REPORT_S. */
static mpccl_status_t wait_stop(void *arg)
{
    wait_ctx_t *w = arg;
    ncclComm_t comm = w->comm;
    if (mpccl_comm_failed(comm) || __atomic_load_n(&comm->aborting, __ATOMIC_ACQUIRE))
        return mpccl_comm_fail_report(comm, "check mode");
    if (mpccl_comm_peer_dead(comm, w->peer)) {
        const mpccl_peer_info_t *pi = mpccl_comm_peer_info(comm, w->peer);
        mpccl_comm_fail(comm, ncclRemoteError, "rank %d (host %s, pid %d) died", w->peer, pi ? pi->host : "?",
                        pi ? (int)pi->pid : -1);
        return mpccl_comm_fail_report(comm, "check mode");
    }
    double now = mpccl_now_seconds();
    mpccl_progress_waiting(&comm->progress, w->start);
    char why[96], summary[1024];
    if (w->timeout > 0 && now - w->start > (double)w->timeout) {
        snprintf(why, sizeof(why), "MPCCL_OP_TIMEOUT=%lld s passed (check mode)", (long long)w->timeout);
        mpccl_hang_report(comm, why, 1, summary, sizeof(summary));
        mpccl_comm_fail(comm, ncclRemoteError, "%s", summary);
        return mpccl_comm_fail_report(comm, "check mode");
    }
    if (w->stall > 0 && !w->stall_done && now - w->start > (double)w->stall) {
        w->stall_done = 1;
        snprintf(why, sizeof(why), "stalled for %lld s (MPCCL_STALL_REPORT_S, check mode; still waiting)",
                 (long long)w->stall);
        mpccl_hang_report(comm, why, 1, summary, sizeof(summary));
    }
    return MPCCL_OK;
}

/* Appends a mismatch to out. */
static void note(char *out, size_t len, int *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void note(char *out, size_t len, int *n, const char *fmt, ...)
{
    size_t l = strlen(out);
    if (l + 1 >= len) return;
    if ((*n)++) l += (size_t)snprintf(out + l, len - l, "; ");
    if (l + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + l, len - l, fmt, ap);
    va_end(ap);
}

/* Whether two ranks' collective lists are the same calls. */
static int same_list(const check_msg_t *a, const check_msg_t *b)
{
    if (a->ncoll != b->ncoll || a->coll_sent != b->coll_sent) return 0;
    const check_call_t *ea = (const check_call_t *)(a + 1), *eb = (const check_call_t *)(b + 1);
    char tmp[8];
    for (uint32_t i = 0; i < a->coll_sent; i++)
        if (differs(&ea[i], &eb[i], tmp, sizeof(tmp))) return 0;
    return 1;
}

/* The collectives: every rank's list against the one most ranks have (ties:
 * the lowest rank's), so that every rank words the same verdict. */
static void compare_colls(comm_part_t *p, check_msg_t **got, char *out, size_t len, int *n)
{
    ncclComm_t comm = p->comm;
    int nr = comm->nranks;
    /* got[r]: rank r's header, its entries after it. */
    int best = -1, best_votes = 0;
    for (int r = 0; r < nr; r++) {
        int votes = 0;
        for (int q = 0; q < nr; q++) votes += same_list(got[r], got[q]);
        if (votes > best_votes) best = r, best_votes = votes;
    }
    const check_msg_t *ref = got[best];
    /* The ranks whose list is the reference, as ranges ("0-2,5"). */
    char agree[256] = "";
    size_t al = 0;
    for (int r = 0; r < nr && al + 16 < sizeof(agree); r++) {
        if (!same_list(got[r], ref)) continue;
        int e = r;
        while (e + 1 < nr && same_list(got[e + 1], ref)) e++;
        al += (size_t)snprintf(agree + al, sizeof(agree) - al, e > r ? "%s%d-%d" : "%s%d", al ? "," : "", r, e);
        r = e;
    }
    const check_call_t *er = (const check_call_t *)(ref + 1);
    char a[160], b[160], d[400];
    for (int r = 0; r < nr; r++) {
        const check_msg_t *m = got[r];
        const check_call_t *em = (const check_call_t *)(m + 1);
        if (m->ncoll != ref->ncoll) {
            note(out, len, n, "rank %d's group holds %u collective(s) where rank(s) %s hold %u (first: %s vs %s)", r,
                 m->ncoll, agree, ref->ncoll, m->coll_sent ? words(&em[0], a, sizeof(a)) : "none",
                 ref->coll_sent ? words(&er[0], b, sizeof(b)) : "none");
            continue;
        }
        for (uint32_t i = 0; i < m->coll_sent && i < ref->coll_sent; i++)
            if (differs(&em[i], &er[i], d, sizeof(d))) {
                note(out, len, n, "rank %d calls %s where rank%s %s call%s %s: %s differs", r,
                     words(&em[i], a, sizeof(a)), best_votes > 1 ? "s" : "", agree, best_votes > 1 ? "" : "s",
                     words(&er[i], b, sizeof(b)), d);
                break;
            }
    }
}

/* The sends and receives between this rank and peer: this rank's list with
 * peer against peer's with this rank, in order. */
static void compare_pair(comm_part_t *p, int peer, const check_msg_t *m, char *out, size_t len, int *n)
{
    const check_call_t *theirs = (const check_call_t *)(m + 1) + m->coll_sent;
    int me = p->comm->rank;
    uint32_t k = 0, mine_total = 0;
    char a[160], b[160];
    for (uint32_t i = 0; i < p->np2p; i++) {
        const check_call_t *c = &p->p2p[i];
        if (c->root != peer) continue;
        mine_total++;
        /* My i-th call with peer pairs with its call of the opposite direction, in order. */
        uint32_t seen = 0, j;
        uint32_t my_index = 0;
        for (uint32_t q = 0; q < i; q++) my_index += p->p2p[q].root == peer && p->p2p[q].coll == c->coll;
        for (j = 0; j < m->p2p_sent; j++)
            if (theirs[j].coll != c->coll && seen++ == my_index) break;
        if (j == m->p2p_sent) {
            if (m->p2p_sent < m->np2p) continue; /* beyond what was sent: counted below */
            /* Worded once, by the sending side and by the receiving side alike. */
            note(out, len, n, "rank %d's %s has no matching %s on rank %d in this group", me, words(c, a, sizeof(a)),
                 c->coll == MPCCL_COLL_SEND ? "receive" : "send", peer);
            continue;
        }
        if (theirs[j].count != c->count || theirs[j].dt != c->dt)
            note(out, len, n, "rank %d's %s pairs with rank %d's %s: %s differs", me, words(c, a, sizeof(a)), peer,
                 words(&theirs[j], b, sizeof(b)), theirs[j].count != c->count ? "count" : "datatype");
        k++;
    }
    /* Calls of peer with this rank that nothing here pairs with. */
    uint32_t sends = 0, recvs = 0, my_sends = 0, my_recvs = 0;
    for (uint32_t j = 0; j < m->p2p_sent; j++) *(theirs[j].coll == MPCCL_COLL_SEND ? &sends : &recvs) += 1;
    for (uint32_t i = 0; i < p->np2p; i++)
        if (p->p2p[i].root == peer) *(p->p2p[i].coll == MPCCL_COLL_SEND ? &my_sends : &my_recvs) += 1;
    if (sends > my_recvs)
        note(out, len, n, "rank %d sends %u message(s) to rank %d in this group, which receives %u", peer, sends, me,
             my_recvs);
    if (recvs > my_sends)
        note(out, len, n, "rank %d receives %u message(s) from rank %d in this group, which sends %u", peer, recvs, me,
             my_sends);
    (void)k, (void)mine_total;
}

static mpccl_status_t check_part(comm_part_t *p)
{
    ncclComm_t comm = p->comm;
    int nr = comm->nranks;
    check_msg_t **got = calloc((size_t)nr, sizeof(*got));
    check_msg_t *self = NULL;
    mpccl_status_t st = got ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "check mode: out of memory for %d ranks", nr);
    wait_ctx_t w = {.comm = comm, .start = mpccl_now_seconds(), .timeout = mpccl_config_int("OP_TIMEOUT")};
    w.stall = w.timeout > 0 ? 0 : mpccl_config_int("STALL_REPORT_S");
    for (int i = 0; i < p->npeers && st == MPCCL_OK; i++) {
        void *data;
        size_t len;
        w.peer = p->peers[i];
        st = mpccl_side_take(comm, p->peers[i], p->kind, p->seqs[i], &data, &len, wait_stop, &w);
        if (st != MPCCL_OK) break;
        const check_msg_t *m = data;
        if (len < sizeof(*m) ||
            len != sizeof(*m) + sizeof(check_call_t) * ((size_t)m->coll_sent + m->p2p_sent)) {
            free(data);
            st = mpccl_fail(MPCCL_ERR_REMOTE, "check mode: a malformed description (%zu bytes) from rank %d", len,
                            p->peers[i]);
            break;
        }
        got[p->peers[i]] = data;
    }
    char out[1536] = "";
    int n = 0;
    if (st == MPCCL_OK && p->kind == KIND_GROUP) {
        size_t len = sizeof(check_msg_t) + sizeof(check_call_t) * (p->ncoll < CHECK_CALLS_MAX ? p->ncoll : CHECK_CALLS_MAX);
        self = malloc(len);
        if (!self) st = mpccl_fail(MPCCL_ERR_SYSTEM, "check mode: out of memory");
        else {
            *self = (check_msg_t){.ncoll = p->ncoll, .coll_sent = p->ncoll < CHECK_CALLS_MAX ? p->ncoll : CHECK_CALLS_MAX};
            memcpy(self + 1, p->colls, sizeof(check_call_t) * self->coll_sent);
            got[comm->rank] = self;
            compare_colls(p, got, out, sizeof(out), &n);
            got[comm->rank] = NULL;
        }
    }
    for (int i = 0; i < p->npeers && st == MPCCL_OK; i++) compare_pair(p, p->peers[i], got[p->peers[i]], out, sizeof(out), &n);
    for (int r = 0; got && r < nr; r++) free(got[r]);
    free(got);
    free(self);
    if (st == MPCCL_OK && n > 0)
        st = mpccl_fail(MPCCL_ERR_USAGE, "check mode (MPCCL_CHECK_MODE=1) on comm 0x%llx, rank %d: %s; no data moved",
                        (unsigned long long)comm->id, comm->rank, out);
    return st;
}

mpccl_status_t mpccl_check_calls(mpccl_call_t *calls)
{
    int nparts = 0;
    for (mpccl_call_t *c = calls; c; c = c->next) nparts += c->comm->check != NULL;
    if (nparts == 0) return MPCCL_OK;
    comm_part_t *parts = calloc((size_t)nparts, sizeof(*parts));
    if (!parts) return mpccl_fail(MPCCL_ERR_SYSTEM, "check mode: out of memory");
    mpccl_status_t st = MPCCL_OK;
    int np = 0;
    for (mpccl_call_t *c = calls; c && st == MPCCL_OK; c = c->next) {
        if (!c->comm->check) continue;
        int seen = 0;
        for (int i = 0; i < np; i++) seen |= parts[i].comm == c->comm;
        if (seen) continue;
        st = describe(c->comm, calls, &parts[np++]);
    }
    /* Every description leaves before any is awaited: ranks may list their
     * communicators in different orders. */
    for (int i = 0; i < np && st == MPCCL_OK; i++)
        for (int k = 0; k < parts[i].npeers && st == MPCCL_OK; k++)
            st = push_to(&parts[i], parts[i].peers[k], parts[i].seqs[k]);
    mpccl_status_t verdict = MPCCL_OK;
    for (int i = 0; i < np && st == MPCCL_OK; i++) {
        mpccl_status_t s = check_part(&parts[i]);
        if (s == MPCCL_ERR_USAGE && verdict == MPCCL_OK) verdict = s; /* the others are still compared */
        else if (s != MPCCL_OK) st = s;
    }
    for (int i = 0; i < np; i++) free_part(&parts[i]);
    free(parts);
    return st != MPCCL_OK ? st : verdict;
}
