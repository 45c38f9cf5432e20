#!/bin/sh
# Runs test_shim (and the Fortran programs when mpif90 is there) under mpirun
# with libmpccl_shim.so preloaded (make check; doc/SHIM.md):
#   1. transparent, np 1..4: results equal MPI's and every call went to MPI
#   2. MPCCL_SHIM_HOST=1, np 1..4: host buffers count as GPU buffers, so every
#      collective goes through mpccl's host path (counters checked by the
#      program; the INFO summary at MPI_Finalize checked here)
#   3. MPCCL_SHIM_AGREE=0 (uniformity rule instead of the agreement step)
#   4. MPCCL_SHIM=0: everything to MPI; MPCCL_SHIM_COLLS=^all: everything staged
#   5. Fortran (mpif.h and mpi_f08) through the host path
#   6. test_shim_p2p (point-to-point semantics): transparent, np 1..4; with
#      MPCCL_SHIM_HOST=1, np 2,3,4,8 (host buffers count as device buffers, so
#      device messages take the shim's envelope protocol without a GPU); and
#      with MPCCL_SHIM_P2P=0 (point-to-point interception off); a peer killed
#      during a send and a receive (test_shim_deadpeer, --enable-recovery):
#      the survivor's call fails within 5 s; Fortran point-to-point
#      (test_shim_p2p_f, test_shim_p2p_f08) plain and through the protocol; four threads per
#      rank at once (test_shim_threads)
#   7. between simulated hosts (MPCCL_HOSTID differs between even and odd
#      ranks, MPCCL_SHIM_HOST=1): test_shim_p2p at np 2-4 through the shim's
#      UCX (read directly, and streamed through pinned memory) and through MPI
#      (MPCCL_SHIM_NET=mpi); test_shim_net: messages of 1 KB to 17 MB, every
#      byte checked, and the UCX route taken (--expect ucx); the dead peer
#      test between the two hosts
# Environment: top_builddir, top_srcdir, MPIRUN (as in make check).
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$top_srcdir/test/shim/shim-env.sh"
prog=$top_builddir/test/shim/test_shim
p2p=$top_builddir/test/shim/test_shim_p2p
need_built "$prog" "$p2p" "$top_builddir/test/shim/test_shim_net"
limit=${MPCCL_SHIM_TEST_TIMEOUT:-300}
timeout_cmd=
command -v timeout >/dev/null 2>&1 && timeout_cmd="timeout -k 10 $limit"
log=${TMPDIR:-/tmp}/shim-check.$$.log
trap 'rm -f "$log"' EXIT
status=0

# run NP [VAR=VALUE...] -- PROGRAM ARGS: the shim goes to the ranks only
# (-x LD_PRELOAD), never to mpirun itself.
run() {
    np=$1
    shift
    xs="-x LD_PRELOAD=$preload"
    while [ "$1" != "--" ]; do xs="$xs -x $1"; shift; done
    shift
    echo "=== np $np: $xs $*" | sed "s|$preload|${MPCCL_TEST_ASAN_PRELOAD:+libasan:}libmpccl_shim.so|"
    start=$(date +%s)
    # shellcheck disable=SC2086
    $timeout_cmd "$mpirun" -np "$np" --oversubscribe --bind-to none --mca btl ^openib \
        --mca btl_vader_single_copy_mechanism none $xs "$@" >"$log" 2>&1
    rc=$?
    cat "$log"
    echo "=== exit $rc after $(( $(date +%s) - start )) s"
    [ $rc -ne 0 ] && status=1
    return $rc
}

# The INFO summary each rank logs at MPI_Finalize: COLL=mpccl/staged/mpi.
summary_has_mpccl() {
    grep "SHIM summary" "$log" | grep -q " $1=[1-9][0-9]*/" || {
        echo "FAIL: no '$1' call went through mpccl according to the shim summary"
        status=1
    }
}

for np in 1 2 3 4; do
    run $np -- "$prog" --quick --expect mpi
done
for np in 1 2 3 4; do
    run $np MPCCL_SHIM_HOST=1 MPCCL_DEBUG=INFO MPCCL_DEBUG_SUBSYS=SHIM -- "$prog" --expect route &&
        summary_has_mpccl allreduce
done
run 3 MPCCL_SHIM_HOST=1 MPCCL_SHIM_AGREE=0 -- "$prog" --quick --expect route
run 2 MPCCL_SHIM=0 MPCCL_SHIM_HOST=1 -- "$prog" --quick --expect mpi
# every collective on the staged route (bounces, spans of v-collectives)
run 3 MPCCL_SHIM_HOST=1 MPCCL_SHIM_COLLS=^all -- "$prog" --quick --expect staged

# Point-to-point: the program checks contents, statuses and matching itself
# (it exits 1 on any difference, and its watchdog ends a hung test).
for np in 1 2 3 4; do
    run $np -- "$p2p"
done
for np in 2 3 4 8; do
    run $np MPCCL_SHIM_HOST=1 -- "$p2p"
done
run 3 MPCCL_SHIM_HOST=1 MPCCL_SHIM_P2P=0 -- "$p2p" --quick
# MPCCL_SHIM_MIN_BYTES=auto tries both routes, then keeps one per size class
run 2 MPCCL_SHIM_HOST=1 -- "$top_builddir/test/shim/test_shim_tune"
run 3 MPCCL_SHIM_HOST=1 -- "$top_builddir/test/shim/test_shim_tune"
run 2 MPCCL_SHIM_HOST=1 MPCCL_SHIM_MIN_BYTES=0 -- "$top_builddir/test/shim/test_shim_tune" --fixed
# four threads per rank exchanging at once (MPI_THREAD_MULTIPLE)
run 2 -- "$top_builddir/test/shim/test_shim_threads"
run 4 MPCCL_SHIM_HOST=1 -- "$top_builddir/test/shim/test_shim_threads"

