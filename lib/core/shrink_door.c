/* ncclCommShrink's id exchange over each rank's door (shrink_door.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "core/comm_fail.h"
#include "core/shrink_door.h"
#include "util/log.h"

#define DOOR_MAGIC 0x5348524b444f4f52ULL /* "SHRKDOOR" */
#define DOOR_ID_MAX 128
#define DOOR_POLL_MS 100      /* between checks for an abort or the root's death */
#define DOOR_PROBE_MS 1000    /* between knocks on the root's door */
#define DOOR_MESSAGE_MS 10000 /* a connection that has begun delivers within this */

typedef struct {
    uint64_t magic; /* DOOR_MAGIC ^ the communicator's id */
    int32_t root;   /* the sender's rank in the parent */
    uint32_t len;
    unsigned char id[DOOR_ID_MAX];
} door_msg_t;

void mpccl_shrink_door_open(int *fd, mpccl_sockaddr_t *addr)
{
    *fd = -1;
    memset(addr, 0, sizeof(*addr));
    mpccl_sockaddr_t where;
    char ifname[32];
    if (mpccl_socket_find_interface(&where, ifname, sizeof(ifname)) != MPCCL_OK ||
        mpccl_socket_listen(&where, fd, addr) != MPCCL_OK) {
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommShrink: no listening socket (%s); a shrink will share its id over "
                   "the transport", mpccl_last_error());
        mpccl_socket_close(fd);
        *fd = -1;
        memset(addr, 0, sizeof(*addr));
    }
}

void mpccl_shrink_door_close(int *fd) { mpccl_socket_close(fd); }

int mpccl_shrink_door_valid(const mpccl_sockaddr_t *a) { return mpccl_sockaddr_len(a) != 0; }

static mpccl_status_t door_write(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, const door_msg_t *m);

/* A message from this rank: len bytes of body (0: a failure notice). */
static void door_msg(ncclComm_t comm, door_msg_t *m, const void *body, size_t body_bytes, uint32_t len)
{
    memset(m, 0, sizeof(*m));
    m->magic = DOOR_MAGIC ^ comm->id;
    m->root = comm->rank;
    m->len = len;
    memcpy(m->id, body, body_bytes);
}

mpccl_status_t mpccl_shrink_door_send(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, const void *id,
                                      size_t len)
{
    if (len == 0 || len > DOOR_ID_MAX) return mpccl_fail(MPCCL_ERR_INTERNAL, "ncclCommShrink: an id of %zu bytes", len);
    door_msg_t m;
    door_msg(comm, &m, id, len, (uint32_t)len);
    return door_write(comm, peer, to, &m);
}

void mpccl_shrink_door_send_failure(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, int lost)
{
    door_msg_t m;
    int32_t l = lost;
    door_msg(comm, &m, &l, sizeof(l), 0); /* a notice, not an id */
    if (door_write(comm, peer, to, &m) != MPCCL_OK)
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommShrink: could not tell rank %d that the shrink failed", peer);
}

/* What a survivor answers once it holds the id. */
static uint64_t ack_word(ncclComm_t comm, int peer) { return DOOR_MAGIC ^ comm->id ^ (uint64_t)(uint32_t)peer; }

/* A written id is not yet a taken one: the kernel queues a connection and its
 * bytes for a live process that may die before it reads them (a survivor
 * killed just before its own shrink), and the child's bootstrap would then
 * wait for it.  So the root waits for the survivor's answer: the survivor's
 * death resets the connection at once, an abort of the communicator ends the
 * wait, and a machine gone silent is given up at MPCCL_BOOTSTRAP_TIMEOUT. */
static mpccl_status_t await_ack(ncclComm_t comm, int peer, int fd)
{
    char what[96];
    snprintf(what, sizeof(what), "rank %d's receipt of the shrink's id", peer);
    uint64_t ack = 0;
    mpccl_status_t st = mpccl_socket_recv_all(fd, &ack, sizeof(ack),
                                              mpccl_socket_now_ms() + 1000LL * mpccl_bootstrap_timeout_s(), what);
    if (st == MPCCL_OK && ack != ack_word(comm, peer))
        st = mpccl_fail(MPCCL_ERR_REMOTE, "%s: a wrong answer 0x%llx (not rank %d's door?)", what,
                        (unsigned long long)ack, peer);
    if (st == MPCCL_OK || st == MPCCL_ERR_USAGE) return st; /* taken, or the communicator is being aborted */
    char why[256];
    snprintf(why, sizeof(why), "%s", mpccl_last_error());
    return mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: rank %d did not take the new communicator's id (%s): it "
                      "died before or during its shrink (exclude it too)", peer, why);
}

static mpccl_status_t door_write(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, const door_msg_t *m)
{
    char what[64];
    snprintf(what, sizeof(what), "the shrink's id to rank %d", peer);
    /* The door has listened since setup: a live peer's kernel takes the
     * connection at once; a dead one refuses it. */
    int64_t now = mpccl_socket_now_ms();
    int fd = -1, e = mpccl_socket_connect(to, now + DOOR_MESSAGE_MS, now + 1000, &fd);
    if (e != 0)
        return mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: cannot reach rank %d to hand it the new "
                          "communicator (%s): it died during the shrink (exclude it too)", peer, strerror(e));
    mpccl_status_t st = mpccl_socket_send_all(fd, m, sizeof(*m), mpccl_socket_now_ms() + DOOR_MESSAGE_MS, what);
    if (st == MPCCL_OK && m->len != 0) st = await_ack(comm, peer, fd);
    mpccl_socket_close(&fd);
    return st;
}

