/* Every collective libmpccl_shim.so intercepts, checked against values computed
 * here on the host, for every datatype/op the shim maps (and some it must not),
 * MPI_IN_PLACE, every root, world/split/dup communicators and a freed dup; the
 * v-collectives at counts 0, 1 and primes differing per rank, in packed and
 * gapped, reversed layouts (negative displacements too), gaps checked unchanged.
 *
 *   test_shim [--gpu] [--expect none|mpi|route|staged] [--quick]
 *
 * --gpu       buffers from cudaMalloc (exit 77 without a usable GPU)
 * --expect    what the shim's counters (mpcclShimCount, found with dlsym) must
 *             show at the end: none = no shim loaded; mpi = shim loaded and
 *             transparent (everything passed to MPI); route = every collective
 *             went through mpccl at least once and the ineligible cases were
 *             staged (MPCCL_SHIM_HOST=1 on host buffers, or --gpu); staged =
 *             every call staged, none through mpccl (MPCCL_SHIM_COLLS=^all)
 * --quick     fewer datatypes on the secondary communicators
 * Seed: MPCCL_TEST_SEED (default 20261121), printed by rank 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim_testlib.h"

static int quick;

/* ---- reduction types ---- */
enum { K_S, K_U, K_F };
typedef struct {
    MPI_Datatype dt;
    const char *name;
    int kind, size, mapped; /* mapped: the shim sends it through mpccl */
} tdesc_t;

static tdesc_t types[32];
static int ntypes;

static void add_type(MPI_Datatype dt, const char *name, int kind, int mapped)
{
    int sz;
    MPI_Type_size(dt, &sz);
    types[ntypes++] = (tdesc_t){dt, name, kind, sz, mapped};
}

static void init_types(void)
{
    add_type(MPI_FLOAT, "float", K_F, 1);
    add_type(MPI_DOUBLE, "double", K_F, 1);
    add_type(MPI_INT, "int", K_S, 1);
    add_type(MPI_UNSIGNED, "unsigned", K_U, 1);
    add_type(MPI_LONG, "long", K_S, 1);
    add_type(MPI_UNSIGNED_LONG, "unsigned long", K_U, 1);
    add_type(MPI_LONG_LONG, "long long", K_S, 1);
    add_type(MPI_UNSIGNED_LONG_LONG, "unsigned long long", K_U, 1);
    add_type(MPI_INT8_T, "int8", K_S, 1);
    add_type(MPI_UINT8_T, "uint8", K_U, 1);
    add_type(MPI_INT32_T, "int32", K_S, 1);
    add_type(MPI_UINT32_T, "uint32", K_U, 1);
    add_type(MPI_INT64_T, "int64", K_S, 1);
    add_type(MPI_UINT64_T, "uint64", K_U, 1);
    add_type(MPI_CHAR, "char", (char)-1 < 0 ? K_S : K_U, 1);
    add_type(MPI_SIGNED_CHAR, "signed char", K_S, 1);
    add_type(MPI_UNSIGNED_CHAR, "unsigned char", K_U, 1);
    add_type(MPI_BYTE, "byte", K_U, 1);
    add_type(MPI_INTEGER, "Fortran integer", K_S, 1);
    add_type(MPI_DOUBLE_PRECISION, "Fortran double precision", K_F, 1);
    add_type(MPI_SHORT, "short", K_S, 0); /* no 16-bit integers in mpccl: staged */
    add_type(MPI_INT16_T, "int16", K_S, 0);
}

static void store(void *b, size_t i, const tdesc_t *t, double v)
{
    char *p = (char *)b + i * (size_t)t->size;
    if (t->kind == K_F) {
        if (t->size == 4) { float f = (float)v; memcpy(p, &f, 4); }
        else memcpy(p, &v, 8);
        return;
    }
    long long x = (long long)v;
    switch (t->size) {
    case 1: { int8_t y = (int8_t)x; memcpy(p, &y, 1); break; }
    case 2: { int16_t y = (int16_t)x; memcpy(p, &y, 2); break; }
    case 4: { int32_t y = (int32_t)x; memcpy(p, &y, 4); break; }
    default: memcpy(p, &x, 8); break;
    }
}

typedef struct {
    MPI_Op op;
    const char *name;
    int mapped;
} odesc_t;
static const odesc_t ops[] = {{MPI_SUM, "sum", 1}, {MPI_PROD, "prod", 1}, {MPI_MAX, "max", 1},
                              {MPI_MIN, "min", 1}, {MPI_BAND, "band", 0}};

/* Small integers: sums, products and extremes of up to 8 ranks fit every type. */
static double value(int r, size_t i, int salt, const tdesc_t *t, int op)
{
    uint64_t h = h4((uint64_t)r, i, (uint64_t)salt, (uint64_t)op);
    int s = t->kind != K_U;
    switch (op) {
    case 0: return s ? (double)(int)(h % 31) - 15 : (double)(h % 31);
    case 1: return s ? (double)((int[]){-1, 1, 2}[h % 3]) : (double)(1 + h % 2);
    case 4: return (double)(h & 0x7f);
    default: return s ? (double)(int)(h % 201) - 100 : (double)(h % 201);
    }
}

