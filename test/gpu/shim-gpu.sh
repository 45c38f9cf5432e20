#!/bin/sh
# Point-to-point through libmpccl_shim.so on one GPU shared by the ranks:
#   shim_halo        --blocking and --overlap at 1, 2, 3 (uneven rows) and 4 ranks
#   shim_halo_f      the Fortran exchange at 2 and 3 ranks (built here with
#                    mpif90 when it is present)
#   shim_mpi4py.py   mpi4py + CuPy at 2 ranks: point-to-point, then
#                    Allgatherv in a run of its own (exit 77 without CuPy)
#   shim_p2p_bench   2 ranks, small sizes: a smoke run of the benchmark; and
#                    between two simulated hosts (MPCCL_HOSTID per rank)
#                    through the shim's UCX, GPU-direct and staged
# each under timeout with the shim preloaded into the ranks, first without
# MPS, then again under an MPS daemon of our own (when
# nvidia-cuda-mps-control exists).  Prints a PASS/FAIL/SKIP summary.
#
#   sh test/gpu/shim-gpu.sh [BUILDDIR]
#
# BUILDDIR (default $top_builddir, else .) holds .libs/libmpccl_shim.so and
# test/gpu/shim_halo, shim_p2p_bench (make check-gpu builds them; a build
# without CUDA has neither).  Environment: MPIRUN (Open MPI's mpirun), PYTHON
# (default python3), SHIM_GPU_TIMEOUT (seconds per step, default 300),
# SHIM_GPU_MPS=0 (skip the MPS pass), CUDA_VISIBLE_DEVICES (its first device
# is the one used; default 0).  Exit: 0 all passed or skipped, 1 a failure,
# 77 no GPU or nothing could run, 99 the shim is not built.
builddir=${1:-${top_builddir:-.}}
builddir=$(cd "$builddir" && pwd) || exit 99
srcdir=$(cd "$(dirname "$0")" && pwd)
shim=$builddir/.libs/libmpccl_shim.so
mpirun=${MPIRUN:-$(command -v mpirun 2>/dev/null)}
python=${PYTHON:-python3}
limit=${SHIM_GPU_TIMEOUT:-300}

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${ngpu:-0}" -eq 0 ]; then
    echo "SKIP: no GPU (nvidia-smi lists none)"
    exit 77
fi
if [ -z "$mpirun" ] || ! "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
    echo "SKIP: needs Open MPI's mpirun (-x forwarding); set MPIRUN"
    exit 77
fi
[ -f "$shim" ] || { echo "$0: $shim not built" >&2; exit 99; }
# A --enable-sanitizers build: its options, and the ASan runtime preloaded
# ahead of the instrumented shim (the programs and python3 are not
# instrumented; CPython keeps its objects until exit, hence no leak check).
# shellcheck source=/dev/null
[ -z "${MPCCL_TEST_SANITIZER_ENV:-}" ] && [ -f "$builddir/test/sanitizers/env.sh" ] &&
    . "$builddir/test/sanitizers/env.sh"
preload=$shim
asan_x=
if [ -n "${MPCCL_TEST_ASAN_PRELOAD:-}" ]; then
    preload=$MPCCL_TEST_ASAN_PRELOAD:$shim
    asan_x="-x ASAN_OPTIONS=$ASAN_OPTIONS:${MPCCL_TEST_ASAN_MPI_OPTIONS:+$MPCCL_TEST_ASAN_MPI_OPTIONS:}detect_leaks=0"
fi

OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
# oversubscribed ranks must yield, or polling ranks starve each other
OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OMPI_MCA_mpi_yield_when_idle
# one GPU for every rank: the first of those visible
gpu=${CUDA_VISIBLE_DEVICES:-0}
gpu=${gpu%%,*}
timeout_cmd=
command -v timeout >/dev/null 2>&1 && timeout_cmd="timeout -k 10 $limit"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shim-gpu.XXXXXX") || exit 99
results=$tmp/results
: > "$results"
mps_up=0
mps_stop() {
    if [ $mps_up -eq 1 ]; then
        echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
        # the daemon shuts its server down before it leaves
        sleep 2
        mps_up=0
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
# shellcheck disable=SC2317 # (called by the EXIT trap)
cleanup() {
    mps_stop
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mode=nomps
mps_x=

# run NAME NP PROGRAM ARGS...: the shim goes to the ranks only (-x
# LD_PRELOAD), never to mpirun itself.
run() {
    name="$1 [$mode]"
    np=$2
    shift 2
    log=$tmp/log
    echo "=== $name: np $np $*"
    start=$(date +%s)
    # shellcheck disable=SC2086
    $timeout_cmd "$mpirun" -np "$np" --oversubscribe --bind-to none --mca btl ^openib \
        --mca btl_vader_single_copy_mechanism none \
        -x LD_PRELOAD="$preload" -x CUDA_VISIBLE_DEVICES="$gpu" $asan_x $mps_x "$@" >"$log" 2>&1
    rc=$?
    cat "$log"
    echo "=== $name: exit $rc after $(($(date +%s) - start)) s"
    why=
    case $rc in
    0) verdict=PASS ;;
    77) verdict=SKIP ;;
    124 | 137) verdict=FAIL why="timed out after $limit s" ;;
    *) verdict=FAIL why="exit $rc" ;;
    esac
    # the programs print the device's MPS attribute: the pass with our
    # daemon must have attached to it, the other must not have
    if [ $verdict = PASS ] && [ $mode = mps ] && grep -q "MPS: not active" "$log"; then
        verdict=FAIL why="it ran, but not under the MPS daemon"
    fi
    if [ $mode = nomps ] && grep -q "MPS: active" "$log"; then
        echo "=== note: MPS was already active on this GPU; the 'nomps' pass ran under it"
    fi
    echo "$verdict $name: np $np $(basename "$1") $(shift; echo "$*")${why:+ -- $why}" >> "$results"
}

