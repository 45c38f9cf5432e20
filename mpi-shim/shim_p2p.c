/* The intercepted point-to-point calls (entry points generated from
 * shim.def call these).  Sends of host buffers go to MPI unchanged; sends of
 * device buffers and every receive that may meet an envelope go through
 * shim_send.c / shim_recv.c.  Persistent requests keep an inert MPI request
 * as the user's handle between starts; each MPI_Start puts the started
 * operation's request in its place, and the completion calls put the inert
 * one back (shim_wait.c). */
#include <stdlib.h>
#include <string.h>

#include "shim_p2p.h"

#ifdef MPCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int mpccl_shim_p2p_wanted(const void *buf, MPI_Comm comm)
{
    const shim_settings_t *s = mpccl_shim_settings();
    (void)buf;
    if (!s->enabled || !s->p2p || mpccl_shim_depth > 0 || comm == MPI_COMM_NULL) return 0;
#ifndef MPCCL_HAVE_CUDA
    if (!s->host_mode) return 0; /* no device memory, and no peer sends envelopes */
#endif
    return 1;
}

int mpccl_shim_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm)
{
    return mpccl_shim_send(buf, count, dt, dest, tag, comm, 0, NULL, "MPI_Send");
}

int mpccl_shim_Ssend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm)
{
    return mpccl_shim_send(buf, count, dt, dest, tag, comm, 1, NULL, "MPI_Ssend");
}

int mpccl_shim_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                     MPI_Request *request)
{
    return mpccl_shim_send(buf, count, dt, dest, tag, comm, 0, request, "MPI_Isend");
}

int mpccl_shim_Issend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                      MPI_Request *request)
{
    return mpccl_shim_send(buf, count, dt, dest, tag, comm, 1, request, "MPI_Issend");
}

int mpccl_shim_Recv(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    return mpccl_shim_recv(buf, count, dt, source, tag, comm, NULL, status, "MPI_Recv");
}

int mpccl_shim_Irecv(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
                     MPI_Request *request)
{
    return mpccl_shim_recv(buf, count, dt, source, tag, comm, request, NULL, "MPI_Irecv");
}

int mpccl_shim_recv_mpi(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
                        MPI_Status *status)
{
    MPI_Request r = MPI_REQUEST_NULL;
    if (!mpccl_shim_ops_active()) return PMPI_Recv(buf, count, dt, source, tag, comm, status);
    int rc = PMPI_Irecv(buf, count, dt, source, tag, comm, &r);
    return rc == MPI_SUCCESS ? mpccl_shim_wait_mpi(&r, status) : rc;
}

/* A receive and a send in flight together, then both waited for. */
static int sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf,
                    int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status,
                    const char *what)
{
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status st[2];
    int rc = mpccl_shim_recv(recvbuf, recvcount, recvtype, source, recvtag, comm, &r[0], NULL, what);
    if (rc != MPI_SUCCESS) return rc;
    rc = mpccl_shim_send(sendbuf, sendcount, sendtype, dest, sendtag, comm, 0, &r[1], what);
    if (rc != MPI_SUCCESS) {
        PMPI_Cancel(&r[0]);
        PMPI_Request_free(&r[0]);
        return rc;
    }
    rc = mpccl_shim_Waitall(2, r, st);
    if (status != MPI_STATUS_IGNORE) *status = st[0];
    if (rc == MPI_ERR_IN_STATUS) rc = st[0].MPI_ERROR != MPI_SUCCESS ? st[0].MPI_ERROR : st[1].MPI_ERROR;
    return rc;
}

int mpccl_shim_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                        MPI_Status *status)
{
    if (!mpccl_shim_recv_wanted(recvbuf, comm, source) &&
        !(mpccl_shim_p2p_wanted(sendbuf, comm) && dest != MPI_PROC_NULL && mpccl_shim_is_device(sendbuf)) &&
        !mpccl_shim_ops_active())
        return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                             recvtag, comm, status);
    return sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm,
                    status, "MPI_Sendrecv");
}

#ifdef MPCCL_HAVE_CUDA
/* Scratch for Sendrecv_replace on device buffers: one per process, grown. */
static void *scratch;
static size_t scratch_bytes;
static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
#endif

