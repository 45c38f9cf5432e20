/* Point-to-point between hosts through UCX (doc/SHIM.md, "Point-to-point").
 *
 * The shim keeps one UCP context and worker of its own (libmpccl's UCX is
 * hidden inside it), made in MPI_Init when some peer is on another host;
 * every rank's worker address travels once over the private communicator.
 * A large contiguous device message to another host still goes as an
 * envelope through MPI (MPI matches it), of kind SHIM_ENV_UCX:
 *
 *  - GET: the sender's UCX can read its buffer (host memory, or GPU memory
 *    when a NIC of this UCX registers it, MPCCL_SHIM_NET_DIRECT): the
 *    envelope carries the buffer's address and packed remote key, the
 *    receiver reads it with ucp_get_nbx, straight
 *    into its own buffer when its UCX can write there, else chunk by chunk
 *    through two pinned host buffers (each chunk copied to the device while
 *    the next one travels), and answers DONE.
 *  - STREAM: the sender's UCX cannot read its buffer: the receiver answers
 *    GO, and the sender copies chunk after chunk into two pinned buffers and
 *    sends each as a UCX tag message while it copies the next; the receiver
 *    receives them into its buffer or its own pinned pair.
 *
 * Every UCX call is made under one lock; the shim's progress loop
 * (shim_op.c) progresses the worker, so a peer reading our memory over a
 * transport that needs our CPU (TCP, shared memory) gets its data while we
 * wait for its answer. */
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "shim_p2p.h"

static pthread_mutex_t ucx_lock = PTHREAD_MUTEX_INITIALIZER;
static ucp_context_h context;
static ucp_worker_h worker;
static int cuda_memory; /* this UCX handles CUDA memory (cuda_copy at least) */
static int gdr_nic;     /* and a network device of it registers GPU memory */
static int nranks;
static unsigned char *addr_all; /* every rank's worker address, back to back */
static int *addr_len, *addr_off;
static ucp_ep_h *eps;
static _Atomic int *ep_failed;
static MPI_Comm attempted = MPI_COMM_NULL; /* the private communicator, when every rank set up */

/* ---- registrations of GPU allocations, kept ----
 * Registering GPU memory (with a NIC, or for CUDA IPC) costs far more than a
 * message, so the sender keeps the registration and packed key of each
 * device allocation it sent from, whole; CUDA's buffer id tells a freed and
 * reallocated address from the old allocation.  Entries in use by a transfer
 * stay; when all are, the message registers its own bytes. */
#define REGS 16
typedef struct reg {
    uint64_t base, size, buffer_id;
    ucp_mem_h memh;
    void *packed;
    size_t packed_len;
    int users;
    unsigned long used;
} reg_t;
static reg_t regs[REGS];
static unsigned long reg_clock;

/* ucx_lock held. */
static ucs_status_t map(void *p, size_t bytes, ucp_mem_h *memh)
{
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = p;
    mp.length = bytes;
    return ucp_mem_map(context, &mp, memh);
}

static void reg_drop(reg_t *r)
{
    if (r->packed) ucp_rkey_buffer_release(r->packed);
    if (r->memh) ucp_mem_unmap(context, r->memh);
    memset(r, 0, sizeof(*r));
}


/* ---- setup ---- */

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    int r = (int)(intptr_t)arg;
    (void)ep;
    if (r >= 0 && r < nranks) ep_failed[r] = 1;
    SHIM_WARN("UCX connection to rank %d of MPI_COMM_WORLD failed: %s", r, ucs_status_string(status));
}

/* Does a network device of this UCX register GPU memory (GPUDirect RDMA:
 * an "ib" memory domain that takes CUDA memory)?  UCX handling CUDA memory
 * alone (cuda_copy) says nothing of whether a peer on another host can read
 * it. */
