#!/bin/sh
# make check: check mode through the shim (test_shim_check.c).  Plain MPI
# collectives, mismatched across ranks and routed through mpccl's host path
# (MPCCL_SHIM_HOST=1), fail on every rank within 1 s with MPCCL_CHECK_MODE=1;
# the message in the log names the MPI rank and the operation.
top_builddir=${top_builddir:-.}
shim=$(cd "$top_builddir" && pwd)/.libs/libmpccl_shim.so
prog=$top_builddir/test/shim/test_shim_check
mpirun=${MPIRUN:-$(command -v mpirun 2>/dev/null)}
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
[ -x "$prog" ] || { echo "$0: $prog not built" >&2; exit 99; }
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_mpi_yield_when_idle
log=${TMPDIR:-/tmp}/shim-hang.$$.log
trap 'rm -f "$log"' EXIT
status=0
for np in 2 4; do
    echo "=== np $np: MPCCL_SHIM_HOST=1 MPCCL_CHECK_MODE=1 test_shim_check"
    timeout -k 10 120 "$mpirun" -np "$np" --oversubscribe --bind-to none --mca btl ^openib \
        --mca btl_vader_single_copy_mechanism none -x LD_PRELOAD="$preload" -x MPCCL_SHIM_HOST=1 \
        -x MPCCL_CHECK_MODE=1 -x CUDA_VISIBLE_DEVICES= "$prog" >"$log" 2>&1
    rc=$?
    cat "$log"
    [ $rc -ne 0 ] && { echo "FAIL: exit $rc"; status=1; }
    last=$((np - 1))
    # every rank's error names the last MPI rank and what it called
    named=$(grep -c "check mode (MPCCL_CHECK_MODE=1) on comm .*rank $last calls broadcast" "$log")
    if [ "$named" -lt "$np" ]; then
        echo "FAIL: $named of $np ranks' errors name MPI rank $last and its broadcast"
        status=1
    fi
done
exit $status
