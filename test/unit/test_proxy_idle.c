/* An idle proxy costs no CPU (the world: proxy_test_world.h).  With 1, 3 and
 * 8 attached communicators, and after a burst of traffic, the whole process
 * uses < 2% of a core over one second while nothing is in flight; pieces
 * nobody announced (a peer's one-sided traffic) still wake the sleeping
 * proxy; a lane's thread sleeps through launches that do not use it, and
 * through pieces posted for a communicator whose kernels were stopped.  The bound holds on a loaded machine: other processes' load does
 * not add to this process's CPU time, and a sleeping proxy uses none. */
#define _GNU_SOURCE
#include <sys/resource.h>
#include <unistd.h>

#include "proxy_test_world.h"
#include "proxy/proxy_wake.h"

#define IDLE_BOUND 0.02 /* of a core */

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* Waits (bounded) until the proxy announced its sleep. */
static void wait_asleep(const char *what)
{
    double end = now_s() + 10;
    while (!mpccl_proxy_asleep()) {
        ck_assert_msg(now_s() < end, "%s: the proxy never went to sleep", what);
        usleep(1000);
    }
}

/* The process's CPU over one second of this thread sleeping, in cores; the
 * other ranks wait in a barrier (a futex: no CPU).  The proxy may wake for a
 * transport's own events (a UCX timer of a connection whose peer never
 * progresses, as rank 1's in the one-communicator case), a few dozen times at
 * most: polling every 100 us would be 10000 wake-ups. */
static double idle_cpu(const char *what)
{
    wait_asleep(what);
    uint64_t s0 = mpccl_proxy_sleeps();
    double c0 = cpu_s(), t0 = now_s();
    usleep(1000000);
    double c1 = cpu_s(), t1 = now_s();
    uint64_t wakes = mpccl_proxy_sleeps() - s0;
    printf("%s: %llu wake-ups in %.2f s\n", what, (unsigned long long)wakes, t1 - t0);
    ck_assert_msg(wakes <= 50, "%s: the proxy woke %llu times in %.2f s with nothing to do", what,
                  (unsigned long long)wakes, t1 - t0);
    return (c1 - c0) / (t1 - t0);
}

/* Ranks below w->msgs (the attached count here) serve every other rank as
 * remote; the rest attach nothing. */
static void idle_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR];
    mpccl_proxy_comm_t *pc = attach(w, me, t, links);
    mpccl_bootstrap_barrier(bs);
    if (me == 0) w->result[0] = idle_cpu("idle");
    detach_together(pc, t, bs, 0);
}

static world_t *idle_world(int n, int attached)
{
    world_t *w = calloc(1, sizeof(*w));
    w->n = n;
    w->nctas = 4;
    w->nslots = 4;
    w->msgs = attached;
    for (int i = 0; i < n; i++) {
        w->slot_bytes[i] = 256;
        for (int j = 0; j < n; j++) w->remote[i][j] = i != j && i < attached;
    }
    return w;
}

START_TEST(test_idle_cpu)
{
    static const int attached[] = {1, 3, 8};
    int a = attached[_i];
    world_t *w = idle_world(a < 2 ? 2 : a, a);
    w->body = idle_body;
    run_world(w);
    printf("test_idle_cpu: %d attached communicator%s, idle process: %.2f%% of a core\n", a, a > 1 ? "s" : "",
           100 * w->result[0]);
    ck_assert_msg(w->result[0] < IDLE_BOUND, "idle process with %d communicators used %.2f%% of a core", a,
                  100 * w->result[0]);
    free(w);
}
END_TEST

/* A burst of traffic on every channel, then nothing: the proxy goes back to sleep. */
static void burst_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR];
    mpccl_proxy_comm_t *pc = attach(w, me, t, links);
    mpccl_bootstrap_barrier(bs);
    kernel(w, me, links, pc, 60);
    ck_assert_int_eq(mpccl_proxy_error(pc), MPCCL_OK);
    mpccl_bootstrap_barrier(bs);
    if (me == 0) w->result[0] = idle_cpu("after a burst");
    detach_together(pc, t, bs, 0);
}

START_TEST(test_idle_after_burst)
{
    world_t *w = idle_world(3, 3);
    w->msgs = 300;
    w->max_len = 4 * 256 + 76; /* up to 5 pieces per message */
    w->body = burst_body;
    run_world(w);
    printf("test_idle_after_burst: idle process after 300 messages per channel: %.2f%% of a core\n",
           100 * w->result[0]);
    ck_assert_msg(w->result[0] < IDLE_BOUND, "idle process after a burst used %.2f%% of a core", 100 * w->result[0]);
    free(w);
}
END_TEST

