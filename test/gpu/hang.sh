#!/bin/sh
# make check-gpu, part "hang": hang reports and check mode on GPU
# communicators, 2-4 processes sharing GPU 0 (test_hang_gpu.c), each run
# bounded by `timeout`.
top_builddir=${top_builddir:-.}
prog="$top_builddir/test/gpu/test_hang_gpu"
if [ ! -x "$prog" ]; then
    echo "SKIP: $prog is not built (a build without CUDA)"
    exit 77
fi
status=0 ran=0
for s in check absent stall; do
    for n in 2 3 4; do
        timeout -k 5 120 "$prog" "$s" "$n"
        r=$?
        case $r in
        0) ran=$((ran + 1)) ;;
        77) ;;
        *) echo "hang-gpu scenario=$s ranks=$n: FAIL (exit $r)"; status=1 ;;
        esac
    done
done
[ $ran -eq 0 ] && [ $status -eq 0 ] && exit 77
exit $status
