/* Windows and one-sided operations (ncclCommWindowRegister, ncclPutSignal,
 * ncclSignal, ncclWaitSignal), registration (ncclCommRegister) and
 * ncclCommQueryProperties, on t_comm: host memory on host communicators,
 * device memory when the communicator has a GPU (perf_mem).  Data is seeded
 * random per (round, source, destination); every rank checks what arrived. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#if defined(__has_include) && !defined(MPCCL_NO_CUDA)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define T_CUDA 1
#endif
#endif

#define WIN_ALIGN 4096

/* Window memory: NCCL_WIN_REQUIRED_ALIGNMENT-aligned; on GPUs cudaMalloc of
 * at least 2 MiB (its granularity, so the base is aligned). */
static void *win_alloc(size_t bytes)
{
    void *p = NULL;
#ifdef T_CUDA
    if (t_mem.gpu) {
        if (cudaMalloc(&p, bytes < (2u << 20) ? (2u << 20) : bytes) != cudaSuccess) return NULL;
        T_EXPECT((uintptr_t)p % WIN_ALIGN == 0, "cudaMalloc returned %p, not %d-aligned", p, WIN_ALIGN);
        return p;
    }
#endif
    if (posix_memalign(&p, WIN_ALIGN, bytes ? bytes : 1) != 0) return NULL;
    return p;
}

static void win_free(void *p)
{
#ifdef T_CUDA
    if (t_mem.gpu) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

/* ncclMemAlloc memory on GPUs (cuMem: peers map it through a file
 * descriptor), as nccl-tests allocates its windows. */
static void *win_alloc_vmm(size_t bytes)
{
#ifdef T_CUDA
    if (t_mem.gpu) {
        void *p = NULL;
        return ncclMemAlloc(&p, bytes) == ncclSuccess ? p : NULL;
    }
#endif
    return win_alloc(bytes);
}

static void win_free_vmm(void *p)
{
#ifdef T_CUDA
    if (t_mem.gpu) {
        ncclMemFree(p);
        return;
    }
#endif
    free(p);
}

static unsigned char pattern(uint64_t seed, size_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    return (unsigned char)(x * 0x94d049bb133111ebULL >> 56);
}

static uint64_t piece_seed(int round, int src, int dst) { return t_seed * 7919 + (uint64_t)round * 1000003 + (uint64_t)src * 1009 + (uint64_t)dst; }

static void fill(unsigned char *h, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) h[i] = pattern(seed, i);
}

static int check(const unsigned char *h, size_t n, uint64_t seed, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (h[i] != pattern(seed, i)) {
            T_EXPECT(0, "%s: byte %zu is %u, expected %u (seed %llu)", what, i, h[i], pattern(seed, i),
                     (unsigned long long)seed);
            return 1;
        }
    return 0;
}

static int contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; hay && *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return 1;
    }
    return 0;
}

/* Waits for every signal of every peer of ctx: a barrier made of signals. */
static void signal_barrier(ncclComm_t comm, int ctx)
{
    ncclWaitSignalDesc_t *d = calloc((size_t)t_nranks, sizeof(*d));
    for (int p = 0; p < t_nranks; p++) {
        T_NCCL(ncclSignal(p, 0, ctx, 0, comm, t_mem.stream));
        d[p] = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = p, .sigIdx = 0, .ctx = ctx};
    }
    T_NCCL(ncclWaitSignal(t_nranks, d, comm, t_mem.stream));
    T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync failed");
    free(d);
}

/* Every communicator reaches every peer one-sidedly (GPU communicators across
 * nodes through the proxy); a build or setup that cannot says so in its
 * properties, and the data tests skip. */
static int rma_supported(void)
{
    ncclCommProperties_t props = NCCL_COMM_PROPERTIES_INITIALIZER;
    if (ncclCommQueryProperties(t_comm, &props) != ncclSuccess) return 0;
    if (!props.hostRmaSupport && t_rank == 0) printf("one-sided data tests skipped: hostRmaSupport = 0\n");
    return props.hostRmaSupport;
}