static double combine(int op, double a, double b)
{
    switch (op) {
    case 0: return a + b;
    case 1: return a * b;
    case 2: return a > b ? a : b;
    case 3: return a < b ? a : b;
    default: return (double)((long long)a & (long long)b);
    }
}

/* Fills rank r's input of n elements (element offset `first` in the global
 * numbering the reference uses). */
static void fill(void *h, size_t n, size_t first, int r, int salt, const tdesc_t *t, int op)
{
    for (size_t i = 0; i < n; i++) store(h, i, t, value(r, first + i, salt, t, op));
}

/* Expected reduction of global element i over the ranks of size n. */
static void expect(void *h, size_t idx, size_t i, int n, int salt, const tdesc_t *t, int op)
{
    double acc = value(0, i, salt, t, op);
    for (int r = 1; r < n; r++) acc = combine(op, acc, value(r, i, salt, t, op));
    store(h, idx, t, acc);
}

static int salt_next;

/* ---- reductions ---- */
typedef enum { R_ALLREDUCE, R_IALLREDUCE, R_REDUCE, R_RSB, R_RS, R_IREDUCE, R_IRSB, R_IRS } red_t;
static const char *const red_names[] = {"Allreduce", "Iallreduce", "Reduce", "Reduce_scatter_block",
                                        "Reduce_scatter", "Ireduce", "Ireduce_scatter_block", "Ireduce_scatter"};

/* A nonblocking call's request, completed by a Test loop (the shim's
 * requests complete in the completion calls, never in the call itself). */
static void complete(MPI_Request *req)
{
    int done = 0;
    while (!done) MPI_OK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
}

static void check_reduction(MPI_Comm comm, red_t kind, const tdesc_t *t, int op, int count, int inplace, int root)
{
    int me, n, salt = ++salt_next;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    int *counts = malloc(sizeof(int) * (size_t)n);
    size_t total = 0, mine, before = 0;
    for (int r = 0; r < n; r++) {
        /* Reduce_scatter gets unequal blocks (one may be empty) half the time */
        counts[r] = ((kind == R_RS || kind == R_IRS) && salt % 2) ? (int)(h4(9, (uint64_t)salt, (uint64_t)r, 0) % (uint64_t)(count + 1))
                                               : count;
        if (r < me) before += (size_t)counts[r];
        total += (size_t)counts[r];
    }
    int scattering = kind == R_RSB || kind == R_RS || kind == R_IRSB || kind == R_IRS;
    size_t in_n = scattering ? total : (size_t)count;
    mine = scattering ? (size_t)counts[me] : (size_t)count;
    size_t es = (size_t)t->size, out_n = (inplace && scattering) ? total : mine;
    char *hin = malloc(in_n * es + 1), *hout = malloc(out_n * es + 1), *want = malloc(mine * es + 1);
    void *din = dbuf(in_n * es, use_gpu), *dout = dbuf(out_n * es, use_gpu);
    fill(hin, in_n, 0, me, salt, t, op);
    memset(hout, 0x5a, out_n * es);
    put(inplace ? dout : din, hin, in_n * es, use_gpu);
    if (!inplace) put(dout, hout, out_n * es, use_gpu);
    const void *sb = inplace ? MPI_IN_PLACE : din;
    int rooted = kind == R_REDUCE || kind == R_IREDUCE, is_root = !rooted || me == root;
    MPI_Request req;
    if (rooted && inplace && !is_root) sb = din, put(din, hin, in_n * es, use_gpu); /* only the root may be in place */
    switch (kind) {
    case R_ALLREDUCE: MPI_OK(MPI_Allreduce(sb, dout, count, t->dt, ops[op].op, comm)); break;
    case R_IALLREDUCE:
        MPI_OK(MPI_Iallreduce(sb, dout, count, t->dt, ops[op].op, comm, &req));
        MPI_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        break;
    case R_IREDUCE:
        MPI_OK(MPI_Ireduce(sb, is_root ? dout : NULL, count, t->dt, ops[op].op, root, comm, &req));
        complete(&req);
        break;
    case R_IRSB:
        MPI_OK(MPI_Ireduce_scatter_block(sb, dout, count, t->dt, ops[op].op, comm, &req));
        complete(&req);
        break;
    case R_IRS:
        MPI_OK(MPI_Ireduce_scatter(sb, dout, counts, t->dt, ops[op].op, comm, &req));
        MPI_OK(MPI_Waitall(1, &req, MPI_STATUSES_IGNORE));
        break;
    case R_REDUCE: MPI_OK(MPI_Reduce(sb, is_root ? dout : NULL, count, t->dt, ops[op].op, root, comm)); break;
    case R_RSB: MPI_OK(MPI_Reduce_scatter_block(sb, dout, count, t->dt, ops[op].op, comm)); break;
    case R_RS: MPI_OK(MPI_Reduce_scatter(sb, dout, counts, t->dt, ops[op].op, comm)); break;
    }
    if (is_root) {
        get(hout, dout, mine * es, use_gpu);
        for (size_t i = 0; i < mine; i++) expect(want, i, (scattering ? before : 0) + i, n, salt, t, op);
        for (size_t i = 0; i < mine; i++)
            if (memcmp(hout + i * es, want + i * es, es)) {
                FAIL("%s %s %s count %d%s root %d on %d ranks: element %zu differs", red_names[kind], t->name,
                     ops[op].name, count, inplace ? " in place" : "", root, n, i);
                break;
            }
    }
    dfree(din, use_gpu), dfree(dout, use_gpu);
    free(hin), free(hout), free(want), free(counts);
}

