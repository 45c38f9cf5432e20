/* The harness of test_shim_p2p (test_shim_p2p.c), over shim_testlib.h: the
 * test in progress, host buffers mirroring the tested ones, message contents, datatypes with holes, status and data checks, the watchdog, and
 * nonblocking message slots.  The tests are in test_shim_p2p.c and
 * p2p_requests.c. */
#ifndef TEST_SHIM_P2P_HARNESS_H
#define TEST_SHIM_P2P_HARNESS_H
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim_testlib.h"

extern int mixed, quick, verbose, skipped, ntests;
extern char watch_msg[320];
extern unsigned watch_s; /* MPCCL_P2P_TEST_TIMEOUT */

/* The test in progress: every rank of a communicator runs the same sequence
 * of tests, so `no` (the count of tests begun) is the same on all of them and
 * seeds the message contents. */
typedef struct {
    MPI_Comm comm;
    const char *cname, *name;
    int me, n, left, right, no;
    int sdev, rdev; /* whether this test's send / receive buffers are on the device */
} test_state_t;
extern test_state_t T;

/* A state the test cannot go on from (a message from a rank that sent none):
 * carrying on would only hang on messages that never come. */
#define FATAL(...)                                                                             \
    do {                                                                                       \
        FAIL(__VA_ARGS__);                                                                     \
        MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    } while (0)

/* A buffer and its host mirror. */
typedef struct {
    void *d;          /* what MPI sees: device or host memory */
    unsigned char *h; /* host copy, filled before put() and after get() */
    size_t bytes;
    int dev;
} buf_t;

#define GUARD 0xa5 /* receive buffers start as this: bytes MPI must not write keep it */

typedef struct {
    MPI_Datatype dt;
    const char *name;
    size_t extent; /* bytes from one element to the next */
    int nelem;     /* basic elements per element (MPI_Get_elements) */
    int nseg;      /* covered byte ranges of an element, in order; the rest are holes */
    size_t off[3], len[3];
} ptype_t;
enum { P_BYTE, P_INT, P_DOUBLE, P_VECTOR, P_STRUCT, NPTYPES };
extern ptype_t pt[NPTYPES];

struct rec {
    int i;
    double d;
    char c;
};

/* One nonblocking message of a test: a send to peer or a receive from it. */
typedef struct {
    int kind; /* 0 none (MPI_REQUEST_NULL), 1 send, 2 receive */
    int peer, tag;
    size_t bytes; /* the message; receives offer 4 bytes more */
    buf_t b;
    int done;
} slot_t;
enum { S_NULL, S_SEND, S_RECV };

/* p2p_harness.c */
void on_alarm(int sig);
const char *p2p_fail_context(void);
buf_t balloc(size_t bytes, int dev);
void bfree(buf_t *b);
uint64_t key(int src, int dst, int idx);
void gen(unsigned char *h, size_t bytes, uint64_t k);
buf_t sbuf_new(size_t bytes, uint64_t k);
void bguard(buf_t *b);
buf_t rbuf_new(size_t bytes);
void init_types(void);
void expected_bytes(unsigned char *out, size_t span, const ptype_t *t, size_t count, uint64_t k);
int check_data(buf_t *b, const ptype_t *t, size_t count, uint64_t k, const char *what);
int check_status(const MPI_Status *st, const ptype_t *t, int src, int tag, size_t count, const char *what);
void check_proc_null(const MPI_Status *st, const char *what);
void check_empty(const MPI_Status *st, const char *what);
void relax(void);
int test_begin(const char *name, int min_ranks);
void test_end(void);
void slot_init(slot_t *s, int kind, int peer, int tag, size_t bytes);
void slot_post(slot_t *s, MPI_Request *req);
void slot_done(slot_t *s, const MPI_Status *st, const char *how);
void slot_free(slot_t *s);

/* p2p_requests.c: completion calls, persistent requests, cancel,
 * communicator separation, a 1-D halo exchange, a window of messages */
void test_completion(void);
void test_persistent(int full);
void test_cancel(void);
void test_separation(MPI_Comm a, const char *aname, MPI_Comm b, const char *bname);
void test_halo(int full);
void test_window(void);

#endif
