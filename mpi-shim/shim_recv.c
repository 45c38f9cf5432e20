/* The receiving side: every receive of the process on an intracommunicator
 * whose ranks are in this job lands where an envelope can be recognised.
 *
 * A host buffer that is contiguous and can hold an envelope takes the
 * message itself (no copy for plain data); anything else lands in a bounce
 * big enough for either, as bytes.  Then: an envelope is served (GPU to GPU
 * copy, or the data asked for), plain data is copied or unpacked into the
 * user's buffer.  Large bounces are plain malloc memory, whose pages exist
 * only where MPI writes: an envelope for a 1 GB receive touches one page. */
#include <stdlib.h>
#include <string.h>

#include "shim_p2p.h"

#define LAND_POOLED (1u << 20) /* larger landings come from malloc */

static void *land_alloc(size_t bytes, int *owned)
{
    if (bytes <= LAND_POOLED) {
        *owned = 1;
        return mpccl_shim_bounce_get(bytes);
    }
    *owned = 2;
    return malloc(bytes);
}

void mpccl_shim_land_free(void *p, int owned)
{
    if (owned == 1) mpccl_shim_bounce_put(p);
    else if (owned == 2) free(p);
}

static void answer(shim_op_t *op, uint32_t code)
{
    int rc = PMPI_Send(&code, 1, MPI_UINT32_T, (int)op->env.sender, (int)op->env.tag, mpccl_shim_private_comm());
    if (rc != MPI_SUCCESS && op->error == MPI_SUCCESS) op->error = rc;
}

/* n packed bytes at src into the user's buffer and datatype; pinned: src
 * is a pooled bounce (else malloc memory, whose copy to the device must be
 * waited for). */
static int deliver(shim_op_t *op, const void *src, size_t n, int pinned)
{
    int tsize = 0, pos = 0, rc;
    if (n == 0) return MPI_SUCCESS;
    if (op->contiguous && op->device)
        return pinned ? mpccl_shim_copy(op->buf, src, n) : mpccl_shim_copy_done(op->buf, src, n);
    if (op->contiguous) return memcpy(op->buf, src, n), MPI_SUCCESS;
    PMPI_Type_size(op->dt, &tsize);
    int elems = tsize > 0 ? (int)(n / (size_t)tsize) : 0;
    if (!op->device) return PMPI_Unpack(src, (int)n, &pos, op->buf, elems, op->dt, op->comm);
    /* A device buffer with holes: its span comes to the host and back, so the
     * holes keep their contents. */
    ptrdiff_t lb = 0;
    size_t span = 0;
    if (!mpccl_shim_span(op->dt, (size_t)op->count, &lb, &span)) return MPI_ERR_TYPE;
    char *sb = mpccl_shim_bounce_get(span);
    if (sb == NULL) return MPI_ERR_NO_MEM;
    rc = mpccl_shim_copy(sb, (char *)op->buf + lb, span);
    if (rc == MPI_SUCCESS) rc = PMPI_Unpack(src, (int)n, &pos, sb - lb, elems, op->dt, op->comm);
    if (rc == MPI_SUCCESS) rc = mpccl_shim_copy((char *)op->buf + lb, sb, span);
    mpccl_shim_bounce_put(sb);
    return rc;
}

static void recv_pushed(shim_op_t *op, MPI_Status *st)
{
    if (st->MPI_ERROR != MPI_SUCCESS) op->error = st->MPI_ERROR;
    else if (op->bounce) op->error = deliver(op, op->bounce, op->bytes, op->bounce_owned == 1);
    if (op->bounce) mpccl_shim_land_free(op->bounce, op->bounce_owned);
    op->bounce = NULL;
    mpccl_shim_op_finish(op);
}

/* A non-contiguous receive's bytes came over UCX into its bounce. */
static void recv_ucx_deliver(shim_op_t *op)
{
    if (op->error == MPI_SUCCESS && op->bounce) op->error = deliver(op, op->bounce, op->bytes, op->bounce_owned == 1);
}

