/* The one table of environment settings.  Each entry: name (after MPCCL_), the
 * NCCL_ variable that means the same (or NULL), default, help.  Values are read
 * once; unknown MPCCL_ variables get a warning naming the nearest known one. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/config.h"
#include "util/log.h"

typedef struct {
    const char *name;
    const char *nccl_alias;
    const char *dflt;
    const char *help;
    const char *value; /* resolved once */
    const char *source; /* which variable it came from, or "default" */
} mpccl_setting_t;

/* The path between nodes when MPCCL_GPU_DIRECT is unset (lib/gpu/gpu_proxy_mem.c):
 * "auto", GPU-direct where a NIC of UCX reads GPU memory itself (GPUDirect
 * RDMA), pinned host staging elsewhere: over UCX's cuda_copy and cuda_ipc the
 * proxy thread's CUDA copies can stall behind an application's lazily loaded
 * kernel (doc/GPU_DESIGN.md). */
#define GPU_DIRECT_DEFAULT "auto"

static mpccl_setting_t settings[] = {
    {"DEBUG", "NCCL_DEBUG", "WARN", "log level: NONE, VERSION, WARN, INFO or TRACE", NULL, NULL},
    {"DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS", "ALL",
     "subsystems logged: INIT,COLL,P2P,NET,SHIM,TUNE,BOOT or ALL; ^ excludes", NULL, NULL},
    {"DEBUG_FILE", "NCCL_DEBUG_FILE", "", "log file instead of stderr; %h = host, %p = pid", NULL, NULL},
    {"HOSTID", "NCCL_HOSTID", "",
     "overrides the host identity that groups ranks into nodes (tests: simulate nodes)", NULL, NULL},
    {"ALGO", "NCCL_ALGO", "",
     "forces algorithms: ring, rd, tree, direct, hier; per collective 'allreduce:ring'; ^ excludes",
     NULL, NULL},
    {"CHUNK_BYTES", NULL, "512K", "pipelining chunk of ring/chain algorithms", NULL, NULL},
    {"HOST_SCRATCH_KEEP", NULL, "256M",
     "host communicators: scratch memory the process keeps between their calls, all together (bytes; 0: none)", NULL, NULL},
    {"SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "",
     "network interfaces for the unique-id bootstrap (prefixes, ^ excludes, = exact)", NULL, NULL},
    {"COMM_ID", "NCCL_COMM_ID", "", "host:port of the unique-id root (rank 0 listens there)", NULL,
     NULL},
    {"COMM_SECRET", "NCCL_SOCKET_MAGIC", "",
     "secret the ranks of a COMM_ID job share; connections prove it without sending it", NULL, NULL},
    {"FD_PEERS", NULL, "job",
     "who may fetch GPU memory descriptors from this process: job (its communicators' peers), user (any process "
     "of the same user: ranks in separate PID namespaces)", NULL, NULL},
    {"BOOTSTRAP_TIMEOUT", NULL, "120", "seconds a bootstrap waits for peers before failing", NULL,
     NULL},
    {"UCX_CLOSE_TIMEOUT", NULL, "2000", "milliseconds ncclCommDestroy waits for UCX to flush", NULL,
     NULL},
    {"UCX_ERR_MODE", NULL, "auto",
     "auto: peers of this machine connect without UCX's failure detection (shared memory/cma; MPCCL_PEER_WATCH "
     "detects their death), other peers with it; peer: UCX detects dead peers everywhere (ranks of one host then "
     "use tcp loopback, slower); none: shared memory everywhere, remote deaths noticed only by revokes and "
     "MPCCL_OP_TIMEOUT",
     NULL, NULL},
    {"PEER_WATCH", NULL, "1",
     "1: a thread watches the processes of this machine's peers (pidfd_open; kill(pid, 0) each second without "
     "it) and fails their communicators with ncclRemoteError within milliseconds of a death; 0: off (then "
     "MPCCL_UCX_ERR_MODE=auto uses peer everywhere)",
     NULL, NULL},
    {"UCX_SPIN_US", NULL, "50", "microseconds a waiting rank yields before it sleeps on the UCX event fd", NULL,
     NULL},
    {"UCX_IDLE_US", NULL, "1000", "longest a waiting rank sleeps on the UCX event fd (0: only yield)", NULL, NULL},
    {"GPU_CTAS", NULL, "0",
     "CTAs per GPU engine launch (0: min(SM count, 16), and at most 4 where every peer is on another node); the "
     "minimum over ranks is used", NULL, NULL},
    {"GPU_SLOT_BYTES", NULL, "64K",
     "bytes per mailbox slot and CTA of the GPU message protocol (where every peer is on another node: 1M, "
     "halved until the slots take at most 256 MB)", NULL, NULL},
    {"GPU_CTA_MIN_BYTES", NULL, "32K",
     "the engine gives each CTA at least this many bytes of a step (0: spread every step over all CTAs); the "
     "minimum over ranks is used", NULL, NULL},
    {"HIER", NULL, "1",
     "GPU communicators spanning nodes with the same number (>= 2) of ranks on each: 1 runs allreduce, allgather, "
     "reduce_scatter, broadcast and reduce from MPCCL_HIER_MIN_BYTES as phases inside the node (flat kernels) around a "
     "phase between nodes (one rank per node), pipelined by chunks; 0: every step on the engine", NULL, NULL},
    {"HIER_MIN_BYTES", NULL, "0", "hierarchical collectives: smaller calls (bytes of the largest buffer) use the engine",
     NULL, NULL},
    {"HIER_CHUNK_BYTES", NULL, "4M",
     "hierarchical collectives: bytes each rank moves between nodes per pipeline chunk", NULL, NULL},
    {"FLAT", NULL, "1", "GPU collectives of one node with P2P between all GPUs use the flat kernels (0: the engine)",
     NULL, NULL},
    {"FLAT_SLICE_BYTES", NULL, "0",
     "flat kernels: bytes each rank keeps per peer and parity (0: min(16M, 128M / (2 * ranks)))", NULL, NULL},
    {"FLAT_LL_BYTES", NULL, "256K",
     "flat kernels: calls whose block per peer is at most this use LL units (data and flag in one store); 0: never",
     NULL, NULL},
    {"FLAT_P2P", NULL, "1", "flat kernels: a group's send/recv calls run as one flat p2p launch (0: the engine)", NULL,
     NULL},
    {"FLAT_P2P_BYTES", NULL, "0",
     "flat p2p: bytes each rank keeps per peer and parity for send/recv (0: min(16M, 64M / (2 * ranks)))", NULL, NULL},
    {"FLAT_P2P_DIRECT_BYTES", NULL, "4M",
     "flat p2p: messages from this many bytes are stored straight into the receive buffer when the receiver "
     "ncclCommRegister'd it (the receiver announces it first); smaller ones are always staged",
     NULL, NULL},
    {"FLAT_P2P_LL_BYTES", NULL, "256K",
     "flat p2p: send/recv messages of at most this many bytes go as LL units (data and flag in one 16-byte store "
     "into the receiver's region: no fence, no ready flag); larger ones are staged; 0: never (a huge value: every "
     "message, in chunks)",
     NULL, NULL},
    {"FLAT_SELF_CTAS", NULL, "64",
     "flat kernels: an alltoall or allgather out of place with blocks of at least FLAT_SELF_BYTES runs this "
     "many extra CTAs (0..64) that copy the rank's own block beside the CTAs on the peers' blocks (0: every CTA "
     "copies its share of the own block after each chunk); this rank's own choice",
     NULL, NULL},
    {"FLAT_LL_THREADS", NULL, "0",
     "flat kernels: threads per CTA of an LL launch (32..512, a multiple of 32); 0: one per 8-byte unit of the "
     "CTA's part, rounded up to a warp",
     NULL, NULL},
    {"FLAT_SELF_BYTES", NULL, "512K", "flat kernels: smallest alltoall or allgather block for FLAT_SELF_CTAS", NULL, NULL},
    {"FLAT_P2P_PULL", NULL, "1",
     "flat p2p: 1: a message of FLAT_P2P_DIRECT_BYTES or more from a ncclCommRegister'd send buffer into an "
     "unregistered receive buffer is copied by the receiver straight out of the send buffer; 0: staged",
     NULL, NULL},
    {"FLAT_P2P_CTAS", NULL, "64", "flat p2p: most CTAs one send/recv message uses (1..128, at most FLAT_CTAS / 2: sending and receiving CTAs are separate)", NULL,
     NULL},
    {"FLAT_CTAS", NULL, "128", "flat kernels: most CTAs per launch (1..128)", NULL, NULL},
    {"FLAT_CTA_BYTES", NULL, "16K", "flat kernels: bytes per CTA and peer before another CTA is added", NULL, NULL},
    {"FLAT_MAX_BYTES", NULL, "0", "flat kernels: larger calls (bytes per rank) use the engine (0: no limit)", NULL,
     NULL},
    {"FLAT_ALLREDUCE", NULL, "auto", "flat allreduce: auto (by FLAT_ONESHOT_BYTES), oneshot or twoshot", NULL, NULL},
    {"FLAT_ONESHOT_BYTES", NULL, "1M",
     "flat allreduce: one-shot while bytes * (ranks-1) * (ranks-2) <= this * ranks, else two-shot", NULL, NULL},
    {"FLAT_WIN", NULL, "1",
     "flat kernels: collectives whose buffers lie in windows registered with NCCL_WIN_COLL_SYMMETRIC read and "
     "write the peers' buffers directly (0: through the region as other buffers)", NULL, NULL},
    {"FLAT_WIN_BYTES", NULL, "4M",
     "flat kernels: calls on symmetric windows from this size (bytes per rank) take the window path; smaller ones "
     "the region (LL) path", NULL, NULL},
    {"FLAT_CE_BYTES", NULL, "128M",
     "flat kernels, 2 ranks: allgather, alltoall (out of place) and broadcast on symmetric windows from this size "
     "(a rank's output buffer) are moved by the copy engines, between two barrier kernels (0: never)", NULL, NULL},
    {"FLAT_ROOT_SPLIT_BYTES", NULL, "4M",
     "flat kernels, 3 or more ranks: broadcast from this size is a scatter and an allgather, reduce a "
     "reduce_scatter and a gather, instead of the root storing into (loading from) every peer (0: never)", NULL,
     NULL},
    {"FLAT_REG", NULL, "1",
     "flat kernels: collectives whose input and output lie in ncclCommRegister'd buffers (on every rank, as NCCL "
     "requires) read and write the peers' buffers directly from MPCCL_FLAT_WIN_BYTES on; ncclCommRegister maps "
     "each buffer into the peer processes (0: registration maps nothing, calls go through the region)", NULL, NULL},
    {"PUT_KERNEL_BYTES", NULL, "4M",
     "ncclPutSignal on GPU comms: puts up to this many bytes are one kernel that stores into the peer's window and "
     "signals; larger ones are a copy-engine copy, then a signal kernel",
     NULL, NULL},
    {"PUT_ONE_CTA_BYTES", NULL, "64K",
     "ncclPutSignal: puts up to this many bytes run on one CTA (more CTAs need a grid barrier, ~1 us)", NULL, NULL},
    {"PUT_CTAS", NULL, "32", "ncclPutSignal: most CTAs of the put kernel (1..128)", NULL, NULL},
    {"PUT_CTA_BYTES", NULL, "8K", "ncclPutSignal: above PUT_ONE_CTA_BYTES, one CTA of the put kernel per this many bytes",
     NULL, NULL},
    {"CHECK_POINTERS", "NCCL_CHECK_POINTERS", "1",
     "1: each GPU call asks the driver what its buffers are (pageable or another device's memory -> "
     "ncclInvalidArgument); 0: only NULL is caught, as NCCL does by default (two driver queries less per call)",
     NULL, NULL},
    {"SHARED_GPU", NULL, "kernels",
     "processes sharing one GPU: kernels (the usual kernels, which the GPU time-slices without MPS; the default until "
     "the shared-device path has run on GPUs), auto (the leader's process runs every collective when MPS is off), "
     "leader (always)",
     NULL, NULL},
    {"P2P_DISABLE", "NCCL_P2P_DISABLE", "0", "1: GPUs of one node talk through host memory instead of P2P/NVLink",
     NULL, NULL},
    {"GPU_DIRECT", NULL, GPU_DIRECT_DEFAULT,
     "GPU collectives and send/recv between nodes: 1 hands UCX device memory (GPU-direct, where UCX moves CUDA "
     "memory; doc/GPU_DESIGN.md), 0 goes through pinned host staging, auto picks GPU-direct where a "
     "NIC of UCX reads GPU memory itself (GPUDirect RDMA) and staging elsewhere", NULL, NULL},
    {"PROXY_LL_BYTES", NULL, "4K",
     "pieces of GPU collectives and send/recv to other nodes of at most this many bytes go as LL lines (data and "
     "flag in each 8 bytes: the sender raises them without a system fence, at twice the bytes on the wire; at "
     "most 8K; 0: never); staged only, the minimum over ranks is used", NULL, NULL},
    {"ENGINE_SMALL", NULL, "1",
     "GPU collectives and send/recv whose every message is one LL piece to another node run on a one-CTA form "
     "of the device engine that keeps the whole plan in shared memory (0: the engine itself)", NULL, NULL},
    {"ENGINE_SMALL_OVERLAP", NULL, "1",
     "the small-call kernel between nodes is launched to start while the previous small-call kernel of its stream "
     "runs (programmatic dependent launch), waiting for it before it reads anything but its plan (0: plain "
     "launches)", NULL, NULL},
    {"PROXY_WHOLE_BYTES", NULL, "0",
     "experimental, GPU-direct only: what is left of a CTA's part of a message to another node goes in one "
     "transfer straight from the source buffer into the destination buffer (no copy through slots) from this "
     "many bytes on (0: never; at most 1G); 0 on any rank turns it off.  Over UCX's cuda_ipc it can hang once "
     "the application frees and reallocates a buffer (doc/GPU_DESIGN.md)", NULL, NULL},
    {"PROXY_EAGER_BYTES", NULL, "auto",
     "staged pieces to other nodes of at most this many bytes near the end of a CTA's part (the last four such "
     "pieces' worth; all of it where a slot holds fewer), where a larger piece would be a rendezvous: auto is "
     "65520 (under UCX's eager limit over TCP) where no UCX network device reads GPU memory, else 0 (whole "
     "slots only); the minimum over ranks is used", NULL, NULL},
    {"PROXY_LANES", NULL, "0",
     "connections (UCX workers) and proxy threads a GPU communicator's traffic to other nodes is spread over "
     "(0: one per CTA up to 4 where every peer is on another node, the communicator has at most 64 ranks and no "
     "GPUDirect RDMA NIC is found, else 1); the minimum over ranks is used", NULL, NULL},
    {"PROXY_SPIN_US", NULL, "20", "microseconds the GPU proxy thread polls busily after the last activity", NULL,
     NULL},
    {"PROXY_YIELD_US", NULL, "500", "then microseconds it polls with sched_yield", NULL, NULL},
    {"PROXY_SLEEP_US", NULL, "100",
     "then, while a launch it serves is unfinished, its longest sleep between polls (doubling from 1 us); with "
     "none in flight it sleeps until a launch or the network wakes it", NULL, NULL},
    {"PROXY_CPU_AFFINITY", NULL, "auto",
     "where the GPU proxy threads run and their pinned staging lives: auto on the CPUs local to the GPU's PCI "
     "device (sysfs local_cpulist) that the process may use, as NCCL places its proxy; 0 where the attaching "
     "thread runs (inherited)", NULL, NULL},
    {"ONESIDED_DIRECT", NULL, "auto",
     "one-sided puts between nodes: 1 puts them with UCX from device memory straight into the target's window "
     "wherever collectives between nodes go GPU-direct (MPCCL_GPU_DIRECT) on every rank, auto only where besides "
     "a NIC of UCX writes GPU memory itself (GPUDirect RDMA), 0 never (the staged one-sided channel; "
     "doc/ONESIDED.md)", NULL, NULL},
    {"ONESIDED_FROM_WINDOW", NULL, "1",
     "GPU-direct one-sided puts: 1 a put whose source lies in a window of the rank leaves from the window itself "
     "(each window is also registered as a UCX source); 0 its data is copied into a slot first",
     NULL, NULL},
    {"PROXY_OS_SLOTS", NULL, "16",
     "one-sided puts to each peer on another node: slots (of MPCCL_GPU_SLOT_BYTES) in flight, a power of two 1..256",
     NULL, NULL},
    {"SHIM", NULL, "1", "libmpccl_shim.so: 0 passes every MPI call to MPI unchanged", NULL, NULL},
    {"SHIM_MIN_BYTES", NULL, "auto", "shim: auto (each collective and size class takes the route measured faster), or a size: smaller collectives on GPU buffers go to MPI on staged host copies", NULL,
     NULL},
    {"SHIM_COLLS", NULL, "all", "shim: collectives sent to mpccl (allreduce,reduce,bcast,...; ^ excludes)", NULL,
     NULL},
    {"SHIM_AGREE", NULL, "1", "shim: ranks agree on each call's route; 0: trust that all pass the same memory kind",
     NULL, NULL},
    {"SHIM_HOST", NULL, "0", "shim test mode: host buffers count as GPU buffers (processes without a GPU only)", NULL,
     NULL},
    {"SHIM_NET", NULL, "auto",
     "shim: device-buffer messages to another host: auto (through the shim's UCX when it is usable), ucx (the same, "
     "warning when it is not), mpi (a host copy through MPI)",
     NULL, NULL},
    {"SHIM_NET_DIRECT", NULL, "auto",
     "shim: auto: UCX reads and writes GPU buffers itself where a network device of it registers GPU memory; 1: "
     "wherever UCX handles CUDA memory; 0: always through pinned host memory, in chunks",
     NULL, NULL},
    {"SHIM_NET_KEY_INLINE", NULL, "112",
     "shim: the largest UCX remote key (bytes, at most 112) carried in a message's envelope; a larger one travels "
     "ahead of it (0: every key does, as tests make it)",
     NULL, NULL},
    {"SHIM_NET_CHUNK", NULL, "4m", "shim: chunk of a message between hosts staged through pinned host memory", NULL,
     NULL},
    {"LIBRARY", NULL, "", "Python bindings (python/mpccl): the libmpccl.so to load (read by Python, not here)",
     NULL, NULL},
    {"OP_TIMEOUT", NULL, "0",
     "seconds a host collective may wait for peers before failing with ncclRemoteError, with a job-wide report "
     "naming the ranks to blame (0: forever)",
     NULL, NULL},
    {"STALL_REPORT_S", NULL, "60",
     "without MPCCL_OP_TIMEOUT: seconds a host call waits before one job-wide hang report is printed (WARN) and "
     "the wait goes on (0: never)",
     NULL, NULL},
    {"CHECK_MODE", "NCCL_CHECK_MODE", "0",
     "1: before data moves, every call is checked against its peers' (operation, count, datatype, op, root, "
     "send/recv pairing, sequence); a mismatch is ncclInvalidUsage on every rank, naming rank and argument. Costs "
     "a message to every peer per call",
     NULL, NULL},
    {"NVTX", "NCCL_NVTX_DISABLE", "1",
     "1: NVTX ranges (domain NCCL) around API calls on GPU communicators, init and destroy, while a tool such as "
     "Nsight Systems is attached; 0: none (NCCL_NVTX_DISABLE=1 means 0)",
     NULL, NULL},
};

