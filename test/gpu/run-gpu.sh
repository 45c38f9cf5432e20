#!/bin/sh
# make check-gpu: the collective suites on GPUs.  Exits 77 (skip) on a machine
# without a GPU, never 0.
#   one process per GPU on all visible GPUs (flat kernels and their forced
#   variants, the engine with MPCCL_FLAT=0); several processes on one GPU;
#   two simulated nodes (GPU data over UCX through the proxy); ncclCommInitAll
#   and graph capture inside the engine test; a compute-sanitizer pass.
here=$(cd "$(dirname "$0")" && pwd)
top_builddir=${top_builddir:-.}
export top_builddir
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${ngpu:-0}" -eq 0 ]; then
    echo "SKIP: no GPU (nvidia-smi lists none): check-gpu needs a CUDA machine"
    exit 77
fi
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
step() {
    echo "##### $*"
    "$@"
    r=$?
    if [ $r -ne 0 ] && [ $r -ne 77 ]; then echo "##### FAILED ($r): $*"; status=1; fi
}
mpi="$here/../mpi/run-mpi.sh"
for t in test/gpu/test_engine test/gpu/test_gpu_comm; do
    [ -x "$top_builddir/$t" ] && step "$top_builddir/$t"
done
# one process per GPU
step sh "$mpi" -t 500 "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 "$ngpu" test/mpi/test_group
step sh "$mpi" -t 300 "$ngpu" test/mpi/test_comm
step sh "$mpi" -t 300 "$ngpu" test/mpi/test_badinput
# the flat kernels' variants (default above: flat, LL for small calls, flat p2p)
step sh "$mpi" -t 300 -e MPCCL_FLAT_ALLREDUCE=twoshot "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 -e MPCCL_FLAT_LL_BYTES=0 "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 -e MPCCL_FLAT_LL_BYTES=1M -e MPCCL_FLAT_SLICE_BYTES=64K "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 -e MPCCL_FLAT=0 -e MPCCL_FLAT_P2P=0 "$ngpu" test/mpi/test_coll
step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P=0 "$ngpu" test/mpi/test_group
step sh "$mpi" -t 300 -e MPCCL_FLAT_P2P_BYTES=64K "$ngpu" test/mpi/test_group
step sh "$mpi" -t 300 "$ngpu" mpccl-perf -C all -d all -o all -b 1 -e 1M -f 7 -c 1 -w 1 -n 1
step sh "$mpi" -t 300 -e MPCCL_FLAT_ALLREDUCE=twoshot "$ngpu" mpccl-perf -C allreduce -d all -o all -b 1 -e 64M -f 7 -c 1 -w 1 -n 1
# several processes on one GPU
step sh "$mpi" -t 500 -e CUDA_VISIBLE_DEVICES=0 3 test/mpi/test_coll
# two simulated nodes: the inter-node steps go through the proxy and UCX
if [ "$ngpu" -ge 2 ]; then
    step sh "$mpi" -t 500 -n 2 "$ngpu" test/mpi/test_coll
else
    step sh "$mpi" -t 500 -n 2 2 test/mpi/test_coll
fi
# registration, windows, put/signal/wait on GPU communicators
if [ -x "$top_builddir/test/mpi/test_onesided" ]; then
    step sh "$mpi" -t 300 "$ngpu" test/mpi/test_onesided
    step sh "$mpi" -t 300 -e CUDA_VISIBLE_DEVICES=0 3 test/mpi/test_onesided
    step sh "$mpi" -t 300 -n 2 2 test/mpi/test_onesided
    step sh "$mpi" -t 300 2 examples/onesided_pingpong -b 8 -e 64M -n 200 -w 20
fi
# the MPI shim on device buffers
if [ -x "$top_builddir/test/shim/test_shim" ]; then
    step timeout 300 ${MPIRUN:-mpirun} -np "$ngpu" --oversubscribe --bind-to none \
        -x LD_PRELOAD="$top_builddir/.libs/libmpccl_shim.so" "$top_builddir/test/shim/test_shim" --gpu --expect route
fi
# the Python bindings on GPU buffers (CuPy / PyTorch when present)
if /usr/bin/python3 -c 'import mpi4py, pytest' >/dev/null 2>&1; then
    step timeout 300 env PYTHONPATH="$here/../../python" MPCCL_LIBRARY="$top_builddir/.libs/libmpccl.so" \
        ${MPIRUN:-mpirun} -np "$ngpu" --oversubscribe --bind-to none \
        -x PYTHONPATH -x MPCCL_LIBRARY /usr/bin/python3 -m pytest -q "$here/../../python/tests_gpu"
fi
# the benchmark with checking
step sh "$mpi" -t 300 "$ngpu" mpccl-perf -b 8 -e 16M -f 8 -c 1 -w 1 -n 3
# memory and race checking of a small configuration
if command -v compute-sanitizer >/dev/null 2>&1 && [ -x "$top_builddir/test/gpu/test_engine" ]; then
    MPCCL_TEST_LEVEL=0 step compute-sanitizer --tool memcheck --error-exitcode 1 "$top_builddir/test/gpu/test_engine"
    MPCCL_TEST_LEVEL=0 step compute-sanitizer --tool racecheck --error-exitcode 1 "$top_builddir/test/gpu/test_engine"
fi
exit $status
