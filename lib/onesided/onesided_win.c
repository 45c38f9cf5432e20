/* Windows of a communicator: the per-communicator state, collective
 * registration with agreement on failure, and release with the communicator.
 * The transport-specific halves live in host_win.c / gpu_win.c. */
#include <stdlib.h>
#include <string.h>

#include "core/comm_hooks.h"
#include "util/log.h"
#include "onesided/onesided_win.h"

/* Windows go with the communicator, after its device communicators
 * (comm_hooks.h).  Without window state there is nothing in flight to stop:
 * puts, signals and deliveries all need a registration or a window. */
static const struct mpccl_comm_hook win_hook = {
    .name = "windows", .order = 20, .finalize = mpccl_win_release, .release = mpccl_win_release};

mpccl_status_t mpccl_win_state(ncclComm_t comm, mpccl_win_state_t **out)
{
    if (!comm->win) {
        MPCCL_CHECK(mpccl_comm_hook_add(comm, &win_hook));
        mpccl_win_state_t *ws = calloc(1, sizeof(*ws));
        if (!ws) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for the window state of comm %p", (void *)comm);
        pthread_mutex_init(&ws->lock, NULL);
        pthread_mutex_init(&ws->wait_lock, NULL);
        ws->nsig_words = (size_t)MPCCL_WIN_NCTX * MPCCL_WIN_NSIG * (size_t)comm->nranks;
        __atomic_store_n(&comm->win, ws, __ATOMIC_RELEASE); /* the proxy thread reads it (gpu_win_remote.c) */
    }
    *out = comm->win;
    return MPCCL_OK;
}

mpccl_status_t mpccl_win_agree(ncclComm_t comm, mpccl_status_t st, const char *what)
{
    return mpccl_bootstrap_agree(&comm->bs, st, 1, what);
}

mpccl_status_t mpccl_win_allgather_blobs(ncclComm_t comm, const void *mine, size_t len, unsigned char **all,
                                         size_t *stride)
{
    int n = comm->nranks;
    *all = NULL;
    uint64_t *lens = calloc((size_t)n, sizeof(uint64_t));
    if (!lens) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory exchanging keys");
    lens[comm->rank] = len;
    mpccl_status_t st = mpccl_bootstrap_allgather(&comm->bs, lens, sizeof(uint64_t));
    size_t max = 0;
    for (int r = 0; st == MPCCL_OK && r < n; r++)
        if (lens[r] > max) max = lens[r];
    free(lens);
    if (st != MPCCL_OK) return st;
    /* Every rank knows max now, so every rank calls the second allgather with
     * the same size; a rank out of memory still joins it (with a scratch
     * buffer it cannot get either: so the agreement comes first). */
    size_t sz = (sizeof(uint64_t) + max + 7) & ~(size_t)7;
    unsigned char *buf = calloc((size_t)n, sz);
    MPCCL_CHECK(mpccl_win_agree(comm, buf ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for keys of %d ranks", n),
                                "key exchange"));
    uint64_t l = len;
    memcpy(buf + (size_t)comm->rank * sz, &l, sizeof(l));
    if (len) memcpy(buf + (size_t)comm->rank * sz + sizeof(uint64_t), mine, len);
    st = mpccl_bootstrap_allgather(&comm->bs, buf, sz);
    if (st != MPCCL_OK) {
        free(buf);
        return st;
    }
    *all = buf;
    *stride = sz;
    return MPCCL_OK;
}

struct mpccl_win *mpccl_win_find(ncclComm_t comm, ncclWindow_t h)
{
    mpccl_win_state_t *ws = comm->win;
    if (!ws || !h) return NULL;
    struct mpccl_win *found = NULL;
    pthread_mutex_lock(&ws->lock);
    for (struct mpccl_win *p = ws->wins; p && !found; p = p->next)
        if (p->handle == h) found = p;
    pthread_mutex_unlock(&ws->lock);
    return found;
}

