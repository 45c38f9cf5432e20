/* What point-to-point needs to know about the job, learned once in MPI_Init:
 * a private duplicate of MPI_COMM_WORLD (the receivers' answers and pushed
 * data travel there, apart from every user message), every rank's pid and
 * host (IPC needs the same host; a dead pid is a dead peer), and, per
 * communicator on first use, its ranks in MPI_COMM_WORLD (cached as an
 * attribute: translating is local, no collective). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim_p2p.h"

typedef struct {
    int32_t pid;
    int32_t pad;
    uint64_t host;
} peer_t;

static MPI_Comm private_comm = MPI_COMM_NULL;
static peer_t *peers;
static int world_size, world_rank = -1, tag_ub = 32767;
static uint64_t my_host;
static atomic_uint tag_next;
static int map_keyval = MPI_KEYVAL_INVALID;
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t fnv(uint64_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The same rule as the library's node detection: MPCCL_HOSTID/NCCL_HOSTID
 * (simulated nodes in tests), else the host name and boot id. */
static uint64_t host_hash(void)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const char *id = getenv("MPCCL_HOSTID");
    if (id == NULL || *id == '\0') id = getenv("NCCL_HOSTID");
    if (id && *id) return fnv(h, id);
    char host[256] = {0}, boot[64] = {0};
    gethostname(host, sizeof(host) - 1);
    h = fnv(h, host);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (fgets(boot, sizeof(boot), f)) h = fnv(h, boot);
        fclose(f);
    }
    return h;
}

static int map_delete(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm, (void)kv, (void)extra;
    free(value);
    return MPI_SUCCESS;
}

/* Does the MPI underneath move device buffers itself (Open MPI's
 * extension, asked past the shim's own answer)? */
static int mpi_cuda_aware(void)
{
    int (*query)(void) = (int (*)(void))dlsym(RTLD_NEXT, "MPIX_Query_cuda_support");
    return query ? query() == 1 : 0;
}

void mpccl_shim_world_init(void)
{
    void *ub = NULL;
    int found = 0;
    mpccl_shim_p2p_resolve(mpi_cuda_aware());
    if (!mpccl_shim_settings()->enabled || !mpccl_shim_settings()->p2p || private_comm != MPI_COMM_NULL) return;
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found) == MPI_SUCCESS && found && ub)
        tag_ub = *(int *)ub;
    peers = calloc((size_t)world_size, sizeof(*peers));
    if (peers == NULL) return;
    my_host = host_hash();
    peer_t me = {(int32_t)getpid(), 0, my_host};
    if (PMPI_Comm_dup(MPI_COMM_WORLD, &private_comm) != MPI_SUCCESS ||
        PMPI_Allgather(&me, (int)sizeof(me), MPI_BYTE, peers, (int)sizeof(me), MPI_BYTE, private_comm) !=
            MPI_SUCCESS ||
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, map_delete, &map_keyval, NULL) != MPI_SUCCESS) {
        SHIM_WARN("point-to-point on device buffers goes staged: the job's private communicator could not be made");
        if (private_comm != MPI_COMM_NULL) PMPI_Comm_free(&private_comm);
        private_comm = MPI_COMM_NULL;
        return;
    }
    PMPI_Comm_set_errhandler(private_comm, MPI_ERRORS_RETURN);
    int any_remote = 0;
    for (int r = 0; r < world_size; r++) any_remote |= peers[r].host != my_host;
    mpccl_shim_ucx_init(private_comm, world_size, any_remote);
    SHIM_INFO("point-to-point on device buffers: %d ranks, private communicator ready", world_size);
}

void mpccl_shim_world_fini(void)
{
    if (private_comm == MPI_COMM_NULL) return;
    PMPI_Comm_free(&private_comm);
    private_comm = MPI_COMM_NULL;
    if (map_keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&map_keyval);
}

int mpccl_shim_p2p_on(void)
{
    return private_comm != MPI_COMM_NULL;
}

MPI_Comm mpccl_shim_private_comm(void)
{
    return private_comm;
}

int mpccl_shim_my_world_rank(void)
{
    return world_rank;
}

uint64_t mpccl_shim_hostid(void)
{
    return my_host;
}

int mpccl_shim_peer_pid(int r)
{
    return peers && r >= 0 && r < world_size ? peers[r].pid : 0;
}

uint64_t mpccl_shim_peer_host(int r)
{
    return peers && r >= 0 && r < world_size ? peers[r].host : 0;
}

int mpccl_shim_next_tag(void)
{
    /* Even numbers 2..tag_ub, unique among this rank's transfers in flight.
     * The answer to transfer t travels with tag t, pushed data with t + 1:
     * between two ranks, one's answers and the other's data never match each
     * other's receives even when both counters hold the same value. */
    unsigned span = (unsigned)(tag_ub - 1) / 2;
    return 2 * (int)(atomic_fetch_add(&tag_next, 1) % span) + 2;
}

typedef struct {
    int n;
    int world[];
} rank_map_t;

static rank_map_t *map_build(MPI_Comm comm)
{
    MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
    int n = 0;
    rank_map_t *m = NULL;
    if (PMPI_Comm_size(comm, &n) != MPI_SUCCESS || n <= 0) return NULL;
    int *ranks = malloc((size_t)n * sizeof(int));
    m = malloc(sizeof(*m) + (size_t)n * sizeof(int));
    if (ranks && m && PMPI_Comm_group(comm, &g) == MPI_SUCCESS &&
        PMPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS) {
        for (int i = 0; i < n; i++) ranks[i] = i;
        m->n = n;
        if (PMPI_Group_translate_ranks(g, n, ranks, wg, m->world) != MPI_SUCCESS) {
            free(m);
            m = NULL;
        }
    } else {
        free(m);
        m = NULL;
    }
    if (g != MPI_GROUP_NULL) PMPI_Group_free(&g);
    if (wg != MPI_GROUP_NULL) PMPI_Group_free(&wg);
    free(ranks);
    return m;
}

int mpccl_shim_world_rank(MPI_Comm comm, int r)
{
    int inter = 0, found = 0;
    rank_map_t *m = NULL;
    if (private_comm == MPI_COMM_NULL || r < 0) return -1;
    if (comm == MPI_COMM_WORLD) return r < world_size ? r : -1;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return -1;
    pthread_mutex_lock(&map_lock);
    if (PMPI_Comm_get_attr(comm, map_keyval, &m, &found) != MPI_SUCCESS) found = 0, m = NULL;
    if (!found) {
        m = map_build(comm);
        if (m && PMPI_Comm_set_attr(comm, map_keyval, m) != MPI_SUCCESS) {
            free(m);
            m = NULL;
        }
    }
    pthread_mutex_unlock(&map_lock);
    if (m == NULL || r >= m->n || m->world[r] == MPI_UNDEFINED) return -1;
    return m->world[r];
}
