/* The side channel: one thread per process that sleeps in poll() on a TCP
 * listener and answers the peers of this process's communicators while the
 * application thread is busy elsewhere, or stuck in a call or a kernel.  It
 * serves a communicator's progress record (core/progress.h) and its last hang
 * report, and takes the call descriptions that check mode
 * (core/check_mode.h) pushes before data moves.  Requests are authenticated
 * by the communicator they name (its random id); a connection that does not
 * deliver a valid first request within a second is dropped.  Costs nothing
 * while nobody asks. */
#ifndef MPCCL_CORE_SIDE_CHANNEL_H
#define MPCCL_CORE_SIDE_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap/bootstrap_net.h"
#include "core/progress.h"
#include "util/status.h"

struct ncclComm;

/* A progress record as a peer receives it. */
typedef struct mpccl_side_record {
    int32_t rank, pid;
    int32_t state;      /* MPCCL_PROGRESS_* */
    int32_t has_report; /* it holds a hang report (mpccl_side_fetch_report) */
    double wait_s;      /* how long its current call has waited (0: not waiting, or not known) */
    uint64_t ncoll, np2p;
    mpccl_call_rec_t cur, coll, done;
    char kernel[200];   /* GPU communicators: where its kernels are ("" on host) */
} mpccl_side_record_t;

/* Starts the process's thread (once) and registers comm, whose id and rank
 * name it in requests; *addr: where peers reach it (zero when no socket can
 * be had: peers then see this rank as not answering). */
mpccl_status_t mpccl_side_register(struct ncclComm *comm, mpccl_sockaddr_t *addr);
/* Before comm is freed: no request touches it after this returns. */
void mpccl_side_unregister(struct ncclComm *comm);

/* This rank's record now (the same a peer receives). */
void mpccl_side_record_of(struct ncclComm *comm, mpccl_side_record_t *out);
/* Every rank's record, asked of all at once; got[r]: MPCCL_SIDE_GOT where
 * rank r answered by deadline_ms (mpccl_socket_now_ms time), MPCCL_SIDE_GONE
 * where its process answered that it left the communicator (destroyed or
 * aborted it), 0 where nothing came.  The caller's own rank, and ranks
 * living in this process, are read directly. */
enum { MPCCL_SIDE_GOT = 1, MPCCL_SIDE_GONE = 2 };
void mpccl_side_fetch_records(struct ncclComm *comm, mpccl_side_record_t *recs, unsigned char *got,
                              int64_t deadline_ms);
/* The longest hang report a peer serves (bytes, with its NUL). */
#define MPCCL_SIDE_REPORT_MAX (32 * 1024)
/* The hang report rank holds (NUL-terminated into buf), or MPCCL_ERR_REMOTE. */
mpccl_status_t mpccl_side_fetch_report(struct ncclComm *comm, int rank, char *buf, size_t len, int64_t deadline_ms);
/* Keeps text as comm's hang report, served to peers. */
void mpccl_side_set_report(struct ncclComm *comm, const char *text);

/* Check mode: sends peer len bytes under (kind, seq); takes the message of
 * (peer, kind, seq) once it arrived, waiting in steps of a few milliseconds
 * while stop(arg) returns 0 (stop returns nonzero: a failure, abort or
 * timeout; the wait then fails with its status).  *data is malloc'd. */
mpccl_status_t mpccl_side_push(struct ncclComm *comm, int peer, uint32_t kind, uint64_t seq, const void *data,
                               size_t len);
mpccl_status_t mpccl_side_take(struct ncclComm *comm, int peer, uint32_t kind, uint64_t seq, void **data,
                               size_t *len, mpccl_status_t (*stop)(void *arg), void *arg);

/* SIGUSR2 (when the application left it at its default): every registered
 * communicator's hang report, job-wide, printed by a short-lived thread that
 * runs dump(comm) for each. */
void mpccl_side_set_dump(void (*dump)(struct ncclComm *comm));
/* A watch over every registered communicator, about once a second on the
 * side channel's thread: due(comm), called with the registry locked (quick:
 * reads only, never waits), says whether act(comm) should run; act runs on a
 * short-lived thread, the communicator kept registered until it returns
 * (core/stall_watch.h). */
void mpccl_side_set_watch(int (*due)(struct ncclComm *comm), void (*act)(struct ncclComm *comm));

#endif