static int find_gdr_nic(void)
{
    uct_component_h *comps = NULL;
    unsigned ncomps = 0;
    int found = 0;
    if (uct_query_components(&comps, &ncomps) != UCS_OK) return 0;
    for (unsigned c = 0; c < ncomps && !found; c++) {
        uct_component_attr_t attr;
        memset(&attr, 0, sizeof(attr));
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if (uct_component_query(comps[c], &attr) != UCS_OK || strcmp(attr.name, "ib") != 0 ||
            attr.md_resource_count == 0)
            continue;
        uct_md_resource_desc_t *mds = calloc(attr.md_resource_count, sizeof(*mds));
        if (mds == NULL) continue;
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        for (unsigned m = 0; uct_component_query(comps[c], &attr) == UCS_OK && m < attr.md_resource_count && !found;
             m++) {
            uct_md_config_t *cfg = NULL;
            uct_md_h md = NULL;
            uct_md_attr_t mattr;
            if (uct_md_config_read(comps[c], NULL, NULL, &cfg) != UCS_OK) continue;
            ucs_status_t st = uct_md_open(comps[c], mds[m].md_name, cfg, &md);
            uct_config_release(cfg);
            if (st != UCS_OK) continue;
            memset(&mattr, 0, sizeof(mattr));
            found = uct_md_query(md, &mattr) == UCS_OK && (mattr.cap.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
            uct_md_close(md);
        }
        free(mds);
    }
    uct_release_component_list(comps);
    return found;
}

/* The context and worker; 0 when this UCX cannot give them. */
static int local_setup(void)
{
    ucp_config_t *cfg = NULL;
    ucp_params_t p;
    ucp_worker_params_t wp;
    ucp_context_attr_t attr;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK) return 0;
    /* a peer that dies is noticed within about a second (unless the user
     * chose otherwise) */
    if (getenv("UCX_KEEPALIVE_INTERVAL") == NULL) (void)ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", "1s");
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
    ucs_status_t st = ucp_init(&p, cfg, &context);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        SHIM_WARN("ucp_init failed (%s): messages to other hosts go through MPI", ucs_status_string(st));
        context = NULL;
        return 0;
    }
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE; /* every call is under ucx_lock */
    if ((st = ucp_worker_create(context, &wp, &worker)) != UCS_OK) {
        SHIM_WARN("ucp_worker_create failed (%s): messages to other hosts go through MPI", ucs_status_string(st));
        ucp_cleanup(context);
        context = NULL;
        return 0;
    }
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    cuda_memory = ucp_context_query(context, &attr) == UCS_OK &&
                  (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    gdr_nic = cuda_memory && find_gdr_nic();
    return 1;
}

static void teardown(void);
static ucp_ep_h ep_of(int r);

void mpccl_shim_ucx_init(MPI_Comm private, int world_size, int any_remote)
{
    const shim_settings_t *s = mpccl_shim_settings();
    ucp_address_t *mine = NULL;
    size_t mine_len = 0;
    /* Every rank decides alike (same settings, same view of the hosts), so
     * every rank takes part in the exchange below or none does. */
    if (s->net == SHIM_NET_MPI || !any_remote || world_size <= 0) return;
    attempted = private;
    int ok = local_setup();
    if (ok && ucp_worker_get_address(worker, &mine, &mine_len) != UCS_OK) ok = 0;
    int len = ok && mine_len < (1u << 20) ? (int)mine_len : 0;
    addr_len = calloc((size_t)world_size, sizeof(int));
    addr_off = calloc((size_t)world_size, sizeof(int));
    int rc = addr_len && addr_off ? PMPI_Allgather(&len, 1, MPI_INT, addr_len, 1, MPI_INT, private) : MPI_ERR_NO_MEM;
    size_t total = 0;
    for (int r = 0; rc == MPI_SUCCESS && r < world_size; r++) {
        addr_off[r] = (int)total;
        total += (size_t)addr_len[r];
    }
    if (rc == MPI_SUCCESS && total > 0x7fffffffu) rc = MPI_ERR_COUNT;
    if (rc == MPI_SUCCESS && (addr_all = malloc(total ? total : 1)) == NULL) rc = MPI_ERR_NO_MEM;
    /* (all ranks reach this with the same total, so none skips it alone) */
    if (rc == MPI_SUCCESS)
        rc = PMPI_Allgatherv(len ? (void *)mine : addr_all, len, MPI_BYTE, addr_all, addr_len, addr_off, MPI_BYTE,
                             private);
    if (mine) ucp_worker_release_address(worker, mine);
    eps = rc == MPI_SUCCESS ? calloc((size_t)world_size, sizeof(*eps)) : NULL;
    ep_failed = eps ? calloc((size_t)world_size, sizeof(*ep_failed)) : NULL;
    if (rc != MPI_SUCCESS || ep_failed == NULL || len == 0) {
        if (ok || s->net == SHIM_NET_UCX)
            SHIM_WARN("UCX for messages between hosts is not usable on rank %d (MPCCL_SHIM_NET=%s): they go through "
                      "MPI",
                      mpccl_shim_my_world_rank(), s->net == SHIM_NET_UCX ? "ucx" : "auto");
        teardown();
        return;
    }
    nranks = world_size;
    SHIM_INFO("messages between hosts go through UCX (GPU memory %s)",
              s->host_mode                                       ? "stood for by host memory, read directly"
              : cuda_memory && s->net_direct && (gdr_nic || s->net_direct == 2) ? "read and written by UCX directly"
                                                                 : "staged through pinned host memory");
}

