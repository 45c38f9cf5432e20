/* Mapping a buffer into the peers' processes on the owner's initiative
 * (ncclCommRegister on GPU communicators).  The owner sends the buffer's IPC
 * description -- and, for cuMem memory, its file descriptor -- to each peer
 * process's fd server; the server thread maps it for the peer's device and
 * answers with the address there.  The peer's application thread never takes
 * part, so registration stays a local call as in NCCL, and a collective on
 * registered buffers only has to tell each peer "my buffer is at X in your
 * address space" (done by the kernel, lib/kernels/flat_win_impl.cuh). */
#include "build_config.h"

#ifdef MPCCL_HAVE_CUDA
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda_fdpass.h"
#include "cuda/cuda_ipc.h"
#include "util/log.h"

enum { PUSH_MAP = 1, PUSH_UNMAP = 2 };
enum { PUSH_FAILED = 16 }; /* codes 0..15 belong to fdpass */

typedef struct {
    uint32_t op, pad;
    unsigned char uuid[16]; /* the device to map for (MAP) */
    mpccl_ipc_desc_t desc;
} push_req_t;

typedef struct {
    uint64_t ptr;
    char msg[MPCCL_FDPASS_MAX_MSG - 8]; /* PUSH_FAILED: why */
} push_reply_t;

/* Runs on this process's fd server thread. */
static int32_t serve_push(const void *req, uint32_t len, int fd, void *reply, uint32_t *reply_len)
{
    push_req_t q;
    push_reply_t *r = reply;
    *reply_len = sizeof(r->ptr);
    r->ptr = 0;
    if (len != sizeof(q)) {
        if (fd >= 0) close(fd);
        snprintf(r->msg, sizeof(r->msg), "malformed request (%u bytes, expected %zu)", len, sizeof(q));
        *reply_len = sizeof(*r);
        return PUSH_FAILED;
    }
    memcpy(&q, req, sizeof(q));
    if (q.op == PUSH_UNMAP) {
        if (fd >= 0) close(fd);
        mpccl_ipc_release(&q.desc);
        return 0;
    }
    mpccl_status_t st;
    int dev = mpccl_ipc_local_device(q.uuid);
    void *p = NULL;
    if (dev < 0) {
        if (fd >= 0) close(fd);
        st = mpccl_fail(MPCCL_ERR_SYSTEM, "the device to map for is not visible to process %d", (int)getpid());
    } else {
        st = mpccl_ipc_import_fd(&q.desc, dev, fd, &p);
    }
    if (st == MPCCL_OK) {
        r->ptr = (uint64_t)(uintptr_t)p;
        return 0;
    }
    snprintf(r->msg, sizeof(r->msg), "%s", mpccl_last_error());
    *reply_len = sizeof(*r);
    return PUSH_FAILED;
}

mpccl_status_t mpccl_ipc_serve(void)
{
    return mpccl_fdpass_serve(serve_push);
}

/* A fresh shareable descriptor of the cuMem allocation d describes. */
static mpccl_status_t vmm_fd(const mpccl_ipc_desc_t *d, int *fd)
{
    const mpccl_cu_fns_t *cu;
    MPCCL_CHECK(mpccl_cu_get(&cu));
    CUmemGenericAllocationHandle h;
    CUresult r = cu->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)d->base);
    if (r != CUDA_SUCCESS) return mpccl_cu_error(r, "cuMemRetainAllocationHandle (registered buffer)");
    r = cu->cuMemExportToShareableHandle(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    (void)cu->cuMemRelease(h);
    return r == CUDA_SUCCESS ? MPCCL_OK : mpccl_cu_error(r, "cuMemExportToShareableHandle (registered buffer)");
}

mpccl_status_t mpccl_ipc_push(const mpccl_ipc_desc_t *d, int32_t peer_pid, uint32_t peer_tag, const unsigned char peer_uuid[16],
                              uint64_t *peer_ptr)
{
    push_req_t q;
    memset(&q, 0, sizeof(q));
    q.op = PUSH_MAP;
    memcpy(q.uuid, peer_uuid, sizeof(q.uuid));
    q.desc = *d;
    if (peer_pid == (int32_t)getpid()) {
        /* the peer shares this address space: no server in between */
        push_reply_t r;
        uint32_t len;
        if (serve_push(&q, sizeof(q), -1, &r, &len) != 0) return mpccl_fail(MPCCL_ERR_SYSTEM, "%s", r.msg);
        *peer_ptr = r.ptr;
        return MPCCL_OK;
    }
    int fd = -1;
    if (d->vmm) MPCCL_CHECK(vmm_fd(d, &fd));
    push_reply_t r;
    uint32_t len = 0;
    int32_t code = -1;
    mpccl_status_t st = mpccl_fdpass_call(peer_pid, peer_tag, &q, sizeof(q), fd, &r, &len, &code, "mapping a registered buffer");
    if (fd >= 0) close(fd);
    MPCCL_CHECK(st);
    if (code != 0 || len < sizeof(r.ptr)) {
        r.msg[sizeof(r.msg) - 1] = 0;
        return mpccl_fail(MPCCL_ERR_SYSTEM, "process %d could not map this process's buffer 0x%llx (%llu bytes): %s",
                          (int)peer_pid, (unsigned long long)d->base, (unsigned long long)d->size,
                          code == PUSH_FAILED && len > sizeof(r.ptr) ? r.msg : "bad reply");
    }
    *peer_ptr = r.ptr;
    return MPCCL_OK;
}

void mpccl_ipc_push_release(const mpccl_ipc_desc_t *d, int32_t peer_pid, uint32_t peer_tag)
{
    if (peer_pid == (int32_t)getpid()) return; /* mpccl_ipc_release is a no-op there too */
    push_req_t q;
    memset(&q, 0, sizeof(q));
    q.op = PUSH_UNMAP;
    q.desc = *d;
    push_reply_t r;
    uint32_t len;
    int32_t code;
    /* A peer that has exited took its mapping with it: nothing to report. */
    if (mpccl_fdpass_call(peer_pid, peer_tag, &q, sizeof(q), -1, &r, &len, &code, "unmapping a registered buffer") != MPCCL_OK)
        mpccl_clear_last_error();
}
#endif
