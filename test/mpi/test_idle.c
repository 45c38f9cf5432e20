/* An idle process costs no CPU, and a process away from the library holds up
 * nobody.  After a burst of collectives on 1, 3 and 8
 * communicators (host ones, or GPU ones whose peers on other nodes the proxy
 * thread serves), every process uses < 2% of a core over one second while no
 * call is in flight.  On GPU communicators, a CUDA graph of collectives
 * replayed after the proxy went to sleep completes with correct results.
 * Holds on a loaded machine: other processes' load does not add to this
 * process's CPU time, and nothing here runs while idle. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define IDLE_BOUND 0.02 /* of a core */
#define BURST_COUNT 4099

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int32_t value(int rank, int i, int round)
{
    return (int32_t)((rank + 1) * ((i * 7 + round + (int)(t_seed % 89)) % 97 + 1));
}

/* rounds allreduces of BURST_COUNT int32 on comm, each checked exactly. */
static void burst(ncclComm_t comm, int rounds)
{
    int n = 0;
    ncclCommCount(comm, &n);
    int32_t *host = malloc(BURST_COUNT * sizeof(int32_t));
    int32_t *buf = perf_mem_alloc(&t_mem, BURST_COUNT * sizeof(int32_t));
    T_EXPECT(host && buf, "out of memory");
    for (int r = 0; r < rounds && host && buf; r++) {
        for (int i = 0; i < BURST_COUNT; i++) host[i] = value(t_rank, i, r);
        T_EXPECT(perf_mem_put(&t_mem, buf, host, BURST_COUNT * sizeof(int32_t)) == 0, "copy in");
        T_NCCL(ncclAllReduce(buf, buf, BURST_COUNT, ncclInt32, ncclSum, comm, t_mem.stream));
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync");
        T_EXPECT(perf_mem_get(&t_mem, host, buf, BURST_COUNT * sizeof(int32_t)) == 0, "copy out");
        int bad = 0;
        for (int i = 0; i < BURST_COUNT && !bad; i++) {
            int64_t want = (int64_t)value(0, i, r) * n * (n + 1) / 2;
            if (host[i] != want) {
                T_EXPECT(0, "round %d element %d: %d, expected %lld", r, i, host[i], (long long)want);
                bad = 1;
            }
        }
    }
    perf_mem_free(&t_mem, buf);
    free(host);
}

/* This process's CPU over one second of sleep, in cores (past the proxy's
 * spin and yield phases first). */
static double idle_cpu(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    usleep(200000);
    double c0 = cpu_s(), t0 = wall_s();
    usleep(1000000);
    return (cpu_s() - c0) / (wall_s() - t0);
}

static void idle_case(int ncomms)
{
    ncclComm_t comms[8];
    for (int k = 0; k < ncomms; k++) T_NCCL(ncclCommSplit(t_comm, 0, t_rank, &comms[k], NULL));
    for (int k = 0; k < ncomms; k++) burst(comms[k], 3);
    double mine = idle_cpu(), worst = 0;
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (t_rank == 0)
        printf("test_idle: %s, %d communicator%s: idle process at most %.2f%% of a core\n",
               t_mem.gpu ? "GPU" : "host", ncomms, ncomms > 1 ? "s" : "", 100 * worst);
    T_EXPECT(mine < IDLE_BOUND, "%d idle communicators: this process used %.2f%% of a core", ncomms, 100 * mine);
    for (int k = 0; k < ncomms; k++) T_NCCL(ncclCommDestroy(comms[k]));
}

START_TEST(test_idle_cpu)
{
    idle_case(1);
    idle_case(3);
    idle_case(8);
    T_END();
}
END_TEST

/* A rank back in the application -- in an MPI call, or computing -- never
 * holds up its peers' calls: each call returns once this rank's part is done,
 * owing its peers nothing (core/comm_drain.h).  Small and large (rendezvous)
 * allreduces; after each, one rank stays away a while, then all meet in
 * MPI_Barrier, which a call still waiting for that rank would never reach.
 * A hang fails through run-mpi.sh's timeout. */
