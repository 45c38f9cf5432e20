/* The envelope of a device-buffer message: sealing and recognising it.
 *
 * A receive cannot know in advance whether its message is data or an
 * envelope, so an envelope must be recognisable from its bytes alone: it is
 * exactly SHIM_ENV_BYTES long, starts with a magic word and ends with a
 * checksum of the rest.  Plain data of that very length passes both by chance
 * with probability about 2^-128.  The parser takes any bytes (they come from
 * another process) and never trusts a field it has not checked. */
#include <string.h>

#include "shim_p2p.h"

/* FNV-1a, 64 bits, over everything but the checksum, seeded apart from the
 * magic so that a zeroed envelope does not check. */
static uint64_t env_hash(const shim_env_t *e)
{
    const unsigned char *p = (const unsigned char *)e;
    uint64_t h = 0xcbf29ce484222325ULL ^ 0x5eedULL;
    for (size_t i = 0; i < offsetof(shim_env_t, check); i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void mpccl_shim_env_seal(shim_env_t *e)
{
    e->magic = SHIM_ENV_MAGIC;
    e->check = env_hash(e);
}

int mpccl_shim_env_parse(const void *p, size_t bytes, shim_env_t *out)
{
    shim_env_t e;
    if (p == NULL || bytes != SHIM_ENV_BYTES) return 0;
    memcpy(&e, p, sizeof(e)); /* p may be unaligned (a user's buffer) */
    if (e.magic != SHIM_ENV_MAGIC || e.check != env_hash(&e)) return 0;
    if (e.kind != SHIM_ENV_IPC && e.kind != SHIM_ENV_PUSH && e.kind != SHIM_ENV_UCX) return 0;
    if (e.tag == 0 || (e.tag & 1) || e.tag >= 0x7fffffffu) return 0;
    if (e.kind == SHIM_ENV_UCX) {
        /* rkey_bytes, flags and the chunk size are checked here; the key
         * itself by UCX when it is unpacked */
        uint32_t mode = e.reserved0 & SHIM_UCX_MODE;
        if (e.reserved0 & ~(uint32_t)(SHIM_UCX_MODE | SHIM_UCX_KEY_AHEAD)) return 0;
        if (mode != SHIM_UCX_GET && mode != SHIM_UCX_STREAM) return 0;
        if (mode == SHIM_UCX_GET && (e.device <= 0 || e.device > (1 << 20))) return 0;
        if (mode == SHIM_UCX_GET && !(e.reserved0 & SHIM_UCX_KEY_AHEAD) && e.device > SHIM_ENV_RKEY_INLINE) return 0;
        if (mode == SHIM_UCX_STREAM && (e.device != 0 || (e.reserved0 & SHIM_UCX_KEY_AHEAD))) return 0;
        if (mode == SHIM_UCX_STREAM && (e.offset == 0 || e.offset > (1u << 30))) return 0;
        if (e.bytes == 0 || e.bytes > 0x7fffffffu) return 0;
        *out = e;
        return 1;
    }
    if (e.offset > e.bytes + e.offset) return 0; /* wraps */
    *out = e;
    return 1;
}