/* NCCL variables whose meaning is the opposite of their MPCCL_ setting (a
 * boolean): NCCL_NVTX_DISABLE=1 is MPCCL_NVTX=0. */
static const char *const inverted_aliases[] = {"NCCL_NVTX_DISABLE"};

static int alias_inverted(const char *alias)
{
    for (size_t i = 0; alias && i < sizeof(inverted_aliases) / sizeof(inverted_aliases[0]); i++)
        if (!strcmp(alias, inverted_aliases[i])) return 1;
    return 0;
}

#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static pthread_once_t settings_once = PTHREAD_ONCE_INIT;

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), prev[64], cur[64];
    if (la >= 63 || lb >= 63) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof(size_t));
    }
    return prev[lb];
}

extern char **environ;

static void warn_unknown_variables(void)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "MPCCL_", 6) != 0) continue;
        const char *name = *e + 6, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        char key[64];
        if (len >= sizeof(key)) len = sizeof(key) - 1;
        memcpy(key, name, len);
        key[len] = '\0';
        /* Test programs and tools keep their own MPCCL_TEST_* / MPCCL_PERF_* knobs. */
        if (!strncmp(key, "TEST_", 5) || !strncmp(key, "PERF_", 5)) continue;
        size_t best = (size_t)-1;
        const char *nearest = NULL;
        int known = 0;
        for (size_t i = 0; i < NSETTINGS; i++) {
            if (!strcmp(key, settings[i].name)) known = 1;
            size_t d = edit_distance(key, settings[i].name);
            if (d < best) best = d, nearest = settings[i].name;
        }
        if (!known)
            MPCCL_WARN(MPCCL_SUB_INIT, "unknown environment variable MPCCL_%s ignored%s%s", key,
                       nearest ? "; did you mean MPCCL_" : "", nearest ? nearest : "");
    }
}

