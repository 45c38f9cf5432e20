/* ncclCommShrink's doors (lib/core/shrink_door.c): an id handed from the
 * root to a survivor's listening socket; connections that are not the root's
 * are dropped; a waiting survivor gives up when the root dies (reported, or
 * found by knocking on the root's door) or the communicator is aborted; a
 * door that is gone refuses the root. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/bootstrap.h"
#include "core/comm_fail.h"
#include "core/shrink_door.h"

/* The failure state is not under test: whether the root died is this flag. */
static int root_dead;
int mpccl_comm_peer_dead(ncclComm_t comm, int peer) { return __atomic_load_n(&root_dead, __ATOMIC_ACQUIRE); }

typedef struct {
    struct ncclComm *comm;
    int fd;
    const mpccl_sockaddr_t *root_door; /* NULL: no knocking */
    unsigned char id[128];
    mpccl_status_t st;
} waiter_t;

static void *wait_at_door(void *p)
{
    waiter_t *w = p;
    w->st = mpccl_shrink_door_recv(w->comm, w->fd, 0, w->root_door, w->id, sizeof(w->id));
    return NULL;
}

static struct ncclComm *fake_comm(int rank, uint64_t id)
{
    struct ncclComm *c = calloc(1, sizeof(*c));
    c->rank = rank;
    c->nranks = 3;
    c->id = id;
    /* The doors' key: communicators with another id hold another secret. */
    for (size_t i = 0; i < sizeof(c->secret); i++) c->secret[i] = (unsigned char)(id >> (8 * (i % 8))) ^ (unsigned char)i;
    return c;
}

/* A door for a test: listening, with a valid address. */
static void open_door(int *fd, mpccl_sockaddr_t *addr)
{
    mpccl_shrink_door_open(fd, addr);
    ck_assert_int_ge(*fd, 0);
    ck_assert(mpccl_shrink_door_valid(addr));
}

START_TEST(test_handover)
{
    int fd;
    mpccl_sockaddr_t addr;
    open_door(&fd, &addr);
    struct ncclComm *root = fake_comm(0, 0x1234), *other = fake_comm(0, 0x9999), *impostor = fake_comm(2, 0x1234);
    /* The root's own door, alive: the waiter knocks on it and goes on waiting. */
    int root_fd;
    mpccl_sockaddr_t root_addr;
    open_door(&root_fd, &root_addr);
    waiter_t w = {.comm = fake_comm(1, 0x1234), .fd = fd, .root_door = &root_addr};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_at_door, &w), 0);
    struct timespec knocks = {.tv_sec = 2, .tv_nsec = 500000000}; /* two knocks answered */
    nanosleep(&knocks, NULL);
    unsigned char id[128], junk[128];
    for (int i = 0; i < 128; i++) id[i] = (unsigned char)(7 * i + 1), junk[i] = 0xee;
    /* Another communicator's shrink and another rank knock first: dropped
     * unanswered, so their senders learn the id was not taken. */
    ck_assert_int_eq(mpccl_shrink_door_send(other, 1, &addr, junk, sizeof(junk)), MPCCL_ERR_REMOTE);
    ck_assert_int_eq(mpccl_shrink_door_send(impostor, 1, &addr, junk, sizeof(junk)), MPCCL_ERR_REMOTE);
    ck_assert_int_eq(mpccl_shrink_door_send(root, 1, &addr, id, sizeof(id)), MPCCL_OK);
    pthread_join(th, NULL);
    ck_assert_int_eq(w.st, MPCCL_OK);
    ck_assert_mem_eq(w.id, id, sizeof(id));
    mpccl_shrink_door_close(&fd);
    mpccl_shrink_door_close(&root_fd);
    /* The door is gone: the root is refused and says who died. */
    ck_assert_int_eq(mpccl_shrink_door_send(root, 1, &addr, id, sizeof(id)), MPCCL_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "rank 1"));
    free(root);
    free(other);
    free(impostor);
    free(w.comm);
}
END_TEST

