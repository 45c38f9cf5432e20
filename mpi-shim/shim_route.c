/* The route of one call: MPI unchanged, mpccl, or MPI on staged host copies.
 *
 * Every rank of the communicator must take the same route (mpccl and MPI do
 * not talk to each other).  By default the ranks agree: one MPI_Allreduce
 * (MPI_BAND) of an int carrying "all my buffers are host", "some are device"
 * and "mpccl can do it" -- mpccl only when every rank has device buffers and
 * can; MPI unchanged when every rank has host buffers; otherwise MPI with the
 * device buffers staged.  MPCCL_SHIM_AGREE=0 drops that step and trusts the
 * uniformity rule (every rank passes the same kind of memory and the same
 * eligibility), see doc/SHIM.md for the measured cost.  A fourth bit agrees
 * whether a v-collective may take its collective form (shim_collv.c). */
#include <stdint.h>
#include <string.h>

#include "shim.h"

int mpccl_shim_begin(shim_call_t *c, shim_coll_t coll, MPI_Comm comm)
{
    const shim_settings_t *s = mpccl_shim_settings();
    int inter = 0;
    memset(c, 0, sizeof(*c));
    c->coll = coll;
    c->comm = comm;
    c->ok = 1;
    if (!s->enabled || mpccl_shim_depth > 0 || comm == MPI_COMM_NULL) return 0;
#ifndef MPCCL_HAVE_CUDA
    /* Built without CUDA there is no device memory: stay out entirely. */
    if (!s->host_mode) return 0;
#endif
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return 0;
    if (PMPI_Comm_rank(comm, &c->rank) != MPI_SUCCESS || PMPI_Comm_size(comm, &c->size) != MPI_SUCCESS) return 0;
    return 1;
}

void mpccl_shim_buf(shim_call_t *c, const void *p, size_t count, MPI_Datatype dt, int dir)
{
    if (p == NULL || p == MPI_IN_PLACE || count == 0 || c->nbuf == SHIM_MAXBUF) return;
    shim_buf_t *b = &c->buf[c->nbuf];
    b->user = b->host = (void *)p;
    b->dir = dir;
    b->device = mpccl_shim_is_device(p);
    if (!mpccl_shim_span(dt, count, &b->lb, &b->bytes)) b->bytes = 0;
    c->nbuf++;
}

void mpccl_shim_buf_span(shim_call_t *c, const void *p, ptrdiff_t lb, size_t bytes, int dir)
{
    if (p == NULL || p == MPI_IN_PLACE || bytes == 0 || c->nbuf == SHIM_MAXBUF) return;
    shim_buf_t *b = &c->buf[c->nbuf++];
    b->user = b->host = (void *)p;
    b->dir = dir;
    b->lb = lb;
    b->bytes = bytes;
    /* the first byte touched: with a negative lb, p may lie outside the allocation */
    b->device = mpccl_shim_is_device((const char *)p + lb);
}

void mpccl_shim_reject(shim_call_t *c, int reason, const char *why)
{
    if (!c->ok) return;
    c->ok = 0;
    mpccl_shim_log_once(c->coll, reason, "%s: not through mpccl: %s (logged once)", mpccl_shim_coll_name(c->coll),
                        why);
}

shim_route_t mpccl_shim_decide(shim_call_t *c, size_t bytes)
{
    const shim_settings_t *s = mpccl_shim_settings();
    int anydev = 0, v;
    if (!(s->colls & (UINT64_C(1) << c->coll))) mpccl_shim_reject(c, SHIM_WHY_COLLS, "not in MPCCL_SHIM_COLLS");
    if (bytes < s->min_bytes) mpccl_shim_reject(c, SHIM_WHY_SMALL, "below MPCCL_SHIM_MIN_BYTES");
    c->bytes = bytes;
    if (s->min_bytes_auto && s->agree && mpccl_shim_tune_staged(c, bytes))
        mpccl_shim_reject(c, SHIM_WHY_SMALL, c->tune ? "staged while MPCCL_SHIM_MIN_BYTES=auto times both routes"
                                                     : "staging measured faster at this size (MPCCL_SHIM_MIN_BYTES=auto)");
    for (int i = 0; i < c->nbuf; i++) anydev |= c->buf[i].device;
    /* A rank with no significant buffer (a v-collective with nothing to move
     * here) goes along with the others: in the agreement it claims both kinds
     * of memory; without it, device memory in a GPU process (uniformity rule). */
    int none = c->nbuf == 0;
    if (none && !s->agree) anydev = mpccl_shim_gpu_process();
    v = (none && s->agree ? 3 : anydev ? 2 : 1) | (c->ok ? 4 : 0) | (c->fast ? 8 : 0);
    c->fast = 0; /* set again from the agreed value */
    if (s->agree) {
        if (PMPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_BAND, c->comm) != MPI_SUCCESS)
            v = anydev ? 2 : 1; /* MPI will report the problem on the call itself */
        c->fast = (v & 8) != 0;
        if (anydev && c->ok && (v & 6) != 6)
            mpccl_shim_log_once(c->coll, SHIM_WHY_PEER, "%s: not through mpccl: another rank passed host memory "
                                "or cannot use mpccl for it (logged once)", mpccl_shim_coll_name(c->coll));
    }
    shim_route_t r = (v & 1) ? SHIM_ROUTE_MPI : (v & 6) == 6 ? SHIM_ROUTE_MPCCL : SHIM_ROUTE_STAGED;
    mpccl_shim_tune_route(c, r);
    mpccl_shim_count(c->coll, r);
    return r;
}

int mpccl_shim_stage_in(shim_call_t *c)
{
    for (int i = 0; i < c->nbuf; i++) {
        shim_buf_t *b = &c->buf[i];
        if (!b->device || b->bytes == 0) continue;
        b->bounce = mpccl_shim_bounce_get(b->bytes);
        if (b->bounce == NULL) return MPI_ERR_NO_MEM;
        /* Output buffers are copied in too: a non-contiguous type leaves holes
         * that must come back unchanged. */
        int rc = mpccl_shim_copy(b->bounce, (char *)b->user + b->lb, b->bytes);
        if (rc != MPI_SUCCESS) return rc;
        b->host = (char *)b->bounce - b->lb;
    }
    return MPI_SUCCESS;
}

static int stage_back(shim_call_t *c, int rc);

int mpccl_shim_stage_out(shim_call_t *c, int rc)
{
    rc = stage_back(c, rc);
    mpccl_shim_tune_done(c, rc, c->bytes);
    return rc;
}

static int stage_back(shim_call_t *c, int rc)
{
    for (int i = 0; i < c->nbuf; i++) {
        shim_buf_t *b = &c->buf[i];
        if (b->bounce == NULL) continue;
        if (rc == MPI_SUCCESS && (b->dir & SHIM_OUT)) rc = mpccl_shim_copy((char *)b->user + b->lb, b->bounce, b->bytes);
        mpccl_shim_bounce_put(b->bounce);
        b->bounce = NULL;
        b->host = b->user;
    }
    return rc;
}

static int done_query(void *extra, MPI_Status *status)
{
    (void)extra;
    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}

static int done_free(void *extra)
{
    (void)extra;
    return MPI_SUCCESS;
}

static int done_cancel(void *extra, int complete)
{
    (void)extra, (void)complete;
    return MPI_SUCCESS;
}

int mpccl_shim_done_request(MPI_Request *req)
{
    int rc = PMPI_Grequest_start(done_query, done_free, done_cancel, NULL, req);
    if (rc == MPI_SUCCESS) rc = PMPI_Grequest_complete(*req);
    return rc;
}
