#!/bin/sh
# make check: windows, registration, put/signal/wait on one node, on two
# simulated nodes, and over UCX's network endpoints between the ranks of one
# node (MPCCL_UCX_ERR_MODE=peer: tcp, as between machines)
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run 1,2,3,8 test/mpi/test_onesided
run -n 2 2,5 test/mpi/test_onesided
run -e MPCCL_UCX_ERR_MODE=peer 3 test/mpi/test_onesided
# the ping-pong benchmark checks the first exchange of each size
run 2,3 examples/onesided_pingpong -b 8 -e 64K -n 5 -w 1
exit $status
