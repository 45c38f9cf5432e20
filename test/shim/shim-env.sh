# Sourced by the shim's test scripts (run-shim.sh, shim-hang.sh): where the
# shim and mpirun are, a sanitizer build's settings, and what the ranks
# preload.  Sets shim, mpirun and preload; exits 77 (skip) without Open MPI's
# mpirun and 99 when the shim is not built.  need_built PROGRAM... exits 99
# naming the first program that is missing.
top_builddir=${top_builddir:-.}
shim=$(cd "$top_builddir" && pwd)/.libs/libmpccl_shim.so
mpirun=${MPIRUN:-$(command -v mpirun 2>/dev/null)}
# A --enable-sanitizers build: the options, and the ASan runtime to preload
# ahead of the shim (the MPI test programs are not instrumented).
[ -z "${MPCCL_TEST_SANITIZER_ENV:-}" ] && [ -f "$top_builddir/test/sanitizers/env.sh" ] &&
    . "$top_builddir/test/sanitizers/env.sh"
preload=$shim
[ -n "${MPCCL_TEST_ASAN_PRELOAD:-}" ] && preload=$MPCCL_TEST_ASAN_PRELOAD:$shim
[ -n "${MPCCL_TEST_ASAN_MPI_OPTIONS:-}" ] && ASAN_OPTIONS=$ASAN_OPTIONS:$MPCCL_TEST_ASAN_MPI_OPTIONS
if [ -z "$mpirun" ] || ! "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
    echo "SKIP: needs Open MPI's mpirun (-x forwarding); set MPIRUN"
    exit 77
fi
[ -f "$shim" ] || { echo "$0: $shim not built" >&2; exit 99; }
need_built() {
    for p in "$@"; do
        [ -x "$p" ] || { echo "$0: $p not built" >&2; exit 99; }
    done
}
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# oversubscribed ranks must yield, or polling ranks starve each other
OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_mpi_yield_when_idle