/* ---- unannounced arrivals wake the proxy ---- */

#define WAKE_PIECES 40u
#define WAKE_LEN 100u

static uint32_t wake_next;  /* pieces delivered to rank 1 */
static char wake_bad[160];

static int wake_deliver(void *ctx, int src, uint32_t piece, const void *host, const void *dev, uint32_t len,
                        volatile uint32_t *ack)
{
    (void)ctx, (void)dev;
    const unsigned char *b = host;
    if (piece != wake_next || len != WAKE_LEN) {
        snprintf(wake_bad, sizeof(wake_bad), "piece %u (%u bytes) from %d, expected piece %u", piece, len, src,
                 wake_next);
        return -1;
    }
    for (uint32_t k = 0; k < len; k++)
        if (b[k] != msg_byte(src, 1, 200, (int)piece, k)) {
            snprintf(wake_bad, sizeof(wake_bad), "piece %u: byte %u differs", piece, k);
            return -1;
        }
    *ack = piece + 1;
    __atomic_store_n(&wake_next, piece + 1, __ATOMIC_RELEASE);
    return 1;
}

/* Rank 1's proxy serves a one-sided channel from rank 0 and sleeps; rank 0
 * (no proxy) sends it pieces straight through its transport, a moment later,
 * one by one.  Only the transport's event can wake rank 1's proxy. */
static void wake_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR], os_links[MAXR];
    mpccl_proxy_comm_t *pc = NULL;
    if (me == 1) {
        mpccl_proxy_alloc_t al = cpu_allocator(&w->heap[me], 0);
        mpccl_proxy_os_t os = {.deliver = wake_deliver, .nslots = 8};
        ck_assert_int_eq(mpccl_proxy_attach(t, me, w->n, w->remote[me], w->nctas, w->nslots, w->slot_bytes[me], &al,
                                            links, &os, os_links, &pc), MPCCL_OK);
    }
    mpccl_bootstrap_barrier(bs);
    if (me == 0) {
        unsigned char buf[WAKE_LEN];
        for (uint32_t p = 0; p < WAKE_PIECES; p++) {
            wait_asleep("before an unannounced piece");
            for (uint32_t k = 0; k < WAKE_LEN; k++) buf[k] = msg_byte(0, 1, 200, (int)p, k);
            mpccl_req_t req = {0};
            ck_assert_int_eq(t->ops->isend(t, 1, mpccl_proxy_tag(0, MPCCL_PROXY_OS_G, p), buf, WAKE_LEN, &req),
                             MPCCL_OK);
            double end = now_s() + 10;
            while (!req.done) {
                ck_assert_msg(now_s() < end, "piece %u: the send never completed", p);
                if (t->ops->progress(t) == 0) sched_yield();
            }
            ck_assert_int_eq(req.status, MPCCL_OK);
            end = now_s() + 10;
            while (__atomic_load_n(&wake_next, __ATOMIC_ACQUIRE) <= p) {
                ck_assert_msg(!wake_bad[0], "%s", wake_bad);
                ck_assert_msg(now_s() < end, "piece %u was never delivered: the sleeping proxy did not wake", p);
                t->ops->progress(t);
                usleep(100);
            }
        }
    }
    mpccl_bootstrap_barrier(bs);
    if (me == 1) {
        ck_assert_int_eq(mpccl_proxy_error(pc), MPCCL_OK);
        mpccl_proxy_detach(pc, 0);
    }
    mpccl_bootstrap_barrier(bs);
    t->ops->close(t, 0);
}

START_TEST(test_wake_unannounced)
{
    world_t *w = idle_world(2, 0);
    w->remote[1][0] = MPCCL_PROXY_REMOTE;
    w->body = wake_body;
    uint64_t slept = mpccl_proxy_sleeps();
    run_world(w);
    printf("test_wake_unannounced: %u pieces delivered, the proxy slept %llu times\n", wake_next,
           (unsigned long long)(mpccl_proxy_sleeps() - slept));
    ck_assert_uint_eq(wake_next, WAKE_PIECES);
    ck_assert_uint_ge(mpccl_proxy_sleeps() - slept, WAKE_PIECES);
    free(w);
}
END_TEST

/* Lanes woken as needed: three lanes; launches with pieces on CTA 0 alone
 * wake lane 0's thread and leave lanes 1 and 2 asleep, launches with pieces
 * on every CTA wake all three.  The launches move nothing (their pieces
 * posted, taken back 2 ms later, the next 2 ms after that: long enough for a
 * lane to fall asleep in between).  UCX's own timers may wake a lane now and
 * then. */