static void recv_envelope(shim_op_t *op, const shim_env_t *e)
{
    op->env = *e;
    op->bytes = e->bytes;
    op->peer_world = (int)e->sender;
    if (e->bytes > op->capacity) {
        if (e->kind == SHIM_ENV_UCX) mpccl_shim_ucx_refuse(e);
        answer(op, SHIM_ANS_FAIL);
        op->error = MPI_ERR_TRUNCATE;
        mpccl_shim_op_finish(op);
        return;
    }
    if (e->kind == SHIM_ENV_UCX) {
        /* from another host: read or received over UCX, straight into a
         * contiguous buffer, else into a bounce unpacked at the end */
        void *dst = op->buf;
        int staged = op->device;
        if (!op->contiguous) {
            dst = op->bounce = land_alloc(e->bytes, &op->bounce_owned);
            staged = 0;
            op->finish = recv_ucx_deliver;
            if (dst == NULL) {
                mpccl_shim_ucx_refuse(e);
                answer(op, SHIM_ANS_FAIL);
                op->error = MPI_ERR_NO_MEM;
                mpccl_shim_op_finish(op);
                return;
            }
        }
        mpccl_shim_ucx_recv(op, dst, staged);
        return;
    }
    if (e->kind == SHIM_ENV_IPC) {
        int owned = 0;
        void *tmp = op->contiguous ? op->buf : land_alloc(e->bytes, &owned);
        int rc = tmp ? mpccl_shim_ipc_pull(e, tmp, e->bytes) : MPI_ERR_NO_MEM;
        if (rc == MPI_SUCCESS && !op->contiguous) op->error = deliver(op, tmp, e->bytes, owned == 1);
        if (!op->contiguous) mpccl_shim_land_free(tmp, owned);
        if (rc == MPI_SUCCESS) {
            mpccl_shim_count_p2p(0, SHIM_ROUTE_MPCCL);
            answer(op, SHIM_ANS_DONE);
            mpccl_shim_op_finish(op);
            return;
        }
    }
    /* Ask for the bytes; the receive for them is posted first. */
    void *dst = op->buf;
    if (op->device || !op->contiguous) {
        dst = op->bounce = land_alloc(e->bytes, &op->bounce_owned);
        if (dst == NULL) {
            answer(op, SHIM_ANS_FAIL);
            op->error = MPI_ERR_NO_MEM;
            mpccl_shim_op_finish(op);
            return;
        }
    }
    op->step = recv_pushed;
    op->cancellable = 0;
    mpccl_shim_count_p2p(0, SHIM_ROUTE_STAGED);
    int rc = PMPI_Irecv(dst, (int)e->bytes, MPI_BYTE, (int)e->sender, (int)e->tag + 1, mpccl_shim_private_comm(),
                        &op->ireq);
    answer(op, rc == MPI_SUCCESS ? SHIM_ANS_PUSH : SHIM_ANS_FAIL);
    if (rc != MPI_SUCCESS) {
        op->error = rc;
        recv_pushed(op, &(MPI_Status){.MPI_ERROR = rc});
    }
}

/* The message is in op->land (n bytes per st). */
static void recv_landed(shim_op_t *op, MPI_Status *st)
{
    int cancelled = 0, n = 0;
    shim_env_t e;
    PMPI_Test_cancelled(st, &cancelled);
    if (cancelled) {
        op->cancelled = 1;
        mpccl_shim_op_finish(op);
        return;
    }
    op->source = st->MPI_SOURCE;
    op->tag = st->MPI_TAG;
    PMPI_Get_count(st, MPI_BYTE, &n);
    if (n == MPI_UNDEFINED || n < 0) n = 0;
    op->bytes = (size_t)n;
    if (st->MPI_ERROR != MPI_SUCCESS) {
        op->error = st->MPI_ERROR;
    } else if (mpccl_shim_p2p_on() && mpccl_shim_env_parse(op->land, (size_t)n, &e)) {
        recv_envelope(op, &e);
        return;
    } else if (op->land != op->buf) {
        mpccl_shim_count_p2p(0, op->device ? SHIM_ROUTE_STAGED : SHIM_ROUTE_MPI);
        if ((size_t)n > op->capacity) op->error = MPI_ERR_TRUNCATE, op->bytes = op->capacity;
        else op->error = deliver(op, op->land, (size_t)n, op->land_owned == 1);
    }
    mpccl_shim_op_finish(op);
}

/* ---- messages already taken out of MPI by a probe ----
 * MPI_Probe cannot tell an envelope's size from its own: a message of
 * exactly SHIM_ENV_BYTES is taken (MPI_Mprobe + MPI_Mrecv) and kept here, in
 * order, and the next receive that matches takes it before asking MPI (it
 * came before anything MPI still holds from that source). */
typedef struct stash {
    MPI_Comm comm;
    int source, tag, claimed;
    unsigned char raw[SHIM_ENV_BYTES];
    struct stash *next;
} stash_t;
static stash_t *stash_head;
static int stash_count;
static pthread_mutex_t stash_lock = PTHREAD_MUTEX_INITIALIZER;

