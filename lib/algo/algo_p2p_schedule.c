/* Cutting a large send/recv group into launches that cannot wait on each
 * other (algo_p2p_schedule.h). */
#include <stdlib.h>

#include "algo/algo_p2p_schedule.h"

typedef struct {
    uint64_t key;
    int index;
} keyed_t;

static int by_key(const void *a, const void *b)
{
    const keyed_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->index - y->index; /* program order inside a launch */
}

int mpccl_p2p_schedule(int rank, int nranks, const mpccl_p2p_call_ref_t *calls, int n, int max_calls, int *order,
                       uint64_t *key)
{
    if (n <= 0) return 0;
    int pairs = max_calls / 2; /* a launch: per_delta * per_ordinal channels each way */
    int per_delta = nranks < pairs ? nranks : pairs;
    int per_ordinal = pairs / per_delta;
    int nblocks = (nranks + per_delta - 1) / per_delta;
    /* k of each call: calls before it on the same (peer, direction) */
    int *seen = calloc((size_t)nranks * 2, sizeof(int));
    keyed_t *kv = malloc((size_t)n * sizeof(*kv));
    if (!seen || !kv) {
        free(seen);
        free(kv);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int p = calls[i].peer, s = calls[i].send ? 1 : 0;
        int delta = s ? ((p - rank) % nranks + nranks) % nranks : ((rank - p) % nranks + nranks) % nranks;
        uint64_t k = (uint64_t)seen[2 * p + s]++;
        kv[i].key = (k / (uint64_t)per_ordinal) * (uint64_t)nblocks + (uint64_t)(delta / per_delta);
        kv[i].index = i;
    }
    qsort(kv, (size_t)n, sizeof(*kv), by_key);
    int launches = 0;
    for (int i = 0; i < n; i++) {
        order[i] = kv[i].index;
        key[i] = kv[i].key;
        if (i == 0 || kv[i].key != kv[i - 1].key) launches++;
    }
    free(seen);
    free(kv);
    return launches;
}
