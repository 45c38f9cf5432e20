#!/bin/sh
# make check: group semantics on one node and on two simulated nodes
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run 1,2,3,4,8 test/mpi/test_group
run -n 2 4,5 test/mpi/test_group
exit $status
