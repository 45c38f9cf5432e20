/* Job-wide hang reports (hang_report.h): gather, compare, word, print. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/comm_fail.h"
#include "core/hang_report.h"
#include "core/side_channel.h"
#include "util/log.h"
#include "bootstrap/bootstrap_net.h"

/* What a rank is, seen from the call this rank waits in. */
enum { RANK_WAITING, RANK_PAST, RANK_OTHER, RANK_BLAME };

#define BLAME_LINES_MAX 64   /* details: ranks to blame listed one by one */
#define KERNEL_LINES_MAX 64  /* details: waiting ranks' kernels listed one by one */
#define SUMMARY_BLAMED_MAX 4 /* the summary names this many, then counts */

typedef struct text {
    char *buf;
    size_t len, cap;
} text_t;

static void add(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text_t *t, const char *fmt, ...)
{
    if (!t->buf) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= t->cap - t->len) {
        t->len = t->cap - 1; /* truncated: the report keeps its beginning */
        return;
    }
    t->len += (size_t)n;
}

/* "0-2,4,7-9" of the ranks r with cls[r] == want. */
static void add_ranks(text_t *t, const unsigned char *cls, int n, int want)
{
    int first = 1;
    for (int r = 0; r < n; r++) {
        if (cls[r] != want) continue;
        int e = r;
        while (e + 1 < n && cls[e + 1] == want) e++;
        if (e > r) add(t, "%s%d-%d", first ? "" : ",", r, e);
        else add(t, "%s%d", first ? "" : ",", r);
        first = 0;
        r = e;
    }
}

static int count_of(const unsigned char *cls, int n, int want)
{
    int k = 0;
    for (int r = 0; r < n; r++) k += cls[r] == want;
    return k;
}

static int is_p2p(const mpccl_call_rec_t *c) { return c->coll == MPCCL_COLL_SEND || c->coll == MPCCL_COLL_RECV; }

/* Classifies rank r against ref (this rank's call) and words what it does
 * into what (without its name). */
