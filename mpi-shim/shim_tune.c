/* MPCCL_SHIM_MIN_BYTES=auto (the default): which route is faster, mpccl or
 * staging through host memory, measured on this machine for each
 * communicator, collective and size class (a power of two).
 *
 * The first calls of a class alternate between the routes on a fixed
 * schedule (every rank follows the same one, since the ranks of a collective
 * call it with the same size); each blocking call is timed from the route
 * decision to its completion.  After the last trial the ranks agree on the
 * slowest rank's best time of each route (one MPI_Allreduce) and the faster
 * route takes the class from then on, logged once at INFO.  The first call
 * is not timed (it creates the communicator).  Nonblocking calls use the
 * class's choice without being timed; v-collectives, whose sizes differ
 * between ranks, always go to mpccl. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "shim.h"

#define TUNE_CLASSES 48
enum { R_MPCCL = 0, R_STAGED = 1 };
/* The trial schedule; index 0 is the untimed first call. */
static const unsigned char schedule[] = {R_MPCCL, R_MPCCL, R_STAGED, R_MPCCL, R_STAGED, R_MPCCL, R_STAGED};
#define TUNE_TRIALS ((int)sizeof(schedule))

typedef struct {
    unsigned char trial;  /* calls timed so far (TUNE_TRIALS: decided) */
    unsigned char choice; /* R_MPCCL or R_STAGED once decided */
    double best[2];       /* this rank's best time per route, seconds (0: none yet) */
} tune_ent_t;

typedef struct {
    tune_ent_t e[SHIM_NCOLLS][TUNE_CLASSES];
} tune_table_t;

static int keyval = MPI_KEYVAL_INVALID;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static int delete_table(MPI_Comm comm, int kv, void *val, void *extra)
{
    (void)comm, (void)kv, (void)extra;
    free(val);
    return MPI_SUCCESS;
}

static void make_key(void)
{
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_table, &keyval, NULL) != MPI_SUCCESS)
        keyval = MPI_KEYVAL_INVALID;
}

static tune_table_t *table_of(MPI_Comm comm)
{
    pthread_once(&key_once, make_key);
    if (keyval == MPI_KEYVAL_INVALID) return NULL;
    void *v = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &v, &found) != MPI_SUCCESS) return NULL;
    if (found) return v;
    tune_table_t *t = calloc(1, sizeof(*t));
    if (t && PMPI_Comm_set_attr(comm, keyval, t) != MPI_SUCCESS) {
        free(t);
        t = NULL;
    }
    return t;
}

static int class_of(size_t bytes)
{
    int k = 0;
    while (k + 1 < TUNE_CLASSES && ((size_t)1 << (k + 1)) <= bytes) k++;
    return k;
}

int mpccl_shim_tune_staged(shim_call_t *c, size_t bytes)
{
    c->tune = NULL;
    if (!c->ok) return 0;
    tune_table_t *t = table_of(c->comm);
    if (!t) return 0;
    tune_ent_t *e = &t->e[c->coll][class_of(bytes)];
    if (e->trial >= TUNE_TRIALS) return e->choice == R_STAGED;
    if (!c->tunable) return 0;
    c->tune = e;
    c->tune_route = schedule[e->trial];
    c->tune_t0 = PMPI_Wtime();
    return c->tune_route == R_STAGED;
}

void mpccl_shim_tune_route(shim_call_t *c, shim_route_t r)
{
    /* the agreement may have sent the call elsewhere: then it is no trial */
    if (!c->tune) return;
    int want = c->tune_route == R_STAGED ? SHIM_ROUTE_STAGED : SHIM_ROUTE_MPCCL;
    if ((int)r != want) c->tune = NULL;
}

void mpccl_shim_tune_done(shim_call_t *c, int rc, size_t bytes)
{
    tune_ent_t *e = c->tune;
    c->tune = NULL;
    if (!e || rc != MPI_SUCCESS) return;
    double dt = PMPI_Wtime() - c->tune_t0;
    int r = c->tune_route;
    if (e->trial > 0 && (e->best[r] == 0 || dt < e->best[r])) e->best[r] = dt;
    if (++e->trial < TUNE_TRIALS) return;
    double worst[2] = {e->best[0], e->best[1]};
    if (PMPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_DOUBLE, MPI_MAX, c->comm) != MPI_SUCCESS) {
        e->choice = R_MPCCL;
        return;
    }
    e->choice = worst[R_STAGED] > 0 && worst[R_STAGED] < worst[R_MPCCL] ? R_STAGED : R_MPCCL;
    if (c->rank == 0)
        SHIM_INFO("%s of %zu bytes and up (to the next power of two) on a communicator of %d ranks: mpccl %.1f us, "
                  "staged %.1f us (measured): %s from now on", mpccl_shim_coll_name(c->coll),
                  (size_t)1 << class_of(bytes), c->size, worst[R_MPCCL] * 1e6, worst[R_STAGED] * 1e6,
                  e->choice == R_STAGED ? "staged" : "mpccl");
}
