/* Point-to-point from several threads at once (MPI_THREAD_MULTIPLE): each
 * thread exchanges messages of its own tag with the same thread of the peer
 * rank, blocking and nonblocking, small (eager) and large (envelopes under
 * MPCCL_SHIM_HOST=1), and checks every byte.  Pairs of ranks; an odd last
 * rank only joins the final reduction.  Exits 77 where the MPI does not
 * provide MPI_THREAD_MULTIPLE. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 40

static int rank, peer, failures;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(int t, int round, const char *what)
{
    pthread_mutex_lock(&fail_lock);
    if (failures++ < 10) fprintf(stderr, "[rank %d thread %d round %d] FAIL %s\n", rank, t, round, what);
    pthread_mutex_unlock(&fail_lock);
}

static unsigned char pat(int from, int t, int round, size_t i)
{
    return (unsigned char)(from * 31 + t * 7 + round * 3 + i * 13);
}

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    for (int round = 0; round < ROUNDS; round++) {
        size_t n = (round % 3 == 0) ? 100000 + (size_t)t : (size_t)(round * 37 + t);
        unsigned char *s = malloc(n + 1), *r = malloc(n + 1);
        for (size_t i = 0; i < n; i++) s[i] = pat(rank, t, round, i);
        memset(r, 0, n + 1);
        MPI_Status st;
        if (round % 2) {
            MPI_Request q[2];
            MPI_Irecv(r, (int)n, MPI_BYTE, peer, t, MPI_COMM_WORLD, &q[0]);
            MPI_Isend(s, (int)n, MPI_BYTE, peer, t, MPI_COMM_WORLD, &q[1]);
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        } else {
            MPI_Sendrecv(s, (int)n, MPI_BYTE, peer, t, r, (int)n, MPI_BYTE, peer, t, MPI_COMM_WORLD, &st);
            int cnt = -1;
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            if (cnt != (int)n || st.MPI_TAG != t) fail(t, round, "status");
        }
        for (size_t i = 0; i < n; i++)
            if (r[i] != pat(peer, t, round, i)) {
                fail(t, round, "data");
                break;
            }
        free(s);
        free(r);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = 0, size, total = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("test_shim_threads: SKIP (MPI_THREAD_MULTIPLE not provided)\n");
        MPI_Finalize();
        return 77;
    }
    alarm(120);
    peer = rank ^ 1;
    if (peer < size) {
        pthread_t th[THREADS];
        for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)t);
        for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    }
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("test_shim_threads: %s (%d failures, %d threads x %d rounds)\n", total ? "FAIL" : "passed",
                          total, THREADS, ROUNDS);
    MPI_Finalize();
    return total ? 1 : 0;
}