/* ---- data movement: byte patterns per (source rank, byte) ---- */
static unsigned char pat(int r, size_t j, int salt)
{
    return (unsigned char)(h4(7, (uint64_t)r, j, (uint64_t)salt) & 0xff);
}

typedef enum { M_BCAST, M_IBCAST, M_ALLGATHER, M_IALLGATHER, M_ALLTOALL, M_GATHER, M_SCATTER, M_IALLTOALL,
               M_IGATHER, M_ISCATTER } mv_t;
static const char *const mv_names[] = {"Bcast", "Ibcast", "Allgather", "Iallgather", "Alltoall", "Gather",
                                       "Scatter", "Ialltoall", "Igather", "Iscatter"};

/* A block of `bytes` per rank, described to MPI as scount x st / rcount x rt. */
static void check_move(MPI_Comm comm, mv_t call, MPI_Datatype st, int scount, MPI_Datatype rt, int rcount,
                       size_t bytes, int inplace, int root, const char *tname)
{
    /* the nonblocking forms check like their blocking ones */
    mv_t kind = call == M_IALLTOALL ? M_ALLTOALL : call == M_IGATHER ? M_GATHER : call == M_ISCATTER ? M_SCATTER : call;
    int me, n, salt = ++salt_next;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    size_t nn = (size_t)n, sbytes = (kind == M_ALLTOALL || kind == M_SCATTER) ? bytes * nn : bytes;
    size_t rbytes = (kind == M_BCAST || kind == M_IBCAST || kind == M_SCATTER) ? bytes : bytes * nn;
    unsigned char *hs = malloc(sbytes + 1), *hr = malloc(rbytes + 1);
    void *ds = dbuf(sbytes, use_gpu), *dr = dbuf(rbytes, use_gpu);
    /* block j of a sender holds pat(sender, j * bytes + k): alltoall sends block j to rank j */
    for (size_t k = 0; k < sbytes; k++) hs[k] = pat(me, k, salt);
    memset(hr, 0xee, rbytes);
    if (kind == M_BCAST || kind == M_IBCAST) {
        if (me == root) memcpy(hr, hs, bytes);
    } else if (inplace) {
        /* MPI_IN_PLACE: our own contribution already sits in the receive buffer */
        if (kind == M_ALLGATHER || kind == M_IALLGATHER || (kind == M_GATHER && me == root))
            memcpy(hr + (size_t)me * bytes, hs, bytes);
        if (kind == M_ALLTOALL) memcpy(hr, hs, rbytes);
    }
    put(ds, hs, sbytes, use_gpu);
    put(dr, hr, rbytes, use_gpu);
    const void *sb = ds;
    void *rb = dr;
    if (inplace && kind != M_SCATTER && (kind != M_GATHER || me == root)) sb = MPI_IN_PLACE;
    if (inplace && kind == M_SCATTER && me == root) rb = MPI_IN_PLACE;
    MPI_Request req;
    switch (call) {
    case M_BCAST: MPI_OK(MPI_Bcast(dr, rcount, rt, root, comm)); break;
    case M_IBCAST:
        MPI_OK(MPI_Ibcast(dr, rcount, rt, root, comm, &req));
        MPI_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        break;
    case M_ALLGATHER: MPI_OK(MPI_Allgather(sb, scount, st, rb, rcount, rt, comm)); break;
    case M_IALLGATHER:
        MPI_OK(MPI_Iallgather(sb, scount, st, rb, rcount, rt, comm, &req));
        MPI_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        break;
    case M_ALLTOALL: MPI_OK(MPI_Alltoall(sb, scount, st, rb, rcount, rt, comm)); break;
    case M_GATHER: MPI_OK(MPI_Gather(sb, scount, st, me == root ? rb : NULL, rcount, rt, root, comm)); break;
    case M_SCATTER: MPI_OK(MPI_Scatter(me == root ? sb : NULL, scount, st, rb, rcount, rt, root, comm)); break;
    case M_IALLTOALL:
        MPI_OK(MPI_Ialltoall(sb, scount, st, rb, rcount, rt, comm, &req));
        complete(&req);
        break;
    case M_IGATHER:
        MPI_OK(MPI_Igather(sb, scount, st, me == root ? rb : NULL, rcount, rt, root, comm, &req));
        complete(&req);
        break;
    case M_ISCATTER:
        MPI_OK(MPI_Iscatter(me == root ? sb : NULL, scount, st, rb, rcount, rt, root, comm, &req));
        complete(&req);
        break;
    }
    get(hr, dr, rbytes, use_gpu);
    int checked = !(kind == M_GATHER && me != root) && !(kind == M_SCATTER && me == root && inplace);
    for (size_t k = 0; checked && k < rbytes; k++) {
        size_t blk = k / (bytes ? bytes : 1), off = k % (bytes ? bytes : 1);
        unsigned char w;
        switch (kind) {
        case M_BCAST: case M_IBCAST: w = pat(root, k, salt); break;
        case M_ALLTOALL: w = pat((int)blk, (size_t)me * bytes + off, salt); break;
        case M_SCATTER: w = pat(root, (size_t)me * bytes + k, salt); break;
        default: w = pat((int)blk, off, salt); break;
        }
        if (hr[k] != w) {
            FAIL("%s %s block %zu bytes%s root %d on %d ranks: byte %zu is %02x, expected %02x", mv_names[call],
                 tname, bytes, inplace ? " in place" : "", root, n, k, hr[k], w);
            break;
        }
    }
    dfree(ds, use_gpu), dfree(dr, use_gpu);
    free(hs), free(hr);
}