static void teardown(void)
{
    pthread_mutex_lock(&ucx_lock);
    for (int i = 0; context && i < REGS; i++)
        if (regs[i].memh) reg_drop(&regs[i]);
    for (int r = 0; eps && r < nranks; r++) {
        if (eps[r] == NULL) continue;
        ucp_request_param_t prm;
        memset(&prm, 0, sizeof(prm));
        /* flushed (a forced close suits only endpoints with failure
         * detection), but not waited for long: a peer may be gone */
        ucs_status_ptr_t q = ucp_ep_close_nbx(eps[r], &prm);
        double t0 = PMPI_Wtime();
        while (UCS_PTR_IS_PTR(q) && ucp_request_check_status(q) == UCS_INPROGRESS && PMPI_Wtime() - t0 < 2.0)
            ucp_worker_progress(worker);
        if (UCS_PTR_IS_PTR(q)) {
            if (ucp_request_check_status(q) == UCS_INPROGRESS) ucp_request_cancel(worker, q);
            ucp_request_free(q);
        }
    }
    if (worker) ucp_worker_destroy(worker);
    if (context) ucp_cleanup(context);
    worker = NULL;
    context = NULL;
    free(eps);
    free((void *)ep_failed);
    free(addr_all);
    free(addr_len);
    free(addr_off);
    eps = NULL;
    ep_failed = NULL;
    addr_all = NULL;
    addr_len = addr_off = NULL;
    nranks = 0;
    pthread_mutex_unlock(&ucx_lock);
}


void mpccl_shim_ucx_fini(void)
{
    /* Every rank took part in the setup or none did (mpccl_shim_ucx_init):
     * once all have drained their transfers, nothing is in flight to or from
     * anyone, and the endpoints close on quiet wires. */
    if (attempted != MPI_COMM_NULL) PMPI_Barrier(attempted);
    attempted = MPI_COMM_NULL;
    teardown();
}

int mpccl_shim_ucx_reaches(int r)
{
    return worker && r >= 0 && r < nranks && addr_len[r] > 0 && !ep_failed[r];
}

int mpccl_shim_ucx_peer_failed(int r)
{
    if (!mpccl_shim_ucx_reaches(r)) return ep_failed && r >= 0 && r < nranks && ep_failed[r];
    /* A transfer waits for this peer: an endpoint to it lets UCX notice its
     * death (failed connection, keepalive), even before any byte moved. */
    if (eps[r] == NULL) {
        pthread_mutex_lock(&ucx_lock);
        (void)ep_of(r);
        pthread_mutex_unlock(&ucx_lock);
    }
    return 0;
}

int mpccl_shim_ucx_progress(void)
{
    if (worker == NULL) return 0;
    pthread_mutex_lock(&ucx_lock);
    int n = worker ? (int)ucp_worker_progress(worker) : 0;
    pthread_mutex_unlock(&ucx_lock);
    return n;
}

/* Callers hold ucx_lock. */
static ucp_ep_h ep_of(int r)
{
    ucp_ep_params_t p;
    if (!mpccl_shim_ucx_reaches(r)) return NULL;
    if (eps[r]) return eps[r];
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = (const ucp_address_t *)(addr_all + addr_off[r]);
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = ep_error;
    p.err_handler.arg = (void *)(intptr_t)r;
    ucs_status_t st = ucp_ep_create(worker, &p, &eps[r]);
    if (st != UCS_OK) {
        /* a transport without failure detection: connect without it */
        p.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        st = ucp_ep_create(worker, &p, &eps[r]);
    }
    if (st != UCS_OK) {
        /* (a peer that died leaves nothing to connect to: this is how its
         * death shows before any byte moved) */
        SHIM_WARN("UCX connection to rank %d of MPI_COMM_WORLD could not be made: %s", r, ucs_status_string(st));
        eps[r] = NULL;
        ep_failed[r] = 1;
    }
    return eps[r];
}

