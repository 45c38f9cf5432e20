/* Datatypes and element-wise host arithmetic.  The CUDA twin (lib/kernels/) keeps
 * the same op set and the same conversion rules. */
#ifndef MPCCL_DATATYPE_H
#define MPCCL_DATATYPE_H

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

/* The element-wise operations schedules apply; ncclAvg and PreMulSum are mapped
 * onto these by the planner (scale before, or divide after). */
typedef enum { MPCCL_OP_SUM = 0, MPCCL_OP_PROD, MPCCL_OP_MAX, MPCCL_OP_MIN, MPCCL_NUM_OPS } mpccl_op_t;

size_t mpccl_dtype_size(ncclDataType_t dt);          /* 0 for an invalid type */
const char *mpccl_dtype_name(ncclDataType_t dt);      /* "float32", ..., "invalid" */
int mpccl_dtype_is_float(ncclDataType_t dt);
const char *mpccl_op_name(mpccl_op_t op);

/* fp16 / bf16 / fp8 <-> float, round to nearest even; conversion to fp8 saturates
 * to the largest finite value (CUDA's __NV_SATFINITE), NaN stays NaN. */
float mpccl_half_to_float(uint16_t h);
uint16_t mpccl_float_to_half(float f);
float mpccl_bf16_to_float(uint16_t b);
uint16_t mpccl_float_to_bf16(float f);
float mpccl_e4m3_to_float(uint8_t v);
uint8_t mpccl_float_to_e4m3(float f);
float mpccl_e5m2_to_float(uint8_t v);
uint8_t mpccl_float_to_e5m2(float f);

/* Converts a double to one element of type dt (PreMulSum scalars, 1/nranks). */
void mpccl_dtype_from_double(ncclDataType_t dt, double v, void *out);
double mpccl_dtype_to_double(ncclDataType_t dt, const void *in);

#endif
