/* One collective call as mpccl-perf and the MPI tests issue it: buffer layout
 * (nccl-tests' conventions, including in-place), launch, input preparation and
 * result check against perf_check's reference.  Public API only. */
#ifndef PERF_COLL_H
#define PERF_COLL_H

#include <stddef.h>
#include "nccl.h"
#include "perf_check.h"
#include "perf_lib.h"
#include "perf_mem.h"

typedef enum {
    PERF_ALLREDUCE = 0,
    PERF_REDUCE_SCATTER,
    PERF_ALL_GATHER,
    PERF_ALLTOALL,
    PERF_BROADCAST,
    PERF_REDUCE,
    PERF_GATHER,
    PERF_SCATTER,
    PERF_SENDRECV, /* ring: send to rank+1, receive from rank-1, in one group */
    PERF_BCAST,    /* ncclBcast: in place by definition */
    PERF_NUM_COLLS
} perf_coll_t;

const char *perf_coll_name(perf_coll_t c); /* nccl-tests names: "all_reduce" -> "allreduce" etc. */
int perf_coll_parse(const char *s, perf_coll_t *c);
int perf_coll_reduces(perf_coll_t c);      /* takes a reduction op */
int perf_coll_rooted(perf_coll_t c);
int perf_coll_has_inplace(perf_coll_t c);  /* sendrecv: no (one buffer both ways races) */
/* busbw = algbw * factor (nccl-tests' definitions, see perf_coll.c). */
double perf_coll_bus_factor(perf_coll_t c, int nranks);
/* For a test size of `total` elements: the count argument of the call and the
 * element counts of the send and receive buffers (nccl-tests' conventions). */
void perf_coll_counts(perf_coll_t c, int nranks, size_t total, size_t *count, size_t *sendcount,
                      size_t *recvcount);

typedef struct perf_call {
    perf_coll_t coll;
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
    size_t count; /* the call's count argument */
    int inplace;
    ncclComm_t comm;
    int rank, nranks;
    cudaStream_t stream;
    /* Allocated by the caller, each of max(sendcount, recvcount) elements. */
    void *sendbase, *recvbase;
    const perf_nccl_t *lib; /* the library that runs the call; NULL: the linked one */
} perf_call_t;

/* The send and receive pointers of the call (in place: inside one buffer). */
void perf_call_ptrs(const perf_call_t *c, void **send, void **recv);
ncclResult_t perf_call_launch(const perf_call_t *c);
/* Writes this rank's input (d) where the call reads it and a poison pattern over
 * the rest of the output; host is scratch of max(send, recv) elements.  exact:
 * every element as perf_call_check expects it; 0: perf_fill_timing's repeated
 * block (the timed loops).  0: ok. */
int perf_call_prepare(const perf_call_t *c, const perf_data_t *d, perf_mem_t *m, void *host, int exact);
/* After the call completed: wrong elements of the output (and, out of place, of
 * the input, which must be left untouched); the first is described in msg. */
size_t perf_call_check(const perf_call_t *c, const perf_data_t *d, perf_mem_t *m, void *host,
                       char *msg, size_t msglen);

#endif
