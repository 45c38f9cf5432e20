#!/bin/sh
# make check-gpu: the collective suites on GPUs.  Exits 77 (skip) on a machine
# without a GPU, never 0.
#   one process per GPU on all visible GPUs (flat kernels and their forced
#   variants -- LL send/recv at every size and never among them -- the engine
#   with MPCCL_FLAT=0); several processes on one GPU;
#   two simulated nodes (GPU data over UCX through the proxy); ncclCommInitAll
#   and graph capture inside the engine test; one-sided operations and the
#   device API; the MPI shim; the Python bindings; a compute-sanitizer pass.
#   a peer killed or hung under every kernel kind: abort, revoke, shrink,
#   graphs and op timeouts must drain the survivors' streams (abort.sh).
# CHECK_GPU_PARTS picks parts (default: all of them, in this order):
#   engine coll flat perf shared nodes onesided devapi abort hang shim python torch ecosystem sanitizer
# PYTHON names the interpreter for the Python part (default: the first of
# /usr/bin/python3 and python3 that has mpi4py and pytest).
here=$(cd "$(dirname "$0")" && pwd)
top_builddir=${top_builddir:-.}
export top_builddir
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${ngpu:-0}" -eq 0 ]; then
    echo "SKIP: no GPU (nvidia-smi lists none): check-gpu needs a CUDA machine"
    exit 77
fi
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A --enable-sanitizers build (doc/TESTING.md): the sanitizers' options from
# test/sanitizers/env.sh (leak checking, lsan.supp, protect_shadow_gap=0 for the
# CUDA driver); programs that are not instrumented get the ASan runtime
# preloaded ahead of mpccl; compute-sanitizer does not run beside ASan.
[ -z "${MPCCL_TEST_SANITIZER_ENV:-}" ] && [ -f "$top_builddir/test/sanitizers/env.sh" ] &&
    . "$top_builddir/test/sanitizers/env.sh"
asan_pre=
[ -n "${MPCCL_TEST_ASAN_PRELOAD:-}" ] && asan_pre=$MPCCL_TEST_ASAN_PRELOAD:
if [ "${MPCCL_TEST_SANITIZERS:-}" = yes ]; then
    echo "##### sanitizer build: ASAN_OPTIONS=$ASAN_OPTIONS LSAN_OPTIONS=$LSAN_OPTIONS"
fi
status=0
step() {
    echo "##### $*"
    "$@"
    r=$?
    if [ $r -ne 0 ] && [ $r -ne 77 ]; then echo "##### FAILED ($r): $*"; status=1; fi
}
parts=${CHECK_GPU_PARTS:-engine coll flat perf shared nodes onesided devapi abort hang shim python torch ecosystem sanitizer}
want() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
mpi="$here/../mpi/run-mpi.sh"
# Whether the UCX that mpccl loads moves CUDA memory ($1: a UCX lib/ folder
# put first on LD_LIBRARY_PATH).
ucx_moves_cuda() {
    env ${1:+LD_LIBRARY_PATH=$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} "$top_builddir/tools/mpccl-info" --json 2>/dev/null |
        tr -d ' \n' | grep -q '"cuda_memory":true'
}
if want engine; then
for t in test/gpu/test_engine test/gpu/test_gpu_comm; do
    [ -x "$top_builddir/$t" ] && step "$top_builddir/$t"
done
fi
# one process per GPU
if want coll; then
step sh "$mpi" -t 500 "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 "$ngpu" test/mpi/test_group
step sh "$mpi" -t 300 "$ngpu" test/mpi/test_comm
step sh "$mpi" -t 300 "$ngpu" test/mpi/test_badinput
fi
# the flat kernels' variants (default above: flat, LL for small calls, flat p2p)
if want flat; then
step sh "$mpi" -t 300 -e MPCCL_FLAT_ALLREDUCE=twoshot "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 -e MPCCL_FLAT_LL_BYTES=0 "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 -e MPCCL_FLAT_LL_BYTES=1M -e MPCCL_FLAT_SLICE_BYTES=64K "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 -e MPCCL_FLAT=0 -e MPCCL_FLAT_P2P=0 "$ngpu" test/mpi/test_coll
# alltoall with CTAs for the own block at every size
step sh "$mpi" -t 300 -e MPCCL_FLAT_SELF_BYTES=1 -e MPCCL_FLAT_LL_BYTES=0 "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P=0 "$ngpu" test/mpi/test_group
step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P_BYTES=64K "$ngpu" test/mpi/test_group
# send/recv as LL units at every size (chunked past a chunk of the LL part), and never
for ll in 64G 0; do
    step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P_LL_BYTES=$ll "$ngpu" test/mpi/test_group
    step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P_LL_BYTES=$ll -e CK_RUN_CASE=p2p "$ngpu" test/mpi/test_coll
