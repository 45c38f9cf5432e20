/* Chunks and pieces of hierarchical collectives (gpu_hier_geometry.h). */
#include "gpu/gpu_hier_geometry.h"

uint64_t mpccl_hier_chunk_elems(uint64_t esize, int G, uint64_t chunk_bytes)
{
    uint64_t share = chunk_bytes / (esize ? esize : 1);
    return (share ? share : 1) * (uint64_t)G;
}

uint64_t mpccl_hier_nchunks(uint64_t count, uint64_t chunk)
{
    return chunk ? (count + chunk - 1) / chunk : 0;
}

mpccl_hier_slice_t mpccl_hier_slice(uint64_t count, uint64_t chunk, int G, uint64_t c)
{
    mpccl_hier_slice_t s;
    s.off = c * chunk;
    s.len = s.off >= count ? 0 : (count - s.off < chunk ? count - s.off : chunk);
    s.share = s.len / (uint64_t)G;
    s.tail = s.len - s.share * (uint64_t)G;
    return s;
}

uint64_t mpccl_hier_piece_elems(uint64_t S, uint64_t esize, int N, uint64_t chunk_bytes)
{
    uint64_t p = chunk_bytes / (esize ? esize : 1) / (uint64_t)(N > 0 ? N : 1);
    if (p == 0) p = 1;
    return p < S ? p : (S ? S : 1);
}

int mpccl_hier_rail_stride(const int *rank_of, int N, int G, int l, int64_t *stride)
{
    int64_t d = N > 1 ? (int64_t)rank_of[G + l] - rank_of[l] : 0;
    for (int n = 1; n < N; n++)
        if ((int64_t)rank_of[n * G + l] - rank_of[(n - 1) * G + l] != d) return 0;
    if (d <= 0 && N > 1) return 0;
    *stride = d;
    return 1;
}
