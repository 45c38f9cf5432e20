/* GPU communicator host side: memory kinds, ncclMemAlloc/ncclMemFree, and the
 * link table of gpu_comm checked without the engine: every rank writes a seeded
 * pattern through its tx pointers (slots, ready, len, and the ack of the
 * reverse channel) with cudaMemcpy, then every rank reads what its peers wrote
 * through its rx pointers.  Overlapping or misplaced areas show up as wrong
 * bytes.  Ranks are threads (in-process bootstrap) or processes (fork + socket
 * bootstrap, real CUDA IPC).  1 GPU: several ranks share it; 2+ GPUs: ranks
 * spread over them.  Exits 77 without a GPU.  MPCCL_TEST_SEED sets the seed. */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "cuda/cuda_rt.h"
#include "gpu/gpu_comm.h"
#include "nccl.h"
#include "util/status.h"
#include "core/topo.h"

static unsigned long test_seed = 20250105;
static int ngpu; /* found by a child process, so this one stays CUDA-free for fork */

static uint32_t mix(uint64_t x)
{
    x ^= test_seed * 0x9e3779b97f4a7c15ull;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 29;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 32;
    return (uint32_t)x;
}

/* Values of channel s -> r, CTA c, slot k (salt tells the arrays apart). */
static uint32_t val(int salt, int s, int r, uint32_t c, uint32_t k, size_t i)
{
    return mix(((uint64_t)salt << 60) ^ ((uint64_t)s << 50) ^ ((uint64_t)r << 40) ^ ((uint64_t)c << 32) ^
               ((uint64_t)k << 24) ^ (uint64_t)i);
}
enum { SALT_SLOT = 1, SALT_READY, SALT_LEN, SALT_ACK };

/* ---- one rank's check of the link table ------------------------------------------ */

typedef struct {
    int fails;
    char msg[512];
} result_t;

#define FAIL(res, ...)                                                        \
    do {                                                                      \
        if ((res)->fails++ == 0) snprintf((res)->msg, sizeof((res)->msg), __VA_ARGS__); \
    } while (0)

static int cuda_ok(result_t *res, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    FAIL(res, "%s: %s", what, cudaGetErrorString(e));
    return 0;
}

/* expect: the link kind every same-node peer must have (0: NVLINK or HOST). */
static void write_phase(mpccl_gpu_comm_t *g, result_t *res)
{
    uint32_t C = g->nctas, K = g->nslots, B = g->slot_bytes;
    uint32_t *buf = malloc(B);
    for (int j = 0; j < g->nranks && res->fails == 0; j++) {
        const mpccl_dev_link_t *L = &g->links_host[j];
        if (L->kind != MPCCL_LINK_NVLINK && L->kind != MPCCL_LINK_HOST) continue;
        uint32_t *ready = malloc(C * K * 4), *len = malloc(C * K * 4), *ack = malloc(C * 4);
        for (uint32_t c = 0; c < C; c++) {
            ack[c] = val(SALT_ACK, j, g->rank, c, 0, 0); /* acking channel j -> me */
            for (uint32_t k = 0; k < K; k++) {
                for (uint32_t i = 0; i < B / 4; i++) buf[i] = val(SALT_SLOT, g->rank, j, c, k, i);
                if (!cuda_ok(res, cudaMemcpy(L->tx_slots + ((size_t)c * K + k) * B, buf, B, cudaMemcpyDefault),
                             "write tx_slots"))
                    break;
                ready[c * K + k] = val(SALT_READY, g->rank, j, c, k, 0);
                len[c * K + k] = val(SALT_LEN, g->rank, j, c, k, 0);
            }
        }
        if (res->fails == 0) {
            cuda_ok(res, cudaMemcpy((void *)L->tx_ready, ready, C * K * 4, cudaMemcpyDefault), "write tx_ready");
            cuda_ok(res, cudaMemcpy((void *)L->tx_len, len, C * K * 4, cudaMemcpyDefault), "write tx_len");
            cuda_ok(res, cudaMemcpy((void *)L->rx_ack, ack, C * 4, cudaMemcpyDefault), "write rx_ack");
        }
        free(ready), free(len), free(ack);
    }
    free(buf);
}

