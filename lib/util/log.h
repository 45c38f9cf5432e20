/* Logging: MPCCL_DEBUG (alias NCCL_DEBUG) = WARN|INFO|TRACE, MPCCL_DEBUG_SUBSYS
 * (INIT,COLL,P2P,NET,SHIM,TUNE,BOOT,ALL, ^ to exclude), MPCCL_DEBUG_FILE with
 * %h (host) and %p (pid).  Lines read "host:pid:tid [rank] mpccl LEVEL ...". */
#ifndef MPCCL_LOG_H
#define MPCCL_LOG_H

enum { MPCCL_LOG_NONE = 0, MPCCL_LOG_WARN = 1, MPCCL_LOG_INFO = 2, MPCCL_LOG_TRACE = 3 };

enum {
    MPCCL_SUB_INIT = 1u << 0,
    MPCCL_SUB_COLL = 1u << 1,
    MPCCL_SUB_P2P = 1u << 2,
    MPCCL_SUB_NET = 1u << 3,
    MPCCL_SUB_SHIM = 1u << 4,
    MPCCL_SUB_TUNE = 1u << 5,
    MPCCL_SUB_BOOT = 1u << 6,
    MPCCL_SUB_ALL = 0xffffffffu
};

extern int mpccl_log_level; /* read once from the env; -1 until then */
void mpccl_log_init(void);
/* Re-reads the debug settings from the environment (ncclResetDebugInit). */
void mpccl_log_reset(void);
void mpccl_log(int level, unsigned subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The rank printed in log lines of this thread (-1: none). */
void mpccl_log_set_rank(int rank);

#define MPCCL_LOG_ON(lvl) \
    (mpccl_log_level < 0 ? (mpccl_log_init(), mpccl_log_level >= (lvl)) : mpccl_log_level >= (lvl))
#define MPCCL_WARN(sub, ...) \
    do { if (MPCCL_LOG_ON(MPCCL_LOG_WARN)) mpccl_log(MPCCL_LOG_WARN, (sub), __VA_ARGS__); } while (0)
#define MPCCL_INFO(sub, ...) \
    do { if (MPCCL_LOG_ON(MPCCL_LOG_INFO)) mpccl_log(MPCCL_LOG_INFO, (sub), __VA_ARGS__); } while (0)
#define MPCCL_TRACE(sub, ...) \
    do { if (MPCCL_LOG_ON(MPCCL_LOG_TRACE)) mpccl_log(MPCCL_LOG_TRACE, (sub), __VA_ARGS__); } while (0)

#endif
