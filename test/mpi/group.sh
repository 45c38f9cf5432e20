#!/bin/sh
# make check: group semantics on one node, on two simulated nodes, and over tcp
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run 1,2,3,4,8 test/mpi/test_group
run -n 2 4,5 test/mpi/test_group
# UCX over tcp between ranks of one machine (no shared memory): a host call
# must not wait for acknowledgements a peer back in MPI never sends
run -e UCX_TLS=tcp,self 2,4 test/mpi/test_group
exit $status
