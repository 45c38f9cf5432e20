/* Plans the small-call kernel runs (plan_small.h). */
#include <stdlib.h>
#include <string.h>

#include "kernels/plan_small.h"

static int refuse(const char **why, const char *reason)
{
    if (why) *why = reason;
    return 0;
}

int mpccl_gpu_plan_small(const mpccl_sched_t *s, uint32_t es, uint32_t nctas, uint32_t min_bytes, uint32_t ll_bytes,
                         uint32_t window, const mpccl_dev_link_t *links, int nranks, const char **why)
{
    if (s->nsteps == 0) return refuse(why, "no steps");
    if (s->nsteps > MPCCL_ENGINE_SMALL_MAX_STEPS) return refuse(why, "too many steps");
    if (window < s->nsteps) return refuse(why, "window smaller than the plan");
    if (ll_bytes == 0) return refuse(why, "no LL pieces");
    int messages = 0;
    for (uint32_t i = 0; i < s->nsteps; i++) {
        const mpccl_step_t *st = &s->steps[i];
        uint64_t b, e;
        mpccl_dev_partition(st->count, es, nctas, min_bytes, 0, &b, &e);
        if (e != st->count) return refuse(why, "a step spans several CTAs");
        if (st->kind != MPCCL_STEP_SEND && st->kind != MPCCL_STEP_RECV) continue;
        if (st->count == 0) continue;
        if (st->peer < 0 || st->peer >= nranks) return refuse(why, "a message to no peer");
        const mpccl_dev_link_t *L = &links[st->peer];
        if (L->kind != MPCCL_LINK_PROXY) return refuse(why, "a message inside the node");
        if (st->kind == MPCCL_STEP_SEND ? L->tx_word == NULL : L->rx_word == NULL)
            return refuse(why, "a link without the proxy's words");
        if (st->count * es > ll_bytes) return refuse(why, "a message larger than an LL piece");
        messages++;
    }
    if (!messages) return refuse(why, "no message to another node");
    if (why) *why = NULL;
    return 1;
}

static int is_msg(uint8_t kind) { return kind == MPCCL_STEP_SEND || kind == MPCCL_STEP_RECV; }

void mpccl_gpu_small_image(const mpccl_sched_t *s, const mpccl_dev_link_t *links, const mpccl_dev_comm_t *hdr,
                           mpccl_dev_small_step_t *out)
{
    memset(out, 0, (size_t)s->nsteps * sizeof(*out));
    for (uint32_t i = 0; i < s->nsteps; i++) {
        const mpccl_step_t *st = &s->steps[i];
        mpccl_dev_small_step_t *d = &out[i];
        d->kind = st->kind;
        d->peer = st->peer;
        d->count = st->count;
        d->dst_buf = (uint8_t)st->dst.buf;
        d->src0_buf = (uint8_t)st->src0.buf;
        d->src1_buf = (uint8_t)st->src1.buf;
        d->dst_off = st->dst.off;
        d->src0_off = st->src0.off;
        d->src1_off = st->src1.off;
        for (uint32_t j = 0; j < st->ndeps; j++) d->deps |= 1u << s->deps[st->dep_first + j];
        if (!is_msg(st->kind)) continue;
        for (uint32_t j = 0; j < i; j++) /* earlier messages with data on the same channel */
            if (s->steps[j].kind == st->kind && s->steps[j].peer == st->peer && s->steps[j].count) d->before |= 1u << j;
        const mpccl_dev_link_t *L = &links[st->peer];
        size_t ch = (size_t)st->peer * hdr->nctas; /* the peer's channel of CTA 0 */
        if (st->kind == MPCCL_STEP_SEND) {
            d->slots = L->tx_slots;
            d->word = L->tx_word;
            d->ack = L->tx_ack;
            d->seq = hdr->tx_seq + ch;
            d->known = hdr->tx_acked + ch;
        } else {
            d->slots = (char *)L->rx_slots;
            d->word = L->rx_word;
            d->ack = L->rx_ack;
            d->seq = hdr->rx_seq + ch;
            d->known = hdr->rx_clean ? hdr->rx_clean + ch * hdr->nslots : NULL;
        }
    }
}

#if defined(MPCCL_HAVE_CUDA) && !defined(MPCCL_GPU_PLAN_CONVERT_ONLY)
mpccl_status_t mpccl_gpu_small_upload(const mpccl_sched_t *s, const mpccl_dev_link_t *links,
                                      const mpccl_dev_comm_t *hdr, mpccl_gpu_plan_t *p)
{
    size_t bytes = (size_t)s->nsteps * sizeof(mpccl_dev_small_step_t);
    mpccl_dev_small_step_t *img = malloc(bytes);
    if (!img) return mpccl_fail(MPCCL_ERR_SYSTEM, "out of memory for a small plan (%zu bytes)", bytes);
    mpccl_gpu_small_image(s, links, hdr, img);
    void *dev = NULL;
    mpccl_status_t st = mpccl_gpu_upload_bytes(img, bytes, &dev);
    free(img);
    if (st != MPCCL_OK) return st;
    p->small = dev;
    p->small_nsteps = s->nsteps;
    return MPCCL_OK;
}
#endif
