/* mpccl-perf: collective bandwidth benchmark with nccl-tests' flags and output.
 *
 *   mpirun -np 8 mpccl-perf -b 8 -e 128M -f 2 -C allreduce -d float -o sum
 *
 * Every rank is one MPI process with (at most) one GPU.  Buffers live on the GPU
 * when the communicator has one (ncclCommCuDevice >= 0) and the program was built
 * with the CUDA runtime; otherwise on the host, where calls are blocking.  Times
 * are for `iters` calls issued back to back followed by one completion wait.
 *
 *   mpirun -np 4 mpccl-perf --compare /path/to/libnccl.so.2 --csv out.csv ...
 *
 * loads another NCCL privately (perf_lib.c), makes a communicator with each
 * library and, for every size and placement, runs mpccl then the other on the
 * same buffers; each row shows both and the ratio mpccl/other.  All calls go
 * through a function table (perf_nccl_t), mpccl's filled from the linked symbols. */
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpccl_mpi.h"
#include "nccl.h"
#include "perf_check.h"
#include "perf_coll.h"
#include "perf_lib.h"
#include "perf_mem.h"

#define PERF_MAX_REPEATS 101 /* -R: timed loops per row, median reported */

typedef struct opts {
    size_t minbytes, maxbytes, stepbytes;
    double stepfactor;
    int iters, warmup, check, root, average, blocking, agg, graph, repeats;
    int window; /* -W: 1 ncclMemAlloc + symmetric windows, 2 ncclMemAlloc + ncclCommRegister,
                 * 3 cudaMalloc + ncclCommRegister at a different offset on every rank */
    int colls[PERF_NUM_COLLS], ncolls;
    ncclDataType_t types[ncclNumTypes];
    int ntypes;
    perf_op_t ops[PERF_COPY];
    int nops;
    int uniqueid;
    const char *compare; /* path of the other library, or NULL */
    const char *csv;     /* CSV output file, or NULL */
} opts_t;

typedef struct env {
    int rank, nranks;
    int nlibs;            /* 2 with --compare: [0] mpccl (linked), [1] the other */
    perf_nccl_t lib[2];
    ncclComm_t comm[2];
    perf_mem_t mem;       /* shared by both: same device, stream and buffers */
    double bw_sum[2];
    int bw_rows[2];
    double host_sum[2];   /* CPU time per call, rows up to 64 KB */
    int host_rows[2];
    long long wrong;
    FILE *csv;            /* rank 0 only */
} env_t;

/* What one measured row is, for the CSV. */
typedef struct row {
    perf_coll_t coll;
    size_t bytes, count;
    ncclDataType_t type;
    perf_op_t op;
    int root;
} row_t;

typedef struct meas {
    double us, algbw, busbw;
    double host_us; /* CPU time inside the library per call (eager launches) */
    long long wrong; /* -1: not checked */
} meas_t;

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "mpccl-perf: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define NCHECK(call)                                                                              \
    do {                                                                                          \
        ncclResult_t r_ = (call);                                                                 \
        if (r_ != ncclSuccess) {                                                                  \
            fprintf(stderr, "mpccl-perf: %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,        \
                    ncclGetErrorString(r_), ncclGetLastError(NULL));                              \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
        }                                                                                         \
    } while (0)

/* A call into library L (the other one reports its own error strings). */
#define LCHECK(L, call)                                                                           \
    do {                                                                                          \
        ncclResult_t r_ = (call);                                                                 \
        if (r_ != ncclSuccess) {                                                                  \
            fprintf(stderr, "mpccl-perf: %s:%d: %s [%s]: %s (%s)\n", __FILE__, __LINE__, #call,   \
                    (L)->label, (L)->GetErrorString(r_), (L)->GetLastError ? (L)->GetLastError(NULL) : ""); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
        }                                                                                         \
    } while (0)

/* "64", "4K", "2M", "1G" (binary multiples, like nccl-tests) */
static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'G': case 'g': v *= 1024.0;
        /* fall through */
    case 'M': case 'm': v *= 1024.0;
        /* fall through */
    case 'K': case 'k': v *= 1024.0;
        end++;
        break;
    default: break;
    }
    if (end == s || *end || v < 0) die("bad size '%s'", s);
    return (size_t)v;
}

static int parse_int(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end) die("bad number '%s'", s);
    return (int)v;
}

