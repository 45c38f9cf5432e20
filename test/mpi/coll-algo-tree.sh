#!/bin/sh
# make check: reduced collective matrix with MPCCL_ALGO=tree forced, two simulated nodes
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run -n 2 -l 0 -e MPCCL_ALGO=tree 3,4 test/mpi/test_coll
exit $status
