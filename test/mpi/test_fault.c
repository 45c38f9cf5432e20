/* A rank dies: every survivor's call fails with ncclRemoteError within a bound,
 * and ncclCommShrink(NCCL_SHRINK_ABORT) without the dead rank gives a working
 * communicator.  Host communicators, one machine.
 *
 * The ranks are forked by this program, not started by mpirun: mpirun ends the
 * whole job when one process dies of a signal.  The parent forks the ranks and
 * waits for them with a deadline, so a hang fails the run instead of blocking
 * it; rank 0 makes the unique id and hands it over through shared memory.
 *
 *   test_fault [-n 3,4,8] [-c all|allreduce,...] [-w before,during,shrink] [-r REPS] [-b SECONDS] [-i]
 *
 * For each rank count, collective and moment, the last rank raise(SIGKILL)s
 * either right after a warm-up allreduce (before: the survivors call into a
 * communicator with a dead rank) or from a second thread while it runs the
 * collective in a loop (during: it dies mid-transfer).  shrink (4 ranks or
 * more): as before, and the next-to-last rank dies too, after the failure
 * showed and before its shrink; the others' shrink without the first victim
 * must fail with ncclRemoteError in time, and a second one without both must
 * work.  -i: instead, checks that an idle process with the peer watcher
 * running costs < 2% of a core. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

enum { C_ALLREDUCE, C_BCAST, C_REDUCE, C_ALLGATHER, C_RS, C_ALLTOALL, C_SENDRECV, C_GROUP, C_NUM };
static const char *const cname[C_NUM] = {"allreduce", "broadcast",     "reduce",   "allgather",
                                         "reduce_scatter", "alltoall", "sendrecv", "group"};

#define COUNT (256 * 1024) /* floats per rank and block: transfers take a while */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static float *sendbuf, *recvbuf;
/* Shared by the ranks of a scenario (mapped before fork): the unique id rank 0
 * makes (the parent must not: forking while its bootstrap root thread holds a
 * lock would deadlock a child), and how many finished the warm-up (the victim
 * dies only once all did, else a survivor's warm-up would be what fails). */
typedef struct {
    int warm;
    int id_ready;
    double death;   /* when the victim raised SIGKILL (CLOCK_MONOTONIC, s) */
    long worst_us;  /* the slowest survivor's failing call returned this long after the death */
    ncclUniqueId id;
} shared_t;
static shared_t *shared;

/* Rank 0 makes the id; the others wait for it (bounded). */
static int get_id(int rank, ncclUniqueId *id)
{
    if (rank == 0) {
        if (ncclGetUniqueId(&shared->id) != ncclSuccess) return -1;
        __atomic_store_n(&shared->id_ready, 1, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < 20000 && !__atomic_load_n(&shared->id_ready, __ATOMIC_ACQUIRE); i++) usleep(1000);
    if (!__atomic_load_n(&shared->id_ready, __ATOMIC_ACQUIRE)) return -1;
    *id = shared->id;
    return 0;
}

/* One call of collective c on comm of n ranks (buffers sized for n). */
static ncclResult_t run_coll(int c, ncclComm_t comm, int rank, int n)
{
    ncclResult_t r, e;
    switch (c) {
    case C_ALLREDUCE: return ncclAllReduce(sendbuf, recvbuf, COUNT, ncclFloat, ncclSum, comm, NULL);
    case C_BCAST: return ncclBroadcast(sendbuf, recvbuf, COUNT, ncclFloat, 0, comm, NULL);
    case C_REDUCE: return ncclReduce(sendbuf, recvbuf, COUNT, ncclFloat, ncclSum, 0, comm, NULL);
    case C_ALLGATHER: return ncclAllGather(sendbuf, recvbuf, COUNT, ncclFloat, comm, NULL);
    case C_RS: return ncclReduceScatter(sendbuf, recvbuf, COUNT, ncclFloat, ncclSum, comm, NULL);
    case C_ALLTOALL: return ncclAlltoAll(sendbuf, recvbuf, COUNT, ncclFloat, comm, NULL);
    case C_SENDRECV:
        if ((r = ncclGroupStart()) != ncclSuccess) return r;
        ncclSend(sendbuf, COUNT, ncclFloat, (rank + 1) % n, comm, NULL);
        ncclRecv(recvbuf, COUNT, ncclFloat, (rank + n - 1) % n, comm, NULL);
        return ncclGroupEnd();
    case C_GROUP:
        if ((r = ncclGroupStart()) != ncclSuccess) return r;
        ncclAllReduce(sendbuf, recvbuf, COUNT, ncclFloat, ncclSum, comm, NULL);
        ncclBroadcast(sendbuf, recvbuf + COUNT, COUNT, ncclFloat, n - 1, comm, NULL);
        e = ncclGroupEnd();
        return e;
    }
    return ncclInternalError;
}

/* Proves a communicator works: an allreduce of (rank + 1) over its ranks. */
static int comm_works(ncclComm_t comm, int n, const char *what, int me)
{
    float *x = malloc(sizeof(float) * 1024);
    for (int i = 0; i < 1024; i++) x[i] = (float)(me + 1);
    ncclResult_t r = ncclAllReduce(x, x, 1024, ncclFloat, ncclSum, comm, NULL);
    float want = (float)(n * (n + 1) / 2);
    int bad = r != ncclSuccess;
    for (int i = 0; i < 1024 && !bad; i++) bad = x[i] != want;
    if (bad)
        fprintf(stderr, "rank %d: %s: allreduce %s, got %g, expected %g (%s)\n", me, what, ncclGetErrorString(r),
                (double)x[0], (double)want, ncclGetLastError(comm));
    free(x);
    return bad;
}

static double kill_delay;
static void *killer(void *arg)
{
    (void)arg;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(kill_delay * 1e9)};
    nanosleep(&ts, NULL);
    shared->death = now_s();
    raise(SIGKILL);
    return NULL;
}

