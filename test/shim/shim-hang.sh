#!/bin/sh
# make check: check mode through the shim (test_shim_check.c).  Plain MPI
# collectives, mismatched across ranks and routed through mpccl's host path
# (MPCCL_SHIM_HOST=1), fail on every rank within 1 s with MPCCL_CHECK_MODE=1;
# the message in the log names the MPI rank and the operation.
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$top_srcdir/test/shim/shim-env.sh"
prog=$top_builddir/test/shim/test_shim_check
need_built "$prog"
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
