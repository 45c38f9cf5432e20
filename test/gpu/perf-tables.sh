#!/bin/sh
# The side-by-side tables of doc/PERFORMANCE.md in one command, on a GPU machine
# (issue 5's "done means": every collective, 8 B - 2 GB in x4 steps, float and
# bf16, out-of-place and in-place, eager and inside CUDA graphs, mpccl and NCCL
# from the same run).
#
#   test/gpu/perf-tables.sh [-n NP] [-o OUTDIR] [-e MAXBYTES] NCCL_LIB
#
# Run from the build directory (mpccl-perf is there).  NCCL_LIB is the other
# library, e.g. "$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])')/lib/libnccl.so.2".
# NP defaults to the number of GPUs (one process per GPU).  Writes
# OUTDIR/<collective>_<type>.csv and _graph.csv, the rows as printed (.txt), and
# OUTDIR/tables.md (examples/perf_table.py); plots with examples/perf_plot.py
# when matplotlib is there.  Exits non-zero if any run fails or checks wrong.
np=
out=perf-tables
maxb=2G
while getopts n:o:e: opt; do
    case $opt in
    n) np=$OPTARG ;;
    o) out=$OPTARG ;;
    e) maxb=$OPTARG ;;
    *) echo "usage: $0 [-n NP] [-o OUTDIR] [-e MAXBYTES] NCCL_LIB" >&2; exit 99 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: $0 [-n NP] [-o OUTDIR] [-e MAXBYTES] NCCL_LIB" >&2; exit 99; }
lib=$1
[ -r "$lib" ] || { echo "$0: cannot read $lib" >&2; exit 99; }
here=$(cd "$(dirname "$0")" && pwd)
[ -n "$np" ] || np=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "${np:-0}" -ge 1 ] || { echo "$0: no GPU"; exit 77; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
run() { # name, then mpccl-perf arguments
    name=$1
    shift
    if ! timeout 900 ${MPIRUN:-mpirun} -np "$np" --bind-to none -x NCCL_NVLS_ENABLE=0 ./mpccl-perf -B uniqueid \
        --compare "$lib" --csv "$out/$name.csv" "$@" > "$out/$name.txt" 2>&1; then
        echo "FAILED: $name (see $out/$name.txt)"
        status=1
    fi
    grep -q '^# Out of bounds values : 0 OK' "$out/$name.txt" || { echo "WRONG RESULTS: $name"; status=1; }
    echo "$name: $(grep -E '^# Host time' "$out/$name.txt" | sed 's/^# //')"
}
for c in allreduce reduce_scatter all_gather alltoall broadcast reduce gather scatter sendrecv; do
    run "${c}_float" -C "$c" -d float -b 8 -e "$maxb" -f 4 -c 0 -w 5 -n 20 -R 3
    run "${c}_bfloat16" -C "$c" -d bfloat16 -b 8 -e "$maxb" -f 4 -c 0 -w 5 -n 20 -R 3
    run "${c}_float_graph" -C "$c" -d float -b 8 -e 16M -f 4 -c 0 -w 20 -n 200 -G 20 -R 3
done
# one checked pass over every collective, datatype and op at awkward sizes
run check_all -C all -d all -o all -b 1 -e 4M -f 7 -c 1 -w 1 -n 1
{
    echo "# mpccl vs $(basename "$lib"), $np processes, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
    python3 "$here/../../examples/perf_table.py" "$out"/*_float.csv "$out"/*_bfloat16.csv
    echo
    echo "## In-place"
    python3 "$here/../../examples/perf_table.py" --inplace "$out"/*_float.csv
    echo
    echo "## Inside CUDA graphs (-G 20)"
    python3 "$here/../../examples/perf_table.py" "$out"/*_graph.csv
} > "$out/tables.md"
for f in "$out"/*_float.csv; do python3 "$here/../../examples/perf_plot.py" "$f" "$out/plots" > /dev/null 2>&1 || true; done
echo "tables: $out/tables.md"
exit $status
