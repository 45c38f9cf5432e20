/* Flat launch geometry (gpu_flat_geometry.h). */
#include "gpu/gpu_flat_geometry.h"

/* About cta_bytes per CTA, at most max_ctas, each CTA's share within its
 * area of the slice (or of the LL area, two bytes per data byte).  LL, where
 * latency is all: a quarter of cta_bytes per CTA up to two such CTAs, an
 * eighth beyond (more SMs, half the threads each: 0.1-0.2 us less at
 * 32-256 KB inside CUDA graphs on 2 x H200; at 4 KB two half CTAs were
 * 0.1 us slower than one). */
void mpccl_flat_geometry(const mpccl_flat_geom_params_t *p, int mode, uint64_t count, size_t es,
                         mpccl_flat_geom_t *out)
{
    uint64_t n = (uint64_t)p->nranks;
    int two = mode == MPCCL_FLAT_ALLREDUCE_2;
    uint64_t block = (two ? (count + n - 1) / n : count) * es;
    int ll = !two && p->ll_max && block <= p->ll_max;
    uint64_t per_cta = p->cta_bytes;
    if (ll) per_cta = block > 2 * ((p->cta_bytes + 3) / 4) ? (p->cta_bytes + 7) / 8 : (p->cta_bytes + 3) / 4;
    uint64_t c = (block + per_cta - 1) / per_cta;
    if (c < 1) c = 1;
    if (c > (uint64_t)p->max_ctas) c = (uint64_t)p->max_ctas;
    uint64_t want = ((block + c - 1) / c + 15) / 16 * 16;
    if (want < 16) want = 16;
    if (ll) {
        out->ll_bytes = mpccl_flat_ll_area(p->ll_max);
        out->stride = (uint32_t)(2 * want);
        out->sub_elems = (uint32_t)(want / es);
    } else {
        uint64_t area = two ? p->slice_bytes / 2 : p->slice_bytes;
        uint64_t st = area / c / 16 * 16;
        out->ll_bytes = 0;
        out->stride = (uint32_t)st;
        out->sub_elems = (uint32_t)((want < st ? want : st) / es);
    }
    out->ctas = (uint32_t)c;
}

uint32_t mpccl_flat_win_geometry(const mpccl_flat_geom_params_t *p, int mode, uint64_t count, size_t es,
                                 uint64_t *sub)
{
    uint64_t n = (uint64_t)p->nranks, vec = 16 / es;
    uint64_t block = mode == MPCCL_FLAT_ALLREDUCE_2 ? (count + n - 1) / n : count;
    uint64_t c = (block * es + p->cta_bytes - 1) / p->cta_bytes;
    if (c > (uint64_t)p->max_ctas) c = (uint64_t)p->max_ctas;
    if (c < 1) c = 1;
    *sub = ((block + c - 1) / c + vec - 1) / vec * vec;
    return (uint32_t)((block + *sub - 1) / *sub);
}

static uint64_t p2p_max_ctas(const mpccl_flat_geom_params_t *p)
{
    /* Sending and receiving CTAs are separate (flat_p2p.cu): half of
     * max_ctas each keeps the grid within max_ctas, all resident at once. */
    uint64_t want = p->p2p_ctas ? p->p2p_ctas : 64, half = p->max_ctas > 1 ? p->max_ctas / 2 : 1;
    return half < want ? half : want;
}

uint32_t mpccl_flat_p2p_stride(const mpccl_flat_geom_params_t *p)
{
    return (uint32_t)(p->p2p_slice / p2p_max_ctas(p) / 16 * 16);
}

void mpccl_flat_p2p_geometry(const mpccl_flat_geom_params_t *p, uint64_t bytes, uint32_t *ctas, uint32_t *sub)
{
    uint64_t cmax = p2p_max_ctas(p), stride = mpccl_flat_p2p_stride(p);
    uint64_t c = (bytes + p->cta_bytes - 1) / p->cta_bytes;
    if (c < 1) c = 1;
    if (c > cmax) c = cmax;
    uint64_t s = ((bytes + c - 1) / c + 15) / 16 * 16;
    if (s < 16) s = 16;
    *ctas = (uint32_t)c;
    *sub = (uint32_t)(s < stride ? s : stride);
}

void mpccl_flat_p2p_ll_geometry(const mpccl_flat_geom_params_t *p, uint64_t bytes, uint32_t *ctas, uint32_t *sub)
{
    /* As the collectives' LL: a quarter of cta_bytes per CTA (latency is all),
     * at most a lane of the LL part per chunk. */
    uint64_t cmax = p2p_max_ctas(p), per = (p->cta_bytes + 3) / 4;
    if (cmax > MPCCL_FLAT_P2P_LL_LANES) cmax = MPCCL_FLAT_P2P_LL_LANES;
    if (per > MPCCL_FLAT_P2P_LL_LANE) per = MPCCL_FLAT_P2P_LL_LANE;
    uint64_t c = (bytes + per - 1) / per;
    if (c < 1) c = 1;
    if (c > cmax) c = cmax;
    uint64_t s = ((bytes + c - 1) / c + 15) / 16 * 16;
    if (s < 16) s = 16;
    if (s > MPCCL_FLAT_P2P_LL_LANE) s = MPCCL_FLAT_P2P_LL_LANE;
    *ctas = (uint32_t)c;
    *sub = (uint32_t)s;
}