static int matches(const stash_t *s, MPI_Comm comm, int source, int tag)
{
    return s->comm == comm && !s->claimed && (source == MPI_ANY_SOURCE || source == s->source) &&
           (tag == MPI_ANY_TAG || tag == s->tag);
}

/* The first matching message, removed (take) or claimed (for MPI_Mprobe). */
static stash_t *stash_find(MPI_Comm comm, int source, int tag, int take, int claim)
{
    stash_t *s = NULL, **pp;
    if (__atomic_load_n(&stash_count, __ATOMIC_ACQUIRE) == 0) return NULL;
    pthread_mutex_lock(&stash_lock);
    for (pp = &stash_head; *pp; pp = &(*pp)->next)
        if (matches(*pp, comm, source, tag)) break;
    s = *pp;
    if (s && take) {
        *pp = s->next;
        __atomic_sub_fetch(&stash_count, 1, __ATOMIC_RELEASE);
    } else if (s && claim) {
        s->claimed = 1;
    }
    pthread_mutex_unlock(&stash_lock);
    return s;
}

static void stash_status(const stash_t *s, MPI_Status *st)
{
    shim_env_t e;
    size_t n = mpccl_shim_env_parse(s->raw, SHIM_ENV_BYTES, &e) ? e.bytes : SHIM_ENV_BYTES;
    if (st == MPI_STATUS_IGNORE) return;
    st->MPI_SOURCE = s->source;
    st->MPI_TAG = s->tag;
    st->MPI_ERROR = MPI_SUCCESS;
    PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)n);
    PMPI_Status_set_cancelled(st, 0);
}

/* Takes the message MPI holds for (source, tag) out into the stash. */
static stash_t *stash_pull(MPI_Comm comm, int source, int tag, int claim)
{
    MPI_Message msg;
    MPI_Status st;
    stash_t *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    if (PMPI_Mprobe(source, tag, comm, &msg, &st) != MPI_SUCCESS ||
        PMPI_Mrecv(s->raw, SHIM_ENV_BYTES, MPI_BYTE, &msg, &st) != MPI_SUCCESS) {
        free(s);
        return NULL;
    }
    s->comm = comm;
    s->source = st.MPI_SOURCE;
    s->tag = st.MPI_TAG;
    s->claimed = claim;
    pthread_mutex_lock(&stash_lock);
    stash_t **pp = &stash_head;
    while (*pp) pp = &(*pp)->next;
    *pp = s;
    __atomic_add_fetch(&stash_count, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&stash_lock);
    return s;
}

/* Takes s out of the stash (its new owner frees it). */
static void stash_unlink(stash_t *s)
{
    pthread_mutex_lock(&stash_lock);
    for (stash_t **pp = &stash_head; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            __atomic_sub_fetch(&stash_count, 1, __ATOMIC_RELEASE);
            break;
        }
    pthread_mutex_unlock(&stash_lock);
}

/* ---- receives ---- */

int mpccl_shim_recv_wanted(const void *buf, MPI_Comm comm, int source)
{
    int inter = 0;
    if (!mpccl_shim_p2p_wanted(buf, comm) || source == MPI_PROC_NULL) return 0;
    if (mpccl_shim_p2p_on()) {
        if (comm == MPI_COMM_WORLD) return 1;
        if (PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter) return 1;
    }
    return mpccl_shim_is_device(buf); /* no envelopes here: only device buffers need us */
}

/* Sets up op's buffer facts; 0 on a bad datatype. */
static int recv_prepare(shim_op_t *op, void *buf, int count, MPI_Datatype dt, MPI_Comm comm, const char *what)
{
    int tsize = 0;
    size_t esz = 0;
    if (count < 0 || PMPI_Type_size(dt, &tsize) != MPI_SUCCESS || tsize < 0) return 0;
    op->what = what;
    op->buf = buf;
    op->count = count;
    op->dt = dt;
    op->comm = comm;
    op->device = count > 0 && tsize > 0 && mpccl_shim_is_device(buf);
    op->contiguous = mpccl_shim_contiguous(dt, &esz) || tsize == 0;
    op->capacity = (size_t)count * (size_t)tsize;
    op->step = recv_landed;
    return 1;
}