static void usage(void)
{
    printf("usage: mpccl-perf [options]   (under mpirun: one process per GPU, or host buffers)\n"
           "  -b, --minbytes N     smallest size (K/M/G suffixes), default 32M\n"
           "  -e, --maxbytes N     largest size, default 32M\n"
           "  -f, --stepfactor F   multiply the size by F (default: add -i)\n"
           "  -i, --stepbytes N    add N bytes per step, default 1M\n"
           "  -n, --iters N        timed iterations, default 20\n"
           "  -w, --warmup_iters N untimed iterations first, default 5\n"
           "  -m, --agg_iters N    calls aggregated in one group per iteration, default 1\n"
           "  -c, --check 0|1      check results against a host reference, default 1\n"
           "  -o, --op OP          sum prod max min avg mulsum, or all; default sum\n"
           "  -d, --datatype T     int8 uint8 int32 uint32 int64 uint64 half float double\n"
           "                       bfloat16 f8e4m3 f8e5m2, or all; default float\n"
           "  -r, --root N         root of rooted collectives, default 0\n"
           "  -a, --average 0-3    time reported: 0 rank 0, 1 average, 2 minimum, 3 maximum\n"
           "  -z, --blocking 0|1   wait for each call (GPU buffers only; host calls block)\n"
           "  -G, --cudagraph N    capture N iterations into a CUDA graph and time its replays\n"
           "  -R, --repeats N      time the loop N times, report the median (default 1)\n"
           "  -W, --window 0..4    1: buffers from ncclMemAlloc registered by each library as\n"
           "                       NCCL_WIN_COLL_SYMMETRIC windows (nccl-tests -R 2);\n"
           "                       2: from ncclMemAlloc, ncclCommRegister'd (nccl-tests -R 1);\n"
           "                       3: from cudaMalloc, ncclCommRegister'd, at an offset that\n"
           "                       differs between ranks;\n"
           "                       4: from cudaMalloc, only the send buffer ncclCommRegister'd\n"
           "  -t, --nthreads 1     -g, --ngpus 1   (one GPU per process)\n"
           "  -C, --collective C   allreduce reduce_scatter all_gather alltoall broadcast\n"
           "                       reduce gather scatter sendrecv, or all (default)\n"
           "  -B, --bootstrap B    mpi (mpcclCommInitMPI, default) or uniqueid\n"
           "      --compare LIB    also run the NCCL in file LIB (e.g. .../libnccl.so.2), loaded\n"
           "                       privately, alternately with mpccl; prints both and mpccl/other\n"
           "      --csv FILE       write every measurement to FILE as CSV (see perf_plot.py)\n"
           "  -h, --help\n\nmpccl settings (environment):\n");
    mpcclPrintConfig();
}