static void read_phase(mpccl_gpu_comm_t *g, result_t *res)
{
    uint32_t C = g->nctas, K = g->nslots, B = g->slot_bytes;
    uint32_t *buf = malloc(B);
    size_t nseq = (size_t)g->nranks * C;
    uint32_t *seq = malloc(nseq * 4);
    for (int j = 0; j < g->nranks && res->fails == 0; j++) {
        const mpccl_dev_link_t *L = &g->links_host[j];
        if (L->kind != MPCCL_LINK_NVLINK && L->kind != MPCCL_LINK_HOST) continue;
        uint32_t *ready = malloc(C * K * 4), *len = malloc(C * K * 4), *ack = malloc(C * 4);
        cuda_ok(res, cudaMemcpy(ready, (const void *)L->rx_ready, C * K * 4, cudaMemcpyDefault), "read rx_ready");
        cuda_ok(res, cudaMemcpy(len, (const void *)L->rx_len, C * K * 4, cudaMemcpyDefault), "read rx_len");
        cuda_ok(res, cudaMemcpy(ack, (const void *)L->tx_ack, C * 4, cudaMemcpyDefault), "read tx_ack");
        for (uint32_t c = 0; c < C && res->fails == 0; c++) {
            if (ack[c] != val(SALT_ACK, g->rank, j, c, 0, 0))
                FAIL(res, "rank %d: tx_ack from %d cta %u = %08x", g->rank, j, c, ack[c]);
            for (uint32_t k = 0; k < K && res->fails == 0; k++) {
                if (ready[c * K + k] != val(SALT_READY, j, g->rank, c, k, 0) ||
                    len[c * K + k] != val(SALT_LEN, j, g->rank, c, k, 0))
                    FAIL(res, "rank %d: ready/len from %d cta %u slot %u wrong", g->rank, j, c, k);
                if (!cuda_ok(res, cudaMemcpy(buf, L->rx_slots + ((size_t)c * K + k) * B, B, cudaMemcpyDefault),
                             "read rx_slots"))
                    break;
                for (uint32_t i = 0; i < B / 4; i++) {
                    if (buf[i] != val(SALT_SLOT, j, g->rank, c, k, i)) {
                        FAIL(res, "rank %d: slot from %d cta %u slot %u word %u = %08x, expected %08x", g->rank,
                             j, c, k, i, buf[i], val(SALT_SLOT, j, g->rank, c, k, i));
                        break;
                    }
                }
            }
        }
        free(ready), free(len), free(ack);
    }
    /* Nobody writes the counters: a stray write from a misplaced link shows here. */
    if (res->fails == 0 && cuda_ok(res, cudaMemcpy(seq, g->tx_seq, nseq * 4, cudaMemcpyDefault), "read tx_seq"))
        for (size_t i = 0; i < nseq; i++)
            if (seq[i]) FAIL(res, "rank %d: tx_seq[%zu] = %u, expected 0", g->rank, i, seq[i]);
    if (res->fails == 0 && cuda_ok(res, cudaMemcpy(seq, g->rx_seq, nseq * 4, cudaMemcpyDefault), "read rx_seq"))
        for (size_t i = 0; i < nseq; i++)
            if (seq[i]) FAIL(res, "rank %d: rx_seq[%zu] = %u, expected 0", g->rank, i, seq[i]);
    free(seq);
    free(buf);
}

