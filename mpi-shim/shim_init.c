/* MPI_Init and MPI_Init_thread: the shim learns the job there (a private
 * communicator for point-to-point, every rank's pid and host; shim_world.c),
 * the only moment every rank is sure to be together before the first
 * message.  Written by hand: their arguments fit no kind of shim.def. */
#include "shim_p2p.h"

int MPI_Init(int *argc, char ***argv) SHIM_EXPORT;
int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) mpccl_shim_world_init();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) SHIM_EXPORT;
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) mpccl_shim_world_init();
    return rc;
}

/* Fortran: Open MPI's mpi_init_ calls PMPI_Init itself, so the Fortran
 * names are ours too (mpif.h / use mpi, and use mpi_f08). */
void mpccl_shim_f_init(MPI_Fint *ierr);
void mpccl_shim_f_init(MPI_Fint *ierr)
{
    int rc = MPI_Init(NULL, NULL);
    if (ierr) *ierr = (MPI_Fint)rc;
}

void mpccl_shim_f_init_thread(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr);
void mpccl_shim_f_init_thread(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)
{
    int p = 0, rc = MPI_Init_thread(NULL, NULL, (int)*required, &p);
    *provided = (MPI_Fint)p;
    if (ierr) *ierr = (MPI_Fint)rc;
}

#define SHIM_INIT_ALIAS(target, name) \
    extern __typeof(target) name __attribute__((alias(#target), visibility("default")));
SHIM_INIT_ALIAS(mpccl_shim_f_init, mpi_init)
SHIM_INIT_ALIAS(mpccl_shim_f_init, mpi_init_)
SHIM_INIT_ALIAS(mpccl_shim_f_init, mpi_init__)
SHIM_INIT_ALIAS(mpccl_shim_f_init, MPI_INIT)
SHIM_INIT_ALIAS(mpccl_shim_f_init, mpi_init_f08_)
SHIM_INIT_ALIAS(mpccl_shim_f_init_thread, mpi_init_thread)
SHIM_INIT_ALIAS(mpccl_shim_f_init_thread, mpi_init_thread_)
SHIM_INIT_ALIAS(mpccl_shim_f_init_thread, mpi_init_thread__)
SHIM_INIT_ALIAS(mpccl_shim_f_init_thread, MPI_INIT_THREAD)
SHIM_INIT_ALIAS(mpccl_shim_f_init_thread, mpi_init_thread_f08_)

/* Codes that check for a CUDA-aware MPI at run time (Open MPI's extension)
 * get yes while the shim moves device buffers, or the MPI does. */
int MPIX_Query_cuda_support(void) SHIM_EXPORT;
int MPIX_Query_cuda_support(void)
{
#ifdef MPCCL_HAVE_CUDA
    /* auto left point-to-point to a CUDA-aware MPI: still yes */
    return mpccl_shim_settings()->enabled && mpccl_shim_settings()->p2p != 0;
#else
    return 0;
#endif
}
