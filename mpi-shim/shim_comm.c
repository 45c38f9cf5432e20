/* One mpccl communicator per MPI communicator, cached as an attribute.
 *
 * It is created at the first call routed to mpccl (every rank gets there
 * together: the route is agreed) and destroyed by the attribute's delete
 * callback, so MPI_Comm_free tears it down; MPI_Finalize (intercepted) destroys
 * whatever is left.  The bootstrap runs through PMPI on a dup of the user's
 * communicator, never through the shim's own entry points. */
#include <pthread.h>
#include <stdlib.h>

#include "mpccl.h"
#include "shim.h"

#ifdef MPCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static int keyval = MPI_KEYVAL_INVALID;
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static shim_comm_t *live; /* every cached communicator, for MPI_Finalize */

static int oob_allgather(void *ctx, const void *sendbuf, void *recvbuf, size_t bytes)
{
    MPI_Comm comm = *(MPI_Comm *)ctx;
    if (bytes > (size_t)0x7fffffff) return 1;
    return PMPI_Allgather(sendbuf, (int)bytes, MPI_BYTE, recvbuf, (int)bytes, MPI_BYTE, comm) != MPI_SUCCESS;
}

static int oob_barrier(void *ctx)
{
    return PMPI_Barrier(*(MPI_Comm *)ctx) != MPI_SUCCESS;
}

static void oob_release(void *ctx)
{
    int finalized = 0;
    PMPI_Finalized(&finalized);
    if (!finalized) PMPI_Comm_free((MPI_Comm *)ctx);
    free(ctx);
}

static const mpcclOobOps_t oob_ops = {oob_allgather, oob_barrier, oob_release};

/* Destroys the mpccl side; the struct stays for the attribute until MPI
 * deletes it (comm_fini may come first). */
static void comm_close(shim_comm_t *sc)
{
    if (sc->nccl == NULL) return;
    pthread_mutex_lock(&list_lock);
    if (sc->linked) {
        if (sc->prev) sc->prev->next = sc->next;
        else live = sc->next;
        if (sc->next) sc->next->prev = sc->prev;
        sc->linked = 0;
    }
    pthread_mutex_unlock(&list_lock);
    mpccl_shim_depth++;
    ncclResult_t r = ncclCommDestroy(sc->nccl);
    mpccl_shim_depth--;
    if (r != ncclSuccess) SHIM_WARN("ncclCommDestroy: %s (%s)", ncclGetErrorString(r), ncclGetLastError(sc->nccl));
    mpccl_shim_ident_free(sc);
#ifdef MPCCL_HAVE_CUDA
    if (sc->stream) cudaStreamDestroy((cudaStream_t)sc->stream);
#endif
    sc->nccl = NULL;
    sc->stream = NULL;
}

static int delete_attr(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm, (void)kv, (void)extra;
    comm_close((shim_comm_t *)value);
    free(value);
    return MPI_SUCCESS;
}

static void keyval_create(void)
{
    /* NULL copy function: a dup starts without a cached mpccl communicator. */
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_attr, &keyval, NULL) != MPI_SUCCESS)
        keyval = MPI_KEYVAL_INVALID;
}

