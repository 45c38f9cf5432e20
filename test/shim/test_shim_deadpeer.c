/* A peer that dies during a point-to-point call: the waiting rank gets an
 * MPI error through its communicator's handler (MPI_ERRORS_RETURN here)
 * within 5 s, naming the peer in the shim's warning, and does not hang.
 *
 *   mpirun -np 2 --enable-recovery -x LD_PRELOAD=libmpccl_shim.so
 *          -x MPCCL_SHIM_HOST=1 test_shim_deadpeer send|recv
 *
 * Rank 1 kills itself (SIGKILL) 0.3 s in; rank 0 is then in a large
 * MPI_Send to it (an envelope waiting for its answer) or in MPI_Recv from it.
 * Rank 0 prints "deadpeer: PASS ..." or "deadpeer: FAIL ..." and exits; the
 * runner reads that line (mpirun's own exit code reports the killed rank). */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    static char buf[1 << 20];
    int rank, size, rc, cls = 0, send = argc > 1 && !strcmp(argv[1], "send");
    MPI_Comm comm;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) printf("deadpeer: SKIP (needs 2 ranks)\n");
        MPI_Finalize();
        return 77;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    if (rank == 1) {
        usleep(300000);
        raise(SIGKILL);
    }
    alarm(30); /* never hang the suite, whatever happens */
    double t0 = MPI_Wtime();
    rc = send ? MPI_Send(buf, (int)sizeof(buf), MPI_BYTE, 1, 7, comm)
              : MPI_Recv(buf, (int)sizeof(buf), MPI_BYTE, 1, 7, comm, MPI_STATUS_IGNORE);
    double t = MPI_Wtime() - t0;
    MPI_Error_class(rc, &cls);
    int ok = rc != MPI_SUCCESS && t < 5.0;
    printf("deadpeer: %s: MPI_%s to a dead peer returned error class %d after %.2f s\n", ok ? "PASS" : "FAIL",
           send ? "Send" : "Recv", cls, t);
    fflush(stdout);
    _exit(ok ? 0 : 1); /* MPI_Finalize would wait for the dead rank */
}