done
fi
# every collective, datatype and op checked by the benchmark (-c 1)
if want perf; then
step sh "$mpi" -t 300 "$ngpu" mpccl-perf -C all -d all -o all -b 1 -e 1M -f 7 -c 1 -w 1 -n 1
# (two-shot needs two ranks; on one GPU the host-side check of 64 MB in every
# datatype and op alone outlasts the step's limit)
[ "$ngpu" -ge 2 ] && step sh "$mpi" -t 300 -e MPCCL_FLAT_ALLREDUCE=twoshot "$ngpu" mpccl-perf -C allreduce -d all -o all -b 1 -e 64M -f 7 -c 1 -w 1 -n 1
[ "$ngpu" -ge 3 ] && step sh "$mpi" -t 300 -e MPCCL_FLAT_ROOT_SPLIT_BYTES=1 "$ngpu" mpccl-perf -C broadcast -d all -b 1 -e 64M -f 7 -c 1 -w 1 -n 2 -r 1
[ "$ngpu" -ge 3 ] && step sh "$mpi" -t 300 -e MPCCL_FLAT_ROOT_SPLIT_BYTES=1 "$ngpu" mpccl-perf -C reduce -d all -o all -b 1 -e 4M -f 7 -c 1 -w 1 -n 1 -r 1
step sh "$mpi" -t 300 "$ngpu" mpccl-perf -b 8 -e 16M -f 8 -c 1 -w 1 -n 3
# alltoall and allgather with the own block's CTAs (the move kernel) at every size, every datatype, eager and in CUDA graphs
step sh "$mpi" -t 300 -e MPCCL_FLAT_SELF_BYTES=1 -e MPCCL_FLAT_LL_BYTES=0 "$ngpu" mpccl-perf -C alltoall -d all -b 1 -e 4M -f 7 -c 1 -w 1 -n 2
step sh "$mpi" -t 300 -e MPCCL_FLAT_SELF_BYTES=1 "$ngpu" mpccl-perf -C alltoall -b 1 -e 64M -f 9 -c 1 -w 1 -n 3 -G 2
step sh "$mpi" -t 300 -e MPCCL_FLAT_SELF_BYTES=1 -e MPCCL_FLAT_LL_BYTES=0 "$ngpu" mpccl-perf -C all_gather -d all -b 1 -e 4M -f 7 -c 1 -w 1 -n 2
step sh "$mpi" -t 300 -e MPCCL_FLAT_SELF_BYTES=1 "$ngpu" mpccl-perf -C all_gather -b 1 -e 64M -f 9 -c 1 -w 1 -n 3 -G 2
# LL launches with fewer threads than units (every thread loops), every collective, datatype and op
step sh "$mpi" -t 300 -e MPCCL_FLAT_LL_THREADS=32 "$ngpu" mpccl-perf -C all -d all -o all -b 1 -e 256K -f 7 -c 1 -w 1 -n 2
# one rank: collectives are a copy on the stream (none in place), scaled ones a kernel
step sh "$mpi" -t 300 1 mpccl-perf -C all -d all -o all -b 1 -e 1M -f 7 -c 1 -w 1 -n 1
step sh "$mpi" -t 300 1 mpccl-perf -C all -b 8 -e 1M -f 8 -c 1 -w 1 -n 5 -G 2
# buffers in symmetric windows: the window kernels at every size, then the default crossover
step sh "$mpi" -t 300 -e MPCCL_FLAT_WIN_BYTES=0 "$ngpu" mpccl-perf -W 1 -C all -d all -o all -b 1 -e 1M -f 7 -c 1 -w 1 -n 1
step sh "$mpi" -t 300 "$ngpu" mpccl-perf -W 1 -b 8 -e 64M -f 8 -c 1 -w 1 -n 3
# symmetric windows moved by the copy engines at every size, every datatype, eager and in CUDA graphs
for c in all_gather alltoall broadcast; do
    step sh "$mpi" -t 300 -e MPCCL_FLAT_WIN_BYTES=0 -e MPCCL_FLAT_CE_BYTES=1 "$ngpu" mpccl-perf -W 1 -C $c -d all -b 1 -e 4M -f 7 -c 1 -w 1 -n 2
    step sh "$mpi" -t 300 -e MPCCL_FLAT_WIN_BYTES=0 -e MPCCL_FLAT_CE_BYTES=1 "$ngpu" mpccl-perf -W 1 -C $c -b 1 -e 64M -f 9 -c 1 -w 1 -n 3 -G 2
