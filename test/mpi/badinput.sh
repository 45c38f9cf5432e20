#!/bin/sh
# make check: argument checking and last-error messages
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run 1,3 test/mpi/test_badinput
run -n 2 4 test/mpi/test_badinput
exit $status