static int classify(ncclComm_t comm, const mpccl_call_rec_t *ref, const mpccl_side_record_t *rec, int got, int r,
                    int streams, char *what, size_t len)
{
    /* On streams (GPU) a call returns once launched: "done" means launched,
     * and the kernels tell whether it runs. */
    const char *done = streams ? "launched" : "completed";
    char a[160], b[160];
    if (mpccl_comm_peer_dead(comm, r)) {
        snprintf(what, len, "died");
        return RANK_BLAME;
    }
    if (got == MPCCL_SIDE_GONE) {
        snprintf(what, len, "is alive but has left this communicator (destroyed or aborted it)");
        return RANK_BLAME;
    }
    if (!got) {
        snprintf(what, len, "did not answer within %.1f s (its process is stopped, or its machine or side channel "
                 "is unreachable)", MPCCL_HANG_GATHER_MS / 1000.0);
        return RANK_BLAME;
    }
    int ref_p2p = is_p2p(ref);
    if (ref_p2p && r != ref->root && r != comm->rank) {
        snprintf(what, len, "%s", rec->state == MPCCL_PROGRESS_IDLE ? "in no call" : "in a call");
        return RANK_OTHER; /* not a partner of this send/recv */
    }
    if (rec->state == MPCCL_PROGRESS_FAILED) {
        const mpccl_call_rec_t *last = ref_p2p ? &rec->cur : &rec->coll;
        if ((ref_p2p && is_p2p(last)) || (!ref_p2p && mpccl_call_rec_same(last, ref))) {
            snprintf(what, len, "gave up on %s too (its call failed)", mpccl_call_rec_str(last, a, sizeof(a)));
            return RANK_WAITING;
        }
        if (!ref_p2p && rec->coll.seq >= ref->seq) {
            snprintf(what, len, "failed in %s where this call is %s", mpccl_call_rec_str(last, a, sizeof(a)),
                     mpccl_call_rec_str(ref, b, sizeof(b)));
            return RANK_BLAME;
        }
        snprintf(what, len, "failed in %s, has not entered call %llu", mpccl_call_rec_str(&rec->cur, a, sizeof(a)),
                 (unsigned long long)ref->seq);
        return RANK_BLAME;
    }
    if (rec->state != MPCCL_PROGRESS_IDLE) {
        const char *grouped = rec->state == MPCCL_PROGRESS_GROUPED ? " (inside ncclGroupStart, not at ncclGroupEnd yet)" : "";
        if (ref_p2p) {
            snprintf(what, len, "is in %s%s", mpccl_call_rec_str(&rec->cur, a, sizeof(a)), grouped);
            return is_p2p(&rec->cur) && !*grouped ? RANK_WAITING : RANK_BLAME;
        }
        if (rec->coll.seq == ref->seq && mpccl_call_rec_same(&rec->coll, ref)) {
            if (*grouped) {
                snprintf(what, len, "has called %s%s", mpccl_call_rec_str(&rec->coll, a, sizeof(a)), grouped);
                return RANK_BLAME;
            }
            if (is_p2p(&rec->cur) && rec->cur.group > 1) { /* waits in the same group */
                snprintf(what, len, "is in %s", mpccl_call_rec_str(&rec->coll, a, sizeof(a)));
                return RANK_WAITING;
            }
            snprintf(what, len, "is in %s", mpccl_call_rec_str(&rec->coll, a, sizeof(a)));
            return RANK_WAITING;
        }
        if (is_p2p(&rec->cur) && rec->coll.seq < ref->seq) {
            snprintf(what, len, "is in %s%s, has not entered call %llu", mpccl_call_rec_str(&rec->cur, a, sizeof(a)),
                     grouped, (unsigned long long)ref->seq);
            return RANK_BLAME;
        }
        if (rec->coll.seq == ref->seq) {
            snprintf(what, len, "is in %s%s where this call is %s", mpccl_call_rec_str(&rec->coll, a, sizeof(a)),
                     grouped, mpccl_call_rec_str(ref, b, sizeof(b)));
            return RANK_BLAME;
        }
        if (rec->coll.seq < ref->seq) {
            snprintf(what, len, "is still in %s%s, has not entered call %llu", mpccl_call_rec_str(&rec->coll, a, sizeof(a)),
                     grouped, (unsigned long long)ref->seq);
            return RANK_BLAME;
        }
        snprintf(what, len, "is past this call, in %s", mpccl_call_rec_str(&rec->coll, a, sizeof(a)));
        return RANK_PAST;
    }
    if (ref_p2p) {
        snprintf(what, len, "is alive, in no call of this communicator (it made %llu send/recv calls)",
                 (unsigned long long)rec->np2p);
        return RANK_BLAME;
    }
    if (rec->done.seq == ref->seq && !mpccl_call_rec_same(&rec->done, ref)) {
        snprintf(what, len, "%s %s where this call is %s", done, mpccl_call_rec_str(&rec->done, a, sizeof(a)),
                 mpccl_call_rec_str(ref, b, sizeof(b)));
        return RANK_BLAME;
    }
    if (streams && rec->done.seq == ref->seq) {
        snprintf(what, len, "launched %s too", mpccl_call_rec_str(&rec->done, a, sizeof(a)));
        return RANK_WAITING;
    }
    if (rec->done.seq >= ref->seq) {
        snprintf(what, len, "%s %s and is in no call", done, mpccl_call_rec_str(&rec->done, a, sizeof(a)));
        return RANK_PAST;
    }
    snprintf(what, len, "is alive, last %s %s, has not %s call %llu", done,
             rec->done.seq ? mpccl_call_rec_str(&rec->done, a, sizeof(a)) : "no collective",
             streams ? "launched" : "entered", (unsigned long long)ref->seq);
    return RANK_BLAME;
}

static const char *rank_name(ncclComm_t comm, int r, char *buf, size_t len)
{
    const mpccl_peer_info_t *p = mpccl_comm_peer_info(comm, r);
    if (p) snprintf(buf, len, "rank %d (host %s, pid %d)", r, p->host, (int)p->pid);
    else snprintf(buf, len, "rank %d", r);
    return buf;
}

/* Builds the report into t (summary first, up to the first newline); returns
 * the lowest waiting rank, or -1 when this rank waits in no call; *blamed:
 * ranks to blame. */