done
# ncclCommRegister'd buffers (ncclMemAlloc; cudaMalloc at an offset that differs
# between ranks): the registered kernels at every size, then the default crossover
step sh "$mpi" -t 300 -e MPCCL_FLAT_WIN_BYTES=0 "$ngpu" mpccl-perf -W 2 -C all -d all -o all -b 1 -e 1M -f 7 -c 1 -w 1 -n 1
step sh "$mpi" -t 300 -e MPCCL_FLAT_WIN_BYTES=0 "$ngpu" mpccl-perf -W 3 -C all -d all -o all -b 1 -e 1M -f 7 -c 1 -w 1 -n 1
step sh "$mpi" -t 300 "$ngpu" mpccl-perf -W 3 -b 8 -e 64M -f 8 -c 1 -w 1 -n 3
# send/recv stored straight into registered receive buffers, at every size
step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P_DIRECT_BYTES=1 "$ngpu" mpccl-perf -W 3 -C sendrecv -d all -b 1 -e 16M -f 7 -c 1 -w 1 -n 1
# send/recv as LL units at every size, eager and in CUDA graphs (counters on the device)
step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P_LL_BYTES=64G "$ngpu" mpccl-perf -C sendrecv -d all -b 1 -e 16M -f 7 -c 1 -w 1 -n 3
step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P_LL_BYTES=64G "$ngpu" mpccl-perf -C sendrecv -b 1 -e 4M -f 5 -c 1 -w 1 -n 4 -G 3
fi
# several processes on one GPU
if want shared; then
# the shared-device path (no MPS) and MPS, every collective and send/recv
step sh "$here/shared-gpu.sh"
# the usual kernels with several processes on one GPU (time-sliced without MPS)
step sh "$mpi" -t 500 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels 3 test/mpi/test_coll
step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels -e MPCCL_FLAT_SELF_BYTES=1 -e MPCCL_FLAT_LL_BYTES=0 3 mpccl-perf -C alltoall -d all -b 1 -e 1M -f 7 -c 1 -w 1 -n 2
step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels -e MPCCL_FLAT_SELF_BYTES=1 -e MPCCL_FLAT_LL_BYTES=0 3 mpccl-perf -C all_gather -d all -b 1 -e 1M -f 7 -c 1 -w 1 -n 2
step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels -e MPCCL_FLAT_WIN_BYTES=0 3 mpccl-perf -W 3 -C all -b 1 -e 64K -f 61 -c 1 -w 1 -n 1
step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels -e MPCCL_FLAT_WIN_BYTES=0 -e MPCCL_FLAT_CE_BYTES=1 2 mpccl-perf -W 1 -C all -b 1 -e 1M -f 31 -c 1 -w 1 -n 1
# broadcast and reduce of 3 ranks split in two launches at every size (counts that 3 does not divide too), root 1, graphs
for c in broadcast reduce; do
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels -e MPCCL_FLAT_ROOT_SPLIT_BYTES=1 3 mpccl-perf -C $c -d all -o all -b 1 -e 1M -f 7 -c 1 -w 1 -n 1 -r 1
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels -e MPCCL_FLAT_ROOT_SPLIT_BYTES=1 3 mpccl-perf -C $c -b 1 -e 4M -f 7 -c 1 -w 1 -n 2 -G 2
done
step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels -e MPCCL_FLAT_P2P_DIRECT_BYTES=1 3 mpccl-perf -W 3 -C sendrecv -b 1 -e 4M -f 13 -c 1 -w 1 -n 1
# send/recv as LL units at every size, and never
for ll in 64G 0; do
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels -e MPCCL_FLAT_P2P_LL_BYTES=$ll 3 test/mpi/test_group
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_SHARED_GPU=kernels -e MPCCL_FLAT_P2P_LL_BYTES=$ll -e CK_RUN_CASE=p2p 3 test/mpi/test_coll
done
fi
# two simulated nodes: the inter-node steps go through the proxy and UCX
if want nodes; then
if [ "$ngpu" -ge 2 ]; then
    step sh "$mpi" -t 500 -n 2 "$ngpu" test/mpi/test_coll
else
    step sh "$mpi" -t 500 -n 2 2 test/mpi/test_coll
