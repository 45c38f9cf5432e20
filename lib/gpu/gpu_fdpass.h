/* Handing file descriptors to other processes of this host (SCM_RIGHTS over
 * a unix socket).  CUDA shares cuMem (VMM) allocations such as ncclMemAlloc
 * memory only as a POSIX file descriptor, which a bootstrap allgather cannot
 * carry: the owner offers the descriptor under a key (its allocation base),
 * and a peer that wants to map the allocation fetches it by (owner pid, key).
 *
 * The same server answers calls: a small request (and optionally a file
 * descriptor) that a handler installed by this process serves on the server
 * thread.  Registered buffers use it: the owner asks each peer process to map
 * its buffer and learns the address there (gpu_ipc_push.c), so the peer never has
 * to stop and ask for it.
 *
 * The first offer (or mpccl_fdpass_serve) starts one server thread per
 * process and copy of the library, blocked in accept() on the abstract socket
 * "mpccl-fd-<pid>-<tag>"; it answers only processes of the same user
 * (SO_PEERCRED).  The tag keeps two copies of mpccl in one process apart
 * (mpccl-perf --compare with another mpccl build), so a server is named by
 * (pid, tag) and descriptors carry both.  No CUDA here. */
#ifndef MPCCL_FDPASS_H
#define MPCCL_FDPASS_H

#include <stdint.h>
#include <sys/types.h>

#include "util/status.h"

/* This copy of the library's server tag (random, nonzero, fixed for the life
 * of the process). */
uint32_t mpccl_fdpass_tag(void);
/* Offers fd under key (the table keeps a duplicate; the caller keeps fd). */
mpccl_status_t mpccl_fdpass_offer(uint64_t key, int fd);
/* Withdraws the offer under key and closes the table's duplicate. */
void mpccl_fdpass_withdraw(uint64_t key);
/* Fetches the descriptor that server (owner, tag) offers under key; *fd is
 * this process's own descriptor (close it when done). */
mpccl_status_t mpccl_fdpass_fetch(pid_t owner, uint32_t tag, uint64_t key, int *fd);

#define MPCCL_FDPASS_MAX_MSG 512 /* bytes of a call's request or reply */
/* Serves one call on the server thread: req (len bytes) with fd (-1: none;
 * the handler owns it).  Writes up to MPCCL_FDPASS_MAX_MSG bytes of reply and
 * returns 0, or a nonzero code the caller receives. */
typedef int32_t (*mpccl_fdpass_handler_t)(const void *req, uint32_t len, int fd, void *reply, uint32_t *reply_len);
/* Installs this process's handler (one per process) and starts the server. */
mpccl_status_t mpccl_fdpass_serve(mpccl_fdpass_handler_t h);
/* Calls server (owner, tag)'s handler with req (len <= MPCCL_FDPASS_MAX_MSG) and
 * fd (-1: none; the caller keeps its own).  On MPCCL_OK, *code is the
 * handler's answer and reply holds *reply_len bytes (reply has room for
 * MPCCL_FDPASS_MAX_MSG).  what names the request in messages. */
mpccl_status_t mpccl_fdpass_call(pid_t owner, uint32_t tag, const void *req, uint32_t len, int fd, void *reply, uint32_t *reply_len,
                                 int32_t *code, const char *what);

#endif