/* The device copy matches the host copy. */
static void check_device_copy(mpccl_gpu_comm_t *g, result_t *res)
{
    mpccl_dev_comm_t d;
    if (!cuda_ok(res, cudaMemcpy(&d, g->dcomm, sizeof(d), cudaMemcpyDefault), "read dcomm")) return;
    if (d.rank != g->rank || d.nranks != g->nranks || d.nctas != g->nctas || d.nslots != g->nslots ||
        d.slot_bytes != g->slot_bytes || d.links != g->dlinks || d.tx_seq != g->tx_seq || d.rx_seq != g->rx_seq)
        FAIL(res, "rank %d: device communicator header differs from the host's", g->rank);
    mpccl_dev_link_t *l = malloc((size_t)g->nranks * sizeof(*l));
    if (cuda_ok(res, cudaMemcpy(l, g->dlinks, (size_t)g->nranks * sizeof(*l), cudaMemcpyDefault), "read links") &&
        memcmp(l, g->links_host, (size_t)g->nranks * sizeof(*l)) != 0)
        FAIL(res, "rank %d: device link table differs from the host's", g->rank);
    free(l);
}

/* One rank: create, check kinds and geometry, write, barrier, read, destroy.
 * want_kind: 0 = NVLINK or HOST accepted (printed), else the kind required of
 * every peer on this node. */
static void rank_body(mpccl_bootstrap_t *bs, const mpccl_topo_t *topo, int dev, uint32_t want_kind,
                      result_t *res)
{
    mpccl_gpu_comm_t *g = NULL;
    if (cudaSetDevice(dev) != cudaSuccess) {
        FAIL(res, "rank %d: cudaSetDevice(%d) failed", bs->rank, dev);
        return;
    }
    mpccl_status_t st = mpccl_gpu_comm_create(bs, topo, dev, 0, &g);
    if (st != MPCCL_OK) {
        FAIL(res, "rank %d: mpccl_gpu_comm_create: %s", bs->rank, mpccl_last_error());
        return;
    }
    if (g->dev != dev || g->nslots != MPCCL_GPU_NSLOTS || g->slot_bytes % 16 || g->nctas < 1)
        FAIL(res, "rank %d: geometry dev %d ctas %u slots %u bytes %u", g->rank, g->dev, g->nctas, g->nslots,
             g->slot_bytes);
    char kinds[256] = "";
    for (int j = 0; j < g->nranks; j++) {
        uint32_t k = g->links_host[j].kind;
        int same = topo->node_of[j] == topo->node_of[g->rank];
        /* A rank's link to itself is a loopback in its own device mailbox. */
        uint32_t want = j == g->rank ? MPCCL_LINK_NVLINK : !same ? MPCCL_LINK_PROXY : want_kind;
        int any = j != g->rank && same && want == 0; /* NVLINK or HOST accepted */
        if ((!any && k != want) || (any && k != MPCCL_LINK_NVLINK && k != MPCCL_LINK_HOST) ||
            (same && g->links_host[j].tx_slots == NULL) ||
            (j == g->rank && g->links_host[j].tx_slots != g->links_host[j].rx_slots) ||
            (k == MPCCL_LINK_PROXY && g->links_host[j].tx_slots != NULL))
            FAIL(res, "rank %d: link to %d has kind %u (tx_slots %p), expected %u", g->rank, j, k,
                 (void *)g->links_host[j].tx_slots, want);
        size_t len = strlen(kinds);
        snprintf(kinds + len, sizeof(kinds) - len, "%s%c", j ? " " : "", "-NHP"[k & 3]);
    }
    printf("rank %d dev %d: %u CTAs x %u slots x %u B, links [%s]\n", g->rank, dev, g->nctas, g->nslots,
           g->slot_bytes, kinds);
    check_device_copy(g, res);
    write_phase(g, res);
    /* Everyone wrote before anyone reads; failures are told through the
     * barrier's absence only as timeouts, so every rank takes part. */
    if (mpccl_bootstrap_barrier(bs) != MPCCL_OK) FAIL(res, "rank %d: barrier failed", g->rank);
    read_phase(g, res);
    if (mpccl_bootstrap_barrier(bs) != MPCCL_OK) FAIL(res, "rank %d: barrier failed", g->rank);
    mpccl_gpu_comm_destroy(g);
}

