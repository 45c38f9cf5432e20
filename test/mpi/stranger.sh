#!/bin/sh
# make check: strangers (silent, garbage, huge-length and flooding
# connections) at every listener of every rank during init, 1000
# allreduces, a shrink and a grow, with 2 and 4 ranks (test_stranger.c).
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
# Open MPI runs over shared memory here: its own TCP listener (not mpccl's)
# hangs a job when a stranger holds a silent connection to it.
run -t 300 -e OMPI_MCA_btl=self,vader 2,4 test/mpi/test_stranger
exit $status