/* Serves op from a stashed message (op not started, no lock held). */
static void recv_from_stash(shim_op_t *op, stash_t *s)
{
    MPI_Status st;
    memset(&st, 0, sizeof(st));
    st.MPI_SOURCE = s->source;
    st.MPI_TAG = s->tag;
    st.MPI_ERROR = MPI_SUCCESS;
    PMPI_Status_set_elements_x(&st, MPI_BYTE, SHIM_ENV_BYTES);
    PMPI_Status_set_cancelled(&st, 0);
    op->land = s->raw;
    if (op->capacity < SHIM_ENV_BYTES || !op->contiguous || op->device) {
        recv_landed(op, &st);
    } else {
        /* the user's buffer would have been the landing: same result */
        memcpy(op->buf, s->raw, SHIM_ENV_BYTES);
        op->land = op->buf;
        recv_landed(op, &st);
    }
}

int mpccl_shim_recv_post(shim_op_t *op, int source, int tag)
{
    /* a named sender that dies is noticed while we wait (shim_op.c) */
    if (source >= 0 && op->comm != MPI_COMM_NULL) op->peer_world = mpccl_shim_world_rank(op->comm, source);
    stash_t *s = stash_find(op->comm, source, tag, 1, 0);
    if (s) {
        op->from_stash = s;
        return MPI_SUCCESS;
    }
    op->cancellable = 1;
    if (mpccl_shim_p2p_on() && !op->device && op->contiguous && op->capacity >= SHIM_ENV_BYTES) {
        op->land = op->buf;
        mpccl_shim_count_p2p(0, SHIM_ROUTE_MPI);
        return PMPI_Irecv(op->buf, op->count, op->dt, source, tag, op->comm, &op->ireq);
    }
    size_t lb = op->capacity > SHIM_ENV_BYTES ? op->capacity : SHIM_ENV_BYTES;
    if (lb > 0x7fffffffu) return MPI_ERR_COUNT; /* larger device receives: not supported */
    op->land = land_alloc(lb, &op->land_owned);
    if (op->land == NULL) return MPI_ERR_NO_MEM;
    op->land_bytes = lb;
    return PMPI_Irecv(op->land, (int)lb, MPI_BYTE, source, tag, op->comm, &op->ireq);
}