START_TEST(test_properties)
{
    ncclCommProperties_t props = NCCL_COMM_PROPERTIES_INITIALIZER;
    T_NCCL(ncclCommQueryProperties(t_comm, &props));
    int dev = -2;
    T_NCCL(ncclCommCuDevice(t_comm, &dev));
    T_EXPECT(props.rank == t_rank && props.nRanks == t_nranks, "rank %d nRanks %d, expected %d %d", props.rank,
             props.nRanks, t_rank, t_nranks);
    T_EXPECT(props.cudaDev == dev, "cudaDev %d, expected %d", props.cudaDev, dev);
    /* The device API exists on GPU communicators; multicast never. */
    T_EXPECT(props.deviceApiSupport == (t_mem.gpu != 0) && !props.multimemSupport,
             "deviceApiSupport %d multimemSupport %d", (int)props.deviceApiSupport, (int)props.multimemSupport);
    T_EXPECT(props.nLsaTeams >= 1 && props.nLsaTeams <= t_nranks, "nLsaTeams %d", props.nLsaTeams);
    T_EXPECT(props.ginType == NCCL_GIN_TYPE_NONE && props.railedGinType == NCCL_GIN_TYPE_NONE, "GIN reported");
    T_EXPECT(props.hostRmaSupport, "%s communicator without hostRmaSupport", t_mem.gpu ? "GPU" : "host");
    ncclCommProperties_t bad = NCCL_COMM_PROPERTIES_INITIALIZER;
    bad.magic = 0;
    T_RESULT(ncclCommQueryProperties(t_comm, &bad), ncclInvalidArgument, t_comm);
    T_RESULT(ncclCommQueryProperties(t_comm, NULL), ncclInvalidArgument, t_comm);
    T_END();
}
END_TEST

START_TEST(test_register)
{
    size_t bytes = 1 << 16;
    void *buf = perf_mem_alloc(&t_mem, bytes), *h = NULL, *h2 = NULL;
    T_NCCL(ncclCommRegister(t_comm, buf, bytes, &h));
    T_EXPECT(h != NULL, "no handle");
    T_NCCL(ncclCommDeregister(t_comm, h));
    T_RESULT(ncclCommDeregister(t_comm, h), ncclInvalidArgument, t_comm);
    T_EXPECT(contains_ci(ncclGetLastError(t_comm), "handle"), "message does not name handle: %s",
             ncclGetLastError(t_comm));
    T_RESULT(ncclCommRegister(t_comm, NULL, bytes, &h), ncclInvalidArgument, t_comm);
    T_RESULT(ncclCommRegister(t_comm, buf, bytes, NULL), ncclInvalidArgument, t_comm);
    /* A handle of another communicator is foreign; a handle still registered
     * when its communicator is destroyed is released with it. */
    ncclComm_t sub = NULL;
    T_NCCL(ncclCommSplit(t_comm, 0, t_rank, &sub, NULL));
    T_NCCL(ncclCommRegister(sub, buf, bytes, &h2));
    T_RESULT(ncclCommDeregister(t_comm, h2), ncclInvalidArgument, t_comm);
    T_NCCL(ncclCommRegister(t_comm, buf, bytes, &h));
    T_RESULT(ncclCommDeregister(sub, h), ncclInvalidArgument, sub);
    T_NCCL(ncclCommDestroy(sub)); /* releases h2 */
    T_NCCL(ncclCommDeregister(t_comm, h));
    perf_mem_free(&t_mem, buf);
    T_END();
}
END_TEST

/* Windows and registrations still live when a communicator goes are
 * released with it: by ncclCommDestroy after ncclCommFinalize (which closed
 * the transport first), and by ncclCommAbort, each after a put just used them. */
START_TEST(test_release_with_comm)
{
    if (!rma_supported()) {
        T_END();
        return;
    }
    size_t bytes = 8192;
    int n = t_nranks, next = (t_rank + 1) % n, prev = (t_rank + n - 1) % n;
    for (int how = 0; how < 2; how++) {
        ncclComm_t sub = NULL;
        ncclWindow_t w = NULL;
        void *h = NULL;
        unsigned char *wbuf = win_alloc(bytes), *src = perf_mem_alloc(&t_mem, bytes), *hb = malloc(bytes);
        T_NCCL(ncclCommSplit(t_comm, 0, t_rank, &sub, NULL));
        T_NCCL(ncclCommWindowRegister(sub, wbuf, bytes, &w, NCCL_WIN_DEFAULT));
        T_NCCL(ncclCommRegister(sub, src, bytes, &h));
        fill(hb, bytes, piece_seed(400 + how, t_rank, next));
        T_EXPECT(perf_mem_put(&t_mem, src, hb, bytes) == 0, "upload");
        T_NCCL(ncclPutSignal(src, bytes, ncclUint8, next, w, 0, 0, 0, 0, sub, t_mem.stream));
        ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = prev, .sigIdx = 0, .ctx = 0};
        T_NCCL(ncclWaitSignal(1, &d, sub, t_mem.stream));
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync failed");
        T_EXPECT(perf_mem_get(&t_mem, hb, wbuf, bytes) == 0, "download");
        check(hb, bytes, piece_seed(400 + how, prev, t_rank), how ? "put before abort" : "put before finalize");
        T_EXPECT(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "barrier");
        if (how == 0) {
            T_NCCL(ncclCommFinalize(sub));
            T_NCCL(ncclCommDestroy(sub)); /* releases w and h after the transport closed */
        } else {
            T_NCCL(ncclCommAbort(sub));
        }
        free(hb);
        perf_mem_free(&t_mem, src);
        win_free(wbuf);
    }
    T_END();
}
END_TEST

