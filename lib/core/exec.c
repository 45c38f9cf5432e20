/* The executors of this build (exec.h): each registers itself when the
 * library loads; communicators pick one at setup. */
#include "core/exec.h"

static const mpccl_executor_t *host_exec;
static const mpccl_executor_t *gpu_exec;

void mpccl_exec_register(const mpccl_executor_t *e, int gpu)
{
    if (gpu) gpu_exec = e;
    else host_exec = e;
}

const mpccl_executor_t *mpccl_exec_host(void)
{
    return host_exec;
}

const mpccl_executor_t *mpccl_exec_gpu(void)
{
    return gpu_exec;
}
