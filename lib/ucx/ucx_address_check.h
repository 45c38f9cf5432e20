/* What mpccl itself reads of the UCX worker addresses ranks exchange at
 * wireup (ucx_transport.c): each rank's length, before any memory is sized
 * by it.  The address bytes are UCX's to parse. */
#ifndef MPCCL_UCX_ADDRESS_CHECK_H
#define MPCCL_UCX_ADDRESS_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* A worker address is a few hundred bytes; anything larger is corrupt. */
#define MPCCL_UCX_ADDRESS_MAX (1u << 20)

/* Whether every one of n ranks' address lengths is plausible (1 ..
 * MPCCL_UCX_ADDRESS_MAX): -1, else the first rank whose length is not; *max
 * receives the largest (any values may come in).  Inline: every build of the
 * transport's sources gets it without another file. */
static inline int mpccl_ucx_address_lengths_bad(const uint64_t *lens, int n, size_t *max)
{
    *max = 0;
    for (int i = 0; i < n; i++) {
        if (lens[i] == 0 || lens[i] > MPCCL_UCX_ADDRESS_MAX) return i;
        if (lens[i] > *max) *max = (size_t)lens[i];
    }
    return -1;
}

#endif
