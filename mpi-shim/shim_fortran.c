/* What the Fortran bindings need beyond handle conversion: Fortran's
 * MPI_IN_PLACE and MPI_BOTTOM are addresses of common-block variables, whose
 * symbol name depends on the compiler's mangling; all spellings are looked up
 * once. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>

#include "shim.h"

static void *in_place[4], *bottom[4];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void resolve(void)
{
    static const char *const ip[4] = {"mpi_fortran_in_place_", "mpi_fortran_in_place", "mpi_fortran_in_place__",
                                      "MPI_FORTRAN_IN_PLACE"};
    static const char *const bt[4] = {"mpi_fortran_bottom_", "mpi_fortran_bottom", "mpi_fortran_bottom__",
                                      "MPI_FORTRAN_BOTTOM"};
    for (int i = 0; i < 4; i++) {
        in_place[i] = dlsym(RTLD_DEFAULT, ip[i]);
        bottom[i] = dlsym(RTLD_DEFAULT, bt[i]);
    }
}

void *mpccl_shim_f2c_buf(void *p)
{
    pthread_once(&once, resolve);
    for (int i = 0; i < 4; i++) {
        if (p && p == in_place[i]) return MPI_IN_PLACE;
        if (p && p == bottom[i]) return MPI_BOTTOM;
    }
    return p;
}
