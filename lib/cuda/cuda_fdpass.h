/* Handing file descriptors to other processes of this host (SCM_RIGHTS over
 * a unix socket).  CUDA shares cuMem (VMM) allocations such as ncclMemAlloc
 * memory only as a POSIX file descriptor, which a bootstrap allgather cannot
 * carry: the owner offers the descriptor under a key (its allocation base),
 * and a peer that wants to map the allocation fetches it by (owner pid, key).
 *
 * The same server answers calls: a small request (and optionally a file
 * descriptor) that a handler installed by this process serves on the server
 * thread.  Registered buffers use it: the owner asks each peer process to map
 * its buffer and learns the address there (cuda_ipc_push.c), so the peer never has
 * to stop and ask for it.
 *
 * The first offer (or mpccl_fdpass_serve) starts one server thread per
 * process and copy of the library, blocked in accept() on the abstract socket
 * "mpccl-fd-<pid>-<tag>", which any local user can see and connect to.  It
 * checks who connected (SO_PEERCRED) before it reads a byte and answers only
 * processes of the same user that its communicators name as peers on this
 * machine (mpccl_fdpass_allow); to anyone else, and for a key it does not
 * hold, it answers the same "denied".  Each connection is served on a thread
 * of its own.  The tag keeps two copies of mpccl in one process apart
 * (mpccl-perf --compare with another mpccl build), so a server is named by
 * (pid, tag) and descriptors carry both.  No CUDA here. */
#ifndef MPCCL_FDPASS_H
#define MPCCL_FDPASS_H

#include <stddef.h>
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

/* Processes that may fetch and call: a communicator's peers on this machine,
 * learned at its setup (counted: allow once per communicator, forget as
 * often).  This process itself is always allowed. */
mpccl_status_t mpccl_fdpass_allow(pid_t pid);
void mpccl_fdpass_forget(pid_t pid);
/* Whether a connection from (pid, uid) is served. */
int mpccl_fdpass_peer_allowed(pid_t pid, uid_t uid);
/* Serves one accepted connection c as the server thread does (tests call it
 * directly); the caller closes c. */
void mpccl_fdpass_serve_connection(int c);
/* Whether a request header (n bytes) is well formed (any bytes may come in). */
int mpccl_fdpass_request_ok(const void *req, size_t n);

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