# Two simulated hosts: even ranks on one, odd ranks on the other (the wrapper
# sets MPCCL_HOSTID from the rank), so device messages between them take the
# route between hosts: the shim's UCX over shared memory and TCP here.
hostid_wrap='MPCCL_HOSTID=host$(( ${OMPI_COMM_WORLD_RANK:-0} % 2 )); export MPCCL_HOSTID; exec "$@"'
net=$top_builddir/test/shim/test_shim_net
for np in 2 3 4; do
    run $np MPCCL_SHIM_HOST=1 -- sh -c "$hostid_wrap" sh "$p2p" --quick
done
run 2 MPCCL_SHIM_HOST=1 MPCCL_SHIM_NET_DIRECT=0 MPCCL_SHIM_NET_CHUNK=64k -- sh -c "$hostid_wrap" sh "$p2p" --quick
run 3 MPCCL_SHIM_HOST=1 MPCCL_SHIM_NET=mpi -- sh -c "$hostid_wrap" sh "$p2p" --quick
run 2 MPCCL_SHIM_HOST=1 -- sh -c "$hostid_wrap" sh "$net" --expect ucx
run 4 MPCCL_SHIM_HOST=1 MPCCL_SHIM_NET=ucx MPCCL_SHIM_NET_KEY_INLINE=0 -- sh -c "$hostid_wrap" sh "$net" --expect ucx
run 3 MPCCL_SHIM_HOST=1 MPCCL_SHIM_NET_DIRECT=0 -- sh -c "$hostid_wrap" sh "$net" --expect ucx
run 2 MPCCL_SHIM_HOST=1 MPCCL_SHIM_NET=mpi -- sh -c "$hostid_wrap" sh "$net" --expect mpi

# A peer that dies during a transfer: rank 1 kills itself, rank 0's MPI_Send
# (an envelope waiting for its answer) or MPI_Recv must fail within 5 s.  Open
# MPI's --enable-recovery keeps the survivor running; the program's own line
# says PASS (mpirun's exit code reports the killed rank).
# Then the same between two simulated hosts: UCX names the dead peer (its
# endpoint cannot be made).
for hosts in 1 2; do
    for mode in send recv; do
        echo "=== np 2, $hosts host(s): dead peer during MPI_${mode}"
        wrap=
        [ $hosts = 2 ] && wrap=yes
        # shellcheck disable=SC2086
        $timeout_cmd "$mpirun" -np 2 --oversubscribe --bind-to none --enable-recovery --mca btl ^openib \
            --mca btl_vader_single_copy_mechanism none -x LD_PRELOAD="$preload" -x MPCCL_SHIM_HOST=1 \
            ${wrap:+sh -c "$hostid_wrap" sh} "$top_builddir/test/shim/test_shim_deadpeer" $mode >"$log" 2>&1
        cat "$log"
        grep -q "deadpeer: PASS" "$log" || { echo "FAIL: the survivor did not get its error in time"; status=1; }
    done
done

# Fortran: built here (configure does not look for a Fortran compiler)
fc=$(command -v mpif90 2>/dev/null)
if [ -n "$fc" ]; then
    for f in test_shim_f test_shim_f08; do
        exe=$top_builddir/test/shim/$f
        # mpif.h code passes buffers of every type to one routine: gfortran >= 10
        # needs -fallow-argument-mismatch for that (older ones reject the flag)
        flags=
        # (probe files get their own name: in an in-tree build $exe.f90 is the source)
        probe=$top_builddir/test/shim/fc_probe_$$
        [ $f = test_shim_f ] && echo "end" > "$probe.f90" &&
            "$fc" -fallow-argument-mismatch -o "$probe.chk" "$probe.f90" >/dev/null 2>&1 &&
            flags="-fallow-argument-mismatch -w"
        rm -f "$probe.f90" "$probe.chk"
        # shellcheck disable=SC2086
        if ! "$fc" -O1 $flags -o "$exe" "$top_srcdir/test/shim/$f.f90"; then
            echo "FAIL: $fc could not build $f.f90"
            status=1
            continue
        fi
        run 2 -- "$exe"
        run 3 MPCCL_SHIM_HOST=1 MPCCL_DEBUG=INFO MPCCL_DEBUG_SUBSYS=SHIM -- "$exe" && {
            for c in allreduce reduce bcast allgather reduce_scatter_block reduce_scatter alltoall gather scatter \
                iallreduce allgatherv scan; do
                summary_has_mpccl $c
            done
        }
        rm -f "$exe"
    done
    for f in test_shim_p2p_f test_shim_p2p_f08; do
        exe=$top_builddir/test/shim/$f
        if "$fc" -O1 -o "$exe" "$top_srcdir/test/shim/$f.f90"; then
            run 2 -- "$exe"
            run 3 MPCCL_SHIM_HOST=1 -- "$exe"
            rm -f "$exe"
        else
            echo "FAIL: $fc could not build $f.f90"
            status=1
        fi
    done
else
    echo "=== no mpif90: Fortran bindings not tested"
fi
exit $status