static int comm_create(MPI_Comm comm, shim_comm_t **out)
{
    shim_comm_t *sc = calloc(1, sizeof(*sc));
    MPI_Comm *dup = malloc(sizeof(*dup));
    if (sc == NULL || dup == NULL) {
        free(sc), free(dup);
        return MPI_ERR_NO_MEM;
    }
    PMPI_Comm_rank(comm, &sc->rank);
    PMPI_Comm_size(comm, &sc->size);
    int rc = PMPI_Comm_dup(comm, dup);
    if (rc != MPI_SUCCESS) {
        free(sc), free(dup);
        return rc;
    }
    mpccl_shim_depth++;
    /* The device current now decides GPU or host communicator (like
     * ncclCommInitRank); on failure mpcclCommInitOob has released dup. */
    ncclResult_t r = mpcclCommInitOob(&sc->nccl, sc->size, sc->rank, &oob_ops, dup, NULL);
    mpccl_shim_depth--;
    if (r != ncclSuccess) {
        SHIM_WARN("creating the mpccl communicator failed: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
        free(sc);
        return MPI_ERR_OTHER;
    }
#ifdef MPCCL_HAVE_CUDA
    int dev = -1;
    if (ncclCommCuDevice(sc->nccl, &dev) == ncclSuccess && dev >= 0) {
        cudaStream_t s;
        /* A blocking stream: it waits for work on the legacy default stream, so
         * kernels the caller put there finish before the collective reads. */
        if (cudaStreamCreate(&s) != cudaSuccess) {
            (void)cudaGetLastError();
            sc->stream = NULL;
            comm_close(sc);
            free(sc);
            return MPI_ERR_OTHER;
        }
        sc->stream = s;
    }
#endif
    pthread_mutex_lock(&list_lock);
    sc->next = live;
    sc->prev = NULL;
    if (live) live->prev = sc;
    live = sc;
    sc->linked = 1;
    pthread_mutex_unlock(&list_lock);
    SHIM_INFO("mpccl communicator for an MPI communicator of %d ranks (%s)", sc->size,
              sc->stream ? "GPU" : "host");
    *out = sc;
    return MPI_SUCCESS;
}

int mpccl_shim_comm_get(MPI_Comm comm, shim_comm_t **out)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    void *val = NULL;
    int found = 0, rc;
    pthread_once(&once, keyval_create);
    if (keyval == MPI_KEYVAL_INVALID) return MPI_ERR_KEYVAL;
    rc = PMPI_Comm_get_attr(comm, keyval, &val, &found);
    if (rc != MPI_SUCCESS) return rc;
    if (found) {
        *out = val;
        return MPI_SUCCESS;
    }
    rc = comm_create(comm, out);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Comm_set_attr(comm, keyval, *out);
    if (rc != MPI_SUCCESS) {
        comm_close(*out);
        free(*out);
    }
    return rc;
}

int mpccl_shim_comm_finish(shim_comm_t *sc, ncclResult_t r, MPI_Comm comm, const char *what)
{
#ifdef MPCCL_HAVE_CUDA
    /* The MPI call returns with the buffer complete: wait for our own stream. */
    if (r == ncclSuccess && sc->stream) {
        cudaError_t e = cudaStreamSynchronize((cudaStream_t)sc->stream);
        if (e != cudaSuccess) {
            SHIM_WARN("%s: cudaStreamSynchronize: %s", what, cudaGetErrorString(e));
            (void)cudaGetLastError();
            return PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER), MPI_ERR_OTHER;
        }
    }
#endif
    if (r == ncclSuccess) return MPI_SUCCESS;
    SHIM_WARN("%s through mpccl failed: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(sc->nccl));
    /* MPI error codes only, through the communicator's error handler like MPI's
     * own failures (fatal by default). */
    PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

void mpccl_shim_comm_fini(void)
{
    /* Deleting the attribute runs the delete callback, which unlinks. */
    if (keyval != MPI_KEYVAL_INVALID) PMPI_Comm_delete_attr(MPI_COMM_WORLD, keyval);
    for (;;) {
        pthread_mutex_lock(&list_lock);
        shim_comm_t *sc = live;
        pthread_mutex_unlock(&list_lock);
        if (sc == NULL) break;
        /* A communicator the program never freed: its mpccl side goes now,
         * while MPI still runs; the struct stays for the attribute. */
        comm_close(sc);
    }
    if (keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&keyval);
}

int mpccl_shim_Finalize(void)
{
    int init = 0, fini = 0;
    PMPI_Initialized(&init);
    PMPI_Finalized(&fini);
    if (init && !fini) {
        mpccl_shim_p2p_fini();
        mpccl_shim_comm_fini();
        mpccl_shim_summary();
    }
    return PMPI_Finalize();
}