/* ---- ranks as threads ------------------------------------------------------------------- */

typedef struct {
    mpccl_inproc_group_t *grp;
    int rank, nranks, dev, nodes;
    uint32_t want;
    result_t res;
} thr_t;

static void *thread_rank(void *arg)
{
    thr_t *t = arg;
    mpccl_bootstrap_t bs;
    if (mpccl_inproc_bootstrap_create(t->grp, t->rank, &bs) != MPCCL_OK) {
        FAIL(&t->res, "rank %d: bootstrap: %s", t->rank, mpccl_last_error());
        return NULL;
    }
    uint64_t *hashes = calloc((size_t)t->nranks, sizeof(uint64_t));
    for (int r = 0; r < t->nranks; r++) hashes[r] = (uint64_t)(r % t->nodes); /* simulated nodes */
    mpccl_topo_t topo;
    if (mpccl_topo_from_hashes(hashes, t->nranks, t->rank, &topo) != MPCCL_OK) {
        FAIL(&t->res, "rank %d: topo: %s", t->rank, mpccl_last_error());
    } else {
        rank_body(&bs, &topo, t->dev, t->want, &t->res);
        mpccl_topo_free(&topo);
    }
    free(hashes);
    mpccl_bootstrap_close(&bs);
    return NULL;
}

static void run_threads(int n, int nodes, uint32_t want)
{
    mpccl_inproc_group_t *grp;
    ck_assert_int_eq(mpccl_inproc_group_create(n, &grp), MPCCL_OK);
    thr_t *t = calloc((size_t)n, sizeof(*t));
    pthread_t *th = calloc((size_t)n, sizeof(*th));
    for (int r = 0; r < n; r++) {
        t[r] = (thr_t){.grp = grp, .rank = r, .nranks = n, .dev = r % ngpu, .nodes = nodes, .want = want};
        ck_assert_int_eq(pthread_create(&th[r], NULL, thread_rank, &t[r]), 0);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    mpccl_inproc_group_release(grp);
    for (int r = 0; r < n; r++) ck_assert_msg(t[r].res.fails == 0, "%s", t[r].res.msg);
    free(t);
    free(th);
}

/* 1 GPU: 3 ranks on it; more: two ranks per GPU (up to 8 ranks). */
static int thread_ranks(void) { return ngpu == 1 ? 3 : (2 * ngpu > 8 ? 8 : 2 * ngpu); }

START_TEST(links_threads)
{
    run_threads(thread_ranks(), 1, 0);
}
END_TEST

START_TEST(links_threads_host)
{
    setenv("MPCCL_P2P_DISABLE", "1", 1);
    setenv("MPCCL_GPU_SLOT_BYTES", "4096", 1); /* smaller host segments */
    run_threads(thread_ranks(), 1, MPCCL_LINK_HOST);
}
END_TEST

/* Two simulated nodes: ranks of the other node get PROXY links without
 * pointers, the rest of the table is as on one node. */
START_TEST(links_threads_two_nodes)
{
    run_threads(thread_ranks() + 1, 2, 0);
}
END_TEST

/* Odd settings: the minimum over the ranks wins, the geometry still fits. */
START_TEST(links_threads_small_geometry)
{
    setenv("MPCCL_GPU_CTAS", "3", 1);
    setenv("MPCCL_GPU_SLOT_BYTES", "1k", 1);
    run_threads(thread_ranks(), 1, 0);
}
END_TEST

/* ---- ranks as processes --------------------------------------------------------------------- */

/* hide: each process sees only its own GPU (CUDA_VISIBLE_DEVICES), as MPI
 * launchers often arrange; P2P is then judged through NVML. */
static void run_processes(int n, int hide, uint32_t want)
{
    setenv("MPCCL_SOCKET_IFNAME", "=lo", 1);
    unsigned char id[128];
    ck_assert_int_eq(mpccl_socket_get_unique_id(id), MPCCL_OK);
    pid_t *pid = calloc((size_t)n, sizeof(pid_t));
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) {
            int dev = r % ngpu;
            if (hide) {
                char v[16];
                snprintf(v, sizeof(v), "%d", dev);
                setenv("CUDA_VISIBLE_DEVICES", v, 1);
                dev = 0;
            }
            result_t res = {0};
            mpccl_bootstrap_t bs;
            mpccl_topo_t topo;
            if (mpccl_socket_bootstrap_create(id, r, n, &bs) != MPCCL_OK) {
                fprintf(stderr, "rank %d: bootstrap: %s\n", r, mpccl_last_error());
                _exit(1);
            }
            if (mpccl_topo_build(&bs, &topo) != MPCCL_OK) {
                fprintf(stderr, "rank %d: topo: %s\n", r, mpccl_last_error());
                _exit(1);
            }
            rank_body(&bs, &topo, dev, want, &res);
            if (res.fails) fprintf(stderr, "%s\n", res.msg);
            fflush(stdout);
            _exit(res.fails ? 1 : 0);
        }
    }
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pid[r], &status, 0), pid[r]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad++;
    }
    free(pid);
    ck_assert_msg(bad == 0, "%d rank processes failed (messages above)", bad);
}