int mpccl_win_find_id(mpccl_win_state_t *ws, uint32_t id, void **base, size_t *size)
{
    int found = -1;
    pthread_mutex_lock(&ws->lock);
    if ((int32_t)(id - ws->next_win_id) >= 0) found = 0;
    for (struct mpccl_win *p = ws->wins; p && found < 0; p = p->next)
        if (p->id == id) {
            *base = p->base;
            *size = p->size;
            found = 1;
        }
    pthread_mutex_unlock(&ws->lock);
    return found;
}

static pthread_mutex_t all_wins_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mpccl_win *all_wins;

struct mpccl_win *mpccl_win_find_any(ncclWindow_t h)
{
    struct mpccl_win *found = NULL;
    pthread_mutex_lock(&all_wins_mu);
    for (struct mpccl_win *p = all_wins; p && !found; p = p->gnext)
        if (p->handle == h) found = p;
    pthread_mutex_unlock(&all_wins_mu);
    return found;
}

static void publish(struct mpccl_win *w)
{
    pthread_mutex_lock(&all_wins_mu);
    w->gnext = all_wins;
    all_wins = w;
    pthread_mutex_unlock(&all_wins_mu);
}

static void unpublish(struct mpccl_win *w)
{
    pthread_mutex_lock(&all_wins_mu);
    for (struct mpccl_win **pp = &all_wins; *pp; pp = &(*pp)->gnext)
        if (*pp == w) {
            *pp = w->gnext;
            break;
        }
    pthread_mutex_unlock(&all_wins_mu);
}

int mpccl_reg_is_live(ncclComm_t comm, const void *h)
{
    mpccl_win_state_t *ws = comm->win;
    if (!ws || !h) return 0;
    int found = 0;
    pthread_mutex_lock(&ws->lock);
    for (mpccl_reg_t *p = ws->regs; p; p = p->next)
        if ((const void *)p == h) found = 1;
    pthread_mutex_unlock(&ws->lock);
    return found;
}

static mpccl_status_t sig_setup(ncclComm_t comm, mpccl_win_state_t *ws)
{
    return comm->exec->sig_setup(comm, ws);
}

static mpccl_status_t win_setup(ncclComm_t comm, struct mpccl_win *w)
{
    return comm->exec->win_setup(comm, w);
}

static void win_free(ncclComm_t comm, struct mpccl_win *w)
{
    if (!w) return;
    unpublish(w);
    comm->exec->win_free(comm, w);
    free(w->peer_size);
    w->magic = MPCCL_OBJ_DEAD;
    free(w);
}

/* Every rank's size and flags: a window is symmetric in size when registered
 * NCCL_WIN_COLL_SYMMETRIC, and the flags must match (they decide how peers
 * address it). */
static mpccl_status_t exchange_sizes(ncclComm_t comm, struct mpccl_win *w)
{
    int n = comm->nranks;
    uint64_t *all = calloc((size_t)n * 2, sizeof(uint64_t));
    w->peer_size = calloc((size_t)n, sizeof(size_t));
    mpccl_status_t st = (all && w->peer_size) ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a window of %d ranks", n);
    st = mpccl_win_agree(comm, st, "ncclCommWindowRegister");
    if (st != MPCCL_OK) {
        free(all);
        return st;
    }
    all[2 * comm->rank] = w->size;
    all[2 * comm->rank + 1] = (uint64_t)w->flags;
    MPCCL_CHECK_GOTO(mpccl_bootstrap_allgather(&comm->bs, all, 2 * sizeof(uint64_t)), st, out);
    for (int r = 0; r < n; r++) {
        w->peer_size[r] = (size_t)all[2 * r];
        if ((int)all[2 * r + 1] != w->flags) {
            st = mpccl_fail(MPCCL_ERR_ARG,
                            "ncclCommWindowRegister: argument winFlags = %#x on rank %d but %#x on rank %d; every "
                            "rank must pass the same flags",
                            w->flags, comm->rank, (int)all[2 * r + 1], r);
            break;
        }
        if ((w->flags & NCCL_WIN_COLL_SYMMETRIC) && all[2 * r] != w->size) {
            st = mpccl_fail(MPCCL_ERR_ARG,
                            "ncclCommWindowRegister: argument size = %zu on rank %d but %zu on rank %d; a window "
                            "registered with NCCL_WIN_COLL_SYMMETRIC has the same size on every rank",
                            w->size, comm->rank, (size_t)all[2 * r], r);
            break;
        }
    }
out:
    free(all);
    return st;
}

