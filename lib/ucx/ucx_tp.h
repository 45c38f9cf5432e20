/* The UCX transport's private state, shared by the files that implement it
 * (ucx_transport.c: operations, progress, close, create; ucx_eager.c: the
 * eager limit per endpoint; ucx_revoke.c: the revoke message; ucx_wireup.c:
 * connecting the network endpoints at creation). */
#ifndef MPCCL_UCX_TP_H
#define MPCCL_UCX_TP_H

#include "ucx.h"

typedef struct mpccl_ucx_peer {
    ucp_ep_h ep;
    struct mpccl_ucx_tp *tp;
    int rank;
    ucp_err_handling_mode_t err_mode; /* NONE to same-machine peers under MPCCL_UCX_ERR_MODE=auto */
    int failed;      /* UCX reported the connection broken: requests end in REMOTE */
    ucs_status_t fail_status; /* what UCX reported */
    int warned;               /* the failure was logged as a warning (once per peer) */
    size_t eager_max;         /* ucx_ep_info.c: 0 until known */
    int lanes_local;          /* ucx_ep_info.c: 1 every lane local, 0 one over a network, -1 not known */
    int info_tries;           /* attempts to read UCX's endpoint description */
    int force_close; /* close: a send is still in flight on this endpoint */
} mpccl_ucx_peer_t;

typedef struct mpccl_ucx_tp {
    mpccl_transport_t pub;
    ucp_worker_h worker;
    int efd;                  /* worker event fd; -1 without WAKEUP */
    mpccl_ucx_peer_t *peers;  /* nranks entries */
    mpccl_ucx_op_t inflight;  /* sentinel of the list of tagged ops in flight */
    int failures_pending;     /* a peer failed: cancel its receives in progress() */
    mpccl_ucx_op_t posting;   /* the op being posted, for a callback run inside the call */
    int posting_done;         /* ... which then completed it already */
    long close_timeout_ms;
    long idle_ns;
    long spin_ns;
    int64_t idle_since;       /* first idle() since progress last did something; 0: none */
    /* The revoke message (transport.h): one receive from any sender stays
     * posted; progress reports an arrival to the owner and posts it again. */
    void *revoke_req;         /* the posted receive; NULL: none */
    uint64_t revoke_buf;
    int revoke_posting, revoke_posted_done;
    int revoke_arrived, revoke_from;
    uint64_t revoke_word;     /* what the arrived revoke message said */
    int closing;
} mpccl_ucx_tp_t;

/* The largest message sent eagerly to peer (transport.h, eager_max). */
size_t mpccl_ucx_eager_max(mpccl_transport_t *t, int peer);
/* Whether every lane of peer's endpoint is local (shared memory, CMA, self,
 * CUDA): 1, 0 (a lane over tcp or another network), -1 (not known). */
int mpccl_ucx_lanes_local(mpccl_ucx_tp_t *tp, int peer);
/* Posts the receive of the revoke message from any sender (outside UCX's
 * callbacks); progress reposts it after each arrival. */
void mpccl_ucx_post_revoke_recv(mpccl_ucx_tp_t *tp);
/* Waits until every endpoint to a peer in error mode peer (another machine)
 * is connected, all lanes, bounded by MPCCL_BOOTSTRAP_TIMEOUT; every rank of
 * the transport calls it at creation.  Fails naming a peer that died meanwhile. */
mpccl_status_t mpccl_ucx_complete_wireup(mpccl_ucx_tp_t *tp);

#endif
