/* One collective call: layout, launch, input and check.  See perf_coll.h. */
#include "perf_coll.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int reduces, rooted, inplace;
} colls[PERF_NUM_COLLS] = {
    [PERF_ALLREDUCE] = {"allreduce", 1, 0, 1},     [PERF_REDUCE_SCATTER] = {"reduce_scatter", 1, 0, 1},
    [PERF_ALL_GATHER] = {"all_gather", 0, 0, 1},   [PERF_ALLTOALL] = {"alltoall", 0, 0, 1},
    [PERF_BROADCAST] = {"broadcast", 0, 1, 1},     [PERF_REDUCE] = {"reduce", 1, 1, 1},
    [PERF_GATHER] = {"gather", 0, 1, 1},           [PERF_SCATTER] = {"scatter", 0, 1, 1},
    [PERF_SENDRECV] = {"sendrecv", 0, 0, 0},       [PERF_BCAST] = {"bcast", 0, 1, 1},
};

const char *perf_coll_name(perf_coll_t c) { return (int)c >= 0 && c < PERF_NUM_COLLS ? colls[c].name : "invalid"; }
int perf_coll_reduces(perf_coll_t c) { return colls[c].reduces; }
int perf_coll_rooted(perf_coll_t c) { return colls[c].rooted; }
int perf_coll_has_inplace(perf_coll_t c) { return colls[c].inplace; }

/* Compares ignoring '_' so both "all_reduce" (nccl-tests) and "allreduce" work. */
static int same_name(const char *a, const char *b)
{
    for (;; a++, b++) {
        while (*a == '_') a++;
        while (*b == '_') b++;
        if (*a != *b) return 0;
        if (*a == 0) return 1;
    }
}

int perf_coll_parse(const char *s, perf_coll_t *c)
{
    for (int i = 0; i < PERF_NUM_COLLS; i++)
        if (same_name(s, colls[i].name)) return *c = (perf_coll_t)i, 0;
    return -1;
}

/* nccl-tests' bus bandwidth: the bytes a rank must move in an optimal algorithm,
 * relative to the buffer size.  allreduce sends and receives 2(n-1)/n of it
 * (reduce-scatter then all-gather); all_gather / reduce_scatter / alltoall /
 * gather / scatter move (n-1)/n; broadcast, reduce and sendrecv move it once. */
double perf_coll_bus_factor(perf_coll_t c, int n)
{
    switch (c) {
    case PERF_ALLREDUCE: return 2.0 * (n - 1) / n;
    case PERF_REDUCE_SCATTER: case PERF_ALL_GATHER: case PERF_ALLTOALL:
    case PERF_GATHER: case PERF_SCATTER: return (double)(n - 1) / n;
    default: return 1;
    }
}

void perf_coll_counts(perf_coll_t c, int n, size_t total, size_t *count, size_t *sendcount, size_t *recvcount)
{
    size_t per = total / (size_t)n;
    switch (c) {
    case PERF_REDUCE_SCATTER: case PERF_SCATTER:
        *count = per, *sendcount = per * n, *recvcount = per;
        break;
    case PERF_ALL_GATHER: case PERF_GATHER:
        *count = per, *sendcount = per, *recvcount = per * n;
        break;
    case PERF_ALLTOALL:
        *count = per, *sendcount = per * n, *recvcount = per * n;
        break;
    default:
        *count = total, *sendcount = total, *recvcount = total;
    }
}

static size_t ts(const perf_call_t *c) { return perf_type_size(c->type); }

void perf_call_ptrs(const perf_call_t *c, void **send, void **recv)
{
    size_t mine = (size_t)c->rank * c->count * ts(c);
    *send = c->sendbase;
    *recv = c->recvbase;
    if (c->coll == PERF_BCAST) {
        *send = c->recvbase;
    } else if (c->inplace) {
        switch (c->coll) {
        case PERF_REDUCE_SCATTER: case PERF_SCATTER: /* result is my slice of the input */
            *recv = (char *)c->sendbase + mine;
            break;
        case PERF_ALL_GATHER: case PERF_GATHER: /* input is my slice of the result */
            *send = (char *)c->recvbase + mine;
            break;
        default:
            *send = c->recvbase;
        }
    }
}

/* A function the library lacks fails the call rather than crashing. */
#define LIBCALL(f, args) (L->f ? L->f args : ncclInvalidUsage)

ncclResult_t perf_call_launch(const perf_call_t *c)
{
    static const perf_nccl_t linked = PERF_NCCL_LINKED;
    const perf_nccl_t *L = c->lib ? c->lib : &linked;
    void *s, *r;
    ncclResult_t res, end;
    perf_call_ptrs(c, &s, &r);
    switch (c->coll) {
    case PERF_ALLREDUCE: return LIBCALL(AllReduce, (s, r, c->count, c->type, c->op, c->comm, c->stream));
    case PERF_REDUCE_SCATTER: return LIBCALL(ReduceScatter, (s, r, c->count, c->type, c->op, c->comm, c->stream));
    case PERF_ALL_GATHER: return LIBCALL(AllGather, (s, r, c->count, c->type, c->comm, c->stream));
    case PERF_ALLTOALL: return LIBCALL(AlltoAll, (s, r, c->count, c->type, c->comm, c->stream));
    case PERF_BROADCAST: return LIBCALL(Broadcast, (s, r, c->count, c->type, c->root, c->comm, c->stream));
    case PERF_BCAST: return LIBCALL(Bcast, (r, c->count, c->type, c->root, c->comm, c->stream));
    case PERF_REDUCE: return LIBCALL(Reduce, (s, r, c->count, c->type, c->op, c->root, c->comm, c->stream));
    case PERF_GATHER: return LIBCALL(Gather, (s, r, c->count, c->type, c->root, c->comm, c->stream));
    case PERF_SCATTER: return LIBCALL(Scatter, (s, r, c->count, c->type, c->root, c->comm, c->stream));
    case PERF_SENDRECV:
        res = L->GroupStart();
        if (res != ncclSuccess) return res;
        res = LIBCALL(Send, (s, c->count, c->type, (c->rank + 1) % c->nranks, c->comm, c->stream));
        if (res == ncclSuccess)
            res = LIBCALL(Recv, (r, c->count, c->type, (c->rank + c->nranks - 1) % c->nranks, c->comm, c->stream));
        end = L->GroupEnd();
        return res != ncclSuccess ? res : end;
    default: return ncclInvalidArgument;
    }
}