mpccl_status_t mpccl_win_register(ncclComm_t comm, void *buff, size_t size, int flags, mpccl_status_t local,
                                  ncclWindow_t *out)
{
    mpccl_win_state_t *ws;
    mpccl_status_t st = local;
    if (st == MPCCL_OK) st = mpccl_win_state(comm, &ws);
    st = mpccl_win_agree(comm, st, "ncclCommWindowRegister");
    if (st != MPCCL_OK) return st;
    if (!ws->sig_ready) {
        MPCCL_CHECK(sig_setup(comm, ws));
        __atomic_store_n(&ws->sig_ready, 1, __ATOMIC_RELEASE);
    }
    struct mpccl_win *w = calloc(1, sizeof(*w));
    st = mpccl_win_agree(comm, w ? MPCCL_OK : mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a window"),
                         "ncclCommWindowRegister");
    if (st != MPCCL_OK) {
        free(w);
        return st;
    }
    w->magic = MPCCL_WIN_MAGIC;
    w->comm = comm;
    /* The ordinal counts only once the window is in the list (below), and
     * every failure in between is agreed on: ordinals stay equal across
     * ranks, and a peer's put that arrives before this rank finished sees
     * "not yet" rather than "gone" (mpccl_win_find_id). */
    pthread_mutex_lock(&ws->lock);
    w->id = ws->next_win_id;
    pthread_mutex_unlock(&ws->lock);
    w->base = buff;
    w->size = size;
    w->flags = flags;
    MPCCL_CHECK_GOTO(exchange_sizes(comm, w), st, fail);
    w->handle = (ncclWindow_t)(void *)w; /* GPU communicators: replaced by the device descriptor */
    MPCCL_CHECK_GOTO(win_setup(comm, w), st, fail);
    publish(w);
    pthread_mutex_lock(&ws->lock);
    w->next = ws->wins;
    ws->wins = w;
    ws->next_win_id = w->id + 1;
    pthread_mutex_unlock(&ws->lock);
    MPCCL_INFO(MPCCL_SUB_P2P, "comm 0x%llx: window %p registered (%p, %zu bytes, flags %#x)",
               (unsigned long long)comm->id, (void *)w->handle, buff, size, flags);
    *out = w->handle;
    return MPCCL_OK;
fail:
    win_free(comm, w);
    return st;
}

mpccl_status_t mpccl_win_deregister(ncclComm_t comm, ncclWindow_t h)
{
    mpccl_win_state_t *ws = comm->win;
    struct mpccl_win *w = NULL;
    if (ws) {
        pthread_mutex_lock(&ws->lock);
        for (struct mpccl_win **pp = &ws->wins; *pp; pp = &(*pp)->next)
            if ((*pp)->handle == h) {
                w = *pp;
                *pp = w->next;
                break;
            }
        pthread_mutex_unlock(&ws->lock);
    }
    if (!w)
        return mpccl_fail(MPCCL_ERR_ARG,
                          "ncclCommWindowDeregister: argument win = %p is not a live window of comm %p "
                          "(deregistered already, or registered on another communicator)",
                          (void *)h, (void *)comm);
    win_free(comm, w);
    return MPCCL_OK;
}

void mpccl_win_release(ncclComm_t comm)
{
    mpccl_win_state_t *ws = comm->win;
    /* Deliveries from other nodes and puts of a group that never ended stop
     * before their windows and counters go. */
    comm->exec->win_stop(comm);
    if (!ws) return;
    while (ws->wins) {
        struct mpccl_win *w = ws->wins;
        ws->wins = w->next;
        win_free(comm, w);
    }
    while (ws->regs) {
        mpccl_reg_t *r = ws->regs;
        ws->regs = r->next;
        mpccl_reg_free(comm, r);
    }
    comm->exec->sig_free(comm, ws);
    pthread_mutex_destroy(&ws->lock);
    pthread_mutex_destroy(&ws->wait_lock);
    free(ws);
    comm->win = NULL;
}