/* ---- v-collectives: counts per (sender, receiver), local layouts ---- */
typedef enum { V_ALLGATHERV, V_ALLTOALLV, V_GATHERV, V_SCATTERV } vk_t;
static const char *const v_names[] = {"Allgatherv", "Alltoallv", "Gatherv", "Scatterv"};
static const char *const layout_names[] = {"packed equal", "unequal, gaps, reversed, negative displs",
                                           "equal with gaps", "unequal packed"};

/* Elements sender s sends to receiver d (-1: one block for all; s and d in
 * either order when sym).  Layouts 0 and 2 give every block one count: 0 is
 * the plain collective's own layout. */
static int vcount(int salt, int s, int d, int layout, int sym)
{
    static const int pick[] = {0, 1, 2, 3, 5, 7, 13, 31, 61};
    if (layout == 0 || layout == 2) return pick[h4(13, (uint64_t)salt, 0, 0) % 9];
    if (sym && s > d) { int x = s; s = d; d = x; }
    return pick[h4(11, (uint64_t)salt, (uint64_t)s, (uint64_t)(d + 1)) % 9];
}

/* Displacements (elements) of one rank's blocks; returns the elements the
 * buffer needs.  Layouts 1 and 2 leave gaps and run backwards; layout 1 also
 * moves the base into the buffer (*shift elements), so some are negative. */
static size_t vlayout(int n, const int *c, int *d, int layout, int me, int salt, size_t *shift)
{
    int gap = (layout == 1 || layout == 2) ? 1 + (int)(h4(12, (uint64_t)salt, (uint64_t)me, 0) % 3) : 0;
    size_t pos = 0;
    for (int k = 0; k < n; k++) {
        int j = gap ? n - 1 - k : k;
        d[j] = (int)pos;
        pos += (size_t)c[j] + (size_t)gap;
    }
    *shift = layout == 1 ? pos / 2 : 0;
    for (int j = 0; j < n; j++) d[j] -= (int)*shift;
    return pos;
}

/* Byte k of the block sender s sends to receiver d (-1: the same to all). */
static unsigned char vpat(int s, int d, size_t k, int salt)
{
    return pat(s, ((size_t)(d + 1) << 24) + k, salt);
}