static void parse(int argc, char **argv, opts_t *o, int rank)
{
    static const struct option lo[] = {
        {"minbytes", 1, 0, 'b'}, {"maxbytes", 1, 0, 'e'}, {"stepfactor", 1, 0, 'f'}, {"stepbytes", 1, 0, 'i'},
        {"iters", 1, 0, 'n'}, {"warmup_iters", 1, 0, 'w'}, {"agg_iters", 1, 0, 'm'}, {"check", 1, 0, 'c'},
        {"op", 1, 0, 'o'}, {"datatype", 1, 0, 'd'}, {"root", 1, 0, 'r'}, {"average", 1, 0, 'a'},
        {"blocking", 1, 0, 'z'}, {"nthreads", 1, 0, 't'}, {"ngpus", 1, 0, 'g'}, {"collective", 1, 0, 'C'},
        {"bootstrap", 1, 0, 'B'}, {"cudagraph", 1, 0, 'G'}, {"repeats", 1, 0, 'R'}, {"window", 1, 0, 'W'}, {"help", 0, 0, 'h'},
        {"compare", 1, 0, 1000}, {"csv", 1, 0, 1001}, {0, 0, 0, 0}};
    int ch;
    const char *op = "sum", *dt = "float", *coll = "all";
    memset(o, 0, sizeof(*o));
    o->minbytes = o->maxbytes = 32u << 20;
    o->stepbytes = 1u << 20;
    o->iters = 20, o->warmup = 5, o->check = 1, o->average = 1, o->agg = 1, o->repeats = 1;
    while ((ch = getopt_long(argc, argv, "b:e:f:i:n:w:m:c:o:d:r:a:z:t:g:C:B:G:R:W:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'b': o->minbytes = parse_size(optarg); break;
        case 'e': o->maxbytes = parse_size(optarg); break;
        case 'f': o->stepfactor = atof(optarg); break;
        case 'i': o->stepbytes = parse_size(optarg), o->stepfactor = 0; break;
        case 'n': o->iters = parse_int(optarg); break;
        case 'w': o->warmup = parse_int(optarg); break;
        case 'm': o->agg = parse_int(optarg); break;
        case 'c': o->check = parse_int(optarg); break;
        case 'o': op = optarg; break;
        case 'd': dt = optarg; break;
        case 'r': o->root = parse_int(optarg); break;
        case 'a': o->average = parse_int(optarg); break;
        case 'z': o->blocking = parse_int(optarg); break;
        case 't': case 'g':
            if (parse_int(optarg) != 1) die("-%s: mpccl-perf runs one thread with one GPU per process", ch == 't' ? "t" : "g");
            break;
        case 'G': o->graph = parse_int(optarg); break;
        case 'R': o->repeats = parse_int(optarg); break;
        case 'W': o->window = parse_int(optarg); break;
        case 'B':
            if (!strcmp(optarg, "uniqueid")) o->uniqueid = 1;
            else if (strcmp(optarg, "mpi")) die("-B %s: expected mpi or uniqueid", optarg);
            break;
        case 'C': coll = optarg; break;
        case 1000: o->compare = optarg; break;
        case 1001: o->csv = optarg; break;
        case 'h':
            if (rank == 0) usage();
            MPI_Finalize();
            exit(0);
        default: die("%s", "bad option (-h for help)");
        }
    }
    if (o->stepfactor != 0 && o->stepfactor <= 1) o->stepfactor = 0; /* nccl-tests: -f 1 = add -i */
    if (o->iters < 1 || o->warmup < 0 || o->agg < 1 || o->average < 0 || o->average > 3 || o->repeats < 1 ||
        o->repeats > PERF_MAX_REPEATS)
        die("%s", "-n, -m need >= 1; -w >= 0; -a 0..3; -R 1..101");
    if (o->minbytes > o->maxbytes) die("%s", "-b is larger than -e");
    if (o->window < 0 || o->window > 4)
        die("%s", "-W: expected 0 (plain), 1 (windows), 2 or 3 (registered), 4 (send buffer registered)");
    if (!strcmp(coll, "all")) {
        for (int c = 0; c < PERF_BCAST; c++) o->colls[o->ncolls++] = c;
    } else {
        perf_coll_t c;
        if (perf_coll_parse(coll, &c)) die("unknown collective '%s'", coll);
        o->colls[o->ncolls++] = c;
    }
    if (!strcmp(dt, "all")) {
        for (int t = 0; t < ncclNumTypes; t++) o->types[o->ntypes++] = (ncclDataType_t)t;
    } else if (perf_type_parse(dt, &o->types[o->ntypes++])) {
        die("unknown datatype '%s'", dt);
    }
    if (!strcmp(op, "all")) {
        for (int p = 0; p < PERF_COPY; p++) o->ops[o->nops++] = (perf_op_t)p;
    } else if (perf_op_parse(op, &o->ops[o->nops++]) || o->ops[0] == PERF_COPY) {
        die("unknown op '%s'", op);
    }
}

static double now_us(void) { return MPI_Wtime() * 1e6; }

/* One rank's wall time per iteration, combined over the ranks as -a says. */
static double combine_ranks(const opts_t *o, env_t *e, double dt)
{
    double out;
    switch (o->average) {
    case 0: out = dt; MPI_Bcast(&out, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
    case 2: MPI_Allreduce(&dt, &out, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD); break;
    case 3: MPI_Allreduce(&dt, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); break;
    default: MPI_Allreduce(&dt, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); out /= e->nranks;
    }
    return out;
}

static void issue(const opts_t *o, const perf_call_t *c)
{
    if (o->agg > 1) LCHECK(c->lib, c->lib->GroupStart());
    for (int a = 0; a < o->agg; a++) LCHECK(c->lib, perf_call_launch(c));
    if (o->agg > 1) LCHECK(c->lib, c->lib->GroupEnd());
}

/* -G N: the iterations are captured into a CUDA graph (N iterations per graph,
 * replayed until iters are done); the time is the replays'. */
static double time_graph(const opts_t *o, env_t *e, const perf_call_t *c, int iters)
{
    if (iters == 0) return 0;
    int per = o->graph < iters ? o->graph : iters;
    if (perf_mem_capture_begin(&e->mem)) die("%s", "cudaStreamBeginCapture failed (-G needs GPU buffers)");
    for (int i = 0; i < per; i++) issue(o, c);
    void *g = perf_mem_capture_end(&e->mem);
    if (!g) die("%s", "capturing the calls into a CUDA graph failed");
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_us();
    int done = 0;
    for (; done + per <= iters; done += per)
        if (perf_mem_graph_launch(&e->mem, g)) die("%s", "cudaGraphLaunch failed");
    if (perf_mem_sync(&e->mem)) die("%s", "stream synchronize failed");
    double dt = done ? (now_us() - t0) / done : 0;
    perf_mem_graph_free(g);
    return combine_ranks(o, e, dt) / o->agg;
}

/* One timed loop: iters * agg calls and a single completion wait.  *host_us
 * (when not NULL) gets the CPU time spent inside the calls, per call. */
static double time_calls(const opts_t *o, env_t *e, const perf_call_t *c, int iters, double *host_us)
{
    if (o->graph > 0) return time_graph(o, e, c, iters);
    double t0, dt, in_calls = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now_us();
    for (int i = 0; i < iters; i++) {
        double c0 = now_us();
        issue(o, c);
        in_calls += now_us() - c0;
        if (o->blocking && perf_mem_sync(&e->mem)) die("%s", "stream synchronize failed");
    }
    if (perf_mem_sync(&e->mem)) die("%s", "stream synchronize failed");
    dt = iters ? (now_us() - t0) / iters : 0;
    if (host_us) *host_us = iters ? combine_ranks(o, e, in_calls / iters) / o->agg : 0;
    return combine_ranks(o, e, dt) / o->agg;
}

static void fmt_time(char *buf, size_t len, double us)
{
    snprintf(buf, len, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n values (sorts them). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Measures one placement with c->lib: warmup, timed loop, then (-c 1) one
 * checked call on fresh input. */
static void measure(const opts_t *o, env_t *e, perf_call_t *c, const perf_data_t *d, size_t bytes, void *host,
                    meas_t *m)
{
    char msg[512] = "";
    long long local = 0;
    int l = c->lib == &e->lib[0] ? 0 : 1;
    if (perf_call_prepare(c, d, &e->mem, host, 0)) die("%s", "cannot copy input to the buffers");
    time_calls(o, e, c, o->warmup, NULL);
    double t[PERF_MAX_REPEATS], h[PERF_MAX_REPEATS];
    for (int r = 0; r < o->repeats; r++) t[r] = time_calls(o, e, c, o->iters, &h[r]);
    m->us = median(t, o->repeats);
    m->host_us = median(h, o->repeats);
    m->wrong = -1;
    if (o->check) {
        /* fresh input (in-place iterations consumed it), one call, then compare */
        if (perf_call_prepare(c, d, &e->mem, host, 1)) die("%s", "cannot copy input to the buffers");
        MPI_Barrier(MPI_COMM_WORLD);
        LCHECK(c->lib, perf_call_launch(c));
        if (perf_mem_sync(&e->mem)) die("%s", "stream synchronize failed");
        local = (long long)perf_call_check(c, d, &e->mem, host, msg, sizeof(msg));
        if (local) fprintf(stderr, "# rank %d: %s%s%s %s: %s\n", e->rank, e->nlibs > 1 ? c->lib->label : "",
                           e->nlibs > 1 ? ": " : "", perf_coll_name(c->coll), c->inplace ? "in-place" : "out-of-place",
                           msg);
        MPI_Allreduce(&local, &m->wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        e->wrong += m->wrong;
    }
    m->algbw = m->us > 0 ? (double)bytes / m->us / 1e3 : 0; /* bytes/us = MB/s; /1e3 = GB/s */
    m->busbw = m->algbw * perf_coll_bus_factor(c->coll, e->nranks);
    e->bw_sum[l] += m->busbw;
    e->bw_rows[l]++;
    if (bytes <= (64u << 10) && o->graph <= 0) {
        e->host_sum[l] += m->host_us;
        e->host_rows[l]++;
    }
}

/* The four columns of one measurement: time, algbw, busbw, #wrong. */
static void print_meas(const meas_t *m)
{
    char tbuf[32], wbuf[32] = "N/A";
    fmt_time(tbuf, sizeof(tbuf), m->us);
    if (m->wrong >= 0) snprintf(wbuf, sizeof(wbuf), "%lld", m->wrong);
    printf("  %7s  %6.2f  %6.2f  %6s", tbuf, m->algbw, m->busbw, wbuf);
}

static void csv_row(env_t *e, const row_t *r, int inplace, const perf_nccl_t *lib, const meas_t *m)
{
    if (!e->csv) return;
    fprintf(e->csv, "%s,%zu,%zu,%s,%s,%d,%d,%s,%.3f,%.4f,%.4f,", perf_coll_name(r->coll), r->bytes, r->count,
            perf_type_name(r->type), perf_op_name(r->op), r->root, inplace, lib->label, m->us, m->algbw, m->busbw);
    if (m->wrong >= 0) fprintf(e->csv, "%lld", m->wrong);
    fprintf(e->csv, ",%.3f\n", m->host_us);
    fflush(e->csv); /* a run stopped by a time limit keeps the rows it measured */
}

/* With --compare: one line per placement, both libraries and the ratios. */
static void print_compare(const row_t *r, int inplace, const meas_t *m)
{
    printf("%12zu  %12zu  %8s  %6s  %6d  %5s", r->bytes, r->count, perf_type_name(r->type),
           perf_coll_reduces(r->coll) ? perf_op_name(r->op) : "none", r->root, inplace ? "in" : "out");
    print_meas(&m[0]);
    print_meas(&m[1]);
    printf("  %6.2f  %6.2f\n", m[1].us > 0 ? m[0].us / m[1].us : 0.0, m[1].busbw > 0 ? m[0].busbw / m[1].busbw : 0.0);
}

static void print_header(const opts_t *o, env_t *e, perf_coll_t coll)
{
    char host[256] = "?";
    int dev = -1;
    gethostname(host, sizeof(host) - 1);
    ncclCommCuDevice(e->comm[0], &dev);
    if (e->rank == 0) {
        printf("# Collective test starting: mpccl-perf %s\n", perf_coll_name(coll));
        printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d "
               "agg iters: %d validation: %d graph: %d repeats: %d (median) windows: %d\n#\n",
               o->minbytes, o->maxbytes, o->stepfactor ? o->stepfactor : (double)o->stepbytes,
               o->stepfactor ? "factor" : "bytes", o->warmup, o->iters, o->agg, o->check, o->graph, o->repeats, o->window);
        for (int l = 0; l < e->nlibs && e->nlibs > 1; l++)
            printf("# Library %-5s: %s (version %d), %s\n", e->lib[l].label, e->lib[l].path, e->lib[l].version,
                   e->lib[l].how);
        if (e->nlibs > 1)
            printf("# Instances    : %s (ncclGetUniqueId at %p in mpccl, %p in other)\n#\n",
                   perf_lib_distinct(&e->lib[1]) ? "distinct" : "SAME", (void *)e->lib[0].GetUniqueId,
                   (void *)e->lib[1].GetUniqueId);
        printf("# Using devices\n");
    }
    /* one line per rank, printed by rank 0 in rank order */
    char line[400];
    snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s]", e->rank, (int)getpid(),
             host, dev, e->mem.gpu ? "GPU" : "host memory");
    if (e->rank == 0) {
        puts(line);
        for (int r = 1; r < e->nranks; r++) {
            MPI_Recv(line, sizeof(line), MPI_CHAR, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            puts(line);
        }
        if (e->nlibs > 1) {
            printf("#\n#%58s%33s%33s%16s\n", "", "mpccl", "other", "mpccl/other");
            printf("#%11s  %12s  %8s  %6s  %6s  %5s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %6s  %6s\n", "size",
                   "count", "type", "redop", "root", "place", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                   "busbw", "#wrong", "time", "busbw");
            printf("#%11s  %12s  %8s  %6s  %6s  %5s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %6s  %6s\n", "(B)",
                   "(elements)", "", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "",
                   "");
            return;
        }
        printf("#\n#%72s%38s\n", "out-of-place", "in-place");
        printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
        printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "",
               "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    } else {
        MPI_Send(line, sizeof(line), MPI_CHAR, 0, 0, MPI_COMM_WORLD);
    }
}

/* -W 1: both buffers become symmetric windows of every library's
 * communicator (collective calls; the same sizes everywhere).  A library
 * without windows, or refusing these buffers, runs on them unregistered. */
static void register_windows(env_t *e, void *sbuf, void *rbuf, size_t bytes, ncclWindow_t win[2][2])
{
    if (!e->lib[0].MemAlloc) die("%s", "-W 1: mpccl has no ncclMemAlloc");
    for (int l = 0; l < e->nlibs; l++) {
        perf_nccl_t *L = &e->lib[l];
        ncclResult_t r = ncclSuccess;
        if (!L->CommWindowRegister) {
            if (e->rank == 0) printf("# -W 1: %s has no ncclCommWindowRegister: its buffers stay unregistered\n", L->label);
            continue;
        }
        r = L->CommWindowRegister(e->comm[l], sbuf, bytes, &win[l][0], NCCL_WIN_COLL_SYMMETRIC);
        if (r == ncclSuccess) r = L->CommWindowRegister(e->comm[l], rbuf, bytes, &win[l][1], NCCL_WIN_COLL_SYMMETRIC);
        if (r != ncclSuccess) {
            if (l == 0) LCHECK(L, r);
            if (e->rank == 0)
                printf("# -W 1: %s refused the windows (%s): its buffers stay unregistered\n", L->label,
                       L->GetErrorString(r));
        }
    }
}

/* -W 2 and 3: both buffers registered with every library's communicator
 * (local calls).  A library refusing them runs on them unregistered. */
static void register_buffers(env_t *e, void *sbuf, void *rbuf, size_t bytes, void *reg[2][2], int recv_too)
{
    for (int l = 0; l < e->nlibs; l++) {
        perf_nccl_t *L = &e->lib[l];
        if (!L->CommRegister) {
            if (e->rank == 0) printf("# -W: %s has no ncclCommRegister: its buffers stay unregistered\n", L->label);
            continue;
        }
        ncclResult_t r = L->CommRegister(e->comm[l], sbuf, bytes, &reg[l][0]);
        if (r == ncclSuccess && recv_too) r = L->CommRegister(e->comm[l], rbuf, bytes, &reg[l][1]);
        if (r != ncclSuccess) {
            if (l == 0) LCHECK(L, r);
            printf("# -W: rank %d: %s refused the registration (%s): its buffers stay unregistered\n", e->rank,
                   L->label, L->GetErrorString(r));
        }
    }
}

static void run_coll(const opts_t *o, env_t *e, perf_coll_t coll)
{
    size_t maxelems = o->maxbytes, cnt, scnt, rcnt;
    void *sbuf, *rbuf, *host;
    if (e->nlibs > 1 && !perf_lib_supports(&e->lib[1], coll)) {
        if (e->rank == 0) printf("# %s: the other library lacks its functions: skipped\n#\n", perf_coll_name(coll));
        return;
    }
    perf_coll_counts(coll, e->nranks, maxelems, &cnt, &scnt, &rcnt); /* bytes as 1-byte elements: max */
    size_t bufbytes = (scnt > rcnt ? scnt : rcnt) + 64;
    ncclWindow_t win[2][2] = {{NULL, NULL}, {NULL, NULL}}; /* [lib][send, recv] */
    void *reg[2][2] = {{NULL, NULL}, {NULL, NULL}};
    size_t shift = o->window == 3 ? (size_t)(e->rank % 16) * 256 : 0; /* -W 3: per-rank offset */
    if (o->window == 1 || o->window == 2) {
        sbuf = rbuf = NULL;
        if (!e->lib[0].MemAlloc) die("%s", "-W 1 and 2: mpccl has no ncclMemAlloc");
        LCHECK(&e->lib[0], e->lib[0].MemAlloc(&sbuf, bufbytes));
        LCHECK(&e->lib[0], e->lib[0].MemAlloc(&rbuf, bufbytes));
        if (o->window == 1) register_windows(e, sbuf, rbuf, bufbytes, win);
        else register_buffers(e, sbuf, rbuf, bufbytes, reg, 1);
    } else if (o->window == 3) {
        sbuf = perf_mem_alloc(&e->mem, bufbytes + shift);
        rbuf = perf_mem_alloc(&e->mem, bufbytes + shift);
        if (sbuf && rbuf) {
            sbuf = (char *)sbuf + shift;
            rbuf = (char *)rbuf + shift;
            register_buffers(e, sbuf, rbuf, bufbytes, reg, 1);
        }
    } else if (o->window == 4) {
        sbuf = perf_mem_alloc(&e->mem, bufbytes);
        rbuf = perf_mem_alloc(&e->mem, bufbytes);
        if (sbuf && rbuf) register_buffers(e, sbuf, rbuf, bufbytes, reg, 0);
    } else {
        sbuf = perf_mem_alloc(&e->mem, bufbytes);
        rbuf = perf_mem_alloc(&e->mem, bufbytes);
    }
    host = malloc(bufbytes);
    if (!sbuf || !rbuf || !host) die("%s", "out of memory for the buffers");
    print_header(o, e, coll);
    for (int ti = 0; ti < o->ntypes; ti++) {
        ncclDataType_t t = o->types[ti];
        size_t tsz = perf_type_size(t);
        for (int oi = 0; oi < (perf_coll_reduces(coll) ? o->nops : 1); oi++) {
            perf_op_t pop = perf_coll_reduces(coll) ? o->ops[oi] : PERF_COPY;
            for (size_t size = o->minbytes; size <= o->maxbytes;) {
                perf_call_t c;
                perf_data_t d;
                ncclRedOp_t op[2];
                unsigned char scalar[8];
                row_t r;
                memset(&c, 0, sizeof(c));
                perf_coll_counts(coll, e->nranks, size / tsz, &c.count, &scnt, &rcnt);
                r.coll = coll, r.type = t, r.op = pop;
                r.count = scnt > rcnt ? scnt : rcnt; /* elements the row reports */
                r.bytes = r.count * tsz;
                perf_data_init(&d, t, pop, e->nranks, 0x5eedull + size * 31 + (size_t)t * 7 + pop);
                for (int l = 0; l < e->nlibs; l++) {
                    op[l] = perf_op_nccl(pop);
                    if (pop != PERF_PREMULSUM) continue;
                    if (!e->lib[l].RedOpCreatePreMulSum) die("%s library has no ncclRedOpCreatePreMulSum", e->lib[l].label);
                    perf_set(t, scalar, 0, d.scalar);
                    LCHECK(&e->lib[l], e->lib[l].RedOpCreatePreMulSum(&op[l], scalar, t, ncclScalarHostImmediate,
                                                                      e->comm[l]));
                }
                c.coll = coll, c.type = t, c.rank = e->rank, c.nranks = e->nranks;
                c.root = r.root = perf_coll_rooted(coll) ? o->root : -1;
                c.stream = e->mem.stream, c.sendbase = sbuf, c.recvbase = rbuf;
                if (e->rank == 0 && e->nlibs == 1)
                    printf("%12zu  %12zu  %8s  %6s  %6d", r.bytes, r.count, perf_type_name(t),
                           perf_coll_reduces(coll) ? perf_op_name(pop) : "none", c.root);
                for (c.inplace = 0; c.inplace < 2; c.inplace++) {
                    meas_t m[2];
                    if (c.inplace && !perf_coll_has_inplace(coll)) {
                        if (e->rank == 0 && e->nlibs == 1) printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
                        continue;
                    }
                    /* mpccl then the other, on the same buffers and data */
                    for (int l = 0; l < e->nlibs; l++) {
                        c.lib = &e->lib[l], c.comm = e->comm[l], c.op = op[l];
                        measure(o, e, &c, &d, r.bytes, host, &m[l]);
                        if (e->rank == 0) csv_row(e, &r, c.inplace, &e->lib[l], &m[l]);
                    }
                    if (e->rank == 0 && e->nlibs == 1) print_meas(&m[0]);
                    if (e->rank == 0 && e->nlibs > 1) print_compare(&r, c.inplace, m);
                }
                if (e->rank == 0 && e->nlibs == 1) printf("\n");
                if (e->rank == 0) fflush(stdout);
                for (int l = 0; l < e->nlibs; l++)
                    if (pop == PERF_PREMULSUM) LCHECK(&e->lib[l], e->lib[l].RedOpDestroy(op[l], e->comm[l]));
                if (o->stepfactor > 1) {
                    size_t next = (size_t)((double)size * o->stepfactor);
                    size = next > size ? next : size + 1;
                } else {
                    size += o->stepbytes ? o->stepbytes : 1;
                }
            }
        }
    }
    free(host);
    for (int l = 0; l < e->nlibs; l++)
        for (int b = 0; b < 2; b++)
            if (reg[l][b]) LCHECK(&e->lib[l], e->lib[l].CommDeregister(e->comm[l], reg[l][b]));
    if (o->window == 3) {
        sbuf = (char *)sbuf - shift;
        rbuf = (char *)rbuf - shift;
    }
    if (o->window == 1 || o->window == 2) {
        for (int l = 0; l < e->nlibs; l++)
            for (int b = 0; b < 2; b++)
                if (win[l][b]) LCHECK(&e->lib[l], e->lib[l].CommWindowDeregister(e->comm[l], win[l][b]));
        LCHECK(&e->lib[0], e->lib[0].MemFree(rbuf));
        LCHECK(&e->lib[0], e->lib[0].MemFree(sbuf));
        return;
    }
    perf_mem_free(&e->mem, rbuf);
    perf_mem_free(&e->mem, sbuf);
}

/* --compare: the other library's communicator, on the device mpccl's has. */
static void init_other(const opts_t *o, env_t *e)
{
    char err[700];
    ncclUniqueId id;
    perf_nccl_t *L = &e->lib[1];
    int dev0 = -1, dev1 = -1;
    if (perf_lib_open(L, o->compare, err, sizeof(err))) die("--compare: %s", err);
    if (!perf_lib_distinct(L)) die("--compare %s: the loader returned the linked mpccl itself", o->compare);
    if (e->rank == 0) LCHECK(L, L->GetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    LCHECK(L, L->CommInitRank(&e->comm[1], e->nranks, id, e->rank));
    ncclCommCuDevice(e->comm[0], &dev0);
    if (L->CommCuDevice) LCHECK(L, L->CommCuDevice(e->comm[1], &dev1));
    if (dev0 != dev1) die("--compare %s: the two communicators are on different devices", o->compare);
    e->nlibs = 2;
}

static void init_comm(const opts_t *o, env_t *e)
{
    MPI_Comm node;
    int local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, e->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    perf_mem_select_device(local); /* the communicator takes the current device */
    perf_lib_linked(&e->lib[0]);
    e->nlibs = 1;
    if (o->uniqueid) {
        ncclUniqueId id;
        if (e->rank == 0) NCHECK(ncclGetUniqueId(&id));
        MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
        NCHECK(ncclCommInitRank(&e->comm[0], e->nranks, id, e->rank));
    } else {
        NCHECK(mpcclCommInitMPI(&e->comm[0], MPI_COMM_WORLD, NULL));
    }
    if (o->compare) init_other(o, e);
    if (perf_mem_init(&e->mem, e->comm[0])) die("%s", "cannot set up the communicator's device");
}

int main(int argc, char **argv)
{
    opts_t o;
    env_t e;
    memset(&e, 0, sizeof(e));
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &e.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &e.nranks);
    parse(argc, argv, &o, e.rank);
    if (o.root < 0 || o.root >= e.nranks) die("%s", "-r: root out of range");
    if (o.csv && e.rank == 0) {
        if (!(e.csv = fopen(o.csv, "w"))) die("cannot write %s", o.csv);
        fprintf(e.csv, "collective,bytes,count,type,op,root,inplace,lib,time_us,algbw,busbw,wrong,host_us\n");
    }
    init_comm(&o, &e);
    for (int i = 0; i < o.ncolls; i++) run_coll(&o, &e, (perf_coll_t)o.colls[i]);
    if (e.rank == 0) {
        printf("# Out of bounds values : %lld %s\n", e.wrong, e.wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", e.bw_rows[0] ? e.bw_sum[0] / e.bw_rows[0] : 0.0);
        if (e.nlibs > 1)
            printf("# Avg bus bandwidth of the other library: %g \n", e.bw_rows[1] ? e.bw_sum[1] / e.bw_rows[1] : 0.0);
        if (e.host_rows[0])
            printf("# Host time per call up to 64 KB (in the library, eager launches): %.2f us%s", e.host_sum[0] / e.host_rows[0],
                   e.nlibs > 1 ? "" : "\n");
        if (e.host_rows[0] && e.nlibs > 1 && e.host_rows[1])
            printf(", the other library %.2f us\n", e.host_sum[1] / e.host_rows[1]);
        else if (e.host_rows[0] && e.nlibs > 1)
            printf("\n");
        printf("#\n");
        if (e.csv && fclose(e.csv)) die("cannot write %s", o.csv);
    }
    /* The other library stays loaded: NCCL keeps threads and exit handlers
     * that must not outlive its code. */
    if (e.nlibs > 1) LCHECK(&e.lib[1], e.lib[1].CommDestroy(e.comm[1]));
    NCHECK(ncclCommDestroy(e.comm[0]));
    perf_mem_fini(&e.mem);
    MPI_Finalize();
    return e.wrong != 0;
}
