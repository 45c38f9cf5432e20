#!/bin/sh
# check-gpu's "shared" part for processes sharing one GPU: every collective and
# send/recv with 2, 3 and 4 ranks on GPU 0, without MPS and with MPS (started
# here and stopped after when nvidia-cuda-mps-control exists), on the path the
# library picks (the shared-device path without MPS, the usual kernels with
# it) and forced the other way.  A time bound catches a fall back to
# time-slicing: 1000 8-byte allreduces of 2 ranks must take under 1 s
# (time-sliced kernels take about 2.4 s).
# Environment: top_builddir, MPIRUN as for run-mpi.sh.  Exits 77 without a GPU.
here=$(cd "$(dirname "$0")" && pwd)
top_builddir=${top_builddir:-.}
export top_builddir
nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo "SKIP: no GPU"; exit 77; }
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi="$here/../mpi/run-mpi.sh"
perf="$top_builddir/mpccl-perf"
status=0
step() {
    echo "##### $*"
    "$@"
    r=$?
    if [ $r -ne 0 ] && [ $r -ne 77 ]; then echo "##### FAILED ($r): $*"; status=1; fi
}
# 1000 small allreduces within a second (the average time per call, in the
# first data row of mpccl-perf, below 1000 us)
bounded() {
    out=$(sh "$mpi" -t 120 -e CUDA_VISIBLE_DEVICES=0 "$@" 2 mpccl-perf -C allreduce -b 8 -e 8 -n 1000 -w 20 -c 0 2>&1)
    echo "$out" | tail -3
    us=$(echo "$out" | awk '$1 == 8 && NF >= 6 { print $6; exit }')
    case "$us" in '' ) echo "no timing row"; return 1 ;; esac
    awk -v t="$us" 'BEGIN { exit !(t < 1000) }' || { echo "8-byte allreduce took $us us: time-sliced?"; return 1; }
}
pass() { # $1: label; the rest: run-mpi.sh -e options
    lab=$1
    shift
    for np in 2,3,4; do
        step sh "$mpi" -t 500 -e CUDA_VISIBLE_DEVICES=0 "$@" $np test/mpi/test_coll
        step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 "$@" $np test/mpi/test_group
    done
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 "$@" 3 mpccl-perf -C all -d all -o all -b 1 -e 256K -f 29 -c 1 -w 1 -n 1
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 "$@" 4 mpccl-perf -C all -b 1 -e 8M -f 5 -c 1 -w 1 -n 2 -r 3
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 "$@" 3 mpccl-perf -C sendrecv -d all -b 1 -e 4M -f 13 -c 1 -w 1 -n 2
    echo "##### $lab done"
}
# no MPS: the shared-device path, bounded in time
pass "no MPS, auto" -e MPCCL_SHARED_GPU=auto
step bounded -e MPCCL_SHARED_GPU=auto
# MPS: the usual kernels by default, the shared-device path when forced
if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    dir=$(mktemp -d)
    export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
        pass "MPS, auto" -e CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY -e MPCCL_SHARED_GPU=auto
        pass "MPS, leader" -e CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY -e MPCCL_SHARED_GPU=leader
        step bounded -e CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY -e MPCCL_SHARED_GPU=auto
        echo quit | nvidia-cuda-mps-control
    else
        echo "##### MPS could not be started: its half is not run"
    fi
    rm -rf "$dir"
fi
exit $status
