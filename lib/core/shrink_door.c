/* ncclCommShrink's id exchange over each rank's door (shrink_door.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/bootstrap_gate.h"
#include "core/comm_fail.h"
#include "core/shrink_door.h"
#include "util/log.h"

#define DOOR_LABEL "mpccl shrink door"
#define DOOR_ID_MAX 128
#define DOOR_POLL_MS 100      /* between checks for an abort or the root's death */
#define DOOR_PROBE_MS 1000    /* between knocks on the root's door */
#define DOOR_MESSAGE_MS 10000 /* a peer that proved the secret delivers within this */
#define DOOR_ACK 0x4e454b41544b5253ULL /* "SRKTAKEN": the survivor holds the id */

/* The sender's body at a survivor's gate (bootstrap_gate.h): the gate proves
 * it knows the communicator's secret; then len bytes of id follow, or, for
 * len 0, the shrink failed because rank `lost` could not be reached. */
typedef struct {
    int32_t root; /* the sender's rank in the parent */
    uint32_t len;
    int32_t lost;
    uint32_t reserved;
} door_msg_t;

static void door_key(ncclComm_t comm, mpccl_gate_key_t *key)
{
    mpccl_gate_key_from(comm->secret, sizeof(comm->secret), key);
}

int mpccl_shrink_door_msg_problem(const void *msg, size_t n, int root, size_t id_len)
{
    door_msg_t m;
    if (n != sizeof(m)) return 1;
    memcpy(&m, msg, sizeof(m));
    if (m.root != root) return 1;
    if (m.len == 0) return 0; /* a failure notice; m.lost is only reported */
    return m.len != id_len || id_len > DOOR_ID_MAX;
}

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

static mpccl_status_t door_write(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, const door_msg_t *m,
                                 const void *id);

mpccl_status_t mpccl_shrink_door_send(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, const void *id,
                                      size_t len)
{
    if (len == 0 || len > DOOR_ID_MAX) return mpccl_fail(MPCCL_ERR_INTERNAL, "ncclCommShrink: an id of %zu bytes", len);
    door_msg_t m = {.root = comm->rank, .len = (uint32_t)len, .lost = -1};
    return door_write(comm, peer, to, &m, id);
}

void mpccl_shrink_door_send_failure(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, int lost)
{
    door_msg_t m = {.root = comm->rank, .len = 0, .lost = lost}; /* a notice, not an id */
    if (door_write(comm, peer, to, &m, NULL) != MPCCL_OK)
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommShrink: could not tell rank %d that the shrink failed", peer);
}

/* A written id is not yet a taken one: the kernel queues bytes for a live
 * process that may die before it reads them (a survivor killed just before
 * its own shrink), and the child's bootstrap would then wait for it.  So the
 * root waits for the survivor's answer: the survivor's death resets the
 * connection at once, an abort of the communicator ends the wait, and a
 * machine gone silent is given up at MPCCL_BOOTSTRAP_TIMEOUT. */
static mpccl_status_t await_ack(ncclComm_t comm, int peer, int fd)
{
    char what[96];
    snprintf(what, sizeof(what), "rank %d's receipt of the shrink's id", peer);
    uint64_t ack = 0;
    mpccl_status_t st = mpccl_socket_recv_all(fd, &ack, sizeof(ack),
                                              mpccl_socket_now_ms() + 1000LL * mpccl_bootstrap_timeout_s(), what);
    if (st == MPCCL_OK && ack != DOOR_ACK)
        st = mpccl_fail(MPCCL_ERR_REMOTE, "%s: a wrong answer 0x%llx", what, (unsigned long long)ack);
    if (st == MPCCL_OK || st == MPCCL_ERR_USAGE) return st; /* taken, or the communicator is being aborted */
    char why[256];
    snprintf(why, sizeof(why), "%s", mpccl_last_error());
    return mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: rank %d did not take the new communicator's id (%s): it "
                      "died before or during its shrink (exclude it too)", peer, why);
}

/* Connects to peer's door and passes its gate: the survivor serves its door
 * only once it waits in its own shrink, so this waits for that (bounded by
 * MPCCL_BOOTSTRAP_TIMEOUT); a connection its gate dropped (this process was
 * slow to answer) is made again. */
