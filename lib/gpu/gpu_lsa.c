/* The LSA team of a GPU communicator, agreed at setup (gpu_lsa.h): the
 * rule itself is pure arithmetic in gpu_lsa_team.c. */
#include <stdlib.h>

#include "gpu/gpu_lsa.h"
#include "gpu/gpu_lsa_team.h"
#include "util/log.h"

mpccl_status_t mpccl_lsa_setup(ncclComm_t comm, const mpccl_dev_link_t *links)
{
    int n = comm->nranks, me = comm->rank;
    int32_t *runs = calloc((size_t)n * 2, sizeof(int32_t));
    unsigned char *reach = calloc((size_t)n, 1);
    if (!runs || !reach) {
        free(runs);
        free(reach);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the LSA team");
    }
    for (int r = 0; r < n; r++) reach[r] = links[r].kind == MPCCL_LINK_NVLINK;
    mpccl_lsa_candidate(n, me, reach, &runs[2 * me], &runs[2 * me + 1]);
    mpccl_status_t st = mpccl_bootstrap_allgather(&comm->bs, runs, 2 * sizeof(int32_t));
    if (st == MPCCL_OK) {
        mpccl_lsa_pick(n, me, runs, &comm->lsa_first, &comm->lsa_size);
        comm->lsa_uniform = 1; /* every rank's team from the same runs: the same answer everywhere */
        for (int r = 0; r < n; r++) {
            int f, sz;
            mpccl_lsa_pick(n, r, runs, &f, &sz);
            if (sz != comm->lsa_size) comm->lsa_uniform = 0;
        }
    }
    free(runs);
    free(reach);
    MPCCL_CHECK(st);
    MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx: LSA team of rank %d is ranks %d..%d", (unsigned long long)comm->id, me,
               comm->lsa_first, comm->lsa_first + comm->lsa_size - 1);
    return MPCCL_OK;
}
