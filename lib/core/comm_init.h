/* Communicator creation (ncclCommInit*, split, grow, shrink): each way a
 * communicator comes to be forms a bootstrap, then mpccl_comm_setup builds the
 * rest.  The inits are collective: they run at once, or at the outermost
 * ncclGroupEnd when called inside a group (group.h).  The API layer has
 * checked the arguments. */
#ifndef MPCCL_COMM_INIT_H
#define MPCCL_COMM_INIT_H

#include "core/comm.h"
#include "mpccl.h"

/* What a deferred init needs; freed by the init function. */
typedef struct mpccl_init_job {
    ncclComm_t comm;
    ncclComm_t *user_slot; /* set to NULL if the init fails */
    ncclConfig_t config;
    int rank, nranks;
    ncclUniqueId id;                 /* unique id inits */
    mpccl_inproc_group_t *inproc;    /* ncclCommInitAll */
    const mpcclOobOps_t *oob;        /* mpcclCommInitOob */
    void *oob_ctx;
    ncclComm_t parent;               /* ncclCommSplit, ncclCommGrow */
    int color, key;
    int has_id;                      /* ncclCommGrow: this rank was given the id */
    int *survivors;                  /* ncclCommShrink: parent ranks kept, ascending */
    int cuda_dev;                    /* the device it binds to; -1: host */
} mpccl_init_job_t;

/* A job for a new communicator of nranks with this rank, bound to the
 * thread's current device: *slot holds the communicator at once and is
 * cleared if the init fails.  NULL when out of memory. */
mpccl_init_job_t *mpccl_init_job_new(ncclComm_t *slot, const ncclConfig_t *config, int rank, int nranks);
/* Finishes an init over bs (st: how forming it went): on failure the
 * communicator is released and the user's handle cleared, as a failed
 * blocking init in NCCL leaves nothing to destroy; a nonblocking init's
 * communicator (run by its worker), or one being aborted, stays for the
 * user's or the abort's release.  The job was a user of the communicator
 * (comm_async.h) until here.  Frees job. */
mpccl_status_t mpccl_init_job_finish(mpccl_init_job_t *job, mpccl_bootstrap_t *bs, mpccl_status_t st);

/* ncclCommInitRank*: over the unique id's bootstrap root. */
mpccl_status_t mpccl_comm_init_rank(const char *fn, ncclComm_t *slot, const ncclConfig_t *config, int rank, int nranks,
                                    const ncclUniqueId *id);
/* ncclCommInitAll: ndev ranks in this process, one group of inits. */
mpccl_status_t mpccl_comm_init_all(const char *fn, ncclComm_t *comms, int ndev, const int *devlist);
/* mpcclCommInitOob: over the caller's allgather. */
mpccl_status_t mpccl_comm_init_oob(const char *fn, ncclComm_t *slot, const ncclConfig_t *config, int rank, int nranks,
                                   const mpcclOobOps_t *ops, void *ctx);
/* The bootstrap of the child of color that this rank joins (comm_split.c):
 * collective over parent; ranks ordered by key, then parent rank.  With
 * NCCL_SPLIT_NOCOLOR only the collective part runs (*count 0, out untouched). */
mpccl_status_t mpccl_split_bootstrap(mpccl_bootstrap_t *parent, int color, int key, int *newrank, int *count,
                                     mpccl_bootstrap_t *out);
/* ncclCommSplit (comm_split.c). */
mpccl_status_t mpccl_comm_split(const char *fn, ncclComm_t parent, int color, int key, const ncclConfig_t *config,
                                ncclComm_t *slot);
/* ncclCommGrow (comm_grow.c): parent NULL on a new rank, which then has an id. */
mpccl_status_t mpccl_comm_grow(const char *fn, ncclComm_t parent, int nranks, const ncclUniqueId *id, int rank,
                               const ncclConfig_t *config, ncclComm_t *slot);
/* ncclCommShrink (comm_shrink.c; abort: NCCL_SHRINK_ABORT): survivors (count parent ranks, ascending,
 * malloc'd; taken over) form the child, this rank as newrank. */
mpccl_status_t mpccl_comm_shrink(const char *fn, ncclComm_t parent, int *survivors, int count, int newrank,
                                 const ncclConfig_t *config, int abort, ncclComm_t *slot);

#endif
