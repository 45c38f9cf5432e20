/* Internal status type and error recording.  Converted to ncclResult_t only at
 * the API boundary (api_common.c). */
#ifndef MPCCL_STATUS_H
#define MPCCL_STATUS_H

#include <stdarg.h>

typedef enum {
    MPCCL_OK = 0,
    MPCCL_ERR_ARG,      /* a bad value: ncclInvalidArgument */
    MPCCL_ERR_USAGE,    /* a bad sequence of calls: ncclInvalidUsage */
    MPCCL_ERR_SYSTEM,   /* the OS said no: ncclSystemError */
    MPCCL_ERR_CUDA,     /* a CUDA call failed: ncclUnhandledCudaError */
    MPCCL_ERR_REMOTE,   /* a peer or the network failed (timeouts too): ncclRemoteError */
    MPCCL_ERR_INTERNAL, /* a bug in mpccl: ncclInternalError */
    MPCCL_INPROGRESS    /* non-blocking work still running: ncclInProgress */
} mpccl_status_t;

/* Records a formatted message as the last error (thread-local and process-wide,
 * read by ncclGetLastError), logs it once at WARN and returns st, so that
 *     return mpccl_fail(MPCCL_ERR_ARG, "root %d out of range [0,%d)", root, n);
 * is the one place an error is described. */
mpccl_status_t mpccl_fail(mpccl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
mpccl_status_t mpccl_vfail(mpccl_status_t st, const char *fmt, va_list ap);

/* The message of the last mpccl_fail on this thread (or in the process when this
 * thread has none); "" when there was none. */
const char *mpccl_last_error(void);
/* Records msg as the last error without logging it (a message another thread
 * logged already, handed to the thread that asks). */
void mpccl_record_error(const char *msg);
void mpccl_clear_last_error(void);

const char *mpccl_status_name(mpccl_status_t st);

#define MPCCL_CHECK(call)                                                     \
    do {                                                                      \
        mpccl_status_t mpccl_st_ = (call);                                    \
        if (mpccl_st_ != MPCCL_OK) return mpccl_st_;                          \
    } while (0)

#define MPCCL_CHECK_GOTO(call, st, label)                                     \
    do {                                                                      \
        (st) = (call);                                                        \
        if ((st) != MPCCL_OK) goto label;                                     \
    } while (0)

#endif
