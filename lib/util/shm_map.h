/* A named POSIX shared-memory segment (/dev/shm) mapped into this process:
 * how processes of one machine share host memory they all register with
 * CUDA (the GPU executor's host mailboxes, the shared-device path). */
#ifndef MPCCL_UTIL_SHM_MAP_H
#define MPCCL_UTIL_SHM_MAP_H

#include <stddef.h>

#include "util/status.h"

/* Maps segment `name` (bytes long) read-write.  create: makes it, fresh and
 * zeroed, and fails if the name exists; otherwise opens the one another
 * process made.  A failed create leaves no name behind.  what names the
 * segment's use in the error. */
mpccl_status_t mpccl_shm_map(const char *name, size_t bytes, int create, const char *what, void **out);

#endif
