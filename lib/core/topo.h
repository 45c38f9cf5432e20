/* Topology: which ranks share a node.  The host identity is the hostname plus the
 * kernel's boot id, or MPCCL_HOSTID / NCCL_HOSTID when set (tests simulate nodes
 * on one machine that way). */
#ifndef MPCCL_TOPO_H
#define MPCCL_TOPO_H

#include "bootstrap/bootstrap.h"
#include "algo/algo_plan.h"

/* Collective over bs: fills topo (arrays owned by topo). */
mpccl_status_t mpccl_topo_build(mpccl_bootstrap_t *bs, mpccl_topo_t *topo);
/* Builds topo from per-rank host hashes (pure: used by the above and the tests). */
mpccl_status_t mpccl_topo_from_hashes(const uint64_t *hashes, int nranks, int rank, mpccl_topo_t *topo);
void mpccl_topo_free(mpccl_topo_t *topo);
uint64_t mpccl_topo_host_hash(void);

#endif
