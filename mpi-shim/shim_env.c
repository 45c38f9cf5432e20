/* Settings, logging and route counters of the shim.
 *
 * The shim is an MPI-side component outside libmpccl, whose config table and
 * logger are internal (hidden), so it reads its variables here, in one place,
 * and prints log lines in mpccl's format ("host:pid:tid [rank] mpccl LEVEL"). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"

__thread int mpccl_shim_depth;

static const char *const coll_names[SHIM_NCOLLS] = {
    "allreduce", "reduce", "bcast", "allgather", "reduce_scatter_block", "reduce_scatter",
    "alltoall", "gather", "scatter", "iallreduce", "ibcast", "iallgather", "allgatherv", "alltoallv", "gatherv",
    "scatterv", "scan", "exscan", "ireduce", "ireduce_scatter_block", "ireduce_scatter", "ialltoall", "igather",
    "iscatter", "iallgatherv", "ialltoallv", "igatherv", "iscatterv", "iscan", "iexscan"};

const char *mpccl_shim_coll_name(shim_coll_t c)
{
    return c < SHIM_NCOLLS ? coll_names[c] : "?";
}

static const char *env2(const char *name, const char *alias)
{
    const char *v = getenv(name);
    if ((v == NULL || *v == '\0') && alias) v = getenv(alias);
    return v && *v ? v : NULL;
}

/* Binary k/m/g suffixes like mpccl's integer settings; -1 when unparsable. */
static long long parse_size(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0) return -1;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    return *end ? -1 : v;
}

#define ALL_COLLS ((SHIM_NCOLLS >= 64 ? 0 : UINT64_C(1) << SHIM_NCOLLS) - 1)

/* "all", a comma list of names, or ^list (all but those). */
static uint64_t parse_colls(const char *s, int *bad)
{
    int exclude = (*s == '^');
    uint64_t mask = 0;
    char buf[512], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", s + exclude);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        if (!strcasecmp(tok, "all")) {
            mask = ALL_COLLS;
            continue;
        }
        for (int c = 0; c < SHIM_NCOLLS; c++)
            if (!strcasecmp(tok, coll_names[c])) mask |= UINT64_C(1) << c, found = 1;
        if (!found) *bad = 1;
    }
    return exclude ? ALL_COLLS & ~mask : mask;
}

static shim_settings_t settings;
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;
static __thread int settings_reading; /* warnings of settings_read itself */

