/* Exported conversion entry points (datatype.h); the bit-level rules live in
 * fp_convert.h so the reduction loops can inline them. */
#include <float.h>
#include <math.h>

#include "util/datatype.h"
#include "util/fp_convert.h"

/* The subnormal rounding in fp_convert.h lets the FPU round a float sum; with
 * excess precision (x87) the sum would be rounded twice. */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "mpccl's fp16/fp8 conversions need FLT_EVAL_METHOD == 0 (SSE or similar float arithmetic)"
#endif

float mpccl_half_to_float(uint16_t h) { return mpccl_f16_to_f32(h); }
uint16_t mpccl_float_to_half(float f) { return mpccl_f32_to_f16(f); }
float mpccl_bf16_to_float(uint16_t b) { return mpccl_bf16_to_f32(b); }
uint16_t mpccl_float_to_bf16(float f) { return mpccl_f32_to_bf16(f); }
float mpccl_e4m3_to_float(uint8_t v) { return mpccl_e4m3_to_f32(v); }
uint8_t mpccl_float_to_e4m3(float f) { return mpccl_f32_to_e4m3(f); }
float mpccl_e5m2_to_float(uint8_t v) { return mpccl_e5m2_to_f32(v); }
uint8_t mpccl_float_to_e5m2(float f) { return mpccl_f32_to_e5m2(f); }