static void resolve_settings(void)
{
    char var[80];
    for (size_t i = 0; i < NSETTINGS; i++) {
        snprintf(var, sizeof(var), "MPCCL_%s", settings[i].name);
        const char *v = getenv(var);
        settings[i].source = "MPCCL_";
        if (v == NULL && settings[i].nccl_alias) {
            v = getenv(settings[i].nccl_alias);
            settings[i].source = settings[i].nccl_alias;
            /* a boolean in the alias's sense: nonzero -> "0", zero -> "1" */
            if (v && *v && alias_inverted(settings[i].nccl_alias)) v = strtol(v, NULL, 0) != 0 ? "0" : "1";
        }
        if (v == NULL) {
            v = settings[i].dflt;
            settings[i].source = "default";
        }
        settings[i].value = v;
    }
}

static void init_settings(void)
{
    resolve_settings();
}

void mpccl_config_reload(void)
{
    pthread_once(&settings_once, init_settings);
    resolve_settings();
}

static mpccl_setting_t *find_setting(const char *name)
{
    pthread_once(&settings_once, init_settings);
    for (size_t i = 0; i < NSETTINGS; i++)
        if (!strcmp(settings[i].name, name)) return &settings[i];
    fprintf(stderr, "mpccl: internal error: setting MPCCL_%s is not in the table (lib/util/config.c)\n",
            name);
    abort();
}