/* 1 GPU: 2 processes on it; more: one per GPU plus one sharing GPU 0. */
static int process_ranks(void) { return ngpu == 1 ? 2 : (ngpu + 1 > 8 ? 8 : ngpu + 1); }

START_TEST(links_processes)
{
    run_processes(process_ranks(), 0, 0);
}
END_TEST

START_TEST(links_processes_host)
{
    setenv("MPCCL_P2P_DISABLE", "1", 1);
    setenv("MPCCL_GPU_SLOT_BYTES", "4096", 1);
    run_processes(process_ranks(), 0, MPCCL_LINK_HOST);
}
END_TEST

START_TEST(links_processes_hidden_devices)
{
    run_processes(ngpu == 1 ? 2 : (ngpu > 8 ? 8 : ngpu), 1, 0);
}
END_TEST

/* ---- memory kinds ---------------------------------------------------------------------------- */

static void expect_kind(const void *p, int dev, int want, int want_dev)
{
    int kind = -1, owner = -2;
    ck_assert_int_eq(mpccl_mem_kind_dev(p, dev, &kind, &owner), MPCCL_OK);
    ck_assert_msg(kind == want, "%p seen from device %d: %s, expected %s", p, dev, mpccl_mem_kind_name(kind),
                  mpccl_mem_kind_name(want));
    ck_assert_int_eq(owner, want_dev);
}

static void expect_reject(const void *p, size_t bytes, int dev, const char *words)
{
    ck_assert_int_eq(mpccl_check_gpu_buffer("ncclAllReduce", "sendbuff", p, bytes, dev), MPCCL_ERR_ARG);
    ck_assert_msg(strstr(mpccl_last_error(), words) && strstr(mpccl_last_error(), "sendbuff"),
                  "message \"%s\" lacks \"%s\"", mpccl_last_error(), words);
}