static void *scratch_get(size_t bytes, int device)
{
    if (!device) return malloc(bytes ? bytes : 1);
#ifdef MPCCL_HAVE_CUDA
    if (!mpccl_shim_settings()->host_mode) {
        pthread_mutex_lock(&scratch_lock);
        if (scratch_bytes < bytes) {
            if (scratch) cudaFree(scratch);
            scratch = NULL;
            scratch_bytes = 0;
            if (cudaMalloc(&scratch, bytes) == cudaSuccess) scratch_bytes = bytes;
            else (void)cudaGetLastError();
        }
        void *p = scratch;
        if (p == NULL) pthread_mutex_unlock(&scratch_lock);
        return p; /* held (locked) until scratch_put */
    }
#endif
    return malloc(bytes ? bytes : 1);
}

static void scratch_put(void *p, int device)
{
#ifdef MPCCL_HAVE_CUDA
    if (device && !mpccl_shim_settings()->host_mode) {
        pthread_mutex_unlock(&scratch_lock);
        return;
    }
#endif
    (void)device;
    free(p);
}

int mpccl_shim_Sendrecv_replace(void *buf, int count, MPI_Datatype dt, int dest, int sendtag, int source,
                                int recvtag, MPI_Comm comm, MPI_Status *status)
{
    ptrdiff_t lb = 0;
    size_t span = 0;
    int device = mpccl_shim_p2p_wanted(buf, comm) && count > 0 && mpccl_shim_is_device(buf);
    if ((!device && !mpccl_shim_recv_wanted(buf, comm, source) && !mpccl_shim_ops_active()) || count <= 0 ||
        !mpccl_shim_span(dt, (size_t)count, &lb, &span))
        return PMPI_Sendrecv_replace(buf, count, dt, dest, sendtag, source, recvtag, comm, status);
    /* Receive beside, send from buf, then copy in: the peer may read buf
     * (GPU to GPU) until our send completes. */
    char *tmp = scratch_get(span, device);
    if (tmp == NULL) return MPI_ERR_NO_MEM;
    /* holes of the type keep their bytes */
    int rc = device ? mpccl_shim_copy_done(tmp, (char *)buf + lb, span) : (memcpy(tmp, (char *)buf + lb, span), 0);
    if (rc == MPI_SUCCESS)
        rc = sendrecv(buf, count, dt, dest, sendtag, tmp - lb, count, dt, source, recvtag, comm, status,
                      "MPI_Sendrecv_replace");
    if (rc == MPI_SUCCESS)
        rc = device ? mpccl_shim_copy_done((char *)buf + lb, tmp, span) : (memcpy((char *)buf + lb, tmp, span), 0);
    scratch_put(tmp, device);
    return rc;
}

/* ---- probes ---- */

int mpccl_shim_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    return mpccl_shim_probe(source, tag, comm, NULL, status, NULL, 1);
}

int mpccl_shim_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status)
{
    return mpccl_shim_probe(source, tag, comm, flag, status, NULL, 0);
}

int mpccl_shim_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status)
{
    return mpccl_shim_probe(source, tag, comm, NULL, status, message, 1);
}

int mpccl_shim_Improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status)
{
    return mpccl_shim_probe(source, tag, comm, flag, status, message, 0);
}

int mpccl_shim_Mrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *message, MPI_Status *status)
{
    return mpccl_shim_mrecv(buf, count, dt, message, status, NULL);
}

int mpccl_shim_Imrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *message, MPI_Request *request)
{
    return mpccl_shim_mrecv(buf, count, dt, message, MPI_STATUS_IGNORE, request);
}

/* ---- persistent requests ---- */

typedef struct persist {
    MPI_Request home;   /* the user's handle while inactive */
    MPI_Request active; /* the started operation's request */
    int send, sync;
    void *buf;
    int count, peer, tag;
    MPI_Datatype dt;
    MPI_Comm comm;
    struct persist *next;
} persist_t;
static persist_t *persists;
static int npersists;
static pthread_mutex_t persist_lock = PTHREAD_MUTEX_INITIALIZER;

static int persist_new(int send, int sync, const void *buf, int count, MPI_Datatype dt, int peer, int tag,
                       MPI_Comm comm, MPI_Request *req)
{
    persist_t *p = calloc(1, sizeof(*p));
    if (p == NULL) return MPI_ERR_NO_MEM;
    /* An inert persistent request: MPI_Wait on it while inactive returns at
     * once, as it must. */
    int rc = PMPI_Recv_init(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, &p->home);
    if (rc != MPI_SUCCESS) {
        free(p);
        return rc;
    }
    p->active = MPI_REQUEST_NULL;
    p->send = send, p->sync = sync, p->buf = (void *)buf, p->count = count, p->dt = dt;
    p->peer = peer, p->tag = tag, p->comm = comm;
    pthread_mutex_lock(&persist_lock);
    p->next = persists;
    persists = p;
    npersists++;
    pthread_mutex_unlock(&persist_lock);
    *req = p->home;
    return MPI_SUCCESS;
}