/* Can this process's UCX read or write p (a buffer the shim calls device
 * memory) itself, for a peer on another host?  MPCCL_SHIM_NET_DIRECT: auto
 * where a NIC registers GPU memory, 1 wherever UCX handles CUDA memory (a
 * peer on the same machine under another host id: cuda_ipc), 0 never. */
static int reaches_memory(const void *p)
{
    const shim_settings_t *s = mpccl_shim_settings();
    shim_alloc_t a;
    if (!s->net_direct) return 0;
    if (s->host_mode) return 1; /* host memory standing for device memory */
    return cuda_memory && (gdr_nic || s->net_direct == 2) && mpccl_shim_alloc_of(p, &a);
}

/* The registration of allocation a, taken (users + 1); NULL when none can be
 * kept.  ucx_lock held. */
static reg_t *reg_get(const shim_alloc_t *a)
{
    reg_t *free_slot = NULL;
    for (int i = 0; i < REGS; i++) {
        reg_t *r = &regs[i];
        if (r->memh && r->base == a->base && r->size == a->size && r->buffer_id == a->buffer_id) {
            r->users++;
            r->used = ++reg_clock;
            return r;
        }
        /* the same address freed and allocated again: the old one is stale */
        if (r->memh && r->users == 0 && r->base == a->base) reg_drop(r);
        if (r->users == 0 && (free_slot == NULL || (free_slot->memh && (!r->memh || r->used < free_slot->used))))
            free_slot = r;
    }
    if (free_slot == NULL) return NULL;
    if (free_slot->memh) reg_drop(free_slot);
    if (map((void *)(uintptr_t)a->base, a->size, &free_slot->memh) != UCS_OK) {
        free_slot->memh = NULL;
        return NULL;
    }
    if (ucp_rkey_pack(context, free_slot->memh, &free_slot->packed, &free_slot->packed_len) != UCS_OK) {
        free_slot->packed = NULL;
        reg_drop(free_slot);
        return NULL;
    }
    free_slot->base = a->base;
    free_slot->size = a->size;
    free_slot->buffer_id = a->buffer_id;
    free_slot->users = 1;
    free_slot->used = ++reg_clock;
    return free_slot;
}

/* ---- one transfer: chunks through at most two buffers in flight ---- */

enum { SEND_STREAM = 1, RECV_GET, RECV_STREAM };
typedef struct {
    int role;
    char *user;         /* the user's bytes: source (send) or destination (receive) */
    int staged;         /* through slot[] (pinned host memory) */
    size_t bytes, chunk;
    size_t nchunks, issued, completed;
    void *slot[2];
    void *req[2];       /* UCX request in flight per slot */
    size_t slot_chunk[2];
    int failed;         /* an MPI error code, or 0 */
    int broken;         /* UCX failed: nothing more is started */
    ucp_ep_h ep;
    ucp_rkey_h rkey;
    uint64_t remote;
    ucp_tag_t tag;      /* of chunk 0; chunk i has tag | (i mod 2^16): two in flight */
    ucp_mem_h memh;     /* sender, GET: its buffer registered for this message */
    reg_t *reg;         /* or its allocation's cached registration */
} xfer_t;

/* The UCX tag of a transfer's chunks: sender, transfer tag, chunk. */
static ucp_tag_t tag_of(const shim_env_t *e)
{
    return ((ucp_tag_t)(e->sender & 0xfffffu) << 44) | ((ucp_tag_t)(e->tag & 0xfffffffu) << 16);
}

static xfer_t *xfer_new(int role, void *user, size_t bytes, size_t chunk, int staged)
{
    xfer_t *x = calloc(1, sizeof(*x));
    if (x == NULL) return NULL;
    x->role = role;
    x->user = user;
    x->bytes = bytes;
    x->staged = staged;
    x->chunk = staged || role != RECV_GET ? chunk : bytes; /* direct reads: one */
    if (x->chunk == 0) x->chunk = bytes;
    x->nchunks = (bytes + x->chunk - 1) / x->chunk;
    for (int s = 0; staged && s < 2; s++)
        if ((x->slot[s] = mpccl_shim_bounce_get(x->chunk)) == NULL) x->failed = MPI_ERR_NO_MEM;
    return x;
}

