/* Host element-wise arithmetic (host_reduce.c), over util/reduce_ops.h's
 * per-element operators. */
#ifndef MPCCL_HOST_REDUCE_H
#define MPCCL_HOST_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "util/datatype.h"

/* dst[i] = a[i] op b[i] for n elements; dst may alias a or b.  Low-precision floats
 * compute in float and round once per element, like the CUDA kernels. */
void mpccl_host_reduce(ncclDataType_t dt, mpccl_op_t op, void *dst, const void *a,
                       const void *b, size_t n);
/* dst[i] = src[i] * scalar; scalar points to one element of type dt (PreMulSum,
 * float ncclAvg).  dst may alias src. */
void mpccl_host_scale(ncclDataType_t dt, void *dst, const void *src, const void *scalar, size_t n);
/* dst[i] = src[i] / divisor (integer ncclAvg: truncates toward zero, as NCCL). */
void mpccl_host_divide(ncclDataType_t dt, void *dst, const void *src, uint64_t divisor, size_t n);

#endif
