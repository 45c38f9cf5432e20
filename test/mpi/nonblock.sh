#!/bin/sh
# make check: nonblocking communicators (config.blocking = 0) and ncclCommAbort
# from another thread (test_nonblock.c); every run bounded by run-mpi.sh's timeout.
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run -t 180 1,2,3,4 test/mpi/test_nonblock
exit $status