START_TEST(mem_kinds)
{
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(mpccl_cuda_current_device(), 0);
    void *d, *m, *h, *reg = malloc(1 << 16), *pageable = malloc(4096);
    int stack_var = 0;
    ck_assert_int_eq(cudaMalloc(&d, 1 << 20), cudaSuccess);
    ck_assert_int_eq(cudaMallocManaged(&m, 1 << 20, cudaMemAttachGlobal), cudaSuccess);
    ck_assert_int_eq(cudaMallocHost(&h, 1 << 16), cudaSuccess);
    ck_assert_int_eq(cudaHostRegister(reg, 1 << 16, cudaHostRegisterDefault), cudaSuccess);
    for (int pass = 0; pass < 2; pass++) { /* the second pass answers from the cache */
        expect_kind(d, 0, MPCCL_MEM_DEVICE, 0);
        expect_kind((char *)d + 12345, 0, MPCCL_MEM_DEVICE, 0);
        expect_kind(m, 0, MPCCL_MEM_MANAGED, -1);
        expect_kind(h, 0, MPCCL_MEM_HOST_PINNED, -1);
        expect_kind((char *)reg + 100, 0, MPCCL_MEM_HOST_PINNED, -1);
        expect_kind(pageable, 0, MPCCL_MEM_HOST_PAGEABLE, -1);
        expect_kind(&stack_var, 0, MPCCL_MEM_HOST_PAGEABLE, -1);
    }
    ck_assert_int_eq(mpccl_check_gpu_buffer("f", "sendbuff", d, 1 << 20, 0), MPCCL_OK);
    ck_assert_int_eq(mpccl_check_gpu_buffer("f", "sendbuff", m, 1 << 20, 0), MPCCL_OK);
    ck_assert_int_eq(mpccl_check_gpu_buffer("f", "sendbuff", h, 1 << 16, 0), MPCCL_OK);
    ck_assert_int_eq(mpccl_check_gpu_buffer("f", "sendbuff", NULL, 0, 0), MPCCL_OK);
    expect_reject(pageable, 4096, 0, "pageable host memory; a GPU communicator needs device, managed or pinned");
    expect_reject(NULL, 8, 0, "NULL");
    expect_reject((char *)d + 16, 1 << 20, 0, "runs past the end");
    /* Freed: the cached entry must not answer for the address any more. */
    ck_assert_int_eq(cudaFree(d), cudaSuccess);
    expect_kind(d, 0, MPCCL_MEM_HOST_PAGEABLE, -1);
    if (ngpu >= 2) {
        void *d1;
        ck_assert_int_eq(cudaSetDevice(1), cudaSuccess);
        ck_assert_int_eq(cudaMalloc(&d1, 4096), cudaSuccess);
        ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
        expect_kind(d1, 0, MPCCL_MEM_OTHER_DEVICE, 1);
        expect_kind(d1, 1, MPCCL_MEM_DEVICE, 1);
        expect_reject(d1, 4096, 0, "belongs to device 1, the communicator uses device 0");
        cudaFree(d1);
    }
    cudaFree(m);
    cudaFreeHost(h);
    cudaHostUnregister(reg);
    free(reg);
    free(pageable);
}
END_TEST

/* ---- ncclMemAlloc / ncclMemFree ------------------------------------------------------------------ */

