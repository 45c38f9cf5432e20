/* NVTX ranges (nvtx.h): the "NCCL" domain, created once; the NVTX v3 headers of
 * the CUDA toolkit are header-only (no link dependency).  Without a tool
 * (NVTX_INJECTION64_PATH unset) NVTX returns no domain, and mpccl then skips
 * every range before formatting anything. */
#include "util/nvtx.h"

#ifdef MPCCL_HAVE_CUDA
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include <nvtx3/nvToolsExt.h>

#include "util/config.h"

int mpccl_nvtx_state;
static nvtxDomainHandle_t domain;
static pthread_once_t decide_once = PTHREAD_ONCE_INIT;

static void decide(void)
{
    int state = 1;
    if (mpccl_config_int("NVTX") != 0) {
        /* The first NVTX call loads the tool named by NVTX_INJECTION64_PATH, if
         * any; without one, every NVTX call is a no-op and this is NULL. */
        domain = nvtxDomainCreateA("NCCL");
        if (domain != NULL) state = 2;
    }
    __atomic_store_n(&mpccl_nvtx_state, state, __ATOMIC_RELEASE);
}

int mpccl_nvtx_decide(void)
{
    pthread_once(&decide_once, decide);
    return __atomic_load_n(&mpccl_nvtx_state, __ATOMIC_ACQUIRE);
}

int mpccl_nvtx_push(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    nvtxEventAttributes_t attr = {0};
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.colorType = NVTX_COLOR_ARGB;
    attr.color = 0xff76b900u;
    attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attr.message.ascii = msg; /* the tool copies it */
    nvtxDomainRangePushEx(domain, &attr);
    return 1;
}

void mpccl_nvtx_pop(void)
{
    nvtxDomainRangePop(domain);
}
#endif
