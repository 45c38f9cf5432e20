/* The process-wide UCX context.  One context serves every communicator (each
 * has its own worker), so memory registrations and transport resources are
 * shared; it lives until the process exits because workers of communicators
 * may outlive any single user of it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/log.h"
#include "ucx.h"

static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static ucp_context_h ctx_handle;
static mpccl_status_t ctx_status = MPCCL_ERR_INTERNAL;
static char ctx_error[256];
static int ctx_wakeup;
static int ctx_cuda;

/* Whether communicators spanning nodes may hand UCX device memory (the rule
 * of lib/gpu/gpu_proxy_mem.c: MPCCL_GPU_DIRECT=1, or auto with a network
 * device that reads GPU memory). */
static int gpu_memory_expected(void)
{
    int mode = mpccl_ucx_gpu_direct_setting();
    return mode == MPCCL_GPU_DIRECT_ON || (mode == MPCCL_GPU_DIRECT_AUTO && mpccl_ucx_gdr_nic() != NULL);
}

int mpccl_ucx_version_at_least(unsigned major, unsigned minor)
{
    unsigned ma, mi, rel;
    ucp_get_version(&ma, &mi, &rel);
    return ma > major || (ma == major && mi >= minor);
}

/* Whether this UCX takes a transport's settings (TCP_...) through
 * ucp_config_modify: 1.22 does; 1.13 ignores them and warns at every worker
 * ("invalid configurations"); the versions between were not checked. */
static int takes_transport_settings(void) { return mpccl_ucx_version_at_least(1, 22); }

/* UCX setting name (UCX_<name> in the environment) = value, unless the user
 * set it. */
static void default_setting(ucp_config_t *config, const char *name, const char *value)
{
    char env[64];
    snprintf(env, sizeof(env), "UCX_%s", name);
    if (getenv(env) != NULL) return;
    ucs_status_t st = ucp_config_modify(config, name, value);
    if (st != UCS_OK)
        MPCCL_INFO(MPCCL_SUB_INIT, "UCX %s: no setting %s (%s); its default stays", ucp_get_version_string(), env,
                   ucs_status_string(st));
}

/* A rank sleeps on the worker's event fd (WAKEUP); RMA/AMO64 serve windows and
 * signals later.  Ask for everything, then fall back feature by feature: a
 * UCX build or network without atomics must still carry tagged messages. */
static const uint64_t feature_sets[] = {
    UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_WAKEUP,
    UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO64,
    UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
    UCP_FEATURE_TAG,
};

static void op_init(void *request)
{
    memset(request, 0, sizeof(mpccl_ucx_op_t));
}

static ucs_status_t try_init(uint64_t features, ucp_context_h *out)
{
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) return st;
    /* Endpoints to other machines detect a dead peer by UCX's keepalive while
     * an operation waits (the peer watcher covers this machine): within a
     * second or two rather than UCX's default 20 s. */
    default_setting(config, "KEEPALIVE_INTERVAL", "1s");
    /* Host memory over tcp (doc/PERFORMANCE.md, 2026-11-27): messages below
     * 64 KB go eager, in one tcp segment.  UCX picks rendezvous from about
     * 8 KB, whose extra round trip made 8-32 KB messages 2-6x slower, and
     * with 8 KB segments UCX 1.22 sends 16-64 KB as multi-fragment eager, 1.5-2x
     * slower than one segment.  Both executors post their receives when the
     * messages arrive or soon after, so little eager data is buffered.
     * Eager sends from CUDA memory go through UCX's bounce copies (1.6x slower
     * at 32 KB), so GPU-direct keeps UCX's choices. */
    if (!gpu_memory_expected()) {
        default_setting(config, "RNDV_THRESH", "64K");
        if (takes_transport_settings()) {
            default_setting(config, "TCP_TX_SEG_SIZE", "64K");
            default_setting(config, "TCP_RX_SEG_SIZE", "64K");
        }
    }
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                        UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = features;
    params.request_size = sizeof(mpccl_ucx_op_t);
    params.request_init = op_init;
    params.mt_workers_shared = 1; /* workers of different communicators, different threads */
    st = ucp_init(&params, config, out);
    ucp_config_release(config);
    return st;
}

static void query_memory_types(void)
{
    ucp_context_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(ctx_handle, &attr) != UCS_OK) return;
    ctx_cuda = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

static void create_context(void)
{
    ucs_status_t st = UCS_ERR_UNSUPPORTED;
    size_t i;
    for (i = 0; i < sizeof(feature_sets) / sizeof(feature_sets[0]); i++) {
        st = try_init(feature_sets[i], &ctx_handle);
        if (st == UCS_OK) break;
        MPCCL_INFO(MPCCL_SUB_INIT, "UCX context with features %#llx failed (%s), trying fewer",
                   (unsigned long long)feature_sets[i], ucs_status_string(st));
    }
    if (st != UCS_OK) {
        snprintf(ctx_error, sizeof(ctx_error), "UCX %s: ucp_init failed: %s",
                 ucp_get_version_string(), ucs_status_string(st));
        ctx_status = MPCCL_ERR_SYSTEM;
        return;
    }
    uint64_t f = feature_sets[i];
    ctx_wakeup = (f & UCP_FEATURE_WAKEUP) != 0;
    query_memory_types();
    ctx_status = MPCCL_OK;
    MPCCL_INFO(MPCCL_SUB_INIT, "UCX %s (built against %d.%d): tag%s%s%s, CUDA memory %s",
               ucp_get_version_string(), UCP_API_MAJOR, UCP_API_MINOR,
               (f & UCP_FEATURE_RMA) ? " rma" : "", (f & UCP_FEATURE_AMO64) ? " amo64" : "",
               ctx_wakeup ? " wakeup" : "", ctx_cuda ? "yes" : "no (host staging)");
}

mpccl_status_t mpccl_ucx_context(ucp_context_h *out)
{
    pthread_once(&ctx_once, create_context);
    if (ctx_status != MPCCL_OK) return mpccl_fail(ctx_status, "%s", ctx_error);
    *out = ctx_handle;
    return MPCCL_OK;
}

int mpccl_ucx_has_wakeup(void)
{
    pthread_once(&ctx_once, create_context);
    return ctx_status == MPCCL_OK && ctx_wakeup;
}

int mpccl_ucx_supports_cuda(void)
{
    pthread_once(&ctx_once, create_context);
    return ctx_status == MPCCL_OK && ctx_cuda;
}
