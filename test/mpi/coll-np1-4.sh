#!/bin/sh
# make check: every collective x datatype x op, 1 to 4 ranks on one node
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run 1,2,3,4 test/mpi/test_coll
exit $status