/* Send/recv with ncclCommRegister'd buffers (GPU communicators store large
 * messages straight into a registered receive buffer -- push -- or copy them
 * straight out of a registered send buffer -- pull) next to unregistered
 * ones.  Rounds name what each rank registers: in "mix" only even ranks
 * register their receive buffer, so the two directions of every pair differ;
 * in "src" only even ranks their send buffer (pull one way, staged the
 * other); in "src+mix" every rank its send buffer and even ranks their
 * receive buffer (push one way, pull the other).  Three messages per
 * direction in one group (order per peer), at odd sizes and offsets around
 * MPCCL_FLAT_P2P_DIRECT_BYTES (4 MB); check-gpu also runs it with that set to
 * 1M, so two direct messages follow each other. */
START_TEST(test_registered_sendrecv)
{
    static const size_t sizes[3] = {(4u << 20) + 7, 4099, (1u << 20) + 16};
    static const size_t offs[3] = {0, (4u << 20) + 16, (4u << 20) + 8192 + 3};
    size_t total = offs[2] + sizes[2];
    int n = t_nranks, next = (t_rank + 1) % n, prev = (t_rank + n - 1) % n;
    /* sources 5 bytes further into their allocation than the receive buffers:
     * sender and receiver misaligned differently */
    unsigned char *src0 = perf_mem_alloc(&t_mem, total + 5), *src = src0 + 5, *dst = perf_mem_alloc(&t_mem, total);
    unsigned char *h = malloc(total);
    const char *rounds[5] = {"mix", "all", "none", "src", "src+mix"};
    for (int r = 0; r < 5 && t_failures() == 0; r++) {
        int even = t_rank % 2 == 0;
        int reg = r == 1 || ((r == 0 || r == 4) && even);
        int reg_src = (r == 3 && even) || r == 4;
        void *handle = NULL, *src_handle = NULL;
        if (reg) T_NCCL(ncclCommRegister(t_comm, dst, total, &handle));
        if (reg_src) T_NCCL(ncclCommRegister(t_comm, src0, total + 5, &src_handle));
        for (int m = 0; m < 3; m++) fill(h + offs[m], sizes[m], piece_seed(500 + r * 3 + m, t_rank, next));
        T_EXPECT(perf_mem_put(&t_mem, src, h, total) == 0, "upload");
        memset(h, 0, total);
        T_EXPECT(perf_mem_put(&t_mem, dst, h, total) == 0, "clear");
        T_NCCL(ncclGroupStart());
        for (int m = 0; m < 3; m++) {
            T_NCCL(ncclSend(src + offs[m], sizes[m], ncclUint8, next, t_comm, t_mem.stream));
            T_NCCL(ncclRecv(dst + offs[m], sizes[m], ncclUint8, prev, t_comm, t_mem.stream));
        }
        T_NCCL(ncclGroupEnd());
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync failed");
        T_EXPECT(perf_mem_get(&t_mem, h, dst, total) == 0, "download");
        for (int m = 0; m < 3; m++) {
            char what[128];
            snprintf(what, sizeof(what), "round %s (registered here: recv %d send %d) message %d of %zu bytes from rank %d",
                     rounds[r], reg, reg_src, m, sizes[m], prev);
            check(h + offs[m], sizes[m], piece_seed(500 + r * 3 + m, prev, t_rank), what);
        }
        if (reg) T_NCCL(ncclCommDeregister(t_comm, handle));
        if (reg_src) T_NCCL(ncclCommDeregister(t_comm, src_handle));
    }
    free(h);
    perf_mem_free(&t_mem, src0);
    perf_mem_free(&t_mem, dst);
    T_END();
}
END_TEST

/* Every rank puts a piece into every peer's window at offset rank * blk, for
 * several rounds (contexts rotate); a signal barrier separates rounds so no
 * piece is overwritten before its check. */
