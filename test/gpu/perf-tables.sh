#!/bin/sh
# The side-by-side tables of doc/PERFORMANCE.md in one command, on a GPU machine
# (the performance targets' sizes: every collective, 8 B (-b) - 2 GB (-e) in x4 steps, float and
# bf16, out-of-place and in-place, eager and inside CUDA graphs, mpccl and NCCL
# from the same run).
#
#   test/gpu/perf-tables.sh [-n NP] [-o OUTDIR] [-b MINBYTES] [-e MAXBYTES] [-C COLLS]
#                           [-k KINDS] [-t SECONDS] NCCL_LIB
#
# Run from the build directory (mpccl-perf is there).  NCCL_LIB is the other
# library, e.g. "$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])')/lib/libnccl.so.2".
# NP defaults to the number of GPUs (one process per GPU).  COLLS (default: all
# nine) and KINDS (default "float bfloat16 graph check") pick a part, so the
# whole set can be taken in pieces that each fit a time limit; a later piece
# with the same OUTDIR adds its files and tables.md is rebuilt from everything
# there.  -t stops starting new runs once SECONDS have passed (the runs not
# started are listed as SKIPPED, one cut short as STOPPED with its rows so far;
# either makes the exit status 2), so the tables are still written in time.
# Writes OUTDIR/<collective>_<kind>.csv, the rows as printed (.txt), the seconds
# each run took (times.txt) and OUTDIR/tables.md (examples/perf_table.py); plots
# with examples/perf_plot.py when matplotlib is there.  Exits 1 if any run fails
# or checks wrong.
np=
out=perf-tables
minb=8
maxb=2G
colls="allreduce reduce_scatter all_gather alltoall broadcast reduce gather scatter sendrecv"
kinds="float bfloat16 graph check"
budget=0
usage="usage: $0 [-n NP] [-o OUTDIR] [-b MINBYTES] [-e MAXBYTES] [-C COLLS] [-k KINDS] [-t SECONDS] NCCL_LIB"
while getopts n:o:b:e:C:k:t: opt; do
    case $opt in
    n) np=$OPTARG ;;
    o) out=$OPTARG ;;
    b) minb=$OPTARG ;;
    e) maxb=$OPTARG ;;
    C) colls=$OPTARG ;;
    k) kinds=$OPTARG ;;
    t) budget=$OPTARG ;;
    *) echo "$usage" >&2; exit 99 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "$usage" >&2; exit 99; }
for k in $kinds; do
    case $k in
    float | bfloat16 | graph | check) ;;
    *) echo "$0: unknown kind '$k' in -k (expected float, bfloat16, graph, check)" >&2; exit 99 ;;
    esac
done
lib=$1
[ -r "$lib" ] || { echo "$0: cannot read $lib" >&2; exit 99; }
here=$(cd "$(dirname "$0")" && pwd)
[ -n "$np" ] || np=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "${np:-0}" -ge 1 ] || { echo "$0: no GPU"; exit 77; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
start=$(date +%s)
run() { # name, then mpccl-perf arguments
    name=$1
    shift
    now=$(date +%s)
    if [ "$budget" -gt 0 ] && [ $((now - start)) -ge "$budget" ]; then
        echo "SKIPPED: $name (-t $budget seconds used)"
        [ $status -ne 0 ] || status=2
        return
    fi
    # a run may not outlast the budget either: it is stopped, and keeps the
    # rows it measured (mpccl-perf writes each CSV row as it goes)
    limit=900
    if [ "$budget" -gt 0 ] && [ $((budget - (now - start))) -lt $limit ]; then limit=$((budget - (now - start))); fi
    # shellcheck disable=SC2086 # MPIRUN may carry options of its own
    timeout "$limit" ${MPIRUN:-mpirun} -np "$np" --bind-to none -x NCCL_NVLS_ENABLE=0 ./mpccl-perf -B uniqueid \
        --compare "$lib" --csv "$out/$name.csv" "$@" > "$out/$name.txt" 2>&1
    rc=$?
    if [ $rc -eq 124 ] && [ "$limit" -lt 900 ]; then
        echo "STOPPED: $name at the -t budget (its rows so far are kept)"
        [ $status -ne 0 ] || status=2
    elif [ $rc -ne 0 ]; then
        echo "FAILED: $name (see $out/$name.txt)"
        status=1
    elif ! grep -q '^# Out of bounds values : 0 OK' "$out/$name.txt"; then
        echo "WRONG RESULTS: $name"
        status=1
    fi
    echo "$name $np $(($(date +%s) - now))" >> "$out/times.txt"
    echo "$name: $(grep -E '^# Host time' "$out/$name.txt" | sed 's/^# //')"
}
has_kind() { case " $kinds " in *" $1 "*) return 0 ;; esac; return 1; }
for c in $colls; do
    has_kind float && run "${c}_float" -C "$c" -d float -b "$minb" -e "$maxb" -f 4 -c 0 -w 5 -n 20 -R 3
    has_kind bfloat16 && run "${c}_bfloat16" -C "$c" -d bfloat16 -b "$minb" -e "$maxb" -f 4 -c 0 -w 5 -n 20 -R 3
    has_kind graph && run "${c}_float_graph" -C "$c" -d float -b "$minb" -e 16M -f 4 -c 0 -w 20 -n 200 -G 20 -R 3
done
# one checked pass over every collective, datatype and op at awkward sizes
has_kind check && run check_all -C all -d all -o all -b 1 -e 4M -f 7 -c 1 -w 1 -n 1
tables() { # title, then perf_table.py's flags and files; files that do not exist are left out
    title=$1
    shift
    flags=
    files=
    for f in "$@"; do
        case $f in
        -*) flags="$flags $f" ;;
        *) [ -e "$f" ] && files="$files $f" ;;
        esac
    done
    [ -n "$files" ] || return 0
    echo "$title"
    # shellcheck disable=SC2086 # the lists are split on purpose; the paths hold no spaces
    python3 "$here/../../examples/perf_table.py" $flags $files
    echo
}
{
    echo "# mpccl vs $(basename "$lib"), $np processes, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
    echo
    tables "## Out-of-place" "$out"/*_float.csv "$out"/*_bfloat16.csv
    tables "## In-place" --inplace "$out"/*_float.csv
    tables "## Inside CUDA graphs (-G 20)" "$out"/*_graph.csv
} > "$out/tables.md"
for f in "$out"/*_float.csv; do
    [ -e "$f" ] && python3 "$here/../../examples/perf_plot.py" "$f" "$out/plots" > /dev/null 2>&1
done
echo "tables: $out/tables.md"
exit $status