/* Elements the call reads on this rank, numbered as perf_fill numbers them. */
static size_t input_count(const perf_call_t *c)
{
    switch (c->coll) {
    case PERF_REDUCE_SCATTER: case PERF_ALLTOALL: case PERF_SCATTER: return c->count * c->nranks;
    default: return c->count;
    }
}

static size_t output_count(const perf_call_t *c)
{
    switch (c->coll) {
    case PERF_ALL_GATHER: case PERF_ALLTOALL: case PERF_GATHER: return c->count * c->nranks;
    default: return c->count;
    }
}

int perf_call_prepare(const perf_call_t *c, const perf_data_t *d, perf_mem_t *m, void *host, int exact)
{
    void *s, *r;
    size_t in = input_count(c), out = output_count(c), big = in > out ? in : out;
    perf_call_ptrs(c, &s, &r);
    /* poison: a call that leaves its output alone cannot pass */
    memset(host, 0xa5, big * ts(c));
    if (c->inplace || c->coll == PERF_BCAST) {
        void *base = (c->coll == PERF_REDUCE_SCATTER || c->coll == PERF_SCATTER) ? c->sendbase : c->recvbase;
        if (perf_mem_put(m, base, host, big * ts(c))) return -1;
    } else if (perf_mem_put(m, r, host, out * ts(c))) {
        return -1;
    }
    if (exact)
        perf_fill(d, c->rank, 0, in, host);
    else
        perf_fill_timing(d, c->rank, in, host);
    return perf_mem_put(m, s, host, in * ts(c));
}

static void note(size_t *wrong, size_t add, const char *what, const char *sub, char *msg, size_t msglen)
{
    if (add && *wrong == 0 && msg && msglen) {
        char tmp[512];
        snprintf(tmp, sizeof(tmp), "%s: %s", what, sub);
        snprintf(msg, msglen, "%s", tmp);
    }
    *wrong += add;
}

size_t perf_call_check(const perf_call_t *c, const perf_data_t *d, perf_mem_t *m, void *host, char *msg,
                       size_t msglen)
{
    void *s, *r;
    size_t p = c->count, wrong = 0, sz = ts(c);
    int n = c->nranks, me = c->rank;
    char sub[400] = "";
    unsigned char *o = host;
    perf_call_ptrs(c, &s, &r);
    if (perf_mem_get(m, host, r, output_count(c) * sz)) {
        if (msg) snprintf(msg, msglen, "cannot copy the result back");
        return output_count(c) ? output_count(c) : 1;
    }
    switch (c->coll) {
    case PERF_ALLREDUCE: note(&wrong, perf_check_reduce(d, 0, p, o, sub, sizeof(sub)), "result", sub, msg, msglen); break;
    case PERF_REDUCE_SCATTER:
        note(&wrong, perf_check_reduce(d, (size_t)me * p, p, o, sub, sizeof(sub)), "result", sub, msg, msglen);
        break;
    case PERF_REDUCE:
        if (me == c->root) note(&wrong, perf_check_reduce(d, 0, p, o, sub, sizeof(sub)), "result", sub, msg, msglen);
        break;
    case PERF_ALL_GATHER: case PERF_GATHER: case PERF_ALLTOALL:
        if (c->coll == PERF_GATHER && me != c->root) break;
        for (int j = 0; j < n; j++)
            note(&wrong, perf_check_copy(d, j, c->coll == PERF_ALLTOALL ? (size_t)me * p : 0, p, o + (size_t)j * p * sz,
                                         sub, sizeof(sub)), "result block from rank", sub, msg, msglen);
        break;
    case PERF_BROADCAST: case PERF_BCAST:
        note(&wrong, perf_check_copy(d, c->root, 0, p, o, sub, sizeof(sub)), "result", sub, msg, msglen);
        break;
    case PERF_SCATTER:
        note(&wrong, perf_check_copy(d, c->root, (size_t)me * p, p, o, sub, sizeof(sub)), "result", sub, msg, msglen);
        break;
    case PERF_SENDRECV:
        note(&wrong, perf_check_copy(d, (me + n - 1) % n, 0, p, o, sub, sizeof(sub)), "received", sub, msg, msglen);
        break;
    default: break;
    }
    if (!c->inplace && c->coll != PERF_BCAST) {
        if (perf_mem_get(m, host, s, input_count(c) * sz)) return wrong + 1;
        note(&wrong, perf_check_copy(d, me, 0, input_count(c), o, sub, sizeof(sub)), "send buffer modified", sub, msg,
             msglen);
    }
    return wrong;
}
