/* The socket bootstrap's root: the wire format between ranks and the root, and
 * the background thread that collects every rank's listening address and tells
 * each rank its ring successor.  Used only by bootstrap_socket.c.  Messages are
 * in host byte order: all ranks of a job share one architecture. */
#ifndef MPCCL_BOOTSTRAP_ROOT_H
#define MPCCL_BOOTSTRAP_ROOT_H

#include <stdint.h>

#include "bootstrap/bootstrap_gate.h"
#include "bootstrap/bootstrap_net.h"
#include "util/status.h"

#ifndef MPCCL_SOCKET_ID_VERSION
#define MPCCL_SOCKET_ID_VERSION 2u
#endif
/* The magic of ids built from MPCCL_COMM_ID: every process can build the same id
 * without exchanging it ("mpcclENV"). */
#define MPCCL_COMM_ID_MAGIC 0x564e456c6363706dull
/* Limits a rank's claim so a corrupt hello cannot make the root allocate wildly. */
#define MPCCL_BOOTSTRAP_MAX_RANKS (1 << 24)
/* Labels binding the gate's proofs to one listener. */
#define MPCCL_GATE_LABEL_ROOT "mpccl bootstrap root"
#define MPCCL_GATE_LABEL_RING "mpccl bootstrap ring"

/* rank -> root: the body of its answer at the root's gate (bootstrap_gate.h),
 * which proves it holds the unique id's secret. */
typedef struct mpccl_root_hello {
    uint32_t version;
    int32_t rank;
    int32_t nranks;
    uint32_t reserved;
    mpccl_sockaddr_t listen_addr; /* where rank-1 will connect */
} mpccl_root_hello_t;

/* The rank of a hello that withdraws the id (mpccl_socket_withdraw_unique_id):
 * the root fails every rank that arrived and every later one. */
#define MPCCL_ROOT_WITHDRAW (-2)
/* root -> rank: status 0 and len = sizeof(mpccl_sockaddr_t) followed by the
 * listening address of rank+1 mod nranks; or status 1 and len bytes of message. */
typedef struct mpccl_root_reply {
    int32_t status;
    uint32_t len;
} mpccl_root_reply_t;

#define MPCCL_ROOT_MSG_MAX 1024

/* Whether a hello that proved the secret is a usable rank of a job of
 * nranks ranks (nranks < 0: the first hello, which sets it): NULL, or why not
 * (msg, len bytes).  Any bytes may come in. */
const char *mpccl_root_hello_problem(const mpccl_root_hello_t *h, int nranks, char *msg, size_t len);
/* The rank side of a reply's header: 0 and the successor's address follows,
 * 1 and *msg_len bytes of message follow, or -1: malformed (any bytes). */
int mpccl_root_reply_parse(const mpccl_root_reply_t *rep, size_t *msg_len);

/* rank -> rank+1: the body of its answer at rank+1's ring gate. */
typedef struct mpccl_ring_hello {
    int32_t rank;
    uint32_t reserved;
} mpccl_ring_hello_t;
/* Whether a ring hello (n bytes, from a peer that proved the secret) is from
 * rank prev (any bytes). */
int mpccl_ring_hello_ok(const void *body, size_t n, int prev);

/* Heads every bootstrap allgather on the ring: ranks calling different
 * collectives show up as a mismatch instead of misread bytes. */
typedef struct mpccl_coll_hdr {
    uint32_t tag;
    uint32_t seq;
    uint64_t bytes;
} mpccl_coll_hdr_t;
#define MPCCL_COLL_TAG 0x42534147u /* "GASB" */
/* Whether a predecessor's header (n bytes) matches this rank's collective #seq
 * of `bytes` per rank (any bytes). */
int mpccl_coll_hdr_ok(const void *hdr, size_t n, uint32_t seq, uint64_t bytes);

/* Listens at addr and starts the detached root thread; it exits once the
 * communicator formed, or it failed or timed out (after telling the ranks that
 * arrived).  Only connections that prove key get in.  *bound is the address
 * to put in the unique id. */
mpccl_status_t mpccl_bootstrap_root_start(const mpccl_sockaddr_t *addr, const mpccl_gate_key_t *key,
                                          mpccl_sockaddr_t *bound);

#endif
