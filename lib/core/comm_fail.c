/* A communicator's failure state (comm_fail.h): the first failure, dead peers,
 * revoke messages, and the peer information exchanged at init. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_config.h"
#include "core/comm_fail.h"
#include "core/comm_hier.h"
#include "core/peer_watch.h"
#include "core/shrink_door.h"
#include "core/side_channel.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

struct mpccl_fail_state {
    int failed; /* atomic: set once, never cleared */
    pthread_mutex_t mu;
    char msg[1536];
    int revoker;                  /* the rank whose revoke was the first failure, or -1 */
    mpccl_peer_info_t *peers;     /* nranks */
    unsigned char *same_machine;  /* nranks: watched by the peer watcher */
    unsigned char *dead;          /* nranks, atomic: the watcher saw it die */
    unsigned char *revoked_by;    /* nranks: its revoke message arrived */
    mpccl_req_t *revoke_reqs;     /* nranks: our revoke sends */
    uint64_t revoke_word;
    int revoke_sent;
    int watched;
    int death_pending; /* atomic: 1 + the rank the watcher saw die, not yet a failure (host) */
    double death_s;    /* atomic: when (mpccl_now_seconds) the watcher saw it */
    int door_fd;       /* this rank's door for ncclCommShrink, or -1 */
};

/* FNV-1a over the identity of this machine as pidfd_open sees it: hostname,
 * boot id and pid namespace (containers sharing a kernel have their own). */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t machine_id(char *host, size_t hostlen)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    memset(host, 0, hostlen);
    gethostname(host, hostlen - 1);
    h = fnv(h, host, strlen(host));
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        char boot[64] = {0};
        if (fgets(boot, sizeof(boot), f)) h = fnv(h, boot, strlen(boot));
        fclose(f);
    }
    struct stat ns;
    if (stat("/proc/self/ns/pid", &ns) == 0) {
        h = fnv(h, &ns.st_dev, sizeof(ns.st_dev));
        h = fnv(h, &ns.st_ino, sizeof(ns.st_ino));
    }
    return h;
}

ncclResult_t mpccl_comm_fail_result(mpccl_status_t st)
{
    switch (st) {
    case MPCCL_OK: return ncclSuccess;
    case MPCCL_ERR_ARG: return ncclInvalidArgument;
    case MPCCL_ERR_USAGE: return ncclInvalidUsage;
    case MPCCL_ERR_REMOTE: return ncclRemoteError;
    case MPCCL_ERR_SYSTEM: return ncclSystemError;
    case MPCCL_ERR_CUDA: return ncclUnhandledCudaError;
    case MPCCL_INPROGRESS: return ncclInProgress;
    default: return ncclInternalError;
    }
}

static mpccl_status_t status_of(ncclResult_t err)
{
    switch (err) {
    case ncclRemoteError: return MPCCL_ERR_REMOTE;
    case ncclSystemError: return MPCCL_ERR_SYSTEM;
    case ncclUnhandledCudaError: return MPCCL_ERR_CUDA;
    default: return MPCCL_ERR_INTERNAL;
    }
}

