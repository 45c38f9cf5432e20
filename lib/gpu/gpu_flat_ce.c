/* Collectives on symmetric windows moved by the copy engines (gpu_flat_ce.h). */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <string.h>

#include <cuda_runtime_api.h>

#include "nccl.h"
#include "gpu/gpu_flat_ce.h"
#include "util/status.h"

/* CTAs of the kernel that copies the own block beside the copy engines */
#define CE_SELF_CTAS 32

typedef struct {
    char *dst;
    const char *src;
    uint64_t bytes;
    int local; /* the own block: SMs copy it (a copy engine beside the NVLink copies slowed them) */
} ce_copy_t;

int mpccl_flat_ce_takes(int mode, int nranks, uint64_t bytes_per_rank, uint64_t ce_bytes)
{
    /* 2 ranks only: on 4 GPUs copies to three peers at once moved 218 GB/s
     * busbw (1 GB allgather, H200) where the SM kernel moves 349 */
    if (nranks != 2 || ce_bytes == 0 || bytes_per_rank < ce_bytes) return 0;
    return mode == MPCCL_FLAT_ALLGATHER || mode == MPCCL_FLAT_ALLTOALL || mode == MPCCL_FLAT_BROADCAST;
}

static void add(ce_copy_t *c, int *n, char *dst, const char *src, uint64_t bytes, int local)
{
    if (dst == src || bytes == 0) return;
    c[*n].dst = dst;
    c[*n].src = src;
    c[*n].bytes = bytes;
    c[*n].local = local;
    (*n)++;
}

/* The copies of one call, the peers' first (from the next rank on, so the
 * ranks start on different links), the own block last. */
static int plan_copies(const mpccl_flat_win_args_t *a, uint64_t esz, ce_copy_t *c)
{
    int n = 0, N = a->nranks, me = a->rank;
    uint64_t B = a->count * esz, mine = (uint64_t)me * B;
    switch (a->mode) {
    case MPCCL_FLAT_ALLGATHER:
        for (int k = 1; k <= N; k++) add(c, &n, a->out[(me + k) % N] + mine, a->in[me], B, k == N);
        break;
    case MPCCL_FLAT_ALLTOALL:
        for (int k = 1; k <= N; k++) {
            int j = (me + k) % N;
            add(c, &n, a->out[j] + mine, a->in[me] + (uint64_t)j * B, B, k == N);
        }
        break;
    case MPCCL_FLAT_BROADCAST:
        if (me != a->root) break;
        for (int k = 1; k <= N; k++) add(c, &n, a->out[(me + k) % N], a->in[me], B, k == N);
        break;
    default: break;
    }
    return n;
}

static mpccl_status_t make_objects(mpccl_flat_ce_t *ce)
{
    MPCCL_CUDA_CHECK(cudaEventCreateWithFlags(&ce->fork, cudaEventDisableTiming));
    for (int i = 0; i < MPCCL_FLAT_CE_STREAMS; i++) {
        MPCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&ce->side[i], cudaStreamNonBlocking));
        MPCCL_CUDA_CHECK(cudaEventCreateWithFlags(&ce->join[i], cudaEventDisableTiming));
    }
    ce->ready = 1;
    return MPCCL_OK;
}

/* The one-CTA barrier kernel of the given window mode (enter or exit). */
static mpccl_status_t barrier(const mpccl_flat_win_args_t *a, int mode, cudaStream_t stream)
{
    mpccl_flat_win_args_t b = *a;
    b.mode = mode;
    b.moved = a->mode;
    b.op = 0;
    b.sub = 1;
    return mpccl_flat_win_launch(&b, 1, stream);
}

mpccl_status_t mpccl_flat_ce_launch(mpccl_flat_ce_t *ce, const mpccl_flat_win_args_t *a, uint64_t esz,
                                    cudaStream_t stream)
{
    ce_copy_t c[MPCCL_FLAT_MAX_RANKS];
    int n = plan_copies(a, esz, c);
    if (n > 1 && !ce->ready) MPCCL_CHECK(make_objects(ce));
    /* every peer's kernel has started: its stream is done with its window */
    MPCCL_CHECK(barrier(a, MPCCL_FLAT_WIN_ENTER, stream));
    int sides = n - 1 < MPCCL_FLAT_CE_STREAMS ? n - 1 : MPCCL_FLAT_CE_STREAMS;
    if (sides > 0) {
        MPCCL_CUDA_CHECK(cudaEventRecord(ce->fork, stream));
        for (int s = 0; s < sides; s++) MPCCL_CUDA_CHECK(cudaStreamWaitEvent(ce->side[s], ce->fork, 0));
    }
    for (int i = 0; i < n; i++) {
        cudaStream_t s = i == 0 ? stream : ce->side[(i - 1) % MPCCL_FLAT_CE_STREAMS];
        if (c[i].local) MPCCL_CHECK(mpccl_flat_copy_launch(c[i].dst, c[i].src, c[i].bytes, CE_SELF_CTAS, s));
        else MPCCL_CUDA_CHECK(cudaMemcpyAsync(c[i].dst, c[i].src, c[i].bytes, cudaMemcpyDeviceToDevice, s));
    }
    for (int s = 0; s < sides; s++) {
        MPCCL_CUDA_CHECK(cudaEventRecord(ce->join[s], ce->side[s]));
        MPCCL_CUDA_CHECK(cudaStreamWaitEvent(stream, ce->join[s], 0));
    }
    /* my copies are done; wait until the peers' into my window are too */
    return barrier(a, MPCCL_FLAT_WIN_EXIT, stream);
}

void mpccl_flat_ce_destroy(mpccl_flat_ce_t *ce)
{
    if (!ce || !ce->ready) return;
    cudaEventDestroy(ce->fork);
    for (int i = 0; i < MPCCL_FLAT_CE_STREAMS; i++) {
        cudaStreamDestroy(ce->side[i]);
        cudaEventDestroy(ce->join[i]);
    }
    memset(ce, 0, sizeof(*ce));
}
#endif