fi
# every step spread over all CTAs (the default gives each CTA at least 32 KB)
step sh "$mpi" -t 300 -l 0 -e MPCCL_GPU_CTA_MIN_BYTES=0 -n 2 2 test/mpi/test_coll
# GPU-direct (off by default): device slots handed to UCX where it moves CUDA
# memory, with the UCX this build links or, when that one has no CUDA support,
# the one under MPCCL_UCX_PREFIX (default: the libucx-cu13 wheel's, found
# through python3's libucx module) put first on LD_LIBRARY_PATH.
ucx_env=
if ! ucx_moves_cuda; then
    ucx_prefix=${MPCCL_UCX_PREFIX:-$(python3 -c 'import os, libucx; print(os.path.dirname(libucx.__file__))' 2>/dev/null)}
    if [ -n "$ucx_prefix" ] && [ -d "$ucx_prefix/lib" ]; then
        ucx_env="-e LD_LIBRARY_PATH=$ucx_prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        ucx_moves_cuda "$ucx_prefix/lib" || ucx_env=
    fi
fi
if [ -n "$ucx_env" ] || ucx_moves_cuda; then
    # shellcheck disable=SC2086
    step sh "$mpi" -t 300 -l 0 $ucx_env -e MPCCL_GPU_DIRECT=1 -n 2 2 test/mpi/test_coll
    # shellcheck disable=SC2086
    step sh "$mpi" -t 300 -l 0 $ucx_env -e MPCCL_GPU_DIRECT=1 -n 2 2 test/mpi/test_group
else
    echo "##### SKIP GPU-direct: no UCX with CUDA support (pip install libucx-cu13, or set MPCCL_UCX_PREFIX)"
fi
# split, shrink (the proxy attached), grow, finalize and abort across nodes
step sh "$mpi" -t 300 -l 0 -n 2 2 test/mpi/test_comm
step sh "$mpi" -t 300 -l 0 -n 2 3 test/mpi/test_comm
step sh "$mpi" -t 300 -l 0 -e MPCCL_PEER_WATCH=0 -n 2 4 test/mpi/test_comm
# the proxy sleeps while idle (< 2% of a core) and graphs replayed after that complete
step sh "$mpi" -t 300 -n 2 2 test/mpi/test_idle
step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -n 2 4 test/mpi/test_idle
fi
# registration, windows, put/signal/wait on GPU communicators
if want onesided && [ -x "$top_builddir/test/mpi/test_onesided" ]; then
    step sh "$mpi" -t 300 "$ngpu" test/mpi/test_onesided
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 3 test/mpi/test_onesided
    step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P_DIRECT_BYTES=1M "$ngpu" test/mpi/test_onesided
    # peers of one node without P2P: one-sided through the proxy's channel
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -e MPCCL_P2P_DISABLE=1 3 test/mpi/test_onesided
    step sh "$mpi" -t 300 -n 2 2 test/mpi/test_onesided
    # peers on the same node through IPC and on the other node through the proxy
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 -n 2 4 test/mpi/test_onesided
    step sh "$mpi" -t 300 -n 2 2 examples/onesided_pingpong -b 8 -e 16M -n 50 -w 5
    step sh "$mpi" -t 300 2 examples/onesided_pingpong -b 8 -e 64M -n 200 -w 20
fi
# the device API: a kernel allreduce over ncclMemAlloc windows with LSA
# barriers, one process per GPU and several processes on one GPU
if want devapi && [ -x "$top_builddir/examples/device_allreduce" ]; then
    step sh "$mpi" -t 300 "$ngpu" examples/device_allreduce
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 3 examples/device_allreduce 1 4093 1000003
fi
# survivors of a dead or hung peer, every kernel kind (2-3 processes; shared
# GPUs when there is one), then the same on one GPU
if want abort; then
    step sh "$here/abort.sh"
    [ "$ngpu" -ge 2 ] && step env CUDA_VISIBLE_DEVICES=0 ABORT_SCENARIOS="killbefore hang shrink" sh "$here/abort.sh"
fi
# hang reports and check mode, 2-4 processes on one GPU
if want hang; then
    step env CUDA_VISIBLE_DEVICES=0 sh "$here/hang.sh"
fi
# the MPI shim on device buffers
if want shim && [ -x "$top_builddir/test/shim/test_shim" ]; then
    step timeout 300 ${MPIRUN:-mpirun} -np "$ngpu" --oversubscribe --bind-to none \
        -x LD_PRELOAD="$asan_pre$top_builddir/.libs/libmpccl_shim.so" \
        ${MPCCL_TEST_ASAN_MPI_OPTIONS:+-x ASAN_OPTIONS=$ASAN_OPTIONS:$MPCCL_TEST_ASAN_MPI_OPTIONS} \
        "$top_builddir/test/shim/test_shim" --gpu --expect route
