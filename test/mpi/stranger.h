/* A stranger inside a test process: a thread that finds every TCP port this
 * process opens to listen on after the stranger started (/proc/self/fd and
 * /proc/net/tcp{,6}; ports open before, such as the MPI library's, are left
 * alone) and, for each,
 * holds 3 silent connections, 3 that sent garbage and 3 that claim a huge
 * length, and floods it with connections that open and close at once (flood
 * of them per port every 100 ms), the way port scanners and monitoring
 * agents do.  It keeps every byte the
 * listeners send it, so a test can check that none of a secret leaked. */
#ifndef MPCCL_TEST_STRANGER_H
#define MPCCL_TEST_STRANGER_H

#include <stddef.h>

typedef struct stranger stranger_t;

/* Starts the thread. */
stranger_t *stranger_start(int flood);
/* Stops it, closes its connections; returns the ports it attacked and the
 * connections it made (*conns).  Frees s. */
int stranger_stop(stranger_t *s, long *conns, int (*leaked)(const unsigned char *buf, size_t n, void *arg), void *arg,
                  int *leak);

#endif
