#!/bin/sh
# make check: an idle process costs no CPU (one node, two simulated nodes)
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run -t 300 1,3 test/mpi/test_idle
run -t 300 -n 2 2 test/mpi/test_idle
exit $status
