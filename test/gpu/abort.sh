#!/bin/sh
# make check-gpu, part "abort": a peer that dies or hangs must not leave the
# survivors' kernels spinning.  Runs test_abort for every kernel kind and
# scenario (several processes; they share GPUs when there are fewer GPUs than
# ranks), each bounded by `timeout`.  Prints one line per survivor with the
# measured abort and stream-drain times (doc/RELIABILITY.md's table).
#   ABORT_KINDS / ABORT_SCENARIOS pick a subset; ABORT_TEST_BOUND_MS (default
#   2000) is the most either time may take.
top_builddir=${top_builddir:-.}
prog="$top_builddir/test/gpu/test_abort"
if [ ! -x "$prog" ]; then
    echo "SKIP: $prog is not built (a build without CUDA)"
    exit 77
fi
kinds=${ABORT_KINDS:-ll oneshot twoshot engine p2p p2pll p2pengine window windowce reg onesided hier nodes nodesll}
scenarios=${ABORT_SCENARIOS:-killbefore killmid hang revoke shrink graph group timeout}
status=0 ran=0
for k in $kinds; do
    for s in $scenarios; do
        timeout -k 5 120 "$prog" "$k" "$s"
        r=$?
        case $r in
        0) ran=$((ran + 1)) ;;
        77) ;;
        124 | 137) echo "abort-test kind=$k scenario=$s: FAIL (did not finish within 120 s: a stream never drained)"; status=1 ;;
        *) echo "abort-test kind=$k scenario=$s: FAIL (exit $r)"; status=1 ;;
        esac
    done
done
[ $ran -eq 0 ] && [ $status -eq 0 ] && exit 77
exit $status
