/* The NCCL functions mpccl-perf calls, as a table of pointers: filled from the
 * library the program is linked with (mpccl), or from another libnccl.so.2
 * loaded privately for --compare, so that the same benchmark code drives both.
 *
 * This header only declares; perf_coll.c needs nothing but PERF_NCCL_LINKED,
 * so the MPI test suites that share perf_coll.c link without perf_lib.c. */
#ifndef PERF_LIB_H
#define PERF_LIB_H

#include "nccl.h"

/* Without these the benchmark cannot run at all. */
#define PERF_NCCL_REQUIRED(X)                                                                     \
    X(GetErrorString) X(GetUniqueId) X(CommInitRank) X(CommDestroy) X(GroupStart) X(GroupEnd)
/* Missing in an older library: the collectives needing them are skipped. */
#define PERF_NCCL_OPTIONAL(X)                                                                     \
    X(GetLastError) X(GetVersion) X(CommCuDevice) X(AllReduce) X(ReduceScatter) X(AllGather)      \
    X(AlltoAll) X(Broadcast) X(Bcast) X(Reduce) X(Gather) X(Scatter) X(Send) X(Recv)              \
    X(RedOpCreatePreMulSum) X(RedOpDestroy) X(MemAlloc) X(MemFree) X(CommWindowRegister)                \
    X(CommWindowDeregister) X(CommRegister) X(CommDeregister)
#define PERF_NCCL_FUNCS(X) PERF_NCCL_REQUIRED(X) PERF_NCCL_OPTIONAL(X)

/* Member F has the type of a pointer to ncclF, taken from nccl.h (same ABI). */
#define PERF_NCCL_FIELD_(f) __typeof__(nccl##f) *f;
typedef struct perf_nccl {
    PERF_NCCL_FUNCS(PERF_NCCL_FIELD_)
    const char *label; /* "mpccl", "other": the lib column of the CSV */
    char path[512];    /* the file the functions come from */
    const char *how;   /* how it was loaded */
    void *handle;      /* dlopen handle; NULL for the linked library */
    int version;       /* ncclGetVersion, 0 if unknown */
} perf_nccl_t;

/* Initializer of the table of the linked library (path etc. left empty). */
#define PERF_NCCL_LINK_(f) .f = nccl##f,
#define PERF_NCCL_LINKED { PERF_NCCL_FUNCS(PERF_NCCL_LINK_) }

/* The linked library's table, with its file found by dladdr. */
void perf_lib_linked(perf_nccl_t *t);
/* Loads path privately: dlopen(RTLD_LOCAL | RTLD_DEEPBIND), and if that returns
 * the already loaded linked library (same file), dlmopen(LM_ID_NEWLM) so the
 * second copy is a distinct instance.  Built with AddressSanitizer: without
 * RTLD_DEEPBIND (t->how says so), and the linked file itself is refused.
 * 0 on success, else err says why. */
int perf_lib_open(perf_nccl_t *t, const char *path, char *err, size_t errlen);
/* 1 if t and the linked library are distinct instances (ncclAllReduce and
 * ncclGetUniqueId at different addresses). */
int perf_lib_distinct(const perf_nccl_t *t);
/* 1 if t has every function collective coll (a perf_coll_t) needs. */
int perf_lib_supports(const perf_nccl_t *t, int coll);

#endif
