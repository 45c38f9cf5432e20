/* The completion calls.  With no transfer of the shim in flight they go to
 * MPI unchanged.  Otherwise they poll: progress every transfer of the
 * process, then ask MPI (MPI_Test*) whether the user's requests are done,
 * with a polite backoff; a generalized request of the shim is complete once
 * its transfer ended.  A started persistent request gets its inert handle
 * back when it completes. */
#include <pthread.h>
#include <stdlib.h>

#include "shim_p2p.h"

#define LOCAL 64

/* ---- failed transfers ----
 * MPI calls the error handler of MPI_COMM_WORLD for a generalized request
 * that completes with an error, not the handler of the communicator the
 * message was on.  So a failed transfer completes its request cleanly, and
 * the completion call that returns it puts the error in the status and
 * calls the right communicator's handler itself. */
typedef struct failed {
    MPI_Request req;
    MPI_Comm comm;
    int error;
    struct failed *next;
} failed_t;
static failed_t *failures;
static int nfailures;
static pthread_mutex_t failed_lock = PTHREAD_MUTEX_INITIALIZER;

void mpccl_shim_failed_add(MPI_Request req, MPI_Comm comm, int error)
{
    failed_t *f = malloc(sizeof(*f));
    if (f == NULL) return;
    f->req = req, f->comm = comm, f->error = error;
    pthread_mutex_lock(&failed_lock);
    f->next = failures;
    failures = f;
    __atomic_add_fetch(&nfailures, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&failed_lock);
}

/* The error of the request that was `before` (now complete), 0 if none. */
static int failed_take(MPI_Request before, MPI_Comm *comm)
{
    int err = MPI_SUCCESS;
    if (__atomic_load_n(&nfailures, __ATOMIC_ACQUIRE) == 0 || before == MPI_REQUEST_NULL) return 0;
    pthread_mutex_lock(&failed_lock);
    for (failed_t **pp = &failures; *pp; pp = &(*pp)->next)
        if ((*pp)->req == before) {
            failed_t *f = *pp;
            *pp = f->next;
            err = f->error;
            *comm = f->comm;
            free(f);
            __atomic_sub_fetch(&nfailures, 1, __ATOMIC_RELEASE);
            break;
        }
    pthread_mutex_unlock(&failed_lock);
    return err;
}

/* Handles before the call: persistent requests get their home back, and
 * failed transfers are recognised. */
typedef struct {
    MPI_Request local[LOCAL];
    MPI_Request *before;
    int n;
} snapshot_t;

/* Is anything of ours pending that a wait must progress? */
static int ours(void)
{
    return mpccl_shim_ops_active();
}

static void snap(snapshot_t *s, int n, const MPI_Request *reqs)
{
    s->n = 0;
    s->before = NULL;
    if ((!ours() && !mpccl_shim_persist_any() && __atomic_load_n(&nfailures, __ATOMIC_ACQUIRE) == 0) || n <= 0 ||
        reqs == NULL)
        return;
    s->before = n <= LOCAL ? s->local : malloc((size_t)n * sizeof(MPI_Request));
    if (s->before == NULL) return;
    for (int i = 0; i < n; i++) s->before[i] = reqs[i];
    s->n = n;
}

/* After MPI returned: for the request at index i (completed: its handle is
 * now MPI_REQUEST_NULL), the error of a failed transfer; the handler of its
 * communicator is called. */
static int failed_at(snapshot_t *s, MPI_Request *reqs, int i)
{
    MPI_Comm comm = MPI_COMM_NULL;
    if (i < 0 || i >= s->n || reqs[i] != MPI_REQUEST_NULL) return MPI_SUCCESS;
    int err = failed_take(s->before[i], &comm);
    if (err != MPI_SUCCESS && comm != MPI_COMM_NULL) PMPI_Comm_call_errhandler(comm, err);
    return err;
}

static void restore(snapshot_t *s, MPI_Request *reqs)
{
    for (int i = 0; i < s->n; i++) mpccl_shim_persist_restore(&reqs[i], s->before[i]);
    if (s->before && s->before != s->local) free(s->before);
    s->before = NULL;
    s->n = 0;
}

