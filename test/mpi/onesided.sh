#!/bin/sh
# make check: windows, registration, put/signal/wait on one node and on two simulated nodes
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run 1,2,3,8 test/mpi/test_onesided
run -n 2 2,5 test/mpi/test_onesided
# the ping-pong benchmark checks the first exchange of each size
run 2,3 examples/onesided_pingpong -b 8 -e 64K -n 5 -w 1
exit $status