const char *mpccl_config_str(const char *name)
{
    const char *v = find_setting(name)->value;
    return (v && *v) ? v : NULL;
}

/* Parses "123", "4k", "2M", "1g" (binary multiples); returns -1 when malformed. */
static int parse_int(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || end == s) return -1;
    while (isspace((unsigned char)*end)) end++;
    switch (tolower((unsigned char)*end)) {
    case 'k': v <<= 10; end++; break;
    case 'm': v <<= 20; end++; break;
    case 'g': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'b' || *end == 'B') end++;
    if (*end != '\0') return -1;
    *out = v;
    return 0;
}

int64_t mpccl_config_int(const char *name)
{
    mpccl_setting_t *s = find_setting(name);
    int64_t v = 0;
    if (s->value && *s->value && parse_int(s->value, &v) == 0) return v;
    if (s->value && *s->value && strcmp(s->source, "default") != 0)
        MPCCL_WARN(MPCCL_SUB_INIT, "%s%s=%s is not an integer (k/m/g suffixes allowed); using %s",
                   strcmp(s->source, "MPCCL_") ? "" : "MPCCL_",
                   strcmp(s->source, "MPCCL_") ? s->source : s->name, s->value, s->dflt);
    if (parse_int(s->dflt, &v) != 0) v = 0;
    return v;
}