START_TEST(test_alltoall_rounds)
{
    if (!rma_supported()) {
        T_END();
        return;
    }
    int n = t_nranks, rounds = t_level >= 2 ? 12 : 6;
    size_t blk = 4099; /* odd: pieces straddle words */
    size_t wbytes = blk * (size_t)n;
    unsigned char *wbuf = win_alloc(wbytes), *src = perf_mem_alloc(&t_mem, blk * (size_t)n);
    unsigned char *h = malloc(wbytes);
    ncclWindow_t win = NULL;
    T_NCCL(ncclCommWindowRegister(t_comm, wbuf, wbytes, &win, NCCL_WIN_DEFAULT));
    void *user = NULL;
    T_NCCL(ncclWinGetUserPtr(t_comm, win, &user));
    T_EXPECT(user == wbuf, "ncclWinGetUserPtr gave %p, expected %p", user, (void *)wbuf);
    ncclWaitSignalDesc_t *d = calloc((size_t)n, sizeof(*d));
    for (int r = 0; r < rounds && t_failures() == 0; r++) {
        int ctx = r % 4;
        for (int p = 0; p < n; p++) fill(h + (size_t)p * blk, blk, piece_seed(r, t_rank, p));
        T_EXPECT(perf_mem_put(&t_mem, src, h, wbytes) == 0, "upload");
        T_NCCL(ncclGroupStart());
        for (int k = 0; k < n; k++) {
            int p = (t_rank + k) % n;
            T_NCCL(ncclPutSignal(src + (size_t)p * blk, blk, ncclUint8, p, win, (size_t)t_rank * blk, 0, ctx, 0,
                                 t_comm, t_mem.stream));
            d[k] = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = p, .sigIdx = 0, .ctx = ctx};
        }
        T_NCCL(ncclWaitSignal(n, d, t_comm, t_mem.stream));
        T_NCCL(ncclGroupEnd());
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync failed");
        T_EXPECT(perf_mem_get(&t_mem, h, wbuf, wbytes) == 0, "download");
        for (int p = 0; p < n; p++) {
            char what[64];
            snprintf(what, sizeof(what), "round %d piece from rank %d", r, p);
            check(h + (size_t)p * blk, blk, piece_seed(r, p, t_rank), what);
        }
        signal_barrier(t_comm, (ctx + 1) % 4);
    }
    T_NCCL(ncclCommWindowDeregister(t_comm, win));
    T_RESULT(ncclCommWindowDeregister(t_comm, win), ncclInvalidArgument, t_comm);
    free(d);
    free(h);
    perf_mem_free(&t_mem, src);
    win_free(wbuf);
    T_END();
}
END_TEST

/* opCnt > 1 and order per peer: K puts to the next rank, the last K/2 of them
 * rewriting the slots of the first K/2 with newer data; one wait for K
 * signals; the newer data must be there.  Then the same while waiting before
 * putting, inside a group. */
START_TEST(test_opcnt_order)
{
    if (!rma_supported()) {
        T_END();
        return;
    }
    int n = t_nranks, K = 8;
    size_t blk = 1024;
    int next = (t_rank + 1) % n, prev = (t_rank + n - 1) % n;
    unsigned char *wbuf = win_alloc_vmm(blk * (size_t)K / 2), *src = perf_mem_alloc(&t_mem, blk * (size_t)K);
    unsigned char *h = malloc(blk * (size_t)K);
    ncclWindow_t win = NULL;
    /* Registered inside a group (it then runs in a thread of ncclGroupEnd),
     * as nccl-tests registers its windows. */
    T_NCCL(ncclGroupStart());
    T_NCCL(ncclCommWindowRegister(t_comm, wbuf, blk * (size_t)K / 2, &win, NCCL_WIN_COLL_SYMMETRIC));
    T_NCCL(ncclGroupEnd());
    for (int pass = 0; pass < 2 && t_failures() == 0; pass++) {
        for (int k = 0; k < K; k++) fill(h + (size_t)k * blk, blk, piece_seed(100 + pass, t_rank, (size_t)k));
        T_EXPECT(perf_mem_put(&t_mem, src, h, blk * (size_t)K) == 0, "upload");
        ncclWaitSignalDesc_t d = {.opCnt = K, .peer = prev, .sigIdx = 0, .ctx = 1};
        T_NCCL(ncclGroupStart());
        if (pass == 1) T_NCCL(ncclWaitSignal(1, &d, t_comm, t_mem.stream)); /* deferred to ncclGroupEnd */
        for (int k = 0; k < K; k++)
            T_NCCL(ncclPutSignal(src + (size_t)k * blk, blk / 4, ncclFloat32, next, win, (size_t)(k % (K / 2)) * blk,
                                 0, 1, 0, t_comm, t_mem.stream));
        if (pass == 0) T_NCCL(ncclWaitSignal(1, &d, t_comm, t_mem.stream));
        T_NCCL(ncclGroupEnd());
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync failed");
        T_EXPECT(perf_mem_get(&t_mem, h, wbuf, blk * (size_t)K / 2) == 0, "download");
        for (int k = K / 2; k < K; k++) {
            char what[64];
            snprintf(what, sizeof(what), "pass %d put %d from rank %d", pass, k, prev);
            check(h + (size_t)(k - K / 2) * blk, blk, piece_seed(100 + pass, prev, (size_t)k), what);
        }
        signal_barrier(t_comm, 2);
    }
    T_NCCL(ncclCommWindowDeregister(t_comm, win));
    free(h);
    perf_mem_free(&t_mem, src);
    win_free_vmm(wbuf);
    T_END();
}
END_TEST

