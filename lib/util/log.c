/* Logging.  Level, subsystems and file come from the env table, read once. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "util/config.h"
#include "util/log.h"

#if defined(__has_include)
#if __has_include("build_config.h")
#include "build_config.h"
#endif
#endif
#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

int mpccl_log_level = -1;
static unsigned log_subsys = MPCCL_SUB_ALL;
static FILE *log_file;
static char log_host[64];
static pthread_mutex_t log_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_ready;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int log_rank = -1;

static const struct { const char *name; unsigned bit; } subsys_names[] = {
    {"INIT", MPCCL_SUB_INIT}, {"COLL", MPCCL_SUB_COLL}, {"P2P", MPCCL_SUB_P2P},
    {"NET", MPCCL_SUB_NET},   {"SHIM", MPCCL_SUB_SHIM}, {"TUNE", MPCCL_SUB_TUNE},
    {"BOOT", MPCCL_SUB_BOOT}, {"BOOTSTRAP", MPCCL_SUB_BOOT}, {"ENV", MPCCL_SUB_INIT},
    {"ALL", MPCCL_SUB_ALL},
};

static unsigned parse_subsys(const char *s)
{
    int exclude = (*s == '^');
    unsigned mask = 0;
    char buf[256], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", s + exclude);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
            if (!strcasecmp(tok, subsys_names[i].name)) mask |= subsys_names[i].bit;
    return exclude ? ~mask : mask;
}

/* Expands %h (host) and %p (pid) in a file name pattern. */
static void expand_path(const char *pattern, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < len; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int n = p[1] == 'h' ? snprintf(out + o, len - o, "%s", log_host)
                                : snprintf(out + o, len - o, "%d", (int)getpid());
            if (n > 0) o += (size_t)n;
            if (o >= len) o = len - 1;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

static void log_setup(void)
{
    const char *level = mpccl_config_str("DEBUG");
    int lvl = MPCCL_LOG_WARN;
    if (level) {
        if (!strcasecmp(level, "NONE") || !strcasecmp(level, "VERSION")) lvl = MPCCL_LOG_NONE;
        else if (!strcasecmp(level, "WARN")) lvl = MPCCL_LOG_WARN;
        else if (!strcasecmp(level, "INFO")) lvl = MPCCL_LOG_INFO;
        else if (!strcasecmp(level, "TRACE")) lvl = MPCCL_LOG_TRACE;
    }
    gethostname(log_host, sizeof(log_host) - 1);
    char *dot = strchr(log_host, '.');
    if (dot) *dot = '\0';
    const char *sub = mpccl_config_str("DEBUG_SUBSYS");
    if (sub) log_subsys = parse_subsys(sub);
    log_file = stderr;
    const char *file = mpccl_config_str("DEBUG_FILE");
    if (file) {
        char path[512];
        expand_path(file, path, sizeof(path));
        FILE *f = fopen(path, "a");
        if (f) {
            setvbuf(f, NULL, _IOLBF, 0);
            log_file = f;
        } else {
            fprintf(stderr, "mpccl: cannot open MPCCL_DEBUG_FILE %s; logging to stderr\n", path);
        }
    }
    mpccl_log_level = lvl;
    if (level && !strcasecmp(level, "VERSION"))
        fprintf(log_file, "%s:%d mpccl version %s\n", log_host, (int)getpid(), PACKAGE_VERSION);
}

void mpccl_log_init(void)
{
    pthread_mutex_lock(&log_init_lock);
    if (!log_ready) {
        log_setup();
        log_ready = 1;
    }
    pthread_mutex_unlock(&log_init_lock);
    /* Outside the lock: it logs warnings itself. */
    mpccl_config_check_environment();
}

void mpccl_log_reset(void)
{
    pthread_mutex_lock(&log_init_lock);
    mpccl_config_reload();
    if (log_file && log_file != stderr) fclose(log_file);
    log_file = stderr;
    log_subsys = MPCCL_SUB_ALL;
    log_setup();
    log_ready = 1;
    pthread_mutex_unlock(&log_init_lock);
}

void mpccl_log_set_rank(int rank)
{
    log_rank = rank;
}

void mpccl_log(int level, unsigned subsys, const char *fmt, ...)
{
    static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
    char msg[2048];
    va_list ap;
    mpccl_log_init();
    if (level > mpccl_log_level) return;
    if (level != MPCCL_LOG_WARN && !(subsys & log_subsys)) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    fprintf(log_file, "%s:%d:%d [%d] mpccl %s %s\n", log_host, (int)getpid(), (int)syscall(SYS_gettid),
            log_rank, names[level], msg);
    fflush(log_file);
    pthread_mutex_unlock(&log_lock);
}