#define LANE_LAUNCHES 40
#define LANE_TIMER_WAKES 10

static uint64_t lanes12_sleeps(void) { return mpccl_proxy_lane_sleeps(1) + mpccl_proxy_lane_sleeps(2); }

static void lanes_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR];
    mpccl_proxy_comm_t *pc = attach(w, me, t, links);
    for (int round = 0; round < 2; round++) {
        mpccl_bootstrap_barrier(bs);
        if (me == 0) {
            double end = now_s() + 10;
            while (!mpccl_proxy_lane_asleep(1) || !mpccl_proxy_lane_asleep(2)) {
                ck_assert_msg(now_s() < end, "lanes 1 and 2 never went to sleep");
                usleep(1000);
            }
            uint64_t s0 = lanes12_sleeps();
            for (int i = 0; i < LANE_LAUNCHES; i++) {
                mpccl_proxy_due_t due[8];
                uint32_t n = round == 0 ? 1 : w->nctas;
                for (uint32_t g = 0; g < n; g++) due[g] = (mpccl_proxy_due_t){1, g, 1, 1, 0, 0};
                mpccl_proxy_post_pieces(pc, due, n, 1);
                usleep(2000);
                mpccl_proxy_post_pieces(pc, due, n, -1);
                usleep(2000);
            }
            w->result[round] = (double)(lanes12_sleeps() - s0);
        }
    }
    mpccl_bootstrap_barrier(bs);
    detach_together(pc, t, bs, 0);
}

START_TEST(test_lanes_woken_as_needed)
{
    world_t *w = idle_world(2, 2);
    w->nctas = 3;
    w->lanes = 3;
    w->body = lanes_body;
    run_world(w);
    printf("test_lanes_woken_as_needed: %d launches: lanes 1-2 woke %.0f times for launches on CTA 0, %.0f for "
           "launches on every CTA\n", LANE_LAUNCHES, w->result[0], w->result[1]);
    ck_assert_msg(w->result[0] <= LANE_TIMER_WAKES, "lanes 1-2 woke %.0f times for launches they have no part in",
                  w->result[0]);
    ck_assert_msg(w->result[1] >= LANE_LAUNCHES / 2, "lanes 1-2 woke only %.0f times for %d launches on their CTAs",
                  w->result[1], LANE_LAUNCHES);
    free(w);
}
END_TEST

/* Pieces posted that no kernel will move keep the proxy polling (it cannot
 * know the kernel failed) until the communicator's stop word is raised:
 * then it sleeps, as when idle, and its CPU is bounded again. */
static void stopped_body(world_t *w, int me, mpccl_transport_t *t, mpccl_bootstrap_t *bs)
{
    mpccl_dev_link_t links[MAXR];
    mpccl_proxy_comm_t *pc = attach(w, me, t, links);
    static volatile uint32_t stop;
    stop = 0;
    mpccl_bootstrap_barrier(bs);
    if (me == 0) {
        mpccl_proxy_set_stop_word(pc, &stop);
        wait_asleep("stopped: before the post");
        mpccl_proxy_due_t due = {1, 0, 1, 1, 0, 0}; /* one piece each way on CTA 0, never raised */
        mpccl_proxy_post_pieces(pc, &due, 1, 1);
        usleep(200000);
        ck_assert_msg(!mpccl_proxy_asleep(), "stopped: the proxy slept with pieces posted and unmoved");
        stop = 1;
        w->result[0] = idle_cpu("stopped: after the stop word");
    }
    mpccl_bootstrap_barrier(bs);
    detach_together(pc, t, bs, 0);
}

START_TEST(test_stopped_sleeps)
{
    world_t *w = idle_world(2, 2);
    w->body = stopped_body;
    run_world(w);
    printf("test_stopped_sleeps: %.4f of a core after the stop word\n", w->result[0]);
    ck_assert_msg(w->result[0] < IDLE_BOUND, "stopped: %.4f of a core with the communicator stopped", w->result[0]);
    free(w);
}
END_TEST

int main(void)
{
    const proxy_test_case_t cases[] = {{"idle", test_idle_cpu, 3},
                                       {"after_burst", test_idle_after_burst, 0},
                                       {"wake", test_wake_unannounced, 0},
                                       {"lanes", test_lanes_woken_as_needed, 0},
                                       {"stopped", test_stopped_sleeps, 0}};
    return proxy_test_main("proxy_idle", cases, sizeof(cases) / sizeof(cases[0]));
}
