/* How a hierarchical collective (gpu_hier.c) cuts a call into pipeline
 * chunks: pure arithmetic, built in every build for its unit test. */
#ifndef MPCCL_GPU_HIER_GEOMETRY_H
#define MPCCL_GPU_HIER_GEOMETRY_H

#include <stdint.h>

/* Chunk c of a call whose phases split elements over the node's G ranks
 * (allreduce, broadcast, reduce): elements [off, off + len) of the buffer;
 * each local rank owns `share` of them (at off + local * share) and the last
 * `tail` (< G, last chunk only) go whole through every phase. */
typedef struct mpccl_hier_slice {
    uint64_t off, len, share, tail;
} mpccl_hier_slice_t;

/* Elements per chunk for elements of esize bytes, G ranks a node,
 * chunk_bytes per rank between nodes: a multiple of G, at least G. */
uint64_t mpccl_hier_chunk_elems(uint64_t esize, int G, uint64_t chunk_bytes);
/* Chunks of count elements of chunk elements each (0 for count 0). */
uint64_t mpccl_hier_nchunks(uint64_t count, uint64_t chunk);
mpccl_hier_slice_t mpccl_hier_slice(uint64_t count, uint64_t chunk, int G, uint64_t c);

/* Allgather and reduce_scatter cut every rank's block of S elements into
 * pieces of at most this many elements (N nodes: one piece of each node's
 * rank crosses between nodes per chunk). */
uint64_t mpccl_hier_piece_elems(uint64_t S, uint64_t esize, int N, uint64_t chunk_bytes);

/* The parent ranks of local index l on nodes 0..N-1, from rank_of (node-major,
 * comm_hier.h), are evenly spaced: rank_of[n*G + l] = first + n * stride.
 * Returns 1 and the stride if so (the reorder is then one 2-D copy). */
int mpccl_hier_rail_stride(const int *rank_of, int N, int G, int l, int64_t *stride);

#endif