/* One request completed (Wait, Test, Waitany, Testany): its error, if any. */
static int one_done(snapshot_t *s, MPI_Request *reqs, int i, MPI_Status *st, int rc)
{
    int err = failed_at(s, reqs, i);
    if (err == MPI_SUCCESS) return rc;
    if (st != MPI_STATUS_IGNORE) st->MPI_ERROR = err;
    return err;
}

/* Several completed (Waitall, Testall: idx NULL; Waitsome, Testsome). */
static int some_done(snapshot_t *s, MPI_Request *reqs, int n, const int *idx, MPI_Status *sts, int rc)
{
    int any = 0;
    for (int k = 0; k < n; k++) {
        int i = idx ? idx[k] : k;
        int err = failed_at(s, reqs, i);
        if (err == MPI_SUCCESS) continue;
        if (!any && rc == MPI_SUCCESS && sts != MPI_STATUSES_IGNORE)
            for (int j = 0; j < n; j++) sts[j].MPI_ERROR = MPI_SUCCESS;
        any = 1;
        if (sts != MPI_STATUSES_IGNORE) sts[k].MPI_ERROR = err;
        rc = sts != MPI_STATUSES_IGNORE ? MPI_ERR_IN_STATUS : err;
    }
    return rc;
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
    if (!ours() && !mpccl_shim_persist_any() && !nfailures) return PMPI_Wait(request, status);
    snap(&s, 1, request);
    int rc = mpccl_shim_wait_mpi(request, status);
    rc = one_done(&s, request, 0, status, rc);
    restore(&s, request);
    return rc;
}

int mpccl_shim_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
    snapshot_t s;
    mpccl_shim_progress();
    snap(&s, 1, request);
    int rc = PMPI_Test(request, flag, status);
    if (*flag) rc = one_done(&s, request, 0, status, rc);
    restore(&s, request);
    return rc;
}

int mpccl_shim_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    snapshot_t s;
    shim_backoff_t b;
    int flag = 0, rc;
    if (!ours() && !mpccl_shim_persist_any() && !nfailures) return PMPI_Waitall(count, requests, statuses);
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
    rc = some_done(&s, requests, count, NULL, statuses, rc);
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[])
{
    snapshot_t s;
    mpccl_shim_progress();
    snap(&s, count, requests);
    int rc = PMPI_Testall(count, requests, flag, statuses);
    if (*flag) rc = some_done(&s, requests, count, NULL, statuses, rc);
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    snapshot_t s;
    shim_backoff_t b;
    int flag = 0, rc;
    if (!ours() && !mpccl_shim_persist_any() && !nfailures) return PMPI_Waitany(count, requests, index, status);
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
    rc = one_done(&s, requests, *index, status, rc);
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status)
{
    snapshot_t s;
    mpccl_shim_progress();
    snap(&s, count, requests);
    int rc = PMPI_Testany(count, requests, index, flag, status);
    if (*flag) rc = one_done(&s, requests, *index, status, rc);
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[])
{
    snapshot_t s;
    shim_backoff_t b;
    int rc;
    if (!ours() && !mpccl_shim_persist_any() && !nfailures)
        return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
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
    if (*outcount != MPI_UNDEFINED) rc = some_done(&s, requests, *outcount, indices, statuses, rc);
    restore(&s, requests);
    return rc;
}

int mpccl_shim_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[])
{
    snapshot_t s;
    mpccl_shim_progress();
    snap(&s, incount, requests);
    int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    if (*outcount != MPI_UNDEFINED) rc = some_done(&s, requests, *outcount, indices, statuses, rc);
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

int mpccl_shim_Barrier(MPI_Comm comm)
{
    MPI_Request r = MPI_REQUEST_NULL;
    if (!ours()) return PMPI_Barrier(comm);
    int rc = PMPI_Ibarrier(comm, &r);
    return rc == MPI_SUCCESS ? mpccl_shim_wait_mpi(&r, MPI_STATUS_IGNORE) : rc;
}