/* The persistent request whose home (or active request, by_active) is r. */
static persist_t *persist_find(MPI_Request r, int by_active)
{
    persist_t *found = NULL;
    if (__atomic_load_n(&npersists, __ATOMIC_ACQUIRE) == 0 || r == MPI_REQUEST_NULL) return NULL;
    pthread_mutex_lock(&persist_lock);
    for (persist_t *p = persists; p && !found; p = p->next)
        if ((by_active ? p->active : p->home) == r) found = p;
    pthread_mutex_unlock(&persist_lock);
    return found;
}

int mpccl_shim_persist_any(void)
{
    return __atomic_load_n(&npersists, __ATOMIC_ACQUIRE) > 0;
}

MPI_Request mpccl_shim_persist_home(MPI_Request active)
{
    persist_t *p = persist_find(active, 1);
    return p ? p->home : MPI_REQUEST_NULL;
}

void mpccl_shim_persist_restore(MPI_Request *slot, MPI_Request before)
{
    persist_t *p;
    if (*slot != MPI_REQUEST_NULL || (p = persist_find(before, 1)) == NULL) return;
    p->active = MPI_REQUEST_NULL;
    *slot = p->home;
}

int mpccl_shim_Send_init(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                         MPI_Request *request)
{
    if (!mpccl_shim_p2p_wanted(buf, comm) || dest == MPI_PROC_NULL || !mpccl_shim_is_device(buf))
        return PMPI_Send_init(buf, count, dt, dest, tag, comm, request);
    return persist_new(1, 0, buf, count, dt, dest, tag, comm, request);
}

int mpccl_shim_Ssend_init(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
                          MPI_Request *request)
{
    if (!mpccl_shim_p2p_wanted(buf, comm) || dest == MPI_PROC_NULL || !mpccl_shim_is_device(buf))
        return PMPI_Ssend_init(buf, count, dt, dest, tag, comm, request);
    return persist_new(1, 1, buf, count, dt, dest, tag, comm, request);
}

int mpccl_shim_Recv_init(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
                         MPI_Request *request)
{
    if (!mpccl_shim_recv_wanted(buf, comm, source)) return PMPI_Recv_init(buf, count, dt, source, tag, comm, request);
    return persist_new(0, 0, buf, count, dt, source, tag, comm, request);
}

int mpccl_shim_Start(MPI_Request *request)
{
    persist_t *p = request ? persist_find(*request, 0) : NULL;
    MPI_Request r = MPI_REQUEST_NULL;
    int rc;
    if (p == NULL) return PMPI_Start(request);
    if (p->active != MPI_REQUEST_NULL) return MPI_ERR_REQUEST; /* started twice */
    rc = p->send ? mpccl_shim_send(p->buf, p->count, p->dt, p->peer, p->tag, p->comm, p->sync, &r, "MPI_Start")
                 : mpccl_shim_recv(p->buf, p->count, p->dt, p->peer, p->tag, p->comm, &r, NULL, "MPI_Start");
    if (rc != MPI_SUCCESS) return rc;
    pthread_mutex_lock(&persist_lock);
    p->active = r;
    pthread_mutex_unlock(&persist_lock);
    *request = r;
    return MPI_SUCCESS;
}

int mpccl_shim_Startall(int count, MPI_Request requests[])
{
    int rc = MPI_SUCCESS;
    for (int i = 0; i < count && rc == MPI_SUCCESS; i++) rc = mpccl_shim_Start(&requests[i]);
    return rc;
}

int mpccl_shim_Request_free(MPI_Request *request)
{
    persist_t *p = request ? persist_find(*request, 0) : NULL;
    if (p == NULL) return PMPI_Request_free(request);
    pthread_mutex_lock(&persist_lock);
    for (persist_t **pp = &persists; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            npersists--;
            break;
        }
    pthread_mutex_unlock(&persist_lock);
    /* An operation still in flight finishes on its own (its request is
     * dropped like a freed active request). */
    if (p->active != MPI_REQUEST_NULL) PMPI_Request_free(&p->active);
    int rc = PMPI_Request_free(&p->home);
    free(p);
    *request = MPI_REQUEST_NULL;
    return rc;
}
