#!/bin/sh
# make check: an idle process costs no CPU, and a rank away from the library
# holds up nobody (one node: shared memory; two simulated nodes; and UCX's
# network endpoints between ranks of one node, MPCCL_UCX_ERR_MODE=peer)
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run -t 300 1,3 test/mpi/test_idle
run -t 300 -n 2 2 test/mpi/test_idle
run -t 300 -e MPCCL_UCX_ERR_MODE=peer 3 test/mpi/test_idle
exit $status