static int build(ncclComm_t comm, const char *why, text_t *t, int *blamed)
{
    int n = comm->nranks;
    mpccl_side_record_t *recs = calloc((size_t)n, sizeof(*recs));
    unsigned char *got = calloc((size_t)n, 1), *cls = calloc((size_t)n, 1);
    char (*what)[400] = calloc((size_t)n, sizeof(*what));
    *blamed = 0;
    if (!recs || !got || !cls || !what) {
        add(t, "%s on comm 0x%llx: out of memory for the report of %d ranks", why, (unsigned long long)comm->id, n);
        free(recs), free(got), free(cls), free(what);
        return -1;
    }
    mpccl_side_fetch_records(comm, recs, got, mpccl_socket_now_ms() + MPCCL_HANG_GATHER_MS);
    const mpccl_side_record_t *me = &recs[comm->rank];
    int in_call = me->state == MPCCL_PROGRESS_RUNNING || me->state == MPCCL_PROGRESS_GROUPED;
    mpccl_call_rec_t ref = is_p2p(&me->cur) && me->cur.group > 1 && me->coll.seq == me->ncoll && me->coll.seq
                               ? me->coll
                               : me->cur;
    /* A GPU rank is in no call once its launches returned; a kernel of it
     * that waits makes its last launched collective the call in question. */
    int streams = !in_call && comm->exec->on_streams && me->done.seq &&
                  (strstr(me->kernel, "waited for") || strstr(me->kernel, "timed out"));
    if (streams) {
        in_call = 1;
        ref = me->done;
    }
    if (!in_call) { /* a report on demand from a rank in no call: compare with its next collective */
        memset(&ref, 0, sizeof(ref));
        ref.seq = me->ncoll + 1;
        ref.coll = -1;
    }
    int lowest = -1;
    for (int r = 0; r < n; r++) {
        if (r == comm->rank && in_call) {
            cls[r] = RANK_WAITING;
            snprintf(what[r], sizeof(what[r]), "%s", streams ? "launched this call" : "is in this call");
        } else if (!in_call) {
            cls[r] = RANK_OTHER;
            char a[160];
            if (got[r] != MPCCL_SIDE_GOT)
                snprintf(what[r], sizeof(what[r]), "%s", mpccl_comm_peer_dead(comm, r) ? "died"
                                                         : got[r] == MPCCL_SIDE_GONE ? "has left this communicator"
                                                                                     : "did not answer");
            else if (recs[r].state == MPCCL_PROGRESS_FAILED)
                snprintf(what[r], sizeof(what[r]), "is in no call, its last one failed: %s",
                         mpccl_call_rec_str(&recs[r].cur, a, sizeof(a)));
            else if (recs[r].state != MPCCL_PROGRESS_IDLE)
                snprintf(what[r], sizeof(what[r]), "is in %s", mpccl_call_rec_str(&recs[r].cur, a, sizeof(a)));
            else
                snprintf(what[r], sizeof(what[r]), "is in no call, last completed %s",
                         recs[r].done.seq ? mpccl_call_rec_str(&recs[r].done, a, sizeof(a)) : "no collective");
        } else {
            cls[r] = (unsigned char)classify(comm, &ref, &recs[r], got[r], r, streams, what[r], sizeof(what[r]));
        }
        if (cls[r] == RANK_WAITING && lowest < 0) lowest = r;
    }
    char a[160], name[128];
    /* The summary line. */
    if (in_call) {
        add(t, "%s%s%s on comm 0x%llx: rank%s ", why, *why ? ": " : "", mpccl_call_rec_str(&ref, a, sizeof(a)),
            (unsigned long long)comm->id, count_of(cls, n, RANK_WAITING) > 1 ? "s" : "");
        add_ranks(t, cls, n, RANK_WAITING);
        if (streams) add(t, " launched it, its kernels wait");
        else add(t, " waiting for %.1f s", me->wait_s);
    } else {
        add(t, "%s%scomm 0x%llx: rank %d is in no call (it made %llu collectives)", why, *why ? ": " : "",
            (unsigned long long)comm->id, comm->rank, (unsigned long long)me->ncoll);
    }
    for (int r = 0; r < n && in_call; r++) {
        if (cls[r] != RANK_BLAME) continue;
        if (++*blamed <= SUMMARY_BLAMED_MAX) add(t, "; %s %s", rank_name(comm, r, name, sizeof(name)), what[r]);
    }
    if (*blamed > SUMMARY_BLAMED_MAX) add(t, "; and %d more rank(s) (see the report)", *blamed - SUMMARY_BLAMED_MAX);
    if (in_call && *blamed == 0) add(t, "; every rank is in this call or past it (a lost message, or a slow rank)");
    /* The details. */
    time_t now = time(NULL);
    struct tm tm;
    char when[32] = "";
    if (localtime_r(&now, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    add(t, "\n  report by %s at %s, comm 0x%llx of %d ranks%s", rank_name(comm, comm->rank, name, sizeof(name)),
        when, (unsigned long long)comm->id, n, lowest >= 0 ? "" : "");
    if (lowest >= 0) add(t, "; printed by rank %d (the lowest waiting)", lowest);
    if (count_of(cls, n, RANK_WAITING)) {
        add(t, "\n  waiting in %s: ranks ", mpccl_call_rec_str(&ref, a, sizeof(a)));
        add_ranks(t, cls, n, RANK_WAITING);
    }
    if (count_of(cls, n, RANK_PAST)) {
        add(t, "\n  past this call: ranks ");
        add_ranks(t, cls, n, RANK_PAST);
    }
    int lines = 0;
    for (int r = 0; r < n; r++) {
        if (cls[r] != RANK_BLAME && cls[r] != RANK_OTHER) continue;
        if (++lines > BLAME_LINES_MAX) continue;
        add(t, "\n  %s %s", rank_name(comm, r, name, sizeof(name)), what[r]);
        if (got[r] == MPCCL_SIDE_GOT && recs[r].wait_s > 0) add(t, ", waiting for %.1f s", recs[r].wait_s);
        if (got[r] == MPCCL_SIDE_GOT && recs[r].kernel[0]) add(t, "; kernels: %s", recs[r].kernel);
    }
    if (lines > BLAME_LINES_MAX) add(t, "\n  ... and %d more rank(s) elsewhere", lines - BLAME_LINES_MAX);
    lines = 0;
    for (int r = 0; r < n; r++) {
        if (cls[r] != RANK_WAITING || got[r] != MPCCL_SIDE_GOT || !recs[r].kernel[0]) continue;
        if (++lines <= KERNEL_LINES_MAX) add(t, "\n  rank %d kernels: %s", r, recs[r].kernel);
    }
    free(recs), free(got), free(cls), free(what);
    return lowest;
}

static void print_report(const char *report)
{
    /* The log takes lines of up to 2 KB: one WARN per line of the report. */
    const char *p = report;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        MPCCL_WARN(MPCCL_SUB_COLL, "%s%.*s", p == report ? "hang: " : "", (int)l, p);
        p += l + (e != NULL);
    }
}

int mpccl_hang_report(ncclComm_t comm, const char *why, int print, char *summary, size_t len)
{
    text_t t = {.buf = malloc(MPCCL_SIDE_REPORT_MAX), .cap = MPCCL_SIDE_REPORT_MAX};
    if (!t.buf) {
        snprintf(summary, len, "%s (no memory for a report)", why);
        return 0;
    }
    t.buf[0] = '\0';
    int blamed = 0;
    int lowest = build(comm, why, &t, &blamed);
    char *nl = strchr(t.buf, '\n');
    snprintf(summary, len, "%.*s", nl ? (int)(nl - t.buf) : (int)t.len, t.buf);
    mpccl_side_set_report(comm, t.buf);
    if (print && (lowest == comm->rank || lowest < 0)) print_report(t.buf);
    free(t.buf);
    return blamed > 0;
}

void mpccl_hang_report_from(ncclComm_t comm, int peer)
{
    char *buf = malloc(MPCCL_SIDE_REPORT_MAX);
    if (!buf) return;
    if (mpccl_side_fetch_report(comm, peer, buf, MPCCL_SIDE_REPORT_MAX,
                                mpccl_socket_now_ms() + MPCCL_HANG_GATHER_MS) == MPCCL_OK && buf[0]) {
        char *nl = strchr(buf, '\n');
        mpccl_comm_fail_amend(comm, "rank %d's report: %.*s", peer, nl ? (int)(nl - buf) : (int)strlen(buf), buf);
        char mark[64];
        snprintf(mark, sizeof(mark), "printed by rank %d (the lowest waiting)", comm->rank);
        if (strstr(buf, mark)) print_report(buf);
        mpccl_side_set_report(comm, buf);
    }
    free(buf);
}

void mpccl_hang_dump(ncclComm_t comm, FILE *out)
{
    text_t t = {.buf = malloc(MPCCL_SIDE_REPORT_MAX), .cap = MPCCL_SIDE_REPORT_MAX};
    if (!t.buf) return;
    t.buf[0] = '\0';
    int blamed = 0;
    build(comm, "state on demand", &t, &blamed);
    if (out) {
        fprintf(out, "%s\n", t.buf);
        fflush(out);
    } else {
        print_report(t.buf);
    }
    free(t.buf);
}