START_TEST(test_peer_outside)
{
    static const int counts[] = {1024, 1 << 20};
    for (int round = 0; round < 12; round++) {
        for (int k = 0; k < 2; k++) {
            int count = counts[k];
            int32_t *buf = perf_mem_alloc(&t_mem, (size_t)count * sizeof(int32_t));
            int32_t *host = malloc((size_t)count * sizeof(int32_t));
            T_EXPECT(buf && host, "out of memory");
            if (!buf || !host) break;
            for (int i = 0; i < count; i++) host[i] = value(t_rank, i, round);
            T_EXPECT(perf_mem_put(&t_mem, buf, host, (size_t)count * sizeof(int32_t)) == 0, "copy in");
            T_NCCL(ncclAllReduce(buf, buf, (size_t)count, ncclInt32, ncclSum, t_comm, t_mem.stream));
            T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync");
            T_EXPECT(perf_mem_get(&t_mem, host, buf, (size_t)count * sizeof(int32_t)) == 0, "copy out");
            for (int i = 0; i < count; i++) {
                int64_t want = (int64_t)value(0, i, round) * t_nranks * (t_nranks + 1) / 2;
                if (host[i] != want) {
                    T_EXPECT(0, "round %d count %d element %d: %d, expected %lld", round, count, i, host[i],
                             (long long)want);
                    break;
                }
            }
            if (t_rank == round % t_nranks) usleep(20000); /* away from the library */
            MPI_Barrier(MPI_COMM_WORLD);
            perf_mem_free(&t_mem, buf);
            free(host);
        }
    }
    T_END();
}
END_TEST

/* A graph of three allreduces, replayed after the proxy went to sleep (and
 * after each replay, once it slept again). */
START_TEST(test_graph_after_sleep)
{
    if (!t_mem.gpu) { /* host communicators have no graphs */
        T_END();
        return;
    }
    int n = t_nranks;
    int32_t *in = perf_mem_alloc(&t_mem, 3 * BURST_COUNT * sizeof(int32_t));
    int32_t *out = perf_mem_alloc(&t_mem, 3 * BURST_COUNT * sizeof(int32_t));
    int32_t *host = malloc(3 * BURST_COUNT * sizeof(int32_t));
    T_EXPECT(in && out && host, "out of memory");
    for (int i = 0; host && i < 3 * BURST_COUNT; i++) host[i] = value(t_rank, i, 5);
    T_EXPECT(perf_mem_put(&t_mem, in, host, 3 * BURST_COUNT * sizeof(int32_t)) == 0, "copy in");
    T_EXPECT(perf_mem_capture_begin(&t_mem) == 0, "begin capture");
    for (int k = 0; k < 3; k++)
        T_NCCL(ncclAllReduce(in + k * BURST_COUNT, out + k * BURST_COUNT, BURST_COUNT, ncclInt32, ncclSum, t_comm,
                             t_mem.stream));
    void *g = perf_mem_capture_end(&t_mem);
    T_EXPECT(g != NULL, "capture failed");
    for (int rep = 0; rep < 4 && g; rep++) {
        MPI_Barrier(MPI_COMM_WORLD);
        usleep(rep % 2 ? 300000 : 50000); /* asleep by then; ranks replay at different moments */
        T_EXPECT(perf_mem_graph_launch(&t_mem, g) == 0, "graph launch");
        T_EXPECT(perf_mem_sync(&t_mem) == 0, "stream sync");
        T_EXPECT(perf_mem_get(&t_mem, host, out, 3 * BURST_COUNT * sizeof(int32_t)) == 0, "copy out");
        for (int i = 0; i < 3 * BURST_COUNT; i++) {
            int64_t want = (int64_t)value(0, i, 5) * n * (n + 1) / 2;
            if (host[i] != want) {
                T_EXPECT(0, "replay %d element %d: %d, expected %lld", rep, i, host[i], (long long)want);
                break;
            }
        }
    }
    perf_mem_graph_free(g);
    perf_mem_free(&t_mem, in);
    perf_mem_free(&t_mem, out);
    free(host);
    T_END();
}
END_TEST

static Suite *idle_suite(void)
{
    Suite *s = suite_create("idle");
    TCase *tc = t_tcase("idle");
    tcase_add_test(tc, test_idle_cpu);
    tcase_add_test(tc, test_peer_outside);
    tcase_add_test(tc, test_graph_after_sleep);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) { return t_main(argc, argv, idle_suite); }
