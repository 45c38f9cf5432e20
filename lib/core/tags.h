/* The message tag bit layout, for every layer that sends on a communicator's
 * transport (host schedules, the GPU proxy, communicator shrink). */
#ifndef MPCCL_CORE_TAGS_H
#define MPCCL_CORE_TAGS_H

#include <stdint.h>

/* Bits 63..40: the sending rank.  Bits 39..0: a sequence number, except that
 * sequences with bits 39..38 = 3 are reserved for the proxy. */
#define MPCCL_TAG_RANK_SHIFT 40

/* Collective and point-to-point messages use separate tag sequences: every rank
 * issues collectives in the same order, while p2p order is only per pair, and
 * NCCL lets a group mix both in any order.  Collectives count from 0, p2p from
 * bit 39. */
#define MPCCL_P2P_SEQ_BASE (1ULL << 39)

/* Host schedules: the tag of message seq from rank sender. */
static inline uint64_t mpccl_tag_seq(int sender, uint64_t seq)
{
    return ((uint64_t)sender << MPCCL_TAG_RANK_SHIFT) | seq;
}

/* The proxy (lib/proxy/proxy.h): bits 39..38 = 3, bits 37..30 the channel g
 * (a CTA index, 0x80 | a CTA index for whole messages, 0xfe the one-sided
 * channel), bits 29..0 the piece. */
#define MPCCL_TAG_PROXY (3ULL << 38)
#define MPCCL_TAG_PROXY_G_SHIFT 30
#define MPCCL_TAG_PROXY_PIECE_MASK 0x3fffffffu

static inline uint64_t mpccl_proxy_tag(int sender, uint32_t g, uint32_t p)
{
    return ((uint64_t)sender << MPCCL_TAG_RANK_SHIFT) | MPCCL_TAG_PROXY | ((uint64_t)g << MPCCL_TAG_PROXY_G_SHIFT) |
           (p & MPCCL_TAG_PROXY_PIECE_MASK);
}

/* A whole message of channel g (< 0x7e; lib/kernels/devplan.h, whole
 * messages): the channel's g field with bit 7 set, the transfer's sequence. */
#define MPCCL_TAG_PROXY_WHOLE_G 0x80u

static inline uint64_t mpccl_proxy_whole_tag(int sender, uint32_t g, uint32_t seq)
{
    return mpccl_proxy_tag(sender, MPCCL_TAG_PROXY_WHOLE_G | g, seq);
}

/* ncclCommShrink's id exchange (core/comm_shrink.c): in the proxy's space,
 * with a channel and piece no launch uses. */
static inline uint64_t mpccl_tag_shrink(int sender)
{
    return mpccl_proxy_tag(sender, 0xff, MPCCL_TAG_PROXY_PIECE_MASK);
}

#endif