static void check_vmove(MPI_Comm comm, vk_t kind, MPI_Datatype t, const char *tname, int layout, int inplace,
                        int root, int nonblocking)
{
    int me, n, salt = ++salt_next, es;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    MPI_Type_size(t, &es);
    int sym = inplace && kind == V_ALLTOALLV, is_root = me == root;
    int *scs = calloc((size_t)n, sizeof(int)), *sds = calloc((size_t)n, sizeof(int));
    int *rcs = calloc((size_t)n, sizeof(int)), *rds = calloc((size_t)n, sizeof(int));
    int vsend = kind == V_ALLTOALLV || kind == V_SCATTERV;
    for (int j = 0; j < n; j++) {
        switch (kind) {
        case V_ALLGATHERV: case V_GATHERV: rcs[j] = vcount(salt, j, -1, layout, 0); break;
        case V_ALLTOALLV:
            scs[j] = vcount(salt, me, j, layout, sym);
            rcs[j] = vcount(salt, j, me, layout, sym);
            break;
        case V_SCATTERV: scs[j] = vcount(salt, root, j, layout, 0); break;
        }
    }
    int sc = vcount(salt, me, -1, layout, 0), rc = vcount(salt, root, me, layout, 0);
    size_t sshift = 0, rshift = 0;
    size_t sel = vsend ? vlayout(n, scs, sds, layout, me, salt, &sshift) : (size_t)sc;
    size_t rel = kind != V_SCATTERV ? vlayout(n, rcs, rds, layout, me, salt + 1, &rshift) : (size_t)rc;
    size_t sbytes = sel * (size_t)es, rbytes = rel * (size_t)es, ues = (size_t)es;
    unsigned char *hs = malloc(sbytes + 1), *hr = malloc(rbytes + 1), *want = malloc(rbytes + 1);
    char *ds = dbuf(sbytes, use_gpu), *dr = dbuf(rbytes, use_gpu);
    memset(hs, 0x11, sbytes);
    memset(hr, 0xee, rbytes);
    /* what we send */
    for (int j = 0; j < n && vsend; j++)
        for (size_t k = 0; k < (size_t)scs[j] * ues; k++)
            hs[(size_t)((long)sds[j] + (long)sshift) * ues + k] = vpat(me, j, k, salt);
    for (size_t k = 0; !vsend && k < sbytes; k++) hs[k] = vpat(me, -1, k, salt);
    /* in place, our contribution already sits in the receive buffer */
    if (inplace && (kind == V_ALLGATHERV || (kind == V_GATHERV && is_root)))
        memcpy(hr + (size_t)((long)rds[me] + (long)rshift) * ues, hs, (size_t)rcs[me] * ues);
    if (inplace && kind == V_ALLTOALLV)
        for (int j = 0; j < n; j++)
            for (size_t k = 0; k < (size_t)rcs[j] * ues; k++)
                hr[(size_t)((long)rds[j] + (long)rshift) * ues + k] = vpat(me, j, k, salt);
    memcpy(want, hr, rbytes);
    put(ds, hs, sbytes, use_gpu);
    put(dr, hr, rbytes, use_gpu);
    const void *sb = ds + sshift * ues;
    void *rb = dr + rshift * ues;
    /* a count-0 buffer may be NULL */
    if (!vsend && sc == 0) sb = NULL;
    if (kind == V_SCATTERV && rc == 0) rb = NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Request *nb = nonblocking ? &req : NULL;
    switch (kind) {
    case V_ALLGATHERV:
        if (nb) MPI_OK(MPI_Iallgatherv(inplace ? MPI_IN_PLACE : sb, sc, t, rb, rcs, rds, t, comm, nb));
        else MPI_OK(MPI_Allgatherv(inplace ? MPI_IN_PLACE : sb, sc, t, rb, rcs, rds, t, comm));
        break;
    case V_ALLTOALLV:
        if (nb) MPI_OK(MPI_Ialltoallv(inplace ? MPI_IN_PLACE : sb, scs, sds, t, rb, rcs, rds, t, comm, nb));
        else MPI_OK(MPI_Alltoallv(inplace ? MPI_IN_PLACE : sb, scs, sds, t, rb, rcs, rds, t, comm));
        break;
    case V_GATHERV:
        if (nb)
            MPI_OK(MPI_Igatherv(inplace && is_root ? MPI_IN_PLACE : sb, sc, t, is_root ? rb : NULL,
                                is_root ? rcs : NULL, is_root ? rds : NULL, t, root, comm, nb));
        else
            MPI_OK(MPI_Gatherv(inplace && is_root ? MPI_IN_PLACE : sb, sc, t, is_root ? rb : NULL,
                               is_root ? rcs : NULL, is_root ? rds : NULL, t, root, comm));
        break;
    case V_SCATTERV:
        if (nb)
            MPI_OK(MPI_Iscatterv(is_root ? sb : NULL, is_root ? scs : NULL, is_root ? sds : NULL, t,
                                 inplace && is_root ? MPI_IN_PLACE : rb, rc, t, root, comm, nb));
        else
            MPI_OK(MPI_Scatterv(is_root ? sb : NULL, is_root ? scs : NULL, is_root ? sds : NULL, t,
                                inplace && is_root ? MPI_IN_PLACE : rb, rc, t, root, comm));
        break;
    }
    if (nb) complete(nb);
    /* what must have arrived; everything else, gaps included, unchanged */
    for (int j = 0; j < n && kind != V_SCATTERV && (kind != V_GATHERV || is_root); j++)
        for (size_t k = 0; k < (size_t)rcs[j] * ues; k++)
            want[(size_t)((long)rds[j] + (long)rshift) * ues + k] = vpat(j, kind == V_ALLTOALLV ? me : -1, k, salt);
    if (kind == V_SCATTERV && !(inplace && is_root))
        for (size_t k = 0; k < rbytes; k++) want[k] = vpat(root, me, k, salt);
    get(hr, dr, rbytes, use_gpu);
    for (size_t k = 0; k < rbytes; k++)
        if (hr[k] != want[k]) {
            FAIL("%s%s %s %s%s root %d on %d ranks: byte %zu of %zu is %02x, expected %02x", nonblocking ? "I" : "",
                 v_names[kind], tname,
                 layout_names[layout], inplace ? " in place" : "", root, n, k, rbytes, hr[k], want[k]);
            break;
        }
    dfree(ds, use_gpu), dfree(dr, use_gpu);
    free(hs), free(hr), free(want), free(scs), free(sds), free(rcs), free(rds);
}