static void expect_bad(const char *call, ncclResult_t got, ncclResult_t want, const char *name, const char *value)
{
    const char *last = ncclGetLastError(t_comm);
    T_EXPECT(got == want, "%s returned %s, expected %s", call, ncclGetErrorString(got), ncclGetErrorString(want));
    T_EXPECT(contains_ci(last, name), "%s: last error \"%s\" does not name '%s'", call, last, name);
    if (value) T_EXPECT(contains_ci(last, value), "%s: last error \"%s\" does not give '%s'", call, last, value);
}
#define BAD(call, name, value) expect_bad(#call, (call), ncclInvalidArgument, name, value)

/* Every bad argument is refused, and nothing lands in any window. */
START_TEST(test_bad_input)
{
    if (!rma_supported()) {
        T_END();
        return;
    }
    int n = t_nranks, peer = (t_rank + 1) % n;
    size_t wbytes = 8192;
    cudaStream_t s = t_mem.stream;
    unsigned char *wbuf = win_alloc(wbytes), *src = perf_mem_alloc(&t_mem, wbytes);
    unsigned char *h = malloc(wbytes);
    fill(h, wbytes, piece_seed(200, t_rank, t_rank));
    T_EXPECT(perf_mem_put(&t_mem, wbuf, h, wbytes) == 0, "upload");
    T_EXPECT(perf_mem_put(&t_mem, src, h, wbytes) == 0, "upload");
    ncclWindow_t win = NULL, other = NULL, tmp = (ncclWindow_t)&tmp;
    ncclComm_t sub = NULL;
    T_NCCL(ncclCommSplit(t_comm, 0, t_rank, &sub, NULL));
    /* Signals need a window first. */
    T_RESULT(ncclSignal(peer, 0, 0, 0, sub, s), ncclInvalidUsage, sub);
    T_NCCL(ncclCommWindowRegister(t_comm, wbuf, wbytes, &win, NCCL_WIN_DEFAULT));
    T_NCCL(ncclCommWindowRegister(sub, wbuf, wbytes, &other, NCCL_WIN_DEFAULT));
    T_EXPECT(perf_mem_sync(&t_mem) == 0 && MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "barrier");

    BAD(ncclPutSignal(src, 16, ncclUint8, -1, win, 0, 0, 0, 0, t_comm, s), "peer", "-1");
    char nr[16];
    snprintf(nr, sizeof(nr), "%d", n);
    BAD(ncclPutSignal(src, 16, ncclUint8, n, win, 0, 0, 0, 0, t_comm, s), "peer", nr);
    BAD(ncclPutSignal(src, 16, ncclUint8, peer, NULL, 0, 0, 0, 0, t_comm, s), "peerWin", NULL);
    BAD(ncclPutSignal(src, 16, ncclUint8, peer, other, 0, 0, 0, 0, t_comm, s), "peerWin", NULL);
    BAD(ncclPutSignal(src, 16, ncclUint8, peer, tmp, 0, 0, 0, 0, t_comm, s), "peerWin", NULL);
    BAD(ncclPutSignal(src, 1, ncclUint8, peer, win, wbytes, 0, 0, 0, t_comm, s), "peerWinOffset", "8192");
    BAD(ncclPutSignal(src, wbytes / 4 + 1, ncclFloat32, peer, win, 0, 0, 0, 0, t_comm, s), "peerWinOffset", NULL);
    BAD(ncclPutSignal(src, 2, ncclUint64, peer, win, wbytes - 8, 0, 0, 0, t_comm, s), "peerWinOffset", NULL);
    BAD(ncclPutSignal(src, SIZE_MAX / 2, ncclFloat64, peer, win, 8, 0, 0, 0, t_comm, s), "peerWinOffset", NULL);
    BAD(ncclPutSignal(src, 16, ncclUint8, peer, win, 0, 1, 0, 0, t_comm, s), "sigIdx", "1");
    BAD(ncclPutSignal(src, 16, ncclUint8, peer, win, 0, -1, 0, 0, t_comm, s), "sigIdx", "-1");
    BAD(ncclPutSignal(src, 16, ncclUint8, peer, win, 0, 0, 4, 0, t_comm, s), "ctx", "4");
    BAD(ncclPutSignal(src, 16, ncclUint8, peer, win, 0, 0, -1, 0, t_comm, s), "ctx", "-1");
    BAD(ncclPutSignal(src, 16, ncclUint8, peer, win, 0, 0, 0, 1, t_comm, s), "flags", "0x1");
    BAD(ncclPutSignal(src, 16, (ncclDataType_t)99, peer, win, 0, 0, 0, 0, t_comm, s), "datatype", "99");
    BAD(ncclPutSignal(NULL, 16, ncclUint8, peer, win, 0, 0, 0, 0, t_comm, s), "localbuff", NULL);
    BAD(ncclPutSignal(src, 16, ncclUint8, peer, win, 0, 0, 0, 0, NULL, s), "comm", NULL);
    BAD(ncclSignal(n, 0, 0, 0, t_comm, s), "peer", nr);
    BAD(ncclSignal(peer, 2, 0, 0, t_comm, s), "sigIdx", "2");
    BAD(ncclSignal(peer, 0, 9, 0, t_comm, s), "ctx", "9");
    BAD(ncclSignal(peer, 0, 0, 4, t_comm, s), "flags", "0x4");
    ncclWaitSignalDesc_t d[2] = {{.opCnt = 1, .peer = peer, .sigIdx = 0, .ctx = 0},
                                 {.opCnt = 1, .peer = n + 3, .sigIdx = 0, .ctx = 0}};
    BAD(ncclWaitSignal(2, d, t_comm, s), "signalDescs[1].peer", NULL);
    d[1] = (ncclWaitSignalDesc_t){.opCnt = -2, .peer = peer, .sigIdx = 0, .ctx = 0};
    BAD(ncclWaitSignal(2, d, t_comm, s), "signalDescs[1].opCnt", "-2");
    d[1] = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = peer, .sigIdx = 5, .ctx = 0};
    BAD(ncclWaitSignal(2, d, t_comm, s), "signalDescs[1].sigIdx", "5");
    d[1] = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = peer, .sigIdx = 0, .ctx = 7};
    BAD(ncclWaitSignal(2, d, t_comm, s), "signalDescs[1].ctx", "7");
    BAD(ncclWaitSignal(-1, d, t_comm, s), "nDesc", "-1");
    BAD(ncclWaitSignal(1, NULL, t_comm, s), "signalDescs", NULL);
    BAD(ncclWinGetUserPtr(t_comm, other, (void **)&tmp), "win", NULL);
    BAD(ncclCommWindowDeregister(t_comm, other), "win", NULL);
    /* Collective refusals: every rank passes the same bad argument. */
    ncclWindow_t w2 = NULL;
    BAD(ncclCommWindowRegister(t_comm, wbuf + 64, 1024, &w2, NCCL_WIN_DEFAULT), "buff", "NCCL_WIN_REQUIRED_ALIGNMENT");
    BAD(ncclCommWindowRegister(t_comm, wbuf, 1024, &w2, 0x40), "winFlags", "0x40");
    BAD(ncclCommWindowRegister(t_comm, wbuf, 1024, NULL, NCCL_WIN_DEFAULT), "win", NULL);
    T_EXPECT(w2 == NULL, "a refused registration wrote its output");
    /* Sizes differ between ranks: refused for symmetric windows only. */
    if (n > 1) {
        BAD(ncclCommWindowRegister(t_comm, wbuf, 4096 * (size_t)(1 + (t_rank == 0)), &w2, NCCL_WIN_COLL_SYMMETRIC),
            "size", NULL);
        T_NCCL(ncclCommWindowRegister(t_comm, wbuf, 4096 * (size_t)(1 + (t_rank == 0)), &w2, NCCL_WIN_DEFAULT));
        if (t_rank != 0) BAD(ncclPutSignal(src, 4097, ncclUint8, 0, w2, 4096, 0, 0, 0, t_comm, s), "peerWinOffset", NULL);
        if (t_rank != 1) BAD(ncclPutSignal(src, 1, ncclUint8, 1, w2, 4096, 0, 0, 0, t_comm, s), "peerWinOffset", NULL);
        T_NCCL(ncclCommWindowDeregister(t_comm, w2));
    }
    /* Nothing was written: every window still holds its own pattern. */
    T_EXPECT(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "barrier");
    T_EXPECT(perf_mem_get(&t_mem, h, wbuf, wbytes) == 0, "download");
    check(h, wbytes, piece_seed(200, t_rank, t_rank), "window after refused calls");
    /* ... and the signal counters are untouched: a real put must still be
     * needed to satisfy a wait (its data is there when the wait returns). */
    T_EXPECT(perf_mem_get(&t_mem, h, src, wbytes) == 0, "download");
    fill(h, 256, piece_seed(201, t_rank, peer));
    T_EXPECT(perf_mem_put(&t_mem, src, h, 256) == 0, "upload");
    T_NCCL(ncclPutSignal(src, 256, ncclUint8, peer, win, 512, 0, 3, 0, t_comm, s));
    ncclWaitSignalDesc_t one = {.opCnt = 1, .peer = (t_rank + n - 1) % n, .sigIdx = 0, .ctx = 3};
    T_NCCL(ncclWaitSignal(1, &one, t_comm, s));
    T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync failed");
    T_EXPECT(perf_mem_get(&t_mem, h, wbuf, wbytes) == 0, "download");
    check(h + 512, 256, piece_seed(201, (t_rank + n - 1) % n, t_rank), "put after refused calls");
    signal_barrier(t_comm, 3);
    T_EXPECT(t_comm_works(t_comm, &t_mem) == 0, "communicator broken after refused calls");
    T_NCCL(ncclCommWindowDeregister(t_comm, win));
    T_NCCL(ncclCommDestroy(sub)); /* releases `other` */
    free(h);
    perf_mem_free(&t_mem, src);
    win_free(wbuf);
    T_END();
}
END_TEST