/* One rank of a scenario; the exit status tells the parent how it went. */
static int rank_main(int n, int rank, int c, int during, double bound)
{
    ncclComm_t comm;
    ncclUniqueId id;
    if (get_id(rank, &id)) {
        fprintf(stderr, "rank %d: no unique id: %s\n", rank, ncclGetLastError(NULL));
        return 2;
    }
    int victim = n - 1;
    size_t elems = (size_t)COUNT * (size_t)n * 2;
    sendbuf = malloc(elems * sizeof(float));
    recvbuf = malloc(elems * sizeof(float));
    for (size_t i = 0; i < elems; i++) sendbuf[i] = (float)(rank + 1);
    ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
    if (r != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank: %s (%s)\n", rank, ncclGetErrorString(r), ncclGetLastError(NULL));
        return 2;
    }
    if (comm_works(comm, n, "warm-up", rank)) return 3;
    __atomic_add_fetch(&shared->warm, 1, __ATOMIC_SEQ_CST);
    if (rank == victim) {
        while (__atomic_load_n(&shared->warm, __ATOMIC_SEQ_CST) < n) usleep(1000);
        if (during != 1) {
            shared->death = now_s();
            raise(SIGKILL);
        }
        pthread_t th;
        kill_delay = 0.002 + 0.001 * (double)(getpid() % 20);
        pthread_create(&th, NULL, killer, NULL);
        for (;;) run_coll(c, comm, rank, n);
    }
    /* Survivors: call until the failure shows (a call may complete before the
     * victim dies); each call must return within the bound. */
    double t0 = now_s(), t_call = t0;
    for (;;) {
        t_call = now_s();
        r = run_coll(c, comm, rank, n);
        if (r != ncclSuccess) break;
        if (now_s() - t0 > bound) break;
    }
    double took = now_s() - t_call;
    long after_us = (long)((now_s() - shared->death) * 1e6);
    for (long w = __atomic_load_n(&shared->worst_us, __ATOMIC_SEQ_CST); after_us > w;)
        if (__atomic_compare_exchange_n(&shared->worst_us, &w, after_us, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) break;
    if (r != ncclRemoteError) {
        fprintf(stderr, "rank %d: %s returned %s after %.2f s, expected ncclRemoteError (%s)\n", rank, cname[c],
                ncclGetErrorString(r), now_s() - t0, ncclGetLastError(comm));
        return 4;
    }
    if (took > bound) {
        fprintf(stderr, "rank %d: %s took %.2f s to fail, bound %.1f s\n", rank, cname[c], took, bound);
        return 5;
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    const char *msg = ncclGetLastError(comm);
    char victim_name[32], second_name[32];
    snprintf(victim_name, sizeof(victim_name), "rank %d", victim);
    snprintf(second_name, sizeof(second_name), "rank %d", victim - 1); /* shrink: may die first here */
    if (async != ncclRemoteError ||
        (!strstr(msg, victim_name) && !strstr(msg, "revoked") && !(during == 2 && strstr(msg, second_name)))) {
        fprintf(stderr,
                "rank %d: async error %s, last error \"%s\": expected ncclRemoteError naming rank %d or a revoke\n",
                rank, ncclGetErrorString(async), msg, victim);
        return 6;
    }
    /* Later calls fail at once too. */
    r = ncclAllReduce(sendbuf, recvbuf, 1, ncclFloat, ncclSum, comm, NULL);
    if (r != ncclRemoteError) {
        fprintf(stderr, "rank %d: a call after the failure returned %s, expected ncclRemoteError\n", rank,
                ncclGetErrorString(r));
        return 7;
    }
    ncclComm_t child = NULL;
    int excluded[2] = {victim, victim - 1}, nexcl = 1;
    if (during == 2) {
        if (rank == victim - 1) raise(SIGKILL); /* the second victim: gone before its shrink */
        double ts = now_s();
        r = ncclCommShrink(comm, excluded, 1, &child, NULL, NCCL_SHRINK_ABORT);
        if (r != ncclRemoteError) {
            fprintf(stderr, "rank %d: ncclCommShrink without rank %d of whom rank %d died too returned %s, expected "
                    "ncclRemoteError (%s)\n", rank, victim, victim - 1, ncclGetErrorString(r), ncclGetLastError(comm));
            return 10;
        }
        if (now_s() - ts > bound) {
            fprintf(stderr, "rank %d: the failed shrink took %.2f s, bound %.1f s (%s)\n", rank, now_s() - ts, bound,
                    ncclGetLastError(comm));
            return 11;
        }
        nexcl = 2;
    }
    r = ncclCommShrink(comm, excluded, nexcl, &child, NULL, NCCL_SHRINK_ABORT);
    if (r != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommShrink: %s (%s)\n", rank, ncclGetErrorString(r), ncclGetLastError(comm));
        return 8;
    }
    int bad = comm_works(child, n - nexcl, "after shrink", rank);
    /* As NCCL asks: finalize (every rank's last messages delivered) before
     * destroy, or a rank that leaves at once looks dead to one still
     * receiving from it. */
    ncclCommFinalize(child);
    ncclCommDestroy(child);
    ncclCommAbort(comm);
    free(sendbuf);
    free(recvbuf);
    return bad ? 9 : 0;
}

static const char *when_name(int during) { return during == 2 ? "shrink" : during ? "during" : "before"; }

static long worst_all_us; /* over every scenario of this run */

/* A hung rank's threads, for the log: gdb's backtraces where gdb is
 * installed (CI installs it), else each thread's kernel wait channel. */
static void dump_stacks(pid_t pid)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "if command -v gdb >/dev/null 2>&1; then timeout 60 gdb -q -p %d -batch -ex 'thread apply all bt' "
             "2>&1 | grep -vE '^(.New |.Thread debugging|Using host|Reading|Downloading|warning:)' | head -n 200; else for t in /proc/%d/task/*; do "
             "echo \"thread $(basename $t): $(cat $t/comm) wchan $(cat $t/wchan)\"; done; fi >&2",
             (int)pid, (int)pid);
    fflush(stderr);
    if (system(cmd) != 0) fprintf(stderr, "(no stacks for pid %d)\n", (int)pid);
}