/* ---- scans: rank r gets ranks 0..r (Scan) or 0..r-1 (Exscan) reduced ---- */
static void check_scan(MPI_Comm comm, int ex, const tdesc_t *t, int op, int count, int inplace)
{
    int me, n, salt = ++salt_next;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    size_t es = (size_t)t->size, bytes = (size_t)count * es;
    char *hin = malloc(bytes + 1), *hout = malloc(bytes + 1), *want = malloc(bytes + 1);
    void *din = dbuf(bytes, use_gpu), *dout = dbuf(bytes, use_gpu);
    fill(hin, (size_t)count, 0, me, salt, t, op);
    memset(hout, 0x5a, bytes);
    put(inplace ? dout : din, hin, bytes, use_gpu);
    if (!inplace) put(dout, hout, bytes, use_gpu);
    const void *sb = inplace ? MPI_IN_PLACE : din;
    int nonblocking = ex >= 2;
    ex %= 2;
    MPI_Request req;
    if (nonblocking) {
        if (ex) MPI_OK(MPI_Iexscan(sb, dout, count, t->dt, ops[op].op, comm, &req));
        else MPI_OK(MPI_Iscan(sb, dout, count, t->dt, ops[op].op, comm, &req));
        complete(&req);
    } else if (ex) {
        MPI_OK(MPI_Exscan(sb, dout, count, t->dt, ops[op].op, comm));
    } else {
        MPI_OK(MPI_Scan(sb, dout, count, t->dt, ops[op].op, comm));
    }
    int upto = ex ? me : me + 1; /* Exscan: rank 0's result is undefined */
    if (upto > 0) {
        get(hout, dout, bytes, use_gpu);
        for (size_t i = 0; i < (size_t)count; i++) expect(want, i, i, upto, salt, t, op);
        for (size_t i = 0; i < (size_t)count; i++)
            if (memcmp(hout + i * es, want + i * es, es)) {
                FAIL("%s %s %s count %d%s on %d ranks (rank %d): element %zu differs", ex ? "Exscan" : "Scan",
                     t->name, ops[op].name, count, inplace ? " in place" : "", n, me, i);
                break;
            }
    }
    dfree(din, use_gpu), dfree(dout, use_gpu);
    free(hin), free(hout), free(want);
}

/* -0.0 everywhere: MPI's sum keeps the sign, so must whatever pads a scan. */
static void check_scan_negzero(MPI_Comm comm)
{
    int me;
    double h[3] = {-0.0, -0.0, -0.0}, o[3];
    MPI_Comm_rank(comm, &me);
    double *din = dbuf(sizeof(h), use_gpu), *dout = dbuf(sizeof(h), use_gpu);
    put(din, h, sizeof(h), use_gpu);
    for (int ex = 0; ex < 2; ex++) {
        put(dout, h, sizeof(h), use_gpu);
        if (ex) MPI_OK(MPI_Exscan(din, dout, 3, MPI_DOUBLE, MPI_SUM, comm));
        else MPI_OK(MPI_Scan(din, dout, 3, MPI_DOUBLE, MPI_SUM, comm));
        get(o, dout, sizeof(o), use_gpu);
        for (int i = 0; i < 3 && (!ex || me > 0); i++)
            if (o[i] != 0.0 || !signbit(o[i])) {
                FAIL("%s of -0.0 (double sum): element %d is %g%s", ex ? "Exscan" : "Scan", i, o[i],
                     signbit(o[i]) ? "" : " (sign lost)");
                break;
            }
    }
    dfree(din, use_gpu), dfree(dout, use_gpu);
}

/* Bcast of a vector type: MPI's business (staged); the holes must survive. */
static void check_vector_bcast(MPI_Comm comm, int root)
{
    int me, n, salt = ++salt_next, cnt = 5;
    MPI_Datatype vec;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec); /* ints 0 and 2 of every 3 */
    MPI_Type_commit(&vec);
    size_t nint = 3 * (size_t)cnt;
    int *h = malloc(nint * sizeof(int)), *want = malloc(nint * sizeof(int));
    for (size_t i = 0; i < nint; i++) {
        int used = (i % 3) != 1;
        want[i] = used ? (int)pat(root, i, salt) : -(int)i - 1;
        h[i] = (me == root || !used) ? want[i] : 77;
    }
    int *d = dbuf(nint * sizeof(int), use_gpu);
    put(d, h, nint * sizeof(int), use_gpu);
    MPI_OK(MPI_Bcast(d, cnt, vec, root, comm));
    get(h, d, nint * sizeof(int), use_gpu);
    for (size_t i = 0; i < nint; i++)
        if (h[i] != want[i]) {
            FAIL("Bcast vector type root %d on %d ranks: int %zu is %d, expected %d", root, n, i, h[i], want[i]);
            break;
        }
    dfree(d, use_gpu);
    free(h), free(want);
    MPI_Type_free(&vec);
}

