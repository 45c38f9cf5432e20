/* Handing file descriptors to other processes of this host (SCM_RIGHTS over
 * a unix socket).  CUDA shares cuMem (VMM) allocations such as ncclMemAlloc
 * memory only as a POSIX file descriptor, which a bootstrap allgather cannot
 * carry: the owner offers the descriptor under a key (its allocation base),
 * and a peer that wants to map the allocation fetches it by (owner pid, key).
 *
 * The first offer starts one server thread per process, blocked in accept()
 * on the abstract socket "mpccl-fd-<pid>"; it answers only processes of the
 * same user (SO_PEERCRED).  No CUDA here. */
#ifndef MPCCL_FDPASS_H
#define MPCCL_FDPASS_H

#include <stdint.h>
#include <sys/types.h>

#include "status.h"

/* Offers fd under key (the table keeps a duplicate; the caller keeps fd). */
mpccl_status_t mpccl_fdpass_offer(uint64_t key, int fd);
/* Withdraws the offer under key and closes the table's duplicate. */
void mpccl_fdpass_withdraw(uint64_t key);
/* Fetches the descriptor process `owner` offers under key; *fd is this
 * process's own descriptor (close it when done). */
mpccl_status_t mpccl_fdpass_fetch(pid_t owner, uint64_t key, int *fd);

#endif