/* Forks n ranks of one scenario; returns 0 when every survivor passed and the
 * victim died of SIGKILL, within the deadline. */
static int scenario(int n, int c, int during, double bound, int verbose)
{
    fflush(stdout);
    fflush(stderr);
    memset(shared, 0, sizeof(*shared));
    pid_t pids[64];
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) _exit(rank_main(n, r, c, during, bound));
    }
    double t0 = now_s(), deadline = t0 + bound + 15.0; /* + init, shrink and teardown */
    int left = n, bad = 0;
    int status[64];
    for (int r = 0; r < n; r++) status[r] = -1;
    while (left > 0 && now_s() < deadline) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p <= 0) {
            usleep(10000);
            continue;
        }
        for (int r = 0; r < n; r++)
            if (pids[r] == p) status[r] = st, left--;
    }
    for (int r = 0; r < n; r++) /* before any is killed: the others would move on */
        if (status[r] == -1) {
            fprintf(stderr, "=== rank %d (pid %d), hung:\n", r, (int)pids[r]);
            dump_stacks(pids[r]);
        }
    for (int r = 0; r < n; r++) {
        if (status[r] == -1) {
            fprintf(stderr, "FAIL np %d %s %s: rank %d hangs after %.0f s; killed\n", n, cname[c],
                    when_name(during), r, now_s() - t0);
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
            bad = 1;
        } else if (r == n - 1 || (during == 2 && r == n - 2)) {
            if (!WIFSIGNALED(status[r]) || WTERMSIG(status[r]) != SIGKILL) {
                fprintf(stderr, "FAIL np %d %s %s: the victim did not die of SIGKILL (status %#x)\n", n, cname[c],
                        when_name(during), status[r]);
                bad = 1;
            }
        } else if (WIFSIGNALED(status[r])) {
            fprintf(stderr, "FAIL np %d %s %s: survivor rank %d died of signal %d (%s)\n", n, cname[c],
                    when_name(during), r, WTERMSIG(status[r]), strsignal(WTERMSIG(status[r])));
            bad = 1;
        } else if (!WIFEXITED(status[r]) || WEXITSTATUS(status[r]) != 0) {
            fprintf(stderr, "FAIL np %d %s %s: survivor rank %d exited with status %d\n", n, cname[c],
                    when_name(during), r, WEXITSTATUS(status[r]));
            bad = 1;
        }
    }
    if (verbose || bad)
        printf("%s np %d %-14s %-6s %.2f s (slowest survivor failed %.1f ms after the death)\n", bad ? "FAIL" : "ok  ",
               n, cname[c], when_name(during), now_s() - t0, 1e-3 * (double)shared->worst_us);
    if (shared->worst_us > worst_all_us) worst_all_us = shared->worst_us;
    return bad;
}