fi
# point-to-point on device buffers: 2 and 4 ranks (shared GPUs where there are
# fewer), then sender and receiver on different sides (device/host) per test
if want shim && [ -x "$top_builddir/test/shim/test_shim_p2p" ]; then
    shim_p2p() {
        np=$1
        shift
        step timeout 300 ${MPIRUN:-mpirun} -np "$np" --oversubscribe --bind-to none \
            -x LD_PRELOAD="$asan_pre$top_builddir/.libs/libmpccl_shim.so" \
            ${MPCCL_TEST_ASAN_MPI_OPTIONS:+-x ASAN_OPTIONS=$ASAN_OPTIONS:$MPCCL_TEST_ASAN_MPI_OPTIONS} \
            "$top_builddir/test/shim/test_shim_p2p" "$@"
    }
    shim_p2p 2 --gpu
    shim_p2p 4 --gpu
    shim_p2p 2 --gpu --mixed
fi
# point-to-point on device buffers through the shim, the ranks sharing one GPU:
# halo exchanges (C and Fortran), mpi4py on CuPy arrays and a benchmark smoke
# run, without and with MPS (shim-gpu.sh)
if want shim; then
    step sh "$here/shim-gpu.sh" "$top_builddir"
fi
# the Python bindings on GPU buffers (CuPy / PyTorch when present)
py=
for cand in ${PYTHON:-} /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
    if [ -n "$cand" ] && "$cand" -c 'import mpi4py, pytest' >/dev/null 2>&1; then py=$cand; break; fi
done
# (sanitizer build: python3 gets the ASan runtime preloaded, without leak
# checking -- CPython keeps its objects until exit; see python/run-pytest.sh)
pypre=
[ -n "$asan_pre" ] && pypre="-x LD_PRELOAD=$MPCCL_TEST_ASAN_PRELOAD -x ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0"
if want python && [ -n "$py" ]; then
    # shellcheck disable=SC2086
    step timeout 300 env PYTHONPATH="$here/../../python" MPCCL_LIBRARY="$top_builddir/.libs/libmpccl.so" \
        ${MPIRUN:-mpirun} -np "$ngpu" --oversubscribe --bind-to none $pypre \
        -x PYTHONPATH -x MPCCL_LIBRARY "$py" -m pytest -q -p no:cacheprovider "$here/../../python/tests_gpu"
    # shellcheck disable=SC2086
    step timeout 120 env PYTHONPATH="$here/../../python" MPCCL_LIBRARY="$top_builddir/.libs/libmpccl.so" \
        ${MPIRUN:-mpirun} -np "$ngpu" --oversubscribe --bind-to none $pypre \
        -x PYTHONPATH -x MPCCL_LIBRARY "$py" "$here/../../examples/python/allreduce.py"
elif want python; then
    echo "##### SKIP python: no interpreter with mpi4py and pytest (set PYTHON=...)"
fi
# PyTorch on libmpccl when a failure strikes: a rank that never calls (the
# watchdog ends the survivor) and a rank killed mid-loop (abort, a new process
# group over the survivors, exact results after it)
if want torch && [ -n "$py" ] && "$py" -c 'import torch' >/dev/null 2>&1; then
    step timeout 400 "$py" "$here/torch_fault.py" "$top_builddir/.libs/libmpccl.so" all
fi
# NVIDIA's nccl4py and CuPy's cupy.cuda.nccl on libmpccl, 2 ranks: loaded
# with LD_PRELOAD, then the way without it (ctypes, RTLD_GLOBAL); skips when
# neither is importable (test/gpu/ecosystem.py, doc/PYTHON.md)
ecopy=${py:-${PYTHON:-python3}}
if want ecosystem && "$ecopy" -c 'import cupy' >/dev/null 2>&1; then
    step timeout 600 "$ecopy" "$here/ecosystem.py" "$top_builddir/.libs/libmpccl.so" all preload
    step timeout 600 "$ecopy" "$here/ecosystem.py" "$top_builddir/.libs/libmpccl.so" all ctypes
fi
# memory and race checking of a small configuration
if want sanitizer && [ "${MPCCL_TEST_SANITIZERS:-}" = yes ]; then
    echo "##### SKIP sanitizer: compute-sanitizer cannot run an AddressSanitizer build (use a normal build)"
elif want sanitizer && command -v compute-sanitizer >/dev/null 2>&1 && [ -x "$top_builddir/test/gpu/test_engine" ]; then
    MPCCL_TEST_LEVEL=0 step compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 "$top_builddir/test/gpu/test_engine"
    # racecheck slows kernels by orders of magnitude: the quick matrix without the 4 MB cases
    MPCCL_TEST_LEVEL=0 step compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 1 \
        "$top_builddir/test/gpu/test_engine" quick nospecial
fi
exit $status
