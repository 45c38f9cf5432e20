/* Error recording: the last error message, per thread and per process. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"
#include "util/status.h"

#define MPCCL_ERRMSG_MAX 2048

static __thread char thread_error[MPCCL_ERRMSG_MAX];
static char process_error[MPCCL_ERRMSG_MAX];
static pthread_mutex_t process_error_lock = PTHREAD_MUTEX_INITIALIZER;

mpccl_status_t mpccl_vfail(mpccl_status_t st, const char *fmt, va_list ap)
{
    vsnprintf(thread_error, sizeof(thread_error), fmt, ap);
    pthread_mutex_lock(&process_error_lock);
    memcpy(process_error, thread_error, sizeof(process_error));
    pthread_mutex_unlock(&process_error_lock);
    MPCCL_WARN(MPCCL_SUB_ALL, "%s: %s", mpccl_status_name(st), thread_error);
    return st;
}

mpccl_status_t mpccl_fail(mpccl_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mpccl_vfail(st, fmt, ap);
    va_end(ap);
    return st;
}

const char *mpccl_last_error(void)
{
    static __thread char copy[MPCCL_ERRMSG_MAX];
    if (thread_error[0]) return thread_error;
    pthread_mutex_lock(&process_error_lock);
    memcpy(copy, process_error, sizeof(copy));
    pthread_mutex_unlock(&process_error_lock);
    return copy;
}

void mpccl_record_error(const char *msg)
{
    snprintf(thread_error, sizeof(thread_error), "%s", msg);
    pthread_mutex_lock(&process_error_lock);
    memcpy(process_error, thread_error, sizeof(process_error));
    pthread_mutex_unlock(&process_error_lock);
}

void mpccl_clear_last_error(void)
{
    thread_error[0] = '\0';
}

const char *mpccl_status_name(mpccl_status_t st)
{
    switch (st) {
    case MPCCL_OK: return "success";
    case MPCCL_ERR_ARG: return "invalid argument";
    case MPCCL_ERR_USAGE: return "invalid usage";
    case MPCCL_ERR_SYSTEM: return "system error";
    case MPCCL_ERR_CUDA: return "CUDA error";
    case MPCCL_ERR_REMOTE: return "remote error";
    case MPCCL_ERR_INTERNAL: return "internal error";
    case MPCCL_INPROGRESS: return "in progress";
    }
    return "unknown status";
}