skip() {
    echo "=== SKIP $1 [$mode]: $2"
    echo "SKIP $1 [$mode]: $2" >> "$results"
}

# The Fortran program, built once: use mpi, and the CUDA runtime called
# through bind(c) (-lcudart, from where this build found CUDA).
halo_f=
fc=$(command -v mpif90 2>/dev/null)
if [ -n "$fc" ]; then
    cuda_ld=$(sed -n 's/^CUDA_LDFLAGS = //p' "$builddir/Makefile" 2>/dev/null)
    if [ -z "$cuda_ld" ]; then
        cuda_home=${CUDA_HOME:-/usr/local/cuda}
        cuda_ld="-L$cuda_home/lib64 -Wl,-rpath,$cuda_home/lib64"
    fi
    # (in its own folder: the module file lands beside the compile)
    mkdir "$tmp/f90"
    # shellcheck disable=SC2086
    if (cd "$tmp/f90" && "$fc" -O1 -o shim_halo_f "$srcdir/shim_halo_f.f90" $cuda_ld -lcudart); then
        halo_f=$tmp/f90/shim_halo_f
    else
        echo "FAIL build shim_halo_f.f90 with $fc" >> "$results"
    fi
fi

halo=$builddir/test/gpu/shim_halo
# each rank on a host of its own
hostid_wrap='MPCCL_HOSTID=host${OMPI_COMM_WORLD_RANK:-0}; export MPCCL_HOSTID; exec "$@"'
bench=$builddir/test/gpu/shim_p2p_bench

suite() {
    if [ -x "$halo" ]; then
        for form in --blocking --overlap; do
            for np in 2 4; do
                run "halo $form" $np "$halo" $form
            done
        done
        if [ $mode = nomps ]; then
            run "halo, one rank" 1 "$halo"
            run "halo, uneven rows" 3 "$halo" -x 777 -y 1001 -n 50
        fi
    else
        skip halo "$halo not built (a build with CUDA and MPI builds it: make check-gpu)"
    fi
    if [ -n "$halo_f" ]; then
        run "fortran halo" 2 "$halo_f"
        [ $mode = nomps ] && run "fortran halo" 3 "$halo_f"
    else
        skip "fortran halo" "no mpif90, or it failed to build"
    fi
    run "mpi4py p2p" 2 "$python" "$srcdir/shim_mpi4py.py" --tests send_recv,sendrecv,isend_irecv,mixed
    run "mpi4py allgatherv" 2 "$python" "$srcdir/shim_mpi4py.py" --tests allgatherv
    if [ -x "$bench" ]; then
        run "p2p bench" 2 "$bench" -b 8 -e 1M -f 4 -n 100 -w 10 --csv "$tmp/bench-$mode.csv"
        run "p2p bench, pinned staging" 2 "$bench" -b 8 -e 64K -f 8 -n 50 -w 5 --staging-pinned
    else
        skip "p2p bench" "$bench not built"
    fi
    # Two simulated hosts (MPCCL_HOSTID per rank): device messages between
    # them go through the shim's UCX, read GPU to GPU (MPCCL_SHIM_NET_DIRECT=1:
    # UCX's cuda_ipc on this machine) or through pinned host memory (0).
    if [ $mode = nomps ] && [ -x "$bench" ]; then
        for direct in 1 0; do
            run "p2p bench between hosts, direct $direct" 2 -x MPCCL_SHIM_NET_DIRECT=$direct \
                sh -c "$hostid_wrap" sh "$bench" -b 8 -e 16M -f 8 -n 50 -w 5
            grep -q "rank 0 sends ucx [1-9]" "$log" ||
                echo "FAIL p2p bench between hosts, direct $direct: no message went through UCX" >> "$results"
        done
    fi
}

suite

if [ "${SHIM_GPU_MPS:-1}" = 0 ]; then
    skip "MPS pass" "SHIM_GPU_MPS=0"
elif ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    skip "MPS pass" "no nvidia-cuda-mps-control"
else
    mode=mps
    CUDA_MPS_PIPE_DIRECTORY=$tmp/mps-pipe
    CUDA_MPS_LOG_DIRECTORY=$tmp/mps-log
    export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    mkdir "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d && sleep 1 &&
        echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then
        mps_up=1
        echo "=== MPS control daemon started (pipes in $CUDA_MPS_PIPE_DIRECTORY)"
        mps_x="-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY"
        suite
        mps_x=
        mps_stop
    else
        echo "FAIL MPS daemon: nvidia-cuda-mps-control -d did not come up" >> "$results"
        cat "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null
        mps_stop
    fi
fi

echo "===== shim point-to-point on GPU $gpu: summary"
cat "$results"
npass=$(grep -c '^PASS' "$results")
nfail=$(grep -c '^FAIL' "$results")
nskip=$(grep -c '^SKIP' "$results")
echo "===== $npass passed, $nfail failed, $nskip skipped"
[ "$nfail" -gt 0 ] && exit 1
[ "$npass" -eq 0 ] && exit 77
exit 0