#ifdef T_CUDA
/* GPU communicators: a put and a wait captured into a CUDA graph and replayed;
 * each replay must move that replay's data (the wait counts in device memory,
 * nothing baked in at capture).  The put is large enough for the put kernel's
 * cooperative multi-CTA launch. */
START_TEST(test_graph_replay)
{
    if (!rma_supported()) {
        T_END();
        return;
    }
    int n = t_nranks, next = (t_rank + 1) % n, prev = (t_rank + n - 1) % n;
    size_t bytes = 3 * 65536 + 17;
    unsigned char *wbuf = win_alloc(bytes), *src = perf_mem_alloc(&t_mem, bytes), *h = malloc(bytes);
    ncclWindow_t win = NULL;
    T_NCCL(ncclCommWindowRegister(t_comm, wbuf, bytes, &win, NCCL_WIN_DEFAULT));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    T_EXPECT(cudaStreamBeginCapture(t_mem.stream, cudaStreamCaptureModeRelaxed) == cudaSuccess, "begin capture");
    T_NCCL(ncclPutSignal(src, bytes, ncclUint8, next, win, 0, 0, 2, 0, t_comm, t_mem.stream));
    ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = prev, .sigIdx = 0, .ctx = 2};
    T_NCCL(ncclWaitSignal(1, &d, t_comm, t_mem.stream));
    T_EXPECT(cudaStreamEndCapture(t_mem.stream, &graph) == cudaSuccess, "end capture");
    T_EXPECT(graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
    for (int rep = 0; rep < 3 && exec && t_failures() == 0; rep++) {
        fill(h, bytes, piece_seed(300 + rep, t_rank, next));
        T_EXPECT(perf_mem_put(&t_mem, src, h, bytes) == 0, "upload");
        T_EXPECT(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "barrier");
        T_EXPECT(cudaGraphLaunch(exec, t_mem.stream) == cudaSuccess, "graph launch");
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync failed");
        T_EXPECT(perf_mem_get(&t_mem, h, wbuf, bytes) == 0, "download");
        char what[64];
        snprintf(what, sizeof(what), "graph replay %d from rank %d", rep, prev);
        check(h, bytes, piece_seed(300 + rep, prev, t_rank), what);
        T_EXPECT(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "barrier");
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    T_NCCL(ncclCommWindowDeregister(t_comm, win));
    free(h);
    perf_mem_free(&t_mem, src);
    win_free(wbuf);
    T_END();
}
END_TEST
#endif

/* Puts of awkward sizes at misaligned source and window offsets, each to the
 * next rank: sizes around the put kernel's one-CTA limit
 * (MPCCL_PUT_ONE_CTA_BYTES, 64K) and its copy-engine limit
 * (MPCCL_PUT_KERNEL_BYTES, 4M), offsets that share no alignment.  Guard bytes either side of each piece must keep what
 * the window held. */
START_TEST(test_put_sizes)
{
    if (!rma_supported()) {
        T_END();
        return;
    }
    static const size_t sizes[] = {1, 15, 8191, 8193, (64u << 10) + 7, (1u << 20) + 5, (5u << 20) + 3};
    static const size_t offs[][2] = {{0, 0}, {3, 3}, {1, 6}, {8, 4}, {2, 0}}; /* {source, window} */
    const size_t guard = 32, most = (5u << 20) + 3, wbytes = most + 2 * guard + 16;
    int n = t_nranks, next = (t_rank + 1) % n, prev = (t_rank + n - 1) % n;
    unsigned char *wbuf = win_alloc(wbytes), *src = perf_mem_alloc(&t_mem, most + 16), *h = malloc(wbytes);
    ncclWindow_t win = NULL;
    T_NCCL(ncclCommWindowRegister(t_comm, wbuf, wbytes, &win, NCCL_WIN_DEFAULT));
    int round = 0;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
        for (size_t oi = 0; oi < sizeof(offs) / sizeof(offs[0]) && t_failures() == 0; oi++, round++) {
            size_t bytes = sizes[si], so = offs[oi][0], wo = offs[oi][1] + guard;
            fill(h, wbytes, piece_seed(400 + round, -1, t_rank)); /* the window before the put */
            T_EXPECT(perf_mem_put(&t_mem, wbuf, h, wbytes) == 0, "upload window");
            fill(h, bytes, piece_seed(400 + round, t_rank, next));
            T_EXPECT(perf_mem_put(&t_mem, src + so, h, bytes) == 0, "upload source");
            signal_barrier(t_comm, 3); /* every window is filled before any put lands */
            T_NCCL(ncclPutSignal(src + so, bytes, ncclUint8, next, win, wo, 0, 0, 0, t_comm, t_mem.stream));
            ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = prev, .sigIdx = 0, .ctx = 0};
            T_NCCL(ncclWaitSignal(1, &d, t_comm, t_mem.stream));
            T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync failed");
            T_EXPECT(perf_mem_get(&t_mem, h, wbuf, wbytes) == 0, "download");
            char what[96];
            snprintf(what, sizeof(what), "put of %zu bytes from offset %zu to window offset %zu from rank %d", bytes,
                     so, wo, prev);
            if (check(h + wo, bytes, piece_seed(400 + round, prev, t_rank), what)) continue;
            unsigned char *before = malloc(wbytes);
            fill(before, wbytes, piece_seed(400 + round, -1, t_rank));
            T_EXPECT(memcmp(h + wo - guard, before + wo - guard, guard) == 0 &&
                         memcmp(h + wo + bytes, before + wo + bytes, guard) == 0,
                     "%s: bytes next to the piece changed", what);
            free(before);
        }
    signal_barrier(t_comm, 3);
    T_NCCL(ncclCommWindowDeregister(t_comm, win));
    free(h);
    perf_mem_free(&t_mem, src);
    win_free(wbuf);
    T_END();
}
END_TEST

static Suite *onesided_suite(void)
{
    Suite *s = suite_create("onesided");
    TCase *tc = t_tcase("onesided");
    tcase_add_test(tc, test_properties);
    tcase_add_test(tc, test_register);
    tcase_add_test(tc, test_release_with_comm);
    tcase_add_test(tc, test_registered_sendrecv);
    tcase_add_test(tc, test_alltoall_rounds);
    tcase_add_test(tc, test_opcnt_order);
    tcase_add_test(tc, test_put_sizes);
    tcase_add_test(tc, test_bad_input);
#ifdef T_CUDA
    if (t_mem.gpu) tcase_add_test(tc, test_graph_replay); /* GPU communicators only */
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) { return t_main(argc, argv, onesided_suite); }
