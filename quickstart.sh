#!/bin/sh
# mpccl quick start on a fresh Debian/Ubuntu machine.
#   ./quickstart.sh        install missing packages (when root), build, run the benchmark on 4 ranks
#   ./quickstart.sh test   build if needed, then run the whole test suite (make check)
# Extra configure options: CONFIGURE_FLAGS="--enable-werror ..." ./quickstart.sh
set -eu
cd "$(dirname "$0")"
mode=${1:-example}
jobs=$(nproc 2>/dev/null || echo 2)

need_pkgs() {
    missing=""
    command -v autoreconf >/dev/null 2>&1 || missing="$missing autoconf automake"
    command -v libtoolize >/dev/null 2>&1 || missing="$missing libtool"
    command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
    command -v mpicc >/dev/null 2>&1 || missing="$missing libopenmpi-dev openmpi-bin"
    [ -f /usr/include/ucp/api/ucp.h ] || missing="$missing libucx-dev"
    pkg-config --exists check 2>/dev/null || missing="$missing check libsubunit-dev"
    command -v gcc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || missing="$missing build-essential"
    echo "$missing"
}

# For the Python bindings' tests only: installed when we can, else those tests skip.
optional_pkgs() {
    optional=""
    /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || optional="$optional python3-numpy"
    /usr/bin/python3 -c 'import mpi4py' >/dev/null 2>&1 || optional="$optional python3-mpi4py"
    /usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || optional="$optional python3-pytest"
    echo "$optional"
}

missing=$(need_pkgs)
optional=$(optional_pkgs)
if [ -n "$optional" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    missing="$missing$optional"
elif [ -n "$optional" ]; then
    echo "quickstart: the Python binding tests will skip without:$optional"
fi
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "quickstart: installing:$missing"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
    else
        echo "quickstart: please install:$missing (as root: apt-get install$missing)" >&2
        exit 1
    fi
fi

if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

[ -x configure ] || ./autogen.sh
# shellcheck disable=SC2086
[ -f Makefile ] || ./configure ${CONFIGURE_FLAGS:-}
make -j"$jobs"

case $mode in
example)
    # Four ranks, every collective, results checked; on GPUs when present.
    mpirun -np 4 --oversubscribe ./mpccl-perf -b 8 -e 4M -f 4 -c 1 -w 2 -n 10
    ;;
test | check)
    make -j"$jobs" check
    ;;
*)
    echo "usage: $0 [example|test]" >&2
    exit 2
    ;;
esac