/* An idle rank with the peer watcher running uses < 2% of a core. */
static int idle_rank(int n, int rank)
{
    ncclComm_t comm;
    ncclUniqueId id;
    if (get_id(rank, &id) || ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return 2;
    if (comm_works(comm, n, "burst", rank)) return 3;
    double c0 = cpu_s(), w0 = now_s();
    sleep(1);
    double frac = (cpu_s() - c0) / (now_s() - w0);
    int bad = comm_works(comm, n, "after idling", rank);
    ncclCommFinalize(comm); /* see the shrink case: deliver, then leave */
    ncclCommDestroy(comm);
    printf("rank %d idle with %d watched peers: %.3f%% of a core\n", rank, n - 1, 100.0 * frac);
    fflush(stdout);
    if (frac >= 0.02) {
        fprintf(stderr, "rank %d: idle process used %.1f%% of a core (bound 2%%)\n", rank, 100.0 * frac);
        return 4;
    }
    return bad ? 5 : 0;
}

static int idle_check(int n)
{
    fflush(stdout);
    memset(shared, 0, sizeof(*shared));
    pid_t pids[64];
    for (int r = 0; r < n; r++)
        if ((pids[r] = fork()) == 0) _exit(idle_rank(n, r));
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    return bad;
}

static int parse_list(const char *s, int *out, int max)
{
    int k = 0;
    for (char *p = (char *)s; *p && k < max;) {
        out[k++] = (int)strtol(p, &p, 10);
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return k;
}

int main(int argc, char **argv)
{
    int nlist[16] = {3}, nn = 1, colls[C_NUM], nc = 0, whens[2] = {0, 1}, nw = 2, reps = 1, idle = 0, verbose = 1;
    double bound = 5.0;
    for (int c = 0; c < C_NUM; c++) colls[nc++] = c;
    int opt;
    while ((opt = getopt(argc, argv, "n:c:w:r:b:iq")) != -1) {
        switch (opt) {
        case 'n':
            if ((nn = parse_list(optarg, nlist, 16)) <= 0) return 99;
            break;
        case 'c':
            if (strcmp(optarg, "all") == 0) break;
            nc = 0;
            for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ","))
                for (int c = 0; c < C_NUM; c++)
                    if (strcmp(tok, cname[c]) == 0) colls[nc++] = c;
            break;
        case 'w':
            nw = 0;
            if (strstr(optarg, "before")) whens[nw++] = 0;
            if (strstr(optarg, "during")) whens[nw++] = 1;
            if (strstr(optarg, "shrink")) whens[nw++] = 2;
            break;
        case 'r': reps = atoi(optarg); break;
        case 'b': bound = atof(optarg); break;
        case 'i': idle = 1; break;
        case 'q': verbose = 0; break;
        default:
            fprintf(stderr, "usage: %s [-n 3,4,8] [-c all|allreduce,...] [-w before,during,shrink] [-r REPS] [-b S] [-i] [-q]\n",
                    argv[0]);
            return 99;
        }
    }
    setenv("MPCCL_DEBUG", getenv("MPCCL_DEBUG") ? getenv("MPCCL_DEBUG") : "NONE", 1); /* expected errors */
    int failures = 0, runs = 0;
    double t0 = now_s();
    shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return 99;
    if (idle) {
        for (int i = 0; i < nn; i++) failures += idle_check(nlist[i]);
        return failures ? 1 : 0;
    }
    for (int rep = 0; rep < reps; rep++)
        for (int i = 0; i < nn; i++)
            for (int c = 0; c < nc; c++)
                for (int w = 0; w < nw; w++) {
                    if (whens[w] == 2 && nlist[i] < 4) continue; /* two deaths need two survivors */
                    failures += scenario(nlist[i], colls[c], whens[w], bound, verbose);
                    runs++;
                }
    printf("%d of %d fault scenarios passed in %.1f s; the slowest survivor failed %.1f ms after the death\n",
           runs - failures, runs, now_s() - t0, 1e-3 * (double)worst_all_us);
    return failures ? 1 : 0;
}