static void battery(MPI_Comm comm, int full)
{
    static int batteries;
    int n, me;
    /* every rank of comm must pick the same cases: the salt restarts per battery
     * (rank counts of earlier communicators differ between ranks) */
    salt_next = 100000 * ++batteries;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    int big = 1 + (int)(h4(3, (uint64_t)n, (uint64_t)full, 0) % 700);
    /* every type x op on the first communicator; a rotating subset elsewhere */
    for (int ti = 0; ti < ntypes; ti++) {
        if (!full && ti % 4 != salt_next % 4) continue;
        for (int op = 0; op < 5; op++) {
            if (op == 4 && types[ti].kind == K_F) continue; /* MPI_BAND needs integers */
            for (int ip = 0; ip < 2; ip++) {
                int count = (op + ip) % 3 == 0 ? 1 : big;
                check_reduction(comm, R_ALLREDUCE, &types[ti], op, count, ip, 0);
                check_reduction(comm, R_REDUCE, &types[ti], op, count, ip, (op + ti) % n);
                check_reduction(comm, R_RSB, &types[ti], op, count, ip, 0);
                check_reduction(comm, R_RS, &types[ti], op, count, ip, 0);
                if (ip == 0) check_reduction(comm, R_IALLREDUCE, &types[ti], op, count, 0, 0);
                /* the other nonblocking reductions: a rotating share */
                if ((ti + op + ip) % 3 == 0) {
                    check_reduction(comm, R_IREDUCE, &types[ti], op, count, ip, (op + ti + 1) % n);
                    check_reduction(comm, R_IRSB, &types[ti], op, count, ip, 0);
                    check_reduction(comm, R_IRS, &types[ti], op, count, ip, 0);
                }
            }
        }
    }
    check_reduction(comm, R_ALLREDUCE, &types[0], 0, 0, 0, 0); /* count 0 */
    /* data movement: odd byte counts, 4- and 8-byte elements, a 12-byte derived
     * type, and send/recv types that differ but carry the same bytes */
    MPI_Datatype c3;
    MPI_Type_contiguous(3, MPI_INT, &c3);
    MPI_Type_commit(&c3);
    struct { MPI_Datatype st; int sc; MPI_Datatype rt; int rc; size_t bytes; const char *name; } mv[] = {
        {MPI_BYTE, 13, MPI_BYTE, 13, 13, "13 x byte"},
        {MPI_INT, big, MPI_INT, big, (size_t)big * 4, "int"},
        {MPI_DOUBLE, 5, MPI_DOUBLE, 5, 40, "5 x double"},
        {c3, 2, c3, 2, 24, "2 x contiguous(3 int)"},
        {MPI_INT, 6, c3, 2, 24, "6 int -> 2 x contiguous(3 int)"},
    };
    for (size_t v = 0; v < sizeof(mv) / sizeof(mv[0]); v++) {
        for (int ip = 0; ip < 2; ip++) {
            int root = (int)(v + (size_t)ip) % n;
            if (ip == 0) {
                check_move(comm, M_BCAST, mv[v].rt, mv[v].rc, mv[v].rt, mv[v].rc, mv[v].bytes, 0, root, mv[v].name);
                check_move(comm, M_IBCAST, mv[v].rt, mv[v].rc, mv[v].rt, mv[v].rc, mv[v].bytes, 0, root, mv[v].name);
                check_move(comm, M_IALLGATHER, mv[v].st, mv[v].sc, mv[v].rt, mv[v].rc, mv[v].bytes, 0, 0, mv[v].name);
            }
            check_move(comm, M_ALLGATHER, mv[v].st, mv[v].sc, mv[v].rt, mv[v].rc, mv[v].bytes, ip, 0, mv[v].name);
            check_move(comm, M_ALLTOALL, mv[v].st, mv[v].sc, mv[v].rt, mv[v].rc, mv[v].bytes, ip, 0, mv[v].name);
            check_move(comm, M_GATHER, mv[v].st, mv[v].sc, mv[v].rt, mv[v].rc, mv[v].bytes, ip, root, mv[v].name);
            check_move(comm, M_SCATTER, mv[v].st, mv[v].sc, mv[v].rt, mv[v].rc, mv[v].bytes, ip, root, mv[v].name);
            check_move(comm, M_IALLTOALL, mv[v].st, mv[v].sc, mv[v].rt, mv[v].rc, mv[v].bytes, ip, 0, mv[v].name);
            check_move(comm, M_IGATHER, mv[v].st, mv[v].sc, mv[v].rt, mv[v].rc, mv[v].bytes, ip, root, mv[v].name);
            check_move(comm, M_ISCATTER, mv[v].st, mv[v].sc, mv[v].rt, mv[v].rc, mv[v].bytes, ip, root, mv[v].name);
        }
    }
    for (int root = 0; root < n; root++) check_vector_bcast(comm, root);
    /* v-collectives: every layout, in place or not, every root */
    struct { MPI_Datatype t; const char *name; } vt[] = {
        {MPI_BYTE, "byte"}, {MPI_INT, "int"}, {MPI_DOUBLE, "double"}, {c3, "contiguous(3 int)"}};
    for (int kind = 0; kind < 4; kind++)
        for (int layout = 0; layout < 4; layout++)
            for (int ip = 0; ip < 2; ip++)
                for (int v = 0; v < 4; v++) {
                    if (!full && (v + layout + ip) % 2) continue;
                    if (kind == V_GATHERV || kind == V_SCATTERV)
                        for (int root = 0; root < n; root++)
                            check_vmove(comm, (vk_t)kind, vt[v].t, vt[v].name, layout, ip, root, (v + root) % 2);
                    else
                        check_vmove(comm, (vk_t)kind, vt[v].t, vt[v].name, layout, ip, 0, v % 2);
                }
    /* scans: the reduction types and ops, counts 0, 1, a prime and big */
    for (int ti = 0; ti < ntypes; ti++) {
        if (!full && ti % 4 != salt_next % 4) continue;
        for (int op = 0; op < 5; op++) {
            if (op == 4 && types[ti].kind == K_F) continue;
            for (int ex = 0; ex < 2; ex++) {
                int count = (int[]){0, 1, 13, big}[(ti + op + ex) % 4];
                check_scan(comm, ex, &types[ti], op, count, (ti + op) % 2);
                check_scan(comm, ex, &types[ti], op, count ? count : 7, (ti + op + 1) % 2);
                if ((ti + op) % 3 == 0) check_scan(comm, ex + 2, &types[ti], op, count ? count : 5, ex); /* Iscan */
            }
        }
    }
    check_scan_negzero(comm);
    MPI_Type_free(&c3);
}

