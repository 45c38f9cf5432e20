/* The modelled time of a group's calls (see estimate.h). */
#include "core/estimate.h"

#include "algo/algo.h"
#include "util/datatype.h"
#include "algo/algo_plan.h"

/* Flat kernels on 2 H200 (doc/PERFORMANCE.md): about 7 us for a small call,
 * 330 GB/s of bus bandwidth for large ones. */
#define FLAT_LATENCY 7.0e-6
#define FLAT_BUS_BW 330.0e9

/* Bytes one rank moves over its links for d, as nccl-tests' busbw counts them. */
static double bus_bytes(const mpccl_coll_desc_t *d, int n)
{
    double es = (double)mpccl_dtype_size(d->dt), c = (double)d->count;
    switch (d->coll) {
    case MPCCL_COLL_ALLREDUCE: return 2.0 * (n - 1) / n * c * es;
    case MPCCL_COLL_BROADCAST:
    case MPCCL_COLL_REDUCE:
    case MPCCL_COLL_SEND:
    case MPCCL_COLL_RECV: return c * es;
    default: return (n - 1) * c * es; /* allgather, reduce_scatter, alltoall, gather, scatter: per peer */
    }
}

double mpccl_call_estimate(const mpccl_call_t *call)
{
    ncclComm_t comm = call->comm;
    const mpccl_coll_desc_t *d = &call->desc;
    int n = comm->nranks;
    if (comm->exec->takes_flat(comm, d)) return FLAT_LATENCY + bus_bytes(d, n) / FLAT_BUS_BW;
    if (d->coll == MPCCL_COLL_SEND || d->coll == MPCCL_COLL_RECV) {
        int remote = comm->topo.node_of[d->root] != comm->topo.node_of[comm->rank];
        mpccl_link_t l = remote ? mpccl_link_inter : mpccl_link_intra;
        return l.alpha + bus_bytes(d, n) * l.beta;
    }
    if (n <= 1) return 0.0;
    mpccl_algo_t a = mpccl_model_choice(&comm->topo, d, mpccl_algo_valid(d->coll), comm->params.chunk_bytes);
    return a == MPCCL_ALGO_AUTO ? 0.0 : mpccl_cost(&comm->topo, d, a, comm->params.chunk_bytes);
}

double mpccl_group_estimate(const mpccl_call_t *ops)
{
    double worst = 0.0;
    for (const mpccl_call_t *a = ops; a; a = a->next) {
        int first = 1; /* each communicator summed once, at its first call */
        for (const mpccl_call_t *b = ops; b != a && first; b = b->next) first = b->comm != a->comm;
        if (!first) continue;
        double t = 0.0;
        for (const mpccl_call_t *b = a; b; b = b->next)
            if (b->comm == a->comm) t += mpccl_call_estimate(b);
        if (t > worst) worst = t;
    }
    return worst;
}
