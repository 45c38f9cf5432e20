#!/bin/sh
# make check: collectives with ranks split into two simulated nodes (MPCCL_HOSTID), even and uneven
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run -n 2 3,4,6 test/mpi/test_coll
exit $status