static mpccl_status_t door_enter(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, const door_msg_t *m,
                                 int *fd)
{
    char what[96];
    snprintf(what, sizeof(what), "ncclCommShrink: rank %d's door", peer);
    mpccl_gate_key_t key;
    door_key(comm, &key);
    int64_t deadline = mpccl_socket_now_ms() + 1000LL * mpccl_bootstrap_timeout_s();
    for (;;) {
        /* The door has listened since setup: a live peer's kernel takes the
         * connection at once; a dead one refuses it. */
        int64_t now = mpccl_socket_now_ms();
        int e = mpccl_socket_connect(to, now + DOOR_MESSAGE_MS, now + 1000, fd);
        if (e != 0)
            return mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: cannot reach rank %d to hand it the new "
                              "communicator (%s): it died during the shrink (exclude it too)", peer, strerror(e));
        int refused = 0, closed = 0;
        mpccl_status_t st = mpccl_gate_enter(*fd, &key, DOOR_LABEL, m, sizeof(*m), deadline, what, &refused, &closed);
        if (st == MPCCL_OK) return MPCCL_OK;
        mpccl_socket_close(fd);
        if (!closed || st == MPCCL_ERR_USAGE || mpccl_socket_now_ms() >= deadline) return st;
        struct timespec nap = {0, 20 * 1000000};
        nanosleep(&nap, NULL);
    }
}

static mpccl_status_t door_write(ncclComm_t comm, int peer, const mpccl_sockaddr_t *to, const door_msg_t *m,
                                 const void *id)
{
    char what[64];
    snprintf(what, sizeof(what), "the shrink's id to rank %d", peer);
    int fd = -1;
    MPCCL_CHECK(door_enter(comm, peer, to, m, &fd));
    mpccl_status_t st = MPCCL_OK;
    if (m->len != 0) {
        st = mpccl_socket_send_all(fd, id, m->len, mpccl_socket_now_ms() + DOOR_MESSAGE_MS, what);
        if (st == MPCCL_OK) st = await_ack(comm, peer, fd);
    }
    mpccl_socket_close(&fd);
    return st;
}

/* One connection that passed the gate: 1 when it carried root's id, 0 when it
 * was someone else's (dropped), -1 when root says the shrink failed (*lost:
 * the rank it could not reach). */
static int take(ncclComm_t comm, int c, const door_msg_t *m, int root, void *id, size_t len, int *lost)
{
    char what[64];
    snprintf(what, sizeof(what), "the shrink's id from rank %d", root);
    if (mpccl_shrink_door_msg_problem(m, sizeof(*m), root, len)) {
        MPCCL_INFO(MPCCL_SUB_INIT, "ncclCommShrink: dropped a connection at the door from rank %d (%u bytes), not "
                   "rank %d's id of %zu bytes", m->root, m->len, root, len);
        return 0;
    }
    if (m->len == 0) {
        *lost = m->lost;
        return -1;
    }
    if (mpccl_socket_recv_all(c, id, len, mpccl_socket_now_ms() + DOOR_MESSAGE_MS, what) != MPCCL_OK) return 0;
    /* The root waits for this (await_ack); were it gone, the child's
     * bootstrap, which it roots, fails on its own. */
    uint64_t ack = DOOR_ACK;
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
    mpccl_gate_key_t key;
    door_key(comm, &key);
    char gate_what[64];
    snprintf(gate_what, sizeof(gate_what), "rank %d's shrink door", comm->rank);
    /* Connections that waited in the queue since setup (strangers, knocks)
     * are served beside root's, each given at most the gate's first-bytes
     * deadline. */
    mpccl_gate_t gate;
    mpccl_gate_init(&gate, fd, &key, DOOR_LABEL, sizeof(door_msg_t), gate_what);
    mpccl_status_t st = MPCCL_OK;
    for (;;) {
        if (mpccl_bootstrap_cancelled()) {
            st = mpccl_fail(MPCCL_ERR_USAGE, "ncclCommShrink: given up waiting for rank %d, the communicator "
                            "was aborted (ncclCommAbort)", root);
            break;
        }
        if (mpccl_comm_peer_dead(comm, root)) {
            st = mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: rank %d died during the shrink (exclude it too)",
                            root);
            break;
        }
        int c = -1;
        door_msg_t m;
        int got = mpccl_gate_next(&gate, mpccl_socket_now_ms() + DOOR_POLL_MS, &c, &m);
        if (!got && root_door && mpccl_socket_now_ms() >= next_knock) {
            int e = knock(root_door, &silent_since);
            if (e != 0) {
                st = mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: rank %d, which hands out the new communicator, "
                                "is gone (its door: %s); exclude it too", root, strerror(e));
                break;
            }
            next_knock = mpccl_socket_now_ms() + DOOR_PROBE_MS;
        }
        if (!got) continue;
        int lost = -1, r = take(comm, c, &m, root, id, len, &lost);
        close(c);
        if (r > 0) break;
        if (r < 0) {
            st = mpccl_fail(MPCCL_ERR_REMOTE, "ncclCommShrink: rank %d, which hands out the new communicator, "
                            "could not reach rank %d: it died during the shrink (exclude it too)", root, lost);
            break;
        }
    }
    mpccl_gate_close(&gate);
    return st;
}