static void xfer_free(xfer_t *x)
{
    if (x == NULL) return;
    pthread_mutex_lock(&ucx_lock);
    for (int s = 0; s < 2; s++)
        if (x->req[s]) {
            ucp_request_cancel(worker, x->req[s]);
            ucp_request_free(x->req[s]);
        }
    if (x->rkey) ucp_rkey_destroy(x->rkey);
    if (x->memh) ucp_mem_unmap(context, x->memh);
    if (x->reg) x->reg->users--;
    pthread_mutex_unlock(&ucx_lock);
    for (int s = 0; s < 2; s++)
        if (x->slot[s]) mpccl_shim_bounce_put(x->slot[s]);
    free(x);
}

/* Starts chunk i in slot s (ucx_lock held). */
static void issue(xfer_t *x, size_t i, int s)
{
    size_t off = i * x->chunk, len = x->bytes - off < x->chunk ? x->bytes - off : x->chunk;
    char *local = x->staged ? x->slot[s] : x->user + off;
    ucp_request_param_t prm;
    ucs_status_ptr_t q;
    memset(&prm, 0, sizeof(prm));
    if (x->role == SEND_STREAM) {
        /* A failed copy is reported here; the chunk still goes, so the
         * receiver is not left waiting for it. */
        if (x->staged && mpccl_shim_copy(local, x->user + off, len) != MPI_SUCCESS) x->failed = MPI_ERR_OTHER;
        q = ucp_tag_send_nbx(x->ep, local, len, x->tag | (i & 0xffff), &prm);
    } else if (x->role == RECV_GET) {
        q = ucp_get_nbx(x->ep, local, len, x->remote + off, x->rkey, &prm);
    } else {
        q = ucp_tag_recv_nbx(worker, local, len, x->tag | (i & 0xffff), (ucp_tag_t)-1, &prm);
    }
    if (UCS_PTR_IS_ERR(q)) {
        SHIM_WARN("UCX %s of chunk %zu (%zu bytes) failed: %s",
                  x->role == SEND_STREAM ? "send" : x->role == RECV_GET ? "read" : "receive", i, len,
                  ucs_status_string(UCS_PTR_STATUS(q)));
        x->failed = MPI_ERR_OTHER;
        x->broken = 1;
        return;
    }
    x->req[s] = q; /* NULL: done already */
    x->slot_chunk[s] = i;
    x->issued++;
}

/* A chunk's bytes are in (ucx_lock held): a staged receive copies them on. */
static void landed(xfer_t *x, int s)
{
    size_t i = x->slot_chunk[s], off = i * x->chunk, len = x->bytes - off < x->chunk ? x->bytes - off : x->chunk;
    if (x->role != SEND_STREAM && x->staged && !x->broken &&
        mpccl_shim_copy_done(x->user + off, x->slot[s], len) != MPI_SUCCESS)
        x->failed = MPI_ERR_OTHER;
    x->completed++;
}

/* Moves x on; 1 when every chunk is done (or it failed and nothing is in
 * flight). */
static int xfer_poll(xfer_t *x)
{
    pthread_mutex_lock(&ucx_lock);
    ucp_worker_progress(worker);
    for (int s = 0; s < 2; s++) {
        if (x->req[s] == NULL) continue;
        ucs_status_t st = ucp_request_check_status(x->req[s]);
        if (st == UCS_INPROGRESS) continue;
        ucp_request_free(x->req[s]);
        x->req[s] = NULL;
        if (st != UCS_OK) {
            SHIM_WARN("UCX transfer of %zu bytes failed: %s", x->bytes, ucs_status_string(st));
            x->failed = MPI_ERR_OTHER;
            x->broken = 1;
        }
        landed(x, s);
    }
    /* Two chunks in flight: while one travels the other is copied.  A chunk
     * whose request completed at once (NULL) is landed here. */
    while (!x->broken && x->issued < x->nchunks) {
        int s = (int)(x->issued % 2);
        if (x->req[s]) break;
        issue(x, x->issued, s);
        if (x->broken) break;
        if (x->req[s] == NULL) landed(x, s);
    }
    pthread_mutex_unlock(&ucx_lock);
    return x->req[0] == NULL && x->req[1] == NULL && (x->broken || x->completed == x->nchunks);
}

/* ---- the sender ---- */