/* One connection at the door: 1 when it carried root's id, 0 when it was
 * someone else's (dropped), -1 when root says the shrink failed (*lost: the
 * rank it could not reach). */
static int take(ncclComm_t comm, int c, int root, void *id, size_t len, int *lost)
{
    door_msg_t m;
    char what[64];
    snprintf(what, sizeof(what), "the shrink's id from rank %d", root);
    mpccl_status_t st = mpccl_socket_recv_all(c, &m, sizeof(m), mpccl_socket_now_ms() + DOOR_MESSAGE_MS, what);
    if (st == MPCCL_OK && m.magic == (DOOR_MAGIC ^ comm->id) && m.root == root && m.len == 0) {
        int32_t l;
        memcpy(&l, m.id, sizeof(l));
        *lost = l;
        return -1;
    }
    if (st != MPCCL_OK || m.magic != (DOOR_MAGIC ^ comm->id) || m.root != root || m.len != len) {
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommShrink: dropped a connection at the door that is not rank %d's for "
                   "comm 0x%llx", root, (unsigned long long)comm->id);
        return 0;
    }
    memcpy(id, m.id, len);
    /* The root waits for this (await_ack); were it gone, the child's
     * bootstrap, which it roots, fails on its own. */
    uint64_t ack = ack_word(comm, comm->rank);
    (void)mpccl_socket_send_all(c, &ack, sizeof(ack), mpccl_socket_now_ms() + DOOR_MESSAGE_MS, what);
    return 1;
}

/* One connection attempt, closed at once (a door drops an empty connection):
 * 0, or the errno that stopped it within wait_ms. */
static int knock_once(const mpccl_sockaddr_t *door, int64_t wait_ms)
{
    int64_t now = mpccl_socket_now_ms();
    int fd = -1, e = mpccl_socket_connect(door, now + wait_ms, now, &fd);
    if (e == 0) mpccl_socket_close(&fd);
    return e;
}

/* Whether root's door still takes connections.  The watcher only covers
 * peers on this machine and UCX notices a dead peer only when something is in
 * flight to it, so a root that dies before it writes the id would otherwise
 * leave us waiting for ever.  Its kernel refuses at once for a dead process;
 * a machine that is gone answers nothing, counted from the first silent knock
 * (*silent_since).  Returns 0, or the errno that says root is gone. */
static int knock(const mpccl_sockaddr_t *root_door, int64_t *silent_since)
{
    int64_t now = mpccl_socket_now_ms();
    int e = knock_once(root_door, DOOR_PROBE_MS);
    if (e == 0) {
        *silent_since = 0;
        return 0;
    }
    if (e == ECONNREFUSED) return e;
    /* Silent (or ECANCELED: the caller's loop reports the abort). */
    if (*silent_since == 0) *silent_since = now;
    return mpccl_socket_now_ms() - *silent_since >= DOOR_MESSAGE_MS ? ETIMEDOUT : 0;
}

int mpccl_shrink_door_refuses(const mpccl_sockaddr_t *door)
{
    return knock_once(door, 200) == ECONNREFUSED;
}

mpccl_status_t mpccl_shrink_door_recv(ncclComm_t comm, int fd, int root, const mpccl_sockaddr_t *root_door,
                                      void *id, size_t len)
{
    if (len > DOOR_ID_MAX) return mpccl_fail(MPCCL_ERR_INTERNAL, "ncclCommShrink: an id of %zu bytes", len);
    int64_t next_knock = mpccl_socket_now_ms() + DOOR_PROBE_MS, silent_since = 0;
    for (;;) {
        if (mpccl_bootstrap_cancelled())
            return mpccl_fail(MPCCL_ERR_USAGE, "ncclCommShrink: given up waiting for rank %d, the communicator "
                              "was aborted (ncclCommAbort)", root);
        if (mpccl_comm_peer_dead(comm, root))
            return mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: rank %d died during the shrink (exclude it too)",
                              root);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, DOOR_POLL_MS);
        if (r < 0 && errno != EINTR)
            return mpccl_fail(MPCCL_ERR_SYSTEM, "ncclCommShrink: poll on the door: %s", strerror(errno));
        if (r <= 0 && root_door && mpccl_socket_now_ms() >= next_knock) {
            int e = knock(root_door, &silent_since);
            if (e != 0)
                return mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: rank %d, which hands out the new communicator, "
                                  "is gone (its door: %s); exclude it too", root, strerror(e));
            next_knock = mpccl_socket_now_ms() + DOOR_PROBE_MS;
        }
        if (r <= 0) continue;
        int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) continue; /* gone between poll and accept, or EINTR: wait for the next */
        int lost = -1, got = take(comm, c, root, id, len, &lost);
        close(c);
        if (got > 0) return MPCCL_OK;
        if (got < 0)
            return mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: rank %d, which hands out the new communicator, "
                              "could not reach rank %d: it died during the shrink (exclude it too)", root, lost);
    }
}
