/* How a flat launch cuts its work (lib/kernels/flat.h): CTAs, each CTA's share
 * of a block per chunk, where that share lies in the region, and whether the
 * call uses LL units.  Pure arithmetic on sizes and settings, no CUDA, so
 * every rank computes the same answer and the unit tests check the invariants
 * the kernels rely on (test/unit/test_flat_geometry.c). */
#ifndef MPCCL_FLAT_GEOMETRY_H
#define MPCCL_FLAT_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/flat_layout.h"

/* The communicator's settings (equal on every rank). */
typedef struct mpccl_flat_geom_params {
    int nranks;
    uint32_t max_ctas;      /* 1..MPCCL_FLAT_MAX_CTAS */
    uint64_t slice_bytes;   /* per (parity, source), a multiple of 256 */
    uint64_t cta_bytes;     /* bytes per CTA before another joins */
    uint64_t ll_max;        /* largest LL block, a multiple of 16; 0: no LL */
    uint64_t p2p_slice;     /* p2p bytes per (source, parity), a multiple of 256 */
    uint32_t p2p_ctas;      /* most CTAs per p2p message (0: 64); at most max_ctas / 2 */
} mpccl_flat_geom_params_t;

typedef struct mpccl_flat_geom {
    uint32_t ctas;          /* grid size */
    uint32_t sub_elems;     /* elements per CTA per block and chunk */
    uint32_t stride;        /* bytes between the CTAs' areas (slice, phase or LL area) */
    uint64_t ll_bytes;      /* LL area per (parity, source) when LL, else 0 */
} mpccl_flat_geom_t;

/* A collective of `count` elements of `es` bytes in `mode` (mpccl_flat_mode_t). */
void mpccl_flat_geometry(const mpccl_flat_geom_params_t *p, int mode, uint64_t count, size_t es,
                         mpccl_flat_geom_t *out);

/* A collective on symmetric windows (flat.h, mpccl_flat_win_args_t) of
 * `count` elements (> 0) of `es` bytes in `mode`: no slice bounds a CTA's
 * part, only cta_bytes and max_ctas.  *sub: elements per CTA part, whole
 * 16-byte vectors; returns the CTAs (the last one's part may be short). */
uint32_t mpccl_flat_win_geometry(const mpccl_flat_geom_params_t *p, int mode, uint64_t count, size_t es,
                                 uint64_t *sub);

/* A p2p message of `bytes`: the stride of every CTA's area in a p2p slice (the
 * same for all messages), the CTAs and bytes per CTA per chunk. */
uint32_t mpccl_flat_p2p_stride(const mpccl_flat_geom_params_t *p);
void mpccl_flat_p2p_geometry(const mpccl_flat_geom_params_t *p, uint64_t bytes, uint32_t *ctas, uint32_t *sub);
/* The same for an LL message: at most MPCCL_FLAT_P2P_LL_LANES CTAs, sub a
 * multiple of 16 and at most MPCCL_FLAT_P2P_LL_LANE; a message larger than
 * ctas * sub goes in several chunks. */
void mpccl_flat_p2p_ll_geometry(const mpccl_flat_geom_params_t *p, uint64_t bytes, uint32_t *ctas, uint32_t *sub);

#endif
