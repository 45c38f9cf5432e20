/* Function tables of the linked and of a privately loaded NCCL: see perf_lib.h. */
#define _GNU_SOURCE /* dladdr, dlmopen, RTLD_DEEPBIND */
#include "perf_lib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "perf_coll.h"

/* AddressSanitizer's dlopen refuses RTLD_DEEPBIND (it would bind the library's
 * malloc past the sanitizer's). */
#if defined(__SANITIZE_ADDRESS__)
#define PERF_LIB_NO_DEEPBIND 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PERF_LIB_NO_DEEPBIND 1
#endif
#endif
#ifndef PERF_LIB_NO_DEEPBIND
#define PERF_LIB_NO_DEEPBIND 0
#endif

void perf_lib_linked(perf_nccl_t *t)
{
    static const perf_nccl_t linked = PERF_NCCL_LINKED;
    Dl_info info;
    *t = linked;
    t->label = "mpccl";
    t->how = "linked";
    snprintf(t->path, sizeof(t->path), "%s",
             dladdr((void *)t->GetUniqueId, &info) && info.dli_fname ? info.dli_fname : "?");
    if (t->GetVersion == NULL || t->GetVersion(&t->version) != ncclSuccess) t->version = 0;
}

/* Fills t from handle h; 0 when every required function is there. */
static int resolve(perf_nccl_t *t, void *h, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    t->handle = h;
#define PERF_SYM_(f) t->f = (__typeof__(nccl##f) *)dlsym(h, "nccl" #f);
    PERF_NCCL_FUNCS(PERF_SYM_)
#undef PERF_SYM_
#define PERF_NEED_(f)                                                                            \
    if (t->f == NULL) {                                                                           \
        snprintf(err, errlen, "no symbol nccl%s in the library", #f);                            \
        return -1;                                                                                \
    }
    PERF_NCCL_REQUIRED(PERF_NEED_)
#undef PERF_NEED_
    return 0;
}

int perf_lib_distinct(const perf_nccl_t *t)
{
    return (void *)t->GetUniqueId != (void *)ncclGetUniqueId && (void *)t->GroupStart != (void *)ncclGroupStart;
}

int perf_lib_open(perf_nccl_t *t, const char *path, char *err, size_t errlen)
{
    /* DEEPBIND: the library's own calls to nccl* (and to its private helpers)
     * bind inside it, never to the same names in mpccl, which the program links. */
#if PERF_LIB_NO_DEEPBIND
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *how = "dlopen(RTLD_NOW|RTLD_LOCAL) (no RTLD_DEEPBIND: AddressSanitizer does not support it)";
#else
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    const char *how = "dlopen(RTLD_NOW|RTLD_LOCAL|RTLD_DEEPBIND)";
#endif
    if (h == NULL) {
        snprintf(err, errlen, "dlopen %s: %s", path, dlerror());
        return -1;
    }
    if (dlsym(h, "ncclGetUniqueId") == (void *)ncclGetUniqueId) {
        /* The loader matched an object already loaded (the same file as the
         * linked mpccl): only a new link-map namespace gives a second copy. */
        dlclose(h);
#if PERF_LIB_NO_DEEPBIND
        /* A new namespace would load a second sanitizer runtime. */
        snprintf(err, errlen,
                 "%s is the linked library: a second copy of it needs dlmopen, which AddressSanitizer does "
                 "not support; pass a copy of the file instead", path);
        return -1;
#endif
        h = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
        how = "dlmopen(LM_ID_NEWLM, RTLD_NOW|RTLD_LOCAL) (the file is the linked library)";
        if (h == NULL) {
            snprintf(err, errlen, "dlmopen %s: %s", path, dlerror());
            return -1;
        }
    }
    if (resolve(t, h, err, errlen)) return -1;
    t->label = "other";
    t->how = how;
    snprintf(t->path, sizeof(t->path), "%s", path);
    if (t->GetVersion == NULL || t->GetVersion(&t->version) != ncclSuccess) t->version = 0;
    return 0;
}

int perf_lib_supports(const perf_nccl_t *t, int coll)
{
    switch ((perf_coll_t)coll) {
    case PERF_ALLREDUCE: return t->AllReduce != NULL;
    case PERF_REDUCE_SCATTER: return t->ReduceScatter != NULL;
    case PERF_ALL_GATHER: return t->AllGather != NULL;
    case PERF_ALLTOALL: return t->AlltoAll != NULL;
    case PERF_BROADCAST: return t->Broadcast != NULL;
    case PERF_REDUCE: return t->Reduce != NULL;
    case PERF_GATHER: return t->Gather != NULL;
    case PERF_SCATTER: return t->Scatter != NULL;
    case PERF_SENDRECV: return t->Send != NULL && t->Recv != NULL;
    case PERF_BCAST: return t->Bcast != NULL;
    default: return 0;
    }
}