START_TEST(memalloc_round_trip)
{
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    const mpccl_cu_fns_t *cu;
    ck_assert_int_eq(mpccl_cu_get(&cu), MPCCL_OK);
    size_t sizes[] = {1, 1000, (2u << 20) + 3, 64u << 20};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        void *p = NULL;
        ck_assert_int_eq(ncclMemAlloc(&p, sizes[s]), ncclSuccess);
        ck_assert_ptr_nonnull(p);
        expect_kind(p, 0, MPCCL_MEM_DEVICE, 0);
        ck_assert_int_eq(mpccl_check_gpu_buffer("f", "recvbuff", p, sizes[s], 0), MPCCL_OK);
        CUdeviceptr base = 0;
        size_t asize = 0;
        ck_assert_int_eq(cu->cuMemGetAddressRange(&base, &asize, (CUdeviceptr)(uintptr_t)p), CUDA_SUCCESS);
        ck_assert_ptr_eq((void *)(uintptr_t)base, p);
        ck_assert_uint_ge(asize, sizes[s]);
        size_t n = sizes[s] < (4u << 20) ? sizes[s] : (4u << 20);
        unsigned char *a = malloc(n), *b = malloc(n);
        for (size_t i = 0; i < n; i++) a[i] = (unsigned char)val(SALT_SLOT, (int)s, 0, 0, 0, i);
        ck_assert_int_eq(cudaMemcpy(p, a, n, cudaMemcpyHostToDevice), cudaSuccess);
        ck_assert_int_eq(cudaMemcpy(b, p, n, cudaMemcpyDeviceToHost), cudaSuccess);
        ck_assert_int_eq(memcmp(a, b, n), 0);
        if (ngpu >= 2) { /* mapped for the peer too: device 1 copies out of it */
            void *d1;
            ck_assert_int_eq(cudaSetDevice(1), cudaSuccess);
            ck_assert_int_eq(cudaMalloc(&d1, n), cudaSuccess);
            ck_assert_int_eq(cudaMemcpyPeer(d1, 1, p, 0, n), cudaSuccess);
            memset(b, 0, n);
            ck_assert_int_eq(cudaMemcpy(b, d1, n, cudaMemcpyDeviceToHost), cudaSuccess);
            ck_assert_int_eq(memcmp(a, b, n), 0);
            cudaFree(d1);
            ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
        }
        free(a);
        free(b);
        ck_assert_int_eq(ncclMemFree(p), ncclSuccess);
        ck_assert_int_eq(ncclMemFree(p), ncclInvalidArgument); /* twice */
        ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "not returned by ncclMemAlloc"));
    }
    void *p = NULL, *d;
    ck_assert_int_eq(ncclMemAlloc(NULL, 10), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ptr is NULL"));
    ck_assert_int_eq(ncclMemAlloc(&p, 0), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "size is 0"));
    ck_assert_ptr_null(p);
    ck_assert_int_eq(ncclMemFree(NULL), ncclSuccess);
    ck_assert_int_eq(cudaMalloc(&d, 4096), cudaSuccess);
    ck_assert_int_eq(ncclMemFree(d), ncclInvalidArgument); /* not ours */
    cudaFree(d);
    ck_assert_int_eq(ncclMemAlloc(&p, (size_t)1 << 62), ncclUnhandledCudaError); /* too large for any GPU */
}
END_TEST

static Suite *gpu_comm_suite(void)
{
    Suite *s = suite_create("gpu_comm");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, mem_kinds);
    tcase_add_test(tc, memalloc_round_trip);
    suite_add_tcase(s, tc);
    tc = tcase_create("links");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, links_threads);
    tcase_add_test(tc, links_threads_host);
    tcase_add_test(tc, links_threads_small_geometry);
    tcase_add_test(tc, links_threads_two_nodes);
    tcase_add_test(tc, links_processes);
    tcase_add_test(tc, links_processes_host);
    tcase_add_test(tc, links_processes_hidden_devices);
    suite_add_tcase(s, tc);
    return s;
}

/* CUDA must not be initialised in this process before Check forks the tests
 * (a forked child cannot use a parent's CUDA state), so a child counts. */
static int count_gpus(void)
{
    pid_t p = fork();
    if (p == 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        _exit(n > 100 ? 100 : n);
    }
    int status = 0;
    if (p < 0 || waitpid(p, &status, 0) != p || !WIFEXITED(status)) return 0;
    return WEXITSTATUS(status);
}

int main(void)
{
    const char *seed = getenv("MPCCL_TEST_SEED");
    if (seed) test_seed = strtoul(seed, NULL, 0);
    ngpu = count_gpus();
    if (ngpu == 0) {
        printf("test_gpu_comm: no usable GPU, skipping\n");
        return 77;
    }
    printf("test_gpu_comm: seed %lu (MPCCL_TEST_SEED), %d GPU%s\n", test_seed, ngpu, ngpu == 1 ? "" : "s");
    fflush(stdout);
    SRunner *sr = srunner_create(gpu_comm_suite());
    srunner_run_all(sr, CK_VERBOSE);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