static void free_state(mpccl_fail_state_t *f)
{
    if (!f) return;
    mpccl_shrink_door_close(&f->door_fd);
    free(f->peers);
    free(f->same_machine);
    free(f->dead);
    free(f->revoked_by);
    free(f->revoke_reqs);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

mpccl_status_t mpccl_comm_fail_setup(ncclComm_t comm)
{
    int n = comm->nranks;
    mpccl_fail_state_t *f = calloc(1, sizeof(*f));
    if (f) {
        f->door_fd = -1;
        f->revoker = -1;
        pthread_mutex_init(&f->mu, NULL);
        f->peers = calloc((size_t)n, sizeof(*f->peers));
        f->same_machine = calloc((size_t)n, 1);
        f->dead = calloc((size_t)n, 1);
        f->revoked_by = calloc((size_t)n, 1);
        f->revoke_reqs = calloc((size_t)n, sizeof(*f->revoke_reqs));
    }
    if (!f || !f->peers || !f->same_machine || !f->dead || !f->revoked_by || !f->revoke_reqs) {
        free_state(f);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the failure state of %d ranks", n);
    }
    mpccl_peer_info_t *me = &f->peers[comm->rank];
    me->pid = (int32_t)getpid();
    me->machine = machine_id(me->host, sizeof(me->host));
    if (n > 1) mpccl_shrink_door_open(&f->door_fd, &me->door);
    /* Registered before the exchange: once every rank has the addresses, a
     * peer may ask this rank at once. */
    mpccl_status_t st = mpccl_side_register(comm, &me->side);
    if (st == MPCCL_OK) st = mpccl_bootstrap_allgather(&comm->bs, f->peers, sizeof(*f->peers));
    if (st != MPCCL_OK) {
        mpccl_side_unregister(comm);
        free_state(f);
        return st;
    }
    int watch = mpccl_config_int("PEER_WATCH") != 0;
    for (int r = 0; r < n; r++) {
        f->peers[r].host[sizeof(f->peers[r].host) - 1] = '\0';
        f->same_machine[r] = watch && f->peers[r].machine == me->machine;
    }
    f->revoke_word = comm->id; /* peers check it names their communicator */
    comm->fail = f;
    return MPCCL_OK;
}

const mpccl_peer_info_t *mpccl_comm_peer_info(ncclComm_t comm, int rank)
{
    if (!comm->fail || rank < 0 || rank >= comm->nranks) return NULL;
    return &comm->fail->peers[rank];
}

int mpccl_comm_door_fd(ncclComm_t comm) { return comm->fail ? comm->fail->door_fd : -1; }

const mpccl_sockaddr_t *mpccl_comm_door_addr(ncclComm_t comm, int peer)
{
    if (!comm->fail || peer < 0 || peer >= comm->nranks) return NULL;
    const mpccl_sockaddr_t *a = &comm->fail->peers[peer].door;
    return mpccl_shrink_door_valid(a) ? a : NULL;
}

const mpccl_sockaddr_t *mpccl_comm_door_to(ncclComm_t comm, int peer)
{
    return mpccl_comm_door_fd(comm) >= 0 ? mpccl_comm_door_addr(comm, peer) : NULL;
}

int mpccl_comm_doors_complete(ncclComm_t comm)
{
    if (mpccl_comm_door_fd(comm) < 0) return 0;
    for (int r = 0; r < comm->nranks; r++)
        if (r != comm->rank && !mpccl_comm_door_to(comm, r)) return 0;
    return 1;
}

const unsigned char *mpccl_comm_same_machine(ncclComm_t comm)
{
    return comm->fail ? comm->fail->same_machine : NULL;
}

static mpccl_status_t fail_dead(ncclComm_t comm, int rank)
{
    mpccl_fail_state_t *f = comm->fail;
    return mpccl_comm_fail(comm, ncclRemoteError, "rank %d (host %s, pid %d) died", rank, f->peers[rank].host,
                           (int)f->peers[rank].pid);
}

/* The watcher saw rank's process end.  A host communicator fails only once a
 * wait loop finds nothing left to progress (mpccl_comm_failed_idle): a rank
 * that finished its part and exited may have left its last messages in shared
 * memory, which the others must still receive. */
static void peer_dead(ncclComm_t comm, int rank)
{
    mpccl_fail_state_t *f = comm->fail;
    __atomic_store_n(&f->dead[rank], 1, __ATOMIC_RELEASE);
    if (comm->exec->on_streams) { /* nothing left in flight to receive on the host */
        fail_dead(comm, rank);
        return;
    }
    int none = 0;
    double now = mpccl_now_seconds();
    __atomic_store(&f->death_s, &now, __ATOMIC_RELEASE); /* before the flag that publishes it */
    __atomic_compare_exchange_n(&f->death_pending, &none, rank + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx rank %d: rank %d (pid %d) ended", (unsigned long long)comm->id,
               comm->rank, rank, (int)f->peers[rank].pid);
}

int mpccl_comm_failed_idle(ncclComm_t comm)
{
    return mpccl_comm_failed_idle_for(comm, NULL, NULL);
}

int mpccl_comm_failed_idle_for(ncclComm_t comm, int (*needs)(void *arg, int rank), void *arg)
{
    mpccl_fail_state_t *f = comm->fail;
    if (!f) return 0;
    int pending = __atomic_load_n(&f->death_pending, __ATOMIC_ACQUIRE);
    if (pending && !__atomic_load_n(&f->failed, __ATOMIC_ACQUIRE)) {
        if (!needs) {
            fail_dead(comm, pending - 1);
        } else {
            for (int r = 0; r < comm->nranks; r++)
                if (__atomic_load_n(&f->dead[r], __ATOMIC_ACQUIRE) && needs(arg, r)) {
                    fail_dead(comm, r);
                    break;
                }
        }
    }
    return mpccl_comm_failed(comm);
}

int mpccl_comm_failed_stalled(ncclComm_t comm, double last_event_s)
{
    mpccl_fail_state_t *f = comm->fail;
    if (!f) return 0;
    int pending = __atomic_load_n(&f->death_pending, __ATOMIC_ACQUIRE);
    if (pending && !__atomic_load_n(&f->failed, __ATOMIC_ACQUIRE)) {
        double death, now = mpccl_now_seconds();
        __atomic_load(&f->death_s, &death, __ATOMIC_ACQUIRE);
        double since = now - (death > last_event_s ? death : last_event_s);
        int rank = pending - 1;
        if (since >= MPCCL_DEAD_PEER_STALL_S)
            mpccl_comm_fail(comm, ncclRemoteError,
                            "rank %d (host %s, pid %d) died, and nothing has moved for %.1f s since: a process "
                            "killed in the middle of a message can leave the shared-memory queues others read "
                            "from blocked", rank, f->peers[rank].host, (int)f->peers[rank].pid, since);
    }
    return mpccl_comm_failed(comm);
}

static void peer_revoked(void *owner, int peer, uint64_t word)
{
    ncclComm_t comm = owner;
    mpccl_fail_state_t *f = comm->fail;
    if (!f) return;
    /* The message names the communicator it revokes: one meant for another
     * (a shrink's parent, say) is not this one's failure. */
    if (!mpccl_revoke_names(peer, word, comm->nranks, comm->id)) {
        MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx rank %d: ignored a revoke from rank %d for comm 0x%llx",
                   (unsigned long long)comm->id, comm->rank, peer, (unsigned long long)word);
        return;
    }
    f->revoked_by[peer] = 1;
    pthread_mutex_lock(&f->mu);
    if (!f->failed) f->revoker = peer;
    pthread_mutex_unlock(&f->mu);
    mpccl_comm_fail(comm, ncclRemoteError,
                    "rank %d (host %s, pid %d) revoked the communicator (a rank failed, or it called "
                    "ncclCommRevoke)",
                    peer, f->peers[peer].host, (int)f->peers[peer].pid);
}