/* Starts a posted op: served from the stash at once, or progressed from now. */
int mpccl_shim_recv_launch(shim_op_t *op, MPI_Request *req, MPI_Status *status)
{
    int rc = MPI_SUCCESS;
    if (req && (rc = mpccl_shim_op_handle(op, req)) != MPI_SUCCESS) {
        if (op->ireq != MPI_REQUEST_NULL) {
            PMPI_Cancel(&op->ireq);
            PMPI_Request_free(&op->ireq);
        }
        if (op->land_owned) mpccl_shim_land_free(op->land, op->land_owned);
        mpccl_shim_op_free(op);
        return rc;
    }
    stash_t *s = op->from_stash;
    if (s) {
        op->from_stash = NULL;
        /* start first: a step that posts a request needs the op active */
        mpccl_shim_op_start(op);
        pthread_mutex_lock(mpccl_shim_ops_lock());
        recv_from_stash(op, s);
        if (op->land == (void *)s->raw) op->land = NULL;
        pthread_mutex_unlock(mpccl_shim_ops_lock());
        free(s);
    } else {
        mpccl_shim_op_start(op);
    }
    if (req) return MPI_SUCCESS;
    rc = mpccl_shim_op_wait(op);
    mpccl_shim_op_status(op, status);
    MPI_Comm comm = op->comm;
    mpccl_shim_op_free(op);
    /* our own failures (a truncated envelope, a dead peer) go through the
     * communicator's handler, as MPI's do */
    if (rc != MPI_SUCCESS && comm != MPI_COMM_NULL) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

/* A blocking receive with nothing of ours in flight: MPI's own MPI_Recv
 * into the user's buffer (a contiguous host buffer that can hold an
 * envelope) or its landing, then a look at what arrived.  The common
 * host-to-host message costs one comparison, and no request of ours. */
static int recv_blocking(shim_op_t *op, int source, int tag, MPI_Status *status)
{
    MPI_Status st;
    shim_env_t e;
    int n = 0, rc, direct = !op->device && op->contiguous && op->capacity >= SHIM_ENV_BYTES;
    st.MPI_ERROR = MPI_SUCCESS;
    MPI_Request r = MPI_REQUEST_NULL;
    if (direct) {
        op->land = op->buf;
        rc = PMPI_Irecv(op->buf, op->count, op->dt, source, tag, op->comm, &r);
    } else {
        size_t lb = op->capacity > SHIM_ENV_BYTES ? op->capacity : SHIM_ENV_BYTES;
        op->land = lb <= 0x7fffffffu ? land_alloc(lb, &op->land_owned) : NULL;
        rc = op->land ? PMPI_Irecv(op->land, (int)lb, MPI_BYTE, source, tag, op->comm, &r)
                      : (lb > 0x7fffffffu ? MPI_ERR_COUNT : MPI_ERR_NO_MEM);
    }
    /* waited for here, so that a named sender's death ends the wait */
    if (rc == MPI_SUCCESS) {
        int peer = source >= 0 ? mpccl_shim_world_rank(op->comm, source) : -1, done = 0;
        shim_backoff_t b;
        mpccl_shim_backoff_init(&b);
        while ((rc = PMPI_Test(&r, &done, &st)) == MPI_SUCCESS && !done) {
            if (mpccl_shim_backoff_due(&b) && mpccl_shim_peer_dead(peer, op->what)) {
                PMPI_Cancel(&r);
                PMPI_Request_free(&r);
                rc = MPI_ERR_OTHER;
                PMPI_Comm_call_errhandler(op->comm, rc);
                break;
            }
        }
    }
    if (rc == MPI_SUCCESS) PMPI_Get_count(&st, MPI_BYTE, &n);
    if (rc != MPI_SUCCESS || (direct && (n != SHIM_ENV_BYTES || !mpccl_shim_env_parse(op->buf, (size_t)n, &e)))) {
        if (rc == MPI_SUCCESS) mpccl_shim_count_p2p(0, SHIM_ROUTE_MPI);
        if (status != MPI_STATUS_IGNORE) *status = st;
        if (op->land_owned) mpccl_shim_land_free(op->land, op->land_owned);
        mpccl_shim_op_free(op);
        return rc;
    }
    /* an envelope, or data to copy in: served like any landed message */
    mpccl_shim_op_start(op);
    pthread_mutex_lock(mpccl_shim_ops_lock());
    recv_landed(op, &st);
    pthread_mutex_unlock(mpccl_shim_ops_lock());
    rc = mpccl_shim_op_wait(op);
    mpccl_shim_op_status(op, status);
    MPI_Comm comm = op->comm;
    mpccl_shim_op_free(op);
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

int mpccl_shim_recv(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm, MPI_Request *req,
                    MPI_Status *status, const char *what)
{
    if (!mpccl_shim_recv_wanted(buf, comm, source)) {
        if (req) return PMPI_Irecv(buf, count, dt, source, tag, comm, req);
        return mpccl_shim_recv_mpi(buf, count, dt, source, tag, comm, status);
    }
    shim_op_t *op = mpccl_shim_op_new();
    if (op == NULL) return MPI_ERR_NO_MEM;
    if (!recv_prepare(op, buf, count, dt, comm, what)) {
        mpccl_shim_op_free(op);
        return req ? PMPI_Irecv(buf, count, dt, source, tag, comm, req) /* MPI reports the bad argument */
                   : PMPI_Recv(buf, count, dt, source, tag, comm, status);
    }
    if (req == NULL && !mpccl_shim_ops_active() && __atomic_load_n(&stash_count, __ATOMIC_ACQUIRE) == 0)
        return recv_blocking(op, source, tag, status);
    int rc = mpccl_shim_recv_post(op, source, tag);
    if (rc != MPI_SUCCESS) {
        if (op->land_owned) mpccl_shim_land_free(op->land, op->land_owned);
        mpccl_shim_op_free(op);
        return rc;
    }
    return mpccl_shim_recv_launch(op, req, status);
}

/* ---- probes ---- */

/* After MPI found a message (st): an envelope-sized one goes to the stash,
 * so the status can give the real size. */
static void probe_found(MPI_Comm comm, MPI_Status *found, MPI_Status *st, MPI_Message *msg)
{
    int n = 0;
    PMPI_Get_count(found, MPI_BYTE, &n);
    if (n != SHIM_ENV_BYTES || !mpccl_shim_p2p_on()) {
        if (msg) PMPI_Mprobe(found->MPI_SOURCE, found->MPI_TAG, comm, msg, found);
        if (st != MPI_STATUS_IGNORE) *st = *found;
        return;
    }
    stash_t *s = stash_pull(comm, found->MPI_SOURCE, found->MPI_TAG, msg != NULL);
    if (s == NULL) {
        if (st != MPI_STATUS_IGNORE) *st = *found;
        if (msg) *msg = MPI_MESSAGE_NULL;
        return;
    }
    stash_status(s, st);
    if (msg) *msg = (MPI_Message)(void *)s;
}

int mpccl_shim_probe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *st, MPI_Message *msg, int block)
{
    MPI_Status found;
    shim_backoff_t b;
    if (!mpccl_shim_p2p_wanted(NULL, comm) || !mpccl_shim_p2p_on() || source == MPI_PROC_NULL) {
        if (msg) return block ? PMPI_Mprobe(source, tag, comm, msg, st) : PMPI_Improbe(source, tag, comm, flag, msg, st);
        return block ? PMPI_Probe(source, tag, comm, st) : PMPI_Iprobe(source, tag, comm, flag, st);
    }
    mpccl_shim_backoff_init(&b);
    for (;;) {
        stash_t *s = stash_find(comm, source, tag, 0, msg != NULL);
        if (s) {
            stash_status(s, st);
            if (msg) *msg = (MPI_Message)(void *)s;
            if (flag) *flag = 1;
            return MPI_SUCCESS;
        }
        int f = 0, rc = PMPI_Iprobe(source, tag, comm, &f, &found);
        if (rc != MPI_SUCCESS) return rc;
        if (f) {
            probe_found(comm, &found, st, msg);
            if (flag) *flag = 1;
            return MPI_SUCCESS;
        }
        mpccl_shim_progress();
        if (!block) {
            if (flag) *flag = 0;
            return MPI_SUCCESS;
        }
        mpccl_shim_backoff(&b);
    }
}

/* Is msg one of the stash's (from mpccl_shim_probe)? */
static stash_t *stash_message(MPI_Message msg)
{
    stash_t *found = NULL;
    if (__atomic_load_n(&stash_count, __ATOMIC_ACQUIRE) == 0) return NULL;
    pthread_mutex_lock(&stash_lock);
    for (stash_t *s = stash_head; s && !found; s = s->next)
        if ((MPI_Message)(void *)s == msg && s->claimed) found = s;
    pthread_mutex_unlock(&stash_lock);
    return found;
}

int mpccl_shim_mrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *msg, MPI_Status *status, MPI_Request *req)
{
    stash_t *s = (msg && *msg != MPI_MESSAGE_NULL && *msg != MPI_MESSAGE_NO_PROC) ? stash_message(*msg) : NULL;
    shim_op_t *op;
    int rc;
    if (s == NULL && !mpccl_shim_is_device(buf))
        return req ? PMPI_Imrecv(buf, count, dt, msg, req) : PMPI_Mrecv(buf, count, dt, msg, status);
    if (s == NULL && (*msg == MPI_MESSAGE_NULL || *msg == MPI_MESSAGE_NO_PROC))
        return req ? PMPI_Imrecv(buf, count, dt, msg, req) : PMPI_Mrecv(buf, count, dt, msg, status);
    op = mpccl_shim_op_new();
    if (op == NULL) return MPI_ERR_NO_MEM;
    if (!recv_prepare(op, buf, count, dt, MPI_COMM_NULL, "MPI_Mrecv")) {
        mpccl_shim_op_free(op);
        return MPI_ERR_TYPE;
    }
    if (s) {
        op->comm = s->comm;
        stash_unlink(s); /* the op owns it now */
        op->from_stash = s;
        *msg = MPI_MESSAGE_NULL;
        return mpccl_shim_recv_launch(op, req, status);
    }
    /* A plain message (never an envelope: those are stashed) into device memory. */
    size_t lb = op->capacity ? op->capacity : 1;
    if (lb > 0x7fffffffu) {
        mpccl_shim_op_free(op);
        return MPI_ERR_COUNT;
    }
    op->land = land_alloc(lb, &op->land_owned);
    op->land_bytes = lb;
    rc = op->land ? PMPI_Imrecv(op->land, (int)lb, MPI_BYTE, msg, &op->ireq) : MPI_ERR_NO_MEM;
    if (rc != MPI_SUCCESS) {
        if (op->land) mpccl_shim_land_free(op->land, op->land_owned);
        mpccl_shim_op_free(op);
        return rc;
    }
    return mpccl_shim_recv_launch(op, req, status);
}

void mpccl_shim_stash_fini(void)
{
    pthread_mutex_lock(&stash_lock);
    while (stash_head) {
        stash_t *s = stash_head;
        stash_head = s->next;
        free(s);
    }
    stash_count = 0;
    pthread_mutex_unlock(&stash_lock);
}
