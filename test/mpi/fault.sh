#!/bin/sh
# make check: a rank dies (SIGKILL) before or during every collective, a
# send/recv and a group, with 3-8 ranks; every survivor must get
# ncclRemoteError within 5 s and shrink to a working communicator; with a
# second death before the shrink, the shrink must fail in time and a second
# one without both must work.  Then 100
# repetitions of the 3-rank allreduce case, the same scenarios over UCX's
# network endpoints (what peers on other machines use: MPCCL_PEER_WATCH=0
# turns same-machine peers into remote ones, noticed through UCX's error
# handling instead of the peer watcher), and the idle cost of the watcher.
# test_fault forks its ranks (mpirun would end the job when one dies);
# timeout bounds each run so a hang fails instead of blocking, and a hung
# rank's stacks are printed (gdb, where installed).
MPCCL_UCX_ERR_MODE=${MPCCL_UCX_ERR_MODE:-auto}
export MPCCL_UCX_ERR_MODE
prog=${top_builddir:-.}/test/mpi/test_fault
[ -x "$prog" ] || { echo "$0: $prog not built" >&2; exit 99; }
timeout_cmd=
command -v timeout >/dev/null 2>&1 && timeout_cmd="timeout -k 10"
status=0
run_env=
# Each run's output is kept, so that a failure's cause (a fatal error printed
# above pages of stacks) can be repeated at the end, where logs are cut.
out=$(mktemp) || exit 99
trap 'rm -f "$out" "$out.all"' EXIT
run() {
    limit=$1
    shift
    echo "=== ${run_env:+$run_env }test_fault $*"
    # shellcheck disable=SC2086 # $run_env: VAR=VALUE words for env
    if [ -n "$timeout_cmd" ]; then $timeout_cmd "$limit" env $run_env "$prog" "$@" >"$out" 2>&1
    else env $run_env "$prog" "$@" >"$out" 2>&1; fi
    rc=$?
    cat "$out"
    [ $rc -eq 124 ] && echo "=== test_fault $*: timed out after $limit s"
    if [ $rc -ne 0 ]; then
        status=1
        { echo "=== ${run_env:+$run_env }test_fault $*: exit $rc"; cat "$out"; } >>"$out.all"
    fi
}
run 300 -n 3
run 300 -q -n 4,5,6,7,8
run 300 -q -r 100 -n 3 -c allreduce
run 300 -q -w shrink -n 4,8
run_env=MPCCL_PEER_WATCH=0
run 300 -q -n 3,4,5,8
run 300 -q -w shrink -n 4,8
run_env=
run 60 -i -n 3,8
if [ $status -ne 0 ]; then
    echo "=== the failures, in short (errors and fatal messages of the failed runs):"
    grep -E "^=== |FAIL|Fatal|Assertion|UCX +ERROR|expected|died|hangs|signal" "$out.all" | grep -v "^=== rank" | tail -n 40
fi
exit $status