int mpccl_config_is_set(const char *name)
{
    return strcmp(find_setting(name)->source, "default") != 0;
}

void mpccl_config_check_environment(void)
{
    /* Not pthread_once: the warnings it logs come back here through the logger. */
    static int checked;
    if (__atomic_exchange_n(&checked, 1, __ATOMIC_ACQ_REL) == 0) warn_unknown_variables();
}

int mpccl_config_entry(size_t i, mpccl_config_entry_t *out)
{
    pthread_once(&settings_once, init_settings);
    if (i >= NSETTINGS) return -1;
    out->name = settings[i].name;
    out->nccl_alias = settings[i].nccl_alias;
    out->alias_inverted = alias_inverted(settings[i].nccl_alias);
    out->dflt = settings[i].dflt;
    out->help = settings[i].help;
    out->value = settings[i].value;
    out->source = settings[i].source;
    return 0;
}

void mpccl_config_print(FILE *out)
{
    pthread_once(&settings_once, init_settings);
    fprintf(out, "%-26s %-20s %-10s %s\n", "variable", "value", "from", "meaning");
    for (size_t i = 0; i < NSETTINGS; i++) {
        char var[80];
        snprintf(var, sizeof(var), "MPCCL_%s", settings[i].name);
        const char *alias = settings[i].nccl_alias;
        fprintf(out, "%-26s %-20s %-10s %s%s%s%s%s\n", var, *settings[i].value ? settings[i].value : "(unset)",
                settings[i].source, settings[i].help, alias ? " [alias " : "", alias ? alias : "",
                alias_inverted(alias) ? ", inverted" : "", alias ? "]" : "");
    }
}
