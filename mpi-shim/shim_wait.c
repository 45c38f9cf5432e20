/* The completion calls.  With no transfer of the shim in flight they go to
 * MPI unchanged.  Otherwise they poll: progress every transfer of the
 * process, then ask MPI (MPI_Test*) whether the user's requests are done,
 * with a polite backoff; a generalized request of the shim is complete once
 * its transfer ended.  A started persistent request gets its inert handle
 * back when it completes. */
#include <stdlib.h>

#include "shim_p2p.h"

#define LOCAL 64

/* Handles before the call, to give persistent requests their home back. */
typedef struct {
    MPI_Request local[LOCAL];
    MPI_Request *before;
    int n;
} snapshot_t;

static void snap(snapshot_t *s, int n, const MPI_Request *reqs)
{
    s->n = 0;
    s->before = NULL;
    if (!mpccl_shim_persist_any() || n <= 0 || reqs == NULL) return;
    s->before = n <= LOCAL ? s->local : malloc((size_t)n * sizeof(MPI_Request));
    if (s->before == NULL) return;
    for (int i = 0; i < n; i++) s->before[i] = reqs[i];
    s->n = n;
}

static void restore(snapshot_t *s, MPI_Request *reqs)
{
    for (int i = 0; i < s->n; i++) mpccl_shim_persist_restore(&reqs[i], s->before[i]);
    if (s->before && s->before != s->local) free(s->before);
    s->before = NULL;
    s->n = 0;
}

/* Is anything of ours pending that a wait must progress? */
static int ours(void)
{
    return mpccl_shim_ops_active();
}

int mpccl_shim_wait_mpi(MPI_Request *req, MPI_Status *st)
{
    shim_backoff_t b;
    int flag = 0, rc;
    mpccl_shim_backoff_init(&b);
    for (;;) {
        mpccl_shim_progress();
        rc = PMPI_Test(req, &flag, st);
        if (rc != MPI_SUCCESS || flag) return rc;
        if (!ours()) return PMPI_Wait(req, st);
        mpccl_shim_backoff(&b);
    }
}

int mpccl_shim_Wait(MPI_Request *request, MPI_Status *status)
{
    snapshot_t s;
    if (!ours() && !mpccl_shim_persist_any()) return PMPI_Wait(request, status);
    snap(&s, 1, request);
    int rc = mpccl_shim_wait_mpi(request, status);
    restore(&s, request);
    return rc;
}

int mpccl_shim_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
    snapshot_t s;
    mpccl_shim_progress();
    snap(&s, 1, request);
    int rc = PMPI_Test(request, flag, status);
    restore(&s, request);
    return rc;
}

int mpccl_shim_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    snapshot_t s;
    shim_backoff_t b;
    int flag = 0, rc;
    if (!ours() && !mpccl_shim_persist_any()) return PMPI_Waitall(count, requests, statuses);
    snap(&s, count, requests);
    mpccl_shim_backoff_init(&b);
    for (;;) {
        mpccl_shim_progress();
        rc = PMPI_Testall(count, requests, &flag, statuses);
        if ((rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) || flag) break;
        if (!ours()) {
            rc = PMPI_Waitall(count, requests, statuses);
            break;
        }
        mpccl_shim_backoff(&b);
    }
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[])
{
    snapshot_t s;
    mpccl_shim_progress();
    snap(&s, count, requests);
    int rc = PMPI_Testall(count, requests, flag, statuses);
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    snapshot_t s;
    shim_backoff_t b;
    int flag = 0, rc;
    if (!ours() && !mpccl_shim_persist_any()) return PMPI_Waitany(count, requests, index, status);
    snap(&s, count, requests);
    mpccl_shim_backoff_init(&b);
    for (;;) {
        mpccl_shim_progress();
        rc = PMPI_Testany(count, requests, index, &flag, status);
        /* flag with MPI_UNDEFINED: no active request at all */
        if (rc != MPI_SUCCESS || flag) break;
        if (!ours()) {
            rc = PMPI_Waitany(count, requests, index, status);
            break;
        }
        mpccl_shim_backoff(&b);
    }
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status)
{
    snapshot_t s;
    mpccl_shim_progress();
    snap(&s, count, requests);
    int rc = PMPI_Testany(count, requests, index, flag, status);
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[])
{
    snapshot_t s;
    shim_backoff_t b;
    int rc;
    if (!ours() && !mpccl_shim_persist_any()) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
    snap(&s, incount, requests);
    mpccl_shim_backoff_init(&b);
    for (;;) {
        mpccl_shim_progress();
        rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
        if ((rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) || *outcount != 0) break;
        if (!ours()) {
            rc = PMPI_Waitsome(incount, requests, outcount, indices, statuses);
            break;
        }
        mpccl_shim_backoff(&b);
    }
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[])
{
    snapshot_t s;
    mpccl_shim_progress();
    snap(&s, incount, requests);
    int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Request_get_status(MPI_Request request, int *flag, MPI_Status *status)
{
    mpccl_shim_progress();
    return PMPI_Request_get_status(request, flag, status);
}

int mpccl_shim_Cancel(MPI_Request *request)
{
    int rc = PMPI_Cancel(request); /* a receive of ours asks its transfer to stop */
    mpccl_shim_progress();
    return rc;
}