/* The one place where the shim reads its environment. */
static void settings_read(void)
{
    const char *v;
    int bad = 0;
    settings_reading = 1;
    settings.enabled = 1;
    settings.agree = 1;
    settings.colls = ALL_COLLS;
    if ((v = env2("MPCCL_SHIM", NULL))) settings.enabled = strcmp(v, "0") != 0;
    if ((v = env2("MPCCL_SHIM_HOST", NULL))) settings.host_mode = strcmp(v, "0") != 0;
    if ((v = env2("MPCCL_SHIM_AGREE", NULL))) settings.agree = strcmp(v, "0") != 0;
    settings.log_level = 1;
    if ((v = env2("MPCCL_DEBUG", "NCCL_DEBUG"))) {
        if (!strcasecmp(v, "NONE") || !strcasecmp(v, "VERSION")) settings.log_level = 0;
        else if (!strcasecmp(v, "INFO")) settings.log_level = 2;
        else if (!strcasecmp(v, "TRACE")) settings.log_level = 3;
    }
    settings.log_shim = 1;
    if ((v = env2("MPCCL_DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS"))) {
        int excl = (*v == '^');
        int named = strcasestr(v, "SHIM") != NULL || (!excl && strcasestr(v, "ALL") != NULL);
        settings.log_shim = excl ? !named : named;
    }
    settings.min_bytes_auto = 1;
    if ((v = env2("MPCCL_SHIM_MIN_BYTES", NULL)) && strcasecmp(v, "auto") != 0) {
        long long n = parse_size(v);
        if (n < 0) SHIM_WARN("MPCCL_SHIM_MIN_BYTES=%s is neither auto nor a size (e.g. 4096, 64k); using auto", v);
        else settings.min_bytes = (size_t)n, settings.min_bytes_auto = 0;
    }
    settings.p2p = -1; /* auto: decided in MPI_Init (mpccl_shim_p2p_resolve) */
    if ((v = env2("MPCCL_SHIM_P2P", NULL)) && strcasecmp(v, "auto")) settings.p2p = strcmp(v, "0") != 0;
    settings.eager_bytes = 1024;
    if ((v = env2("MPCCL_SHIM_EAGER_BYTES", NULL))) {
        long long n = parse_size(v);
        if (n < 0) SHIM_WARN("MPCCL_SHIM_EAGER_BYTES=%s is not a size (e.g. 1024, 64k); using 1024", v);
        else settings.eager_bytes = (size_t)n;
    }
    settings.net = SHIM_NET_AUTO;
    if ((v = env2("MPCCL_SHIM_NET", NULL))) {
        if (!strcasecmp(v, "ucx")) settings.net = SHIM_NET_UCX;
        else if (!strcasecmp(v, "mpi")) settings.net = SHIM_NET_MPI;
        else if (strcasecmp(v, "auto")) SHIM_WARN("MPCCL_SHIM_NET=%s is not auto, ucx or mpi; using auto", v);
    }
    settings.net_direct = 1;
    if ((v = env2("MPCCL_SHIM_NET_DIRECT", NULL))) {
        if (!strcmp(v, "0")) settings.net_direct = 0;
        else if (!strcmp(v, "1")) settings.net_direct = 2;
        else if (strcasecmp(v, "auto")) SHIM_WARN("MPCCL_SHIM_NET_DIRECT=%s is not auto, 1 or 0; using auto", v);
    }
    settings.net_chunk = 4u << 20;
    if ((v = env2("MPCCL_SHIM_NET_CHUNK", NULL))) {
        long long n = parse_size(v);
        if (n < 4096 || n > (1LL << 30))
            SHIM_WARN("MPCCL_SHIM_NET_CHUNK=%s is not a size from 4k to 1g (e.g. 4m); using 4m", v);
        else settings.net_chunk = (size_t)n;
    }
    settings.net_key_inline = 112; /* SHIM_ENV_RKEY_INLINE */
    if ((v = env2("MPCCL_SHIM_NET_KEY_INLINE", NULL))) {
        long long n = parse_size(v);
        if (n < 0 || n > 112) SHIM_WARN("MPCCL_SHIM_NET_KEY_INLINE=%s is not a size from 0 to 112; using 112", v);
        else settings.net_key_inline = (size_t)n;
    }
    if ((v = env2("MPCCL_SHIM_COLLS", NULL))) {
        settings.colls = parse_colls(v, &bad);
        if (bad) {
            char known[512];
            size_t o = (size_t)snprintf(known, sizeof(known), "all");
            for (int c = 0; c < SHIM_NCOLLS && o < sizeof(known); c++)
                o += (size_t)snprintf(known + o, sizeof(known) - o, ", %s", coll_names[c]);
            SHIM_WARN("MPCCL_SHIM_COLLS=%s names an unknown collective; known: %s", v, known);
        }
    }
    settings_reading = 0;
}

const shim_settings_t *mpccl_shim_settings(void)
{
    pthread_once(&settings_once, settings_read);
    return &settings;
}

void mpccl_shim_p2p_resolve(int mpi_cuda_aware)
{
    mpccl_shim_settings();
    if (settings.p2p >= 0) return;
    /* auto: an MPI that moves device buffers itself keeps point-to-point (it
     * also reaches other nodes GPU-direct); any other needs the shim */
    settings.p2p = !mpi_cuda_aware;
    if (mpi_cuda_aware)
        SHIM_INFO("point-to-point left to MPI: it is CUDA-aware (MPCCL_SHIM_P2P=1 routes it through the shim)");
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void vlog(int level, const char *fmt, va_list ap)
{
    static const char *const names[] = {"NONE", "WARN", "INFO", "TRACE"};
    char host[64] = "", msg[1024];
    int rank = -1, init = 0, fini = 0;
    if (!settings_reading) mpccl_shim_settings();
    if (level > settings.log_level) return;
    if (level > 1 && !settings.log_shim) return;
    gethostname(host, sizeof(host) - 1);
    char *dot = strchr(host, '.');
    if (dot) *dot = '\0';
    PMPI_Initialized(&init);
    PMPI_Finalized(&fini);
    if (init && !fini) PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s:%d:%d [%d] mpccl %s SHIM %s\n", host, (int)getpid(), (int)syscall(SYS_gettid), rank,
            names[level], msg);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
}

