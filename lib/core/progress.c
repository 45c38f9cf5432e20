/* Progress records (progress.h): a consistent copy, and their words. */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "core/progress.h"
#include "util/datatype.h"

void mpccl_progress_read(const mpccl_progress_t *p, mpccl_progress_t *out)
{
    /* A seqlock read: the writer is the calling thread of the communicator,
     * which changes the record for a few stores per call. */
    for (int tries = 0;; tries++) {
        uint32_t v1 = __atomic_load_n(&p->version, __ATOMIC_ACQUIRE);
        memcpy(out, (const void *)p, sizeof(*out));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        uint32_t v2 = __atomic_load_n(&p->version, __ATOMIC_RELAXED);
        if ((v1 == v2 && !(v1 & 1u)) || tries > 1000) return; /* a torn copy after 1000 tries is still a hint */
        sched_yield();
    }
}

static const char *op_word(int op)
{
    static const char *names[] = {"sum", "prod", "max", "min", "avg"};
    if (op >= 0 && op < (int)ncclNumOps) return names[op];
    return op < 0 ? "" : "premulsum";
}

const char *mpccl_call_rec_str(const mpccl_call_rec_t *r, char *buf, size_t len)
{
    if (r->coll < 0 || r->seq == 0) {
        snprintf(buf, len, "no call");
        return buf;
    }
    const char *name = mpccl_coll_name((mpccl_coll_t)r->coll);
    const char *dt = mpccl_dtype_name((ncclDataType_t)r->dt);
    unsigned long long seq = (unsigned long long)r->seq, count = (unsigned long long)r->count;
    switch ((mpccl_coll_t)r->coll) {
    case MPCCL_COLL_ALLREDUCE:
    case MPCCL_COLL_REDUCESCATTER:
        snprintf(buf, len, "%s call %llu (%llu %s %s)", name, seq, count, dt, op_word(r->op));
        break;
    case MPCCL_COLL_REDUCE:
        snprintf(buf, len, "%s call %llu (%llu %s %s, root %d)", name, seq, count, dt, op_word(r->op), r->root);
        break;
    case MPCCL_COLL_BROADCAST:
    case MPCCL_COLL_GATHER:
    case MPCCL_COLL_SCATTER:
        snprintf(buf, len, "%s call %llu (%llu %s, root %d)", name, seq, count, dt, r->root);
        break;
    case MPCCL_COLL_SEND:
        snprintf(buf, len, "%s call %llu (%llu %s to rank %d)", name, seq, count, dt, r->root);
        break;
    case MPCCL_COLL_RECV:
        snprintf(buf, len, "%s call %llu (%llu %s from rank %d)", name, seq, count, dt, r->root);
        break;
    default:
        snprintf(buf, len, "%s call %llu (%llu %s)", name, seq, count, dt);
        break;
    }
    return buf;
}

int mpccl_call_rec_same(const mpccl_call_rec_t *a, const mpccl_call_rec_t *b)
{
    return a->seq == b->seq && a->coll == b->coll && a->count == b->count && a->dt == b->dt && a->op == b->op &&
           a->root == b->root;
}
