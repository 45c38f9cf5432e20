/* Check under MPI: every rank runs the same suite (CK_NOFORK).  Tests record
 * failures with T_EXPECT/T_NCCL and keep going, so all ranks issue the same
 * collectives and nobody waits for a rank that bailed out; T_END() then agrees on
 * the verdict over MPI, so a failure on one rank fails the test on every rank.
 * A watchdog (alarm) aborts the job if a test hangs. */
#ifndef MPCCL_TEST_HARNESS_H
#define MPCCL_TEST_HARNESS_H

#include <check.h>
#include <mpi.h>
#include <stdint.h>

#include "mpccl_mpi.h"
#include "nccl.h"
#include "perf_mem.h"

extern int t_rank, t_nranks;
extern ncclComm_t t_comm;  /* over MPI_COMM_WORLD, created by t_main */
extern perf_mem_t t_mem;   /* buffers for t_comm: GPU or host */
extern uint64_t t_seed;    /* MPCCL_TEST_SEED, or chosen by rank 0 and printed */
extern int t_level;        /* MPCCL_TEST_LEVEL: 0 quick, 1 normal (default), 2 more */

void t_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define T_EXPECT(cond, ...)                                                                       \
    do {                                                                                          \
        if (!(cond)) t_fail(__FILE__, __LINE__, __VA_ARGS__);                                     \
    } while (0)
/* Expects `want` from an NCCL call; on a mismatch reports ncclGetLastError(comm). */
#define T_RESULT(call, want, comm)                                                                \
    do {                                                                                          \
        ncclResult_t r_ = (call);                                                                 \
        if (r_ != (want))                                                                         \
            t_fail(__FILE__, __LINE__, "%s returned %s, expected %s (last error: %s)", #call,     \
                   ncclGetErrorString(r_), ncclGetErrorString(want), ncclGetLastError(comm));     \
    } while (0)
#define T_NCCL(call) T_RESULT(call, ncclSuccess, NULL)
#define T_END() t_end(__FILE__, __LINE__)
void t_end(const char *file, int line);
/* Local failures so far in this test. */
int t_failures(void);

/* A test case with the harness's fixtures (failure reset, watchdog, verdict). */
TCase *t_tcase(const char *name);
/* Initialises MPI and t_comm, runs the suite, finalises; returns the exit code. */
int t_main(int argc, char **argv, Suite *(*make_suite)(void));

/* Allreduce of one float on comm (host or device buffers per m) checked against the
 * exact sum: proves a communicator still works.  Returns 0 when correct. */
int t_comm_works(ncclComm_t comm, perf_mem_t *m);

#endif
