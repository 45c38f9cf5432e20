/* Agreeing on the outcome of a collective setup step (bootstrap.h). */
#include <stdlib.h>

#include "bootstrap/bootstrap.h"

mpccl_status_t mpccl_bootstrap_agree(mpccl_bootstrap_t *bs, mpccl_status_t mine, int peer_code, const char *what)
{
    int32_t *all = calloc((size_t)bs->nranks, sizeof(int32_t));
    if (!all) return mine != MPCCL_OK ? mine : mpccl_fail(MPCCL_ERR_SYSTEM, "%s: out of memory agreeing on the result", what);
    all[bs->rank] = (int32_t)mine;
    mpccl_status_t st = mpccl_bootstrap_allgather(bs, all, sizeof(int32_t));
    for (int r = 0; st == MPCCL_OK && mine == MPCCL_OK && r < bs->nranks; r++)
        if (all[r] != MPCCL_OK)
            st = mpccl_fail(peer_code ? (mpccl_status_t)all[r] : MPCCL_ERR_REMOTE,
                            "%s: rank %d failed (%s; see that rank's log)", what, r,
                            mpccl_status_name((mpccl_status_t)all[r]));
    free(all);
    return mine != MPCCL_OK ? mine : st;
}