int mpccl_shim_ucx_send_prepare(shim_op_t *op)
{
    shim_env_t *e = &op->env;
    const shim_settings_t *s = mpccl_shim_settings();
    int rc = MPI_SUCCESS;
    e->kind = SHIM_ENV_UCX;
    if (!reaches_memory(op->buf)) {
        e->reserved0 = SHIM_UCX_STREAM;
        e->offset = s->net_chunk;
        e->device = 0;
        return MPI_SUCCESS;
    }
    xfer_t *x = xfer_new(0, op->buf, e->bytes, e->bytes, 0);
    if (x == NULL) return MPI_ERR_NO_MEM;
    void *packed = NULL;
    size_t packed_len = 0;
    ucs_status_t st = UCS_OK;
    shim_alloc_t a;
    pthread_mutex_lock(&ucx_lock);
    if (!s->host_mode && mpccl_shim_alloc_of(op->buf, &a) && (x->reg = reg_get(&a)) != NULL) {
        packed = x->reg->packed;
        packed_len = x->reg->packed_len;
    } else if ((st = map(op->buf, e->bytes, &x->memh)) == UCS_OK) {
        st = ucp_rkey_pack(context, x->memh, &packed, &packed_len);
    }
    pthread_mutex_unlock(&ucx_lock);
    if (st != UCS_OK || packed_len == 0 || packed_len > (1u << 20)) {
        SHIM_WARN("%s: registering %zu bytes with UCX failed (%s): sent staged instead", op->what, (size_t)e->bytes,
                  ucs_status_string(st));
        if (packed && x->reg == NULL) ucp_rkey_buffer_release(packed);
        xfer_free(x);
        return MPI_ERR_OTHER;
    }
    e->reserved0 = SHIM_UCX_GET;
    e->base = (uint64_t)(uintptr_t)op->buf;
    e->offset = 0;
    e->device = (int32_t)packed_len;
    if (packed_len <= s->net_key_inline) memcpy(e->rkey, packed, packed_len);
    /* Too big for the envelope: it goes ahead, small enough to travel
     * eagerly, on the private communicator. */
    else {
        e->reserved0 |= SHIM_UCX_KEY_AHEAD;
        rc = PMPI_Send(packed, (int)packed_len, MPI_BYTE, op->peer_world, (int)e->tag + 1, mpccl_shim_private_comm());
    }
    if (x->reg == NULL) ucp_rkey_buffer_release(packed);
    if (rc != MPI_SUCCESS) {
        xfer_free(x);
        return rc;
    }
    mpccl_shim_sync_legacy(); /* the receiver reads the buffer directly */
    op->ctx = x;
    return MPI_SUCCESS;
}

void mpccl_shim_ucx_send_abort(shim_op_t *op)
{
    xfer_free(op->ctx);
    op->ctx = NULL;
}

static int send_stream_poll(shim_op_t *op)
{
    xfer_t *x = op->ctx;
    if (!xfer_poll(x)) return 0;
    if (x->failed && op->error == MPI_SUCCESS) op->error = x->failed;
    return 1;
}

static void send_stream_finish(shim_op_t *op)
{
    xfer_free(op->ctx);
    op->ctx = NULL;
}

void mpccl_shim_ucx_send_answered(shim_op_t *op, MPI_Status *st)
{
    const shim_env_t *e = &op->env;
    if (st->MPI_ERROR == MPI_SUCCESS && (op->answer == SHIM_ANS_DONE || op->answer == SHIM_ANS_GO))
        mpccl_shim_count_p2p(1, SHIM_ROUTE_UCX);
    if (st->MPI_ERROR == MPI_SUCCESS && op->answer == SHIM_ANS_GO &&
        (e->reserved0 & SHIM_UCX_MODE) == SHIM_UCX_STREAM) {
        xfer_t *x = xfer_new(SEND_STREAM, op->buf, e->bytes, e->offset, 1);
        pthread_mutex_lock(&ucx_lock);
        if (x) x->ep = ep_of(op->peer_world);
        pthread_mutex_unlock(&ucx_lock);
        if (x && x->ep && !x->failed) {
            x->tag = tag_of(e);
            op->ctx = x;
            op->poll = send_stream_poll;
            op->finish = send_stream_finish;
            return; /* polled from now on */
        }
        /* The receiver waits for chunks that cannot come: it learns of the
         * failure from its own UCX when we are gone; we report ours. */
        SHIM_WARN("%s: %zu bytes to rank %d of MPI_COMM_WORLD could not be sent through UCX", op->what,
                  (size_t)e->bytes, op->peer_world);
        xfer_free(x);
        op->error = x ? MPI_ERR_OTHER : MPI_ERR_NO_MEM;
        mpccl_shim_op_finish(op);
        return;
    }
    if (st->MPI_ERROR != MPI_SUCCESS) op->error = st->MPI_ERROR;
    xfer_free(op->ctx); /* GET: the receiver has read the buffer (or will not) */
    op->ctx = NULL;
    mpccl_shim_op_finish(op);
}

