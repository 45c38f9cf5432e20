#!/bin/sh
# Checks perf-tables.sh's bookkeeping without a GPU: a stand-in for mpirun writes
# the CSV mpccl-perf would, with made-up times, so the pieces (-C, -k, -t), the
# rebuilt tables.md and the exit statuses can be compared with what they must be.
set -u
src=$(cd "${top_srcdir:-$(dirname "$0")/../..}" && pwd) # absolute: the test runs in a temporary folder
script="$src/test/gpu/perf-tables.sh"
[ -r "$script" ] || { echo "cannot read $script"; exit 99; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 99
cat > fake-mpirun <<'FAKE'
#!/bin/sh
csv=
dtype=float
while [ $# -gt 0 ]; do
    case $1 in --csv) csv=$2 ;; -d) dtype=$2 ;; -C) coll=$2 ;; esac
    shift
done
echo "collective,bytes,count,type,op,root,inplace,lib,time_us,algbw,busbw,wrong,host_us" > "$csv"
for ip in 0 1; do
    echo "$coll,1024,256,$dtype,sum,-1,$ip,mpccl,4.00,0.25,0.50,0,2.0" >> "$csv"
    echo "$coll,1024,256,$dtype,sum,-1,$ip,other,8.00,0.12,0.25,0,3.0" >> "$csv"
done
[ "$coll" = broken ] && { echo "# Out of bounds values : 3 FAILED"; exit 1; }
echo "# Out of bounds values : 0 OK"
FAKE
chmod +x fake-mpirun
: > libnccl.so.2
fails=0
expect() { # what, wanted, got
    if [ "$2" != "$3" ]; then echo "FAIL: $1: expected '$2', got '$3'"; fails=$((fails + 1)); else echo "ok: $1"; fi
}
MPIRUN=./fake-mpirun sh "$script" -n 2 -o out -C "allreduce sendrecv" -k "float graph" libnccl.so.2 > log1
expect "first piece exits 0" 0 $?
expect "first piece's runs" "allreduce_float allreduce_float_graph sendrecv_float sendrecv_float_graph" \
    "$(cut -d' ' -f1 out/times.txt | tr '\n' ' ' | sed 's/ $//')"
MPIRUN=./fake-mpirun sh "$script" -n 2 -o out -C "alltoall" -k "bfloat16" libnccl.so.2 > log2
expect "second piece exits 0" 0 $?
expect "tables.md holds both pieces (allreduce, sendrecv float; alltoall bf16)" 3 \
    "$(sed -n '/^## Out-of-place/,/^## In-place/p' out/tables.md | grep -c '^| 1 KB | 4.00 | 8.00 | 0.50 |')"
expect "the graph table" 2 "$(sed -n '/^## Inside CUDA graphs/,$p' out/tables.md | grep -c '^| 1 KB ')"
printf '#!/bin/sh\nsleep 2\nexec ./fake-mpirun "$@"\n' > slow-mpirun
chmod +x slow-mpirun
MPIRUN=./slow-mpirun sh "$script" -n 1 -o out5 -k float -t 1 -C "allreduce reduce" libnccl.so.2 > log5 2>&1
expect "-t skips the runs past the limit (exit 2)" 2 $?
expect "the skipped run is named" 1 "$(grep -c '^SKIPPED: reduce_float' log5)"
expect "the run before the limit ran" allreduce_float "$(cut -d' ' -f1 out5/times.txt)"
MPIRUN=./fake-mpirun sh "$script" -n 2 -o out6 -C broken -k float libnccl.so.2 > log6
expect "a failing run exits 1" 1 $?
expect "and is named" 1 "$(grep -c '^FAILED: broken_float' log6)"
MPIRUN=./fake-mpirun sh "$script" -n 2 -k flaot libnccl.so.2 > /dev/null 2>&1
expect "an unknown kind is refused (99)" 99 $?
[ $fails -eq 0 ] || exit 1