typedef long long (*count_fn_t)(const char *, const char *);

static void check_counters(const char *mode)
{
    static const char *const colls[] = {"allreduce", "reduce", "bcast", "allgather", "reduce_scatter_block",
                                        "reduce_scatter", "alltoall", "gather", "scatter", "iallreduce", "ibcast",
                                        "iallgather", "allgatherv", "alltoallv", "gatherv", "scatterv", "scan",
                                        "exscan", "ireduce", "ireduce_scatter_block", "ireduce_scatter",
                                        "ialltoall", "igather", "iscatter", "iallgatherv", "ialltoallv", "igatherv",
                                        "iscatterv", "iscan", "iexscan"};
    count_fn_t count = (count_fn_t)(uintptr_t)dlsym(RTLD_DEFAULT, "mpcclShimCount");
    if (!strcmp(mode, "none")) {
        if (count) FAIL("--expect none, but libmpccl_shim.so is loaded");
        return;
    }
    if (count == NULL) {
        FAIL("--expect %s: libmpccl_shim.so is not loaded (LD_PRELOAD it)", mode);
        return;
    }
    for (size_t i = 0; i < sizeof(colls) / sizeof(colls[0]); i++) {
        long long m = count(colls[i], "mpi"), r = count(colls[i], "mpccl"), s = count(colls[i], "staged");
        if (world_rank == 0) printf("shim counters %-20s mpccl %6lld staged %6lld mpi %6lld\n", colls[i], r, s, m);
        if (!strcmp(mode, "mpi") && (r != 0 || s != 0 || m == 0))
            FAIL("%s: transparent mode must pass every call to MPI (mpccl %lld, staged %lld, mpi %lld)", colls[i], r, s,
                 m);
        if (!strcmp(mode, "route") && r == 0) FAIL("%s: no call went through mpccl", colls[i]);
        if (!strcmp(mode, "staged") && (r != 0 || s == 0))
            FAIL("%s: MPCCL_SHIM_COLLS=^all must stage every call (mpccl %lld, staged %lld)", colls[i], r, s);
    }
    if (!strcmp(mode, "route")) {
        /* MPI_BAND and MPI_SHORT reductions, vector types: MPI on staged copies */
        if (count("allreduce", "staged") == 0) FAIL("allreduce: the ineligible cases were not staged");
        if (count("bcast", "staged") == 0) FAIL("bcast: the vector type was not staged");
        if (count("scan", "staged") == 0) FAIL("scan: the ineligible cases were not staged");
        if (count("exscan", "staged") == 0) FAIL("exscan: the ineligible cases were not staged");
    }
}

int main(int argc, char **argv)
{
    const char *mode = "none";
    int nworld;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nworld);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gpu")) use_gpu = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--expect") && i + 1 < argc) mode = argv[++i];
        else {
            if (world_rank == 0)
                fprintf(stderr, "usage: %s [--gpu] [--expect none|mpi|route|staged] [--quick]\n", argv[0]);
            MPI_Finalize();
            return 99;
        }
    }
    int setup = shim_test_setup();
    if (setup) {
        MPI_Finalize();
        return setup;
    }
    init_types();
    if (world_rank == 0)
        printf("test_shim: %d ranks, %s buffers, expect %s, seed %llu (MPCCL_TEST_SEED)\n", nworld,
               use_gpu ? "device" : "host", mode, seed);

    battery(MPI_COMM_WORLD, 1);
    /* split: two halves with reversed rank order */
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, -world_rank, &half);
    battery(half, !quick);
    /* a dup, used, freed (its mpccl communicator goes with it), and a new one */
    for (int round = 0; round < 2; round++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        battery(dup, 0);
        MPI_Comm_free(&dup);
    }
    battery(MPI_COMM_WORLD, 0); /* the world's cached communicator still works */
    MPI_Comm_free(&half);

    check_counters(mode);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (world_rank == 0) printf("test_shim: %s (%d failures)\n", all ? "FAILED" : "passed", all);
    MPI_Finalize();
    return all ? 1 : 0;
}