/* ---- the receiver ---- */

void mpccl_shim_ucx_refuse(const shim_env_t *e)
{
    /* a remote key too big for the envelope came ahead of it: take it */
    size_t n = (e->reserved0 & SHIM_UCX_MODE) == SHIM_UCX_GET ? (size_t)e->device : 0;
    if (!(e->reserved0 & SHIM_UCX_KEY_AHEAD)) return;
    void *rk = malloc(n);
    if (rk)
        PMPI_Recv(rk, (int)n, MPI_BYTE, (int)e->sender, (int)e->tag + 1, mpccl_shim_private_comm(),
                  MPI_STATUS_IGNORE);
    free(rk);
}

static void answer(shim_op_t *op, uint32_t code)
{
    int rc = PMPI_Send(&code, 1, MPI_UINT32_T, (int)op->env.sender, (int)op->env.tag, mpccl_shim_private_comm());
    if (rc != MPI_SUCCESS && op->error == MPI_SUCCESS) op->error = rc;
}

static int recv_poll(shim_op_t *op)
{
    xfer_t *x = op->ctx;
    if (!xfer_poll(x)) return 0;
    if (x->failed && op->error == MPI_SUCCESS) op->error = x->failed;
    if (x->role == RECV_GET) answer(op, x->failed ? SHIM_ANS_FAIL : SHIM_ANS_DONE);
    xfer_free(x);
    op->ctx = NULL;
    return 1;
}

void mpccl_shim_ucx_recv(shim_op_t *op, void *dst, int staged)
{
    const shim_env_t *e = &op->env;
    int get = (e->reserved0 & SHIM_UCX_MODE) == SHIM_UCX_GET, rc = MPI_SUCCESS;
    size_t rklen = get ? (size_t)e->device : 0;
    unsigned char *rk = NULL;
    staged = staged && !reaches_memory(dst);
    xfer_t *x = xfer_new(get ? RECV_GET : RECV_STREAM, dst, e->bytes,
                         get ? mpccl_shim_settings()->net_chunk : e->offset, staged);
    /* The remote key that did not fit in the envelope came ahead of it. */
    if (e->reserved0 & SHIM_UCX_KEY_AHEAD) {
        rk = malloc(rklen);
        rc = rk ? PMPI_Recv(rk, (int)rklen, MPI_BYTE, (int)e->sender, (int)e->tag + 1, mpccl_shim_private_comm(),
                            MPI_STATUS_IGNORE)
                : MPI_ERR_NO_MEM;
    }
    if (rc == MPI_SUCCESS && (x == NULL || x->failed)) rc = MPI_ERR_NO_MEM;
    if (rc == MPI_SUCCESS) {
        pthread_mutex_lock(&ucx_lock);
        x->ep = ep_of((int)e->sender);
        ucs_status_t st = UCS_OK;
        if (x->ep == NULL) rc = MPI_ERR_OTHER;
        else if (get && (st = ucp_ep_rkey_unpack(x->ep, rk ? rk : e->rkey, &x->rkey)) != UCS_OK) {
            SHIM_WARN("%s: the remote key of rank %u's buffer could not be unpacked: %s", op->what, e->sender,
                      ucs_status_string(st));
            x->rkey = NULL;
            rc = MPI_ERR_OTHER;
        }
        pthread_mutex_unlock(&ucx_lock);
    }
    free(rk);
    if (rc != MPI_SUCCESS) {
        /* The sender completes; the failure is ours to report. */
        answer(op, SHIM_ANS_FAIL);
        xfer_free(x);
        op->error = rc;
        mpccl_shim_op_finish(op);
        return;
    }
    x->remote = e->base;
    x->tag = tag_of(e);
    op->ctx = x;
    op->poll = recv_poll;
    op->cancellable = 0;
    mpccl_shim_count_p2p(0, SHIM_ROUTE_UCX);
    if (!get) {
        /* the first chunks' receives are posted before the sender is told to go */
        xfer_poll(x);
        answer(op, SHIM_ANS_GO);
    }
}