START_TEST(test_give_up)
{
    int fd;
    mpccl_sockaddr_t addr;
    open_door(&fd, &addr);
    waiter_t w = {.comm = fake_comm(1, 0x42), .fd = fd};
    pthread_t th;
    /* The root dies while a survivor waits. */
    ck_assert_int_eq(pthread_create(&th, NULL, wait_at_door, &w), 0);
    __atomic_store_n(&root_dead, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    __atomic_store_n(&root_dead, 0, __ATOMIC_RELEASE);
    ck_assert_int_eq(w.st, MPCCL_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "rank 0 died"));
    /* An abort of the communicator ends the wait too (the flag is read on
     * the waiting thread). */
    static int aborting = 1;
    mpccl_bootstrap_set_cancel(&aborting, NULL);
    w.st = MPCCL_OK;
    wait_at_door(&w);
    mpccl_bootstrap_set_cancel(NULL, NULL);
    ck_assert_int_eq(w.st, MPCCL_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "aborted"));
    mpccl_shrink_door_close(&fd);
    free(w.comm);
}
END_TEST

/* The root died and nothing says so (another machine, or no watcher): its
 * door refuses the knock, and the wait ends within a few knocks. */
START_TEST(test_root_door_gone)
{
    int fd, root_fd;
    mpccl_sockaddr_t addr, root_addr;
    open_door(&fd, &addr);
    open_door(&root_fd, &root_addr);
    mpccl_shrink_door_close(&root_fd);
    waiter_t w = {.comm = fake_comm(1, 0x77), .fd = fd, .root_door = &root_addr};
    int64_t t0 = mpccl_socket_now_ms();
    wait_at_door(&w);
    ck_assert_int_eq(w.st, MPCCL_ERR_REMOTE);
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "rank 0"));
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "is gone"));
    ck_assert_int_lt(mpccl_socket_now_ms() - t0, 30000); /* one knock a second; loose for a loaded machine */
    mpccl_shrink_door_close(&fd);
    free(w.comm);
}
END_TEST

/* A survivor whose door was open when the root wrote the id but that died
 * before taking it (killed just before its shrink): the kernel had queued the
 * connection and its bytes, so only the missing answer shows the loss, and
 * it must show at the death, not at the bootstrap's timeout. */
typedef struct {
    struct ncclComm *root;
    const mpccl_sockaddr_t *to;
    mpccl_status_t st;
} sender_t;

static void *send_id(void *p)
{
    sender_t *s = p;
    unsigned char id[128] = {1};
    s->st = mpccl_shrink_door_send(s->root, 1, s->to, id, sizeof(id));
    return NULL;
}

START_TEST(test_survivor_dies_before_taking)
{
    int fd;
    mpccl_sockaddr_t addr;
    open_door(&fd, &addr);
    sender_t s = {.root = fake_comm(0, 0x55), .to = &addr};
    pthread_t th;
    int64_t t0 = mpccl_socket_now_ms();
    ck_assert_int_eq(pthread_create(&th, NULL, send_id, &s), 0);
    struct timespec queued = {.tv_sec = 0, .tv_nsec = 300000000}; /* connected and written, unanswered */
    nanosleep(&queued, NULL);
    mpccl_shrink_door_close(&fd); /* the survivor's death: its queued connection is reset */
    pthread_join(th, NULL);
    ck_assert_int_eq(s.st, MPCCL_ERR_REMOTE);
    /* Its gate never answered: the connection is reset and made again, and
     * the refusal names the dead rank. */
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "rank 1"));
    ck_assert_ptr_nonnull(strstr(mpccl_last_error(), "died"));
    ck_assert_int_lt(mpccl_socket_now_ms() - t0, 20000); /* the bootstrap timeout is 120 s */
    free(s.root);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shrink_door");
    TCase *tc = tcase_create("door");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_handover);
    tcase_add_test(tc, test_give_up);
    tcase_add_test(tc, test_root_door_gone);
    tcase_add_test(tc, test_survivor_dies_before_taking);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
