/* Test data and host reference for mpccl-perf -c and the MPI test suites.
 *
 * Every input element is a pure function of (seed, rank, element index), so each
 * rank can regenerate the inputs of all ranks and compute the expected result of
 * any collective locally: checking needs no communication.  Only the public NCCL
 * API (nccl.h) is used: this file is example code a user may copy. */
#ifndef PERF_CHECK_H
#define PERF_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

/* What the data will go through: decides the value ranges (see perf_check.c). */
typedef enum {
    PERF_SUM = 0,
    PERF_PROD,
    PERF_MAX,
    PERF_MIN,
    PERF_AVG,
    PERF_PREMULSUM, /* ncclRedOpCreatePreMulSum(scalar) then sum */
    PERF_COPY,      /* data movement only: random bit patterns, compared bytewise */
    PERF_NUM_OPS
} perf_op_t;

typedef struct perf_data {
    ncclDataType_t type;
    perf_op_t op;
    int nranks;
    uint64_t seed;
    double scalar; /* PreMulSum factor, exactly representable in type */
} perf_data_t;

size_t perf_type_size(ncclDataType_t t);        /* 0 for an invalid type */
const char *perf_type_name(ncclDataType_t t);   /* nccl-tests spelling: "float", "f8e4m3" */
int perf_type_parse(const char *s, ncclDataType_t *t); /* 0 on success */
int perf_type_is_float(ncclDataType_t t);
const char *perf_op_name(perf_op_t op);         /* "sum" ... "mulsum", "none" */
int perf_op_parse(const char *s, perf_op_t *op);
/* The built-in ncclRedOp_t of op (ncclSum for PREMULSUM and COPY). */
ncclRedOp_t perf_op_nccl(perf_op_t op);

/* Element access as double: exact for every value perf_fill produces. */
double perf_get(ncclDataType_t t, const void *buf, size_t i);
/* Stores v rounded to nearest even (fp8 saturates to the largest finite value). */
void perf_set(ncclDataType_t t, void *buf, size_t i, double v);

/* Chooses the PreMulSum scalar from the seed. */
void perf_data_init(perf_data_t *d, ncclDataType_t t, perf_op_t op, int nranks, uint64_t seed);
/* buf[0..count) = elements first..first+count-1 of rank's input. */
void perf_fill(const perf_data_t *d, int rank, size_t first, size_t count, void *buf);
/* buf[0..count) = a block of rank's input repeated: data to time with, not to check. */
void perf_fill_timing(const perf_data_t *d, int rank, size_t count, void *buf);
/* Wrong elements of out[0..count) as the reduction over all ranks of input elements
 * first..first+count-1; the first one is described in msg (may be NULL). */
size_t perf_check_reduce(const perf_data_t *d, size_t first, size_t count, const void *out,
                         char *msg, size_t msglen);
/* Wrong elements of out[0..count) as a copy of rank src's elements first..; bytewise. */
size_t perf_check_copy(const perf_data_t *d, int src, size_t first, size_t count, const void *out,
                       char *msg, size_t msglen);
/* Largest allowed |result - exact| for one reduced element whose inputs have
 * magnitude sum abs_sum (before the scalar / the 1/nranks of avg). */
double perf_tolerance(const perf_data_t *d, double abs_sum);

#endif