void mpccl_shim_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

static atomic_uchar logged_once[SHIM_NCOLLS][SHIM_NWHY];

void mpccl_shim_log_once(shim_coll_t c, int reason, const char *fmt, ...)
{
    va_list ap;
    if (mpccl_shim_settings()->log_level < 2 || atomic_exchange(&logged_once[c][reason], 1)) return;
    va_start(ap, fmt);
    vlog(2, fmt, ap);
    va_end(ap);
}

static atomic_ullong counts[SHIM_NCOLLS][SHIM_NROUTES];

void mpccl_shim_count(shim_coll_t c, shim_route_t r)
{
    atomic_fetch_add_explicit(&counts[c][r], 1, memory_order_relaxed);
}

/* Point-to-point, counted per side: mpi (host buffer, unchanged), mpccl
 * (GPU to GPU through the envelope), staged (a host copy: eager, pushed),
 * ucx (another host, through the shim's UCX worker). */
static atomic_ullong p2p_counts[2][SHIM_NROUTES];

void mpccl_shim_count_p2p(int send, shim_route_t r)
{
    atomic_fetch_add_explicit(&p2p_counts[send ? 0 : 1][r], 1, memory_order_relaxed);
}

/* Exported for tests and tools (dlsym): how many calls of collective `coll`
 * (shim.def name, e.g. "allreduce") took route "mpi", "mpccl" or "staged";
 * -1 for an unknown name. */
SHIM_EXPORT long long mpcclShimCount(const char *coll, const char *route)
{
    static const char *const routes[SHIM_NROUTES] = {"mpi", "mpccl", "staged", "ucx"};
    int side = !strcasecmp(coll, "send") ? 0 : !strcasecmp(coll, "recv") ? 1 : -1;
    for (int r = 0; r < SHIM_NROUTES && side >= 0; r++)
        if (!strcasecmp(route, routes[r])) return (long long)atomic_load(&p2p_counts[side][r]);
    for (int c = 0; c < SHIM_NCOLLS; c++) {
        if (strcasecmp(coll, coll_names[c])) continue;
        for (int r = 0; r < SHIM_NROUTES; r++)
            if (!strcasecmp(route, routes[r])) return (long long)atomic_load(&counts[c][r]);
    }
    return -1;
}

void mpccl_shim_summary(void)
{
    char line[1024];
    size_t o = 0;
    if (mpccl_shim_settings()->log_level < 2) return;
    line[0] = '\0';
    for (int c = 0; c < SHIM_NCOLLS && o < sizeof(line); c++) {
        unsigned long long m = atomic_load(&counts[c][SHIM_ROUTE_MPI]), n = atomic_load(&counts[c][SHIM_ROUTE_MPCCL]),
                           s = atomic_load(&counts[c][SHIM_ROUTE_STAGED]);
        if (m + n + s == 0) continue;
        o += (size_t)snprintf(line + o, sizeof(line) - o, " %s=%llu/%llu/%llu", coll_names[c], n, s, m);
    }
    for (int side = 0; side < 2 && o < sizeof(line); side++) {
        unsigned long long m = atomic_load(&p2p_counts[side][SHIM_ROUTE_MPI]),
                           n = atomic_load(&p2p_counts[side][SHIM_ROUTE_MPCCL]),
                           s = atomic_load(&p2p_counts[side][SHIM_ROUTE_STAGED]),
                           u = atomic_load(&p2p_counts[side][SHIM_ROUTE_UCX]);
        if (m + n + s + u == 0) continue;
        o += (size_t)snprintf(line + o, sizeof(line) - o, " %s=%llu/%llu/%llu", side ? "recv" : "send", n, s, m);
        if (u) o += (size_t)snprintf(line + o, sizeof(line) - o, " %s_ucx=%llu", side ? "recv" : "send", u);
    }
    mpccl_shim_log(2, "summary (mpccl/staged/mpi):%s", o ? line : " no collective calls");
}
