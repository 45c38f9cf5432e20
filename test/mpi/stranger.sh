#!/bin/sh
# make check: strangers (silent, garbage, huge-length and flooding
# connections) at every listener of every rank during init, 1000
# allreduces, a shrink and a grow, with 2 and 4 ranks (test_stranger.c).
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
# The stranger leaves alone the ports open before it started: Open MPI's own
# TCP listener (not mpccl's) hangs a job on a silent connection.
run -t 300 2,4 test/mpi/test_stranger
exit $status
