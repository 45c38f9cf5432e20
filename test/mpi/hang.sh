#!/bin/sh
# make check: hang reports and check mode (test_hang.c, doc/DEBUGGING.md).
# Each case runs under its own settings; the stall case's log must hold one
# stall report (printed by one rank only) and the SIGUSR2 report.  Host
# communicators only (CUDA_VISIBLE_DEVICES empty): GPU ones are test/gpu/hang.sh's.
status=0
dir=$(dirname "$0")
log=${TMPDIR:-/tmp}/mpccl-hang.$$.log
run() { "$dir/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run -t 120 -e CUDA_VISIBLE_DEVICES= -e MPCCL_OP_TIMEOUT=3 -e CK_RUN_CASE=timeout 3,4 test/mpi/test_hang
run -t 120 -e CUDA_VISIBLE_DEVICES= -e MPCCL_CHECK_MODE=1 -e CK_RUN_CASE=check 2,4 test/mpi/test_hang
run -t 120 -e CUDA_VISIBLE_DEVICES= -e NCCL_CHECK_MODE=1 -e CK_RUN_CASE=check 3 test/mpi/test_hang
"$dir/run-mpi.sh" -t 120 -e CUDA_VISIBLE_DEVICES= -e MPCCL_STALL_REPORT_S=2 -e CK_RUN_CASE=stall 3 test/mpi/test_hang >"$log" 2>&1
r=$?
cat "$log"
[ $r -eq 77 ] && { rm -f "$log"; exit 77; }
[ $r -ne 0 ] && status=1
stalls=$(grep -c 'mpccl WARN hang: stalled' "$log")
if [ "$stalls" -ne 1 ]; then
    echo "FAIL: $stalls stall reports in the log, expected exactly 1 (by the lowest waiting rank)"
    status=1
fi
if ! grep -q 'mpccl WARN hang: state on demand' "$log"; then
    echo "FAIL: no report after SIGUSR2"
    status=1
fi
rm -f "$log"
exit $status
