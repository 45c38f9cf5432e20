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
# --compare against a second, privately loaded copy of mpccl itself: the loading
# (a distinct instance), the alternating runs, both checks, the ratio and the CSV
lib="$(cd "${top_builddir:-.}" && pwd)/.libs/libmpccl.so.2"
# how the second copy is loaded: the same file as the linked library needs a
# new link-map namespace
how='dlmopen(LM_ID_NEWLM'
if [ -f "$lib" ] && [ "${MPCCL_TEST_SANITIZERS:-}" = yes ]; then
    # AddressSanitizer supports neither RTLD_DEEPBIND nor the second link-map
    # namespace that a second copy of the linked file needs: mpccl-perf loads
    # a copy of the file (another inode) without RTLD_DEEPBIND, and says so.
    copydir=$(mktemp -d) || exit 99
    trap 'rm -rf "$copydir"' EXIT
    cp "$lib" "$copydir/" || exit 99
    lib=$copydir/libmpccl.so.2
    how='no RTLD_DEEPBIND: AddressSanitizer'
fi
if [ -f "$lib" ]; then
    out=$(mktemp) && csv=$(mktemp) || exit 99
    run 2 mpccl-perf --compare "$lib" -b 8 -e 64K -f 8 -c 1 -n 2 -w 1 -C allreduce --csv "$csv" >"$out"
    cat "$out"
    fail() { echo "FAIL: mpccl-perf --compare: $1"; status=1; }
    grep -q '^# Library other: .*libmpccl.so.2' "$out" || fail "no line naming the loaded library"
    grep '^# Library other: ' "$out" | grep -qF "$how" || fail "the library was not loaded with $how"
    grep -q '^# Instances *: distinct' "$out" || fail "the two libraries are not distinct instances"
    grep -q '^# Out of bounds values : 0 OK' "$out" || fail "wrong results"
    # 8 64 512 4K 32K, out of place and in place: 10 rows of 16 columns, both #wrong 0,
    # ratios printed (numbers: on an oversubscribed CI machine one noisy sample of
    # either library -- a rank descheduled for a millisecond -- can make either
    # ratio round to 0.00, so their sizes are not checked)
    n=$(awk '/^ *[0-9]/ && NF == 16 && $10 == 0 && $14 == 0 && $15 ~ /^[0-9]+[.][0-9]+$/ && $16 ~ /^[0-9]+[.][0-9]+$/' "$out" | wc -l)
    [ "$n" -eq 10 ] || fail "$n good rows, expected 10"
    [ "$(head -1 "$csv")" = "collective,bytes,count,type,op,root,inplace,lib,time_us,algbw,busbw,wrong,host_us" ] ||
        fail "CSV header"
    for l in mpccl other; do
        n=$(awk -F, -v l=$l '$1 == "allreduce" && $8 == l && $9 > 0 && $12 == "0" && $13 > 0' "$csv" | wc -l)
        [ "$n" -eq 10 ] || fail "$n CSV rows for $l, expected 10"
    done
    rm -f "$out" "$csv"
fi
exit $status