void mpccl_comm_fail_attach(ncclComm_t comm)
{
    mpccl_fail_state_t *f = comm->fail;
    if (!f) return;
    if (comm->transport) {
        comm->transport->owner = comm;
        comm->transport->on_revoke = peer_revoked;
    }
    int mypid = (int)getpid();
    for (int r = 0; r < comm->nranks; r++) {
        if (r == comm->rank || !f->same_machine[r] || f->peers[r].pid == mypid) continue;
        if (mpccl_peer_watch_add(comm, r, f->peers[r].pid, peer_dead) != MPCCL_OK)
            MPCCL_WARN(MPCCL_SUB_INIT, "rank %d: cannot watch rank %d (pid %d): its death is noticed only by "
                       "MPCCL_OP_TIMEOUT", comm->rank, r, (int)f->peers[r].pid);
        else f->watched = 1;
    }
}

void mpccl_comm_fail_release(ncclComm_t comm)
{
    mpccl_fail_state_t *f = comm->fail;
    if (!f) return;
    if (f->watched) mpccl_peer_watch_remove(comm);
    mpccl_side_unregister(comm);
    if (comm->transport) {
        comm->transport->on_revoke = NULL;
        comm->transport->owner = NULL;
        for (int r = 0; r < comm->nranks && f->revoke_sent; r++)
            if (f->revoke_reqs[r].impl && !f->revoke_reqs[r].done)
                comm->transport->ops->cancel(comm->transport, &f->revoke_reqs[r]);
    }
    comm->fail = NULL;
    free_state(f);
}

