#!/bin/sh
# Runs an MPI test program under mpirun for several rank counts (make check).
#
#   run-mpi.sh [-n NODES] [-l LEVEL] [-t SECONDS] [-e VAR=VALUE]... NPLIST PROGRAM [ARGS...]
#
#   NPLIST   comma-separated rank counts, e.g. 1,2,3,4
#   PROGRAM  path under $top_builddir (e.g. test/mpi/test_coll)
#   -n       simulate NODES nodes on this machine: rank r gets
#            MPCCL_HOSTID=node<r*NODES/size> (ranks split into contiguous blocks)
#   -l       MPCCL_TEST_LEVEL for the suites (0 quick, 1 normal)
#   -t       timeout of each mpirun (default 600 s)
#   -e       extra environment for the ranks (repeatable), e.g. -e MPCCL_ALGO=ring
# Exits 77 (skip) only when there is no mpirun; any failing run fails the test.
nodes=1
level=
limit=600
extra=
while getopts n:l:t:e: opt; do
    case $opt in
    n) nodes=$OPTARG ;;
    l) level=$OPTARG ;;
    t) limit=$OPTARG ;;
    e) extra="$extra $OPTARG" ;;
    *) echo "usage: $0 [-n NODES] [-l LEVEL] [-t SECONDS] [-e VAR=VALUE]... NPLIST PROGRAM [ARGS...]" >&2; exit 99 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || { echo "$0: NPLIST and PROGRAM required" >&2; exit 99; }
nplist=$1
shift
prog=${top_builddir:-.}/$1
shift
# the sanitizers' options in a --enable-sanitizers build (make check sets them already)
[ -z "${MPCCL_TEST_SANITIZER_ENV:-}" ] && [ -f "${top_builddir:-.}/test/sanitizers/env.sh" ] &&
    . "${top_builddir:-.}/test/sanitizers/env.sh"
[ -n "${MPCCL_TEST_ASAN_MPI_OPTIONS:-}" ] && ASAN_OPTIONS=$ASAN_OPTIONS:$MPCCL_TEST_ASAN_MPI_OPTIONS

mpirun=${MPIRUN:-$(command -v mpirun 2>/dev/null)}
if [ -z "$mpirun" ] || ! command -v "$mpirun" >/dev/null 2>&1; then
    echo "SKIP: no mpirun (set MPIRUN or install Open MPI)"
    exit 77
fi
[ -x "$prog" ] || { echo "$0: $prog not built" >&2; exit 99; }

OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM

# Environment for the ranks: set here, and named with -x for Open MPI (which
# forwards only what it is told to remote daemons).
envvars=
for kv in $extra; do
    export "${kv?}"
    envvars="$envvars ${kv%%=*}"
done
[ -n "$level" ] && { MPCCL_TEST_LEVEL=$level; export MPCCL_TEST_LEVEL; }
# the suites' per-test watchdog fires well before timeout(1) kills mpirun
MPCCL_TEST_TIMEOUT=${MPCCL_TEST_TIMEOUT:-$((limit / 2))}
export MPCCL_TEST_TIMEOUT
for v in MPCCL_TEST_LEVEL MPCCL_TEST_SEED MPCCL_TEST_TIMEOUT MPCCL_DEBUG MPCCL_DEBUG_SUBSYS MPCCL_ALGO \
    ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do
    eval "isset=\${$v+x}"
    [ -n "$isset" ] && case " $envvars " in *" $v "*) ;; *) envvars="$envvars $v" ;; esac
done

if "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
    # btl ^openib: no InfiniBand warnings; vader without CMA: containers forbid ptrace
    mpiopts="--oversubscribe --bind-to none --mca btl ^openib --mca btl_vader_single_copy_mechanism none"
    for v in $envvars; do mpiopts="$mpiopts -x $v"; done
else
    mpiopts=   # MPICH-style launchers forward the whole environment
fi

# The per-rank host id needs the rank, which only the launched process knows.
hostid_wrap=
if [ "$nodes" -gt 1 ]; then
    # shellcheck disable=SC2016 # expanded by the launched shell, per rank
    hostid_wrap='MPCCL_HOSTID=node$(( ${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}} * '"$nodes"' / ${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-1}} )); export MPCCL_HOSTID; exec "$@"'
fi

timeout_cmd=
command -v timeout >/dev/null 2>&1 && timeout_cmd="timeout -k 10 $limit"

status=0
for np in $(echo "$nplist" | tr ',' ' '); do
    echo "=== $(basename "$prog") $* : np $np, nodes $nodes${level:+, level $level}${extra:+,$extra}"
    start=$(date +%s)
    if [ -n "$hostid_wrap" ]; then
        # shellcheck disable=SC2086
        $timeout_cmd "$mpirun" -np "$np" $mpiopts sh -c "$hostid_wrap" sh "$prog" "$@"
    else
        # shellcheck disable=SC2086
        $timeout_cmd "$mpirun" -np "$np" $mpiopts "$prog" "$@"
    fi
    rc=$?
    echo "=== np $np: exit $rc after $(( $(date +%s) - start )) s"
    if [ $rc -ne 0 ]; then
        [ $rc -eq 124 ] && echo "=== np $np: timed out after $limit s"
        status=1
    fi
done
exit $status
