#!/bin/sh
# make check: the examples and mpccl-perf with its host check
status=0
run() { "$(dirname "$0")/run-mpi.sh" "$@"; r=$?; [ $r -eq 77 ] && exit 77; [ $r -ne 0 ] && status=1; }
run 1,4 examples/allreduce_mpi
run 1,4 examples/allreduce_uniqueid
run -n 2 4 examples/allreduce_mpi
run 1,3 mpccl-perf -b 64 -e 64K -f 32 -n 2 -w 1 -c 1 -d all -o sum
run 4 mpccl-perf -b 1K -e 1K -n 1 -w 0 -c 1 -C allreduce -d half -o all
run -n 2 4 mpccl-perf -b 4K -e 4K -n 2 -w 1 -c 1 -B uniqueid
exit $status