mpccl_status_t mpccl_comm_fail(ncclComm_t comm, ncclResult_t err, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mpccl_status_t st = status_of(err);
    mpccl_fail_state_t *f = comm->fail;
    int first = 1;
    if (f) {
        pthread_mutex_lock(&f->mu);
        first = !f->failed;
        if (first) {
            snprintf(f->msg, sizeof(f->msg), "%s", msg);
            __atomic_store_n(&comm->async_error, err, __ATOMIC_RELEASE);
            __atomic_store_n(&f->failed, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&f->mu);
    } else if (comm->async_error == ncclSuccess) {
        comm->async_error = err;
    }
    if (!first) {
        MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx rank %d (failed already): %s", (unsigned long long)comm->id,
                   comm->rank, msg);
        return st;
    }
    mpccl_fail(st, "comm 0x%llx rank %d failed: %s", (unsigned long long)comm->id, comm->rank, msg);
    comm->exec->stop(comm); /* GPU communicators: their kernels leave their waits */
    mpccl_comm_hier_stop(comm);
    /* Host wait loops check mpccl_comm_failed on every pass: they sleep at
     * most MPCCL_UCX_IDLE_US on the transport and see it then. */
    return st;
}

void mpccl_comm_fail_amend(ncclComm_t comm, const char *fmt, ...)
{
    mpccl_fail_state_t *f = comm->fail;
    if (!f) return;
    char extra[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(extra, sizeof(extra), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&f->mu);
    size_t l = strlen(f->msg);
    snprintf(f->msg + l, sizeof(f->msg) - l, "; %s", extra);
    pthread_mutex_unlock(&f->mu);
}

int mpccl_comm_failed_by_revoke(ncclComm_t comm)
{
    mpccl_fail_state_t *f = comm->fail;
    if (!f) return -1;
    pthread_mutex_lock(&f->mu);
    int r = f->revoker;
    pthread_mutex_unlock(&f->mu);
    return r;
}

int mpccl_comm_failed(ncclComm_t comm)
{
    return comm->fail && __atomic_load_n(&comm->fail->failed, __ATOMIC_ACQUIRE);
}

int mpccl_comm_peer_dead(ncclComm_t comm, int peer)
{
    return comm->fail && peer >= 0 && peer < comm->nranks && __atomic_load_n(&comm->fail->dead[peer], __ATOMIC_ACQUIRE);
}

mpccl_status_t mpccl_comm_fail_report(ncclComm_t comm, const char *fn)
{
    mpccl_fail_state_t *f = comm->fail;
    char msg[1536] = "";
    if (f) {
        pthread_mutex_lock(&f->mu);
        snprintf(msg, sizeof(msg), "%s", f->msg);
        pthread_mutex_unlock(&f->mu);
    }
    return mpccl_fail(MPCCL_ERR_REMOTE, "%s: comm 0x%llx rank %d has failed: %s", fn, (unsigned long long)comm->id,
                      comm->rank, msg[0] ? msg : ncclGetErrorString(comm->async_error));
}

void mpccl_comm_send_revoke(ncclComm_t comm)
{
    mpccl_fail_state_t *f = comm->fail;
    mpccl_transport_t *t = comm->transport;
    if (!f || !t || f->revoke_sent) return;
    f->revoke_sent = 1;
    int sent = 0;
    for (int r = 0; r < comm->nranks; r++) {
        if (r == comm->rank || __atomic_load_n(&f->dead[r], __ATOMIC_ACQUIRE) || f->revoked_by[r]) continue;
        if (t->ops->isend(t, r, MPCCL_REVOKE_TAG(comm->rank), &f->revoke_word, sizeof(f->revoke_word),
                          &f->revoke_reqs[r]) == MPCCL_OK)
            sent++;
    }
    t->ops->progress(t);
    MPCCL_INFO(MPCCL_SUB_INIT, "comm 0x%llx rank %d: revoke sent to %d live peer(s)", (unsigned long long)comm->id,
               comm->rank, sent);
}
