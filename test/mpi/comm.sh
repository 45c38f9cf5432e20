#!/bin/sh
# make check: communicator lifecycle, split, bootstraps, configs
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run 1,2,4,5 test/mpi/test_comm
run -n 2 4 test/mpi/test_comm
exit $status
