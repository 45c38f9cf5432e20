#!/bin/sh
# make check: every collective x datatype x op, 5 and 8 ranks on one node
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run 5,8 test/mpi/test_coll
exit $status
