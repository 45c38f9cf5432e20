/* Hierarchical GPU communicators: a GPU communicator that spans several nodes,
 * with the same number (>= 2) of ranks on each, keeps two children made at
 * setup -- its node's ranks (the flat kernels over NVLink) and its rail, the
 * ranks with the same local index on every node (one per node, over UCX) --
 * so that the GPU executor can run allreduce, allgather, reduce_scatter,
 * broadcast and reduce as phases inside the node around a phase between
 * nodes (lib/gpu/gpu_hier.c).  The children belong to the parent: they are
 * stopped, aborted, finalized and released with it. */
#ifndef MPCCL_COMM_HIER_H
#define MPCCL_COMM_HIER_H

#include "core/comm.h"

typedef struct mpccl_hier {
    ncclComm_t node;  /* this rank's node; its rank there is the local rank */
    ncclComm_t rail;  /* one rank per node, same local rank; its rank there is the node index */
    int nnodes, node_size;
    int *rank_of;     /* [node * node_size + local]: the parent rank */
    int *node_ranks, *rail_ranks; /* the children's parent_ranks */
    /* Settings every rank agreed on at setup (a rank with other values would
     * run other phases and wait forever): the largest MPCCL_HIER_MIN_BYTES,
     * the smallest MPCCL_HIER_CHUNK_BYTES. */
    uint64_t min_bytes, chunk_bytes;
} mpccl_hier_t;

/* Whether comm's topology allows children: a GPU communicator over two or
 * more nodes with the same number (>= 2) of ranks on each (pure: the same
 * answer on every rank). */
int mpccl_comm_hier_possible(ncclComm_t comm);
/* Collective over comm, after its executor's setup: makes the children where
 * possible and every rank's MPCCL_HIER allows it (comm->hier stays NULL
 * otherwise). */
mpccl_status_t mpccl_comm_hier_setup(ncclComm_t comm);
/* A failure or an abort of comm: the children's in-flight work stops too. */
void mpccl_comm_hier_stop(ncclComm_t comm);
/* ncclCommFinalize of comm: the children first. */
void mpccl_comm_hier_finalize(ncclComm_t comm);
/* Releases the children (force: as an abort, after their kernels were told
 * to stop and given a bounded time to exit). */
void mpccl_comm_hier_release(ncclComm_t comm, int force);
/* ncclCommGetAsyncError: a child's error is the parent's. */
void mpccl_comm_hier_poll_error(ncclComm_t comm);

#endif
