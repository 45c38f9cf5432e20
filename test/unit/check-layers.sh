#!/bin/sh
# The layering rules of doc/MAP.md, over every folder of lib/:
#
#   util <- bootstrap <- ucx, algo <- core <- onesided, kernels, cuda <- host, proxy <- gpu <- devapi <- api
#
# 1. A file includes headers of, and names functions of, only the folders
#    below its own (the edges of test/unit/import-graph.sh), except the few
#    upward arrows listed below, each explained in doc/MAP.md.
# 2. Every folder of lib/ has a place in the line.
# 3. Each folder's .am adds only its own folder's files to the library.
# 4. The core's call path (comm.c, group.c, enqueue.c, estimate.c) reaches
#    GPUs only through the executor table.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "${top_srcdir:-$here/../..}" && pwd)
lib="$src/lib"
[ -d "$lib/core" ] || { echo "no $lib/core"; exit 99; }
fail=0

# The layer of each folder: lower numbers are lower layers.
rank() {
    case $1 in
    util) echo 0 ;; bootstrap) echo 1 ;; ucx | algo) echo 2 ;; core) echo 3 ;;
    onesided | kernels | cuda) echo 4 ;; host | proxy) echo 5 ;; gpu) echo 6 ;; devapi) echo 7 ;; api) echo 8 ;;
    *) echo none ;;
    esac
}

# The upward arrows doc/MAP.md explains ("file folder": that file may reach that folder).
allowed_up="
lib/ucx/ucx.h core
lib/ucx/ucx_rma.h core
lib/devapi/devapi_comm.c api
"

for d in "$lib"/*/; do
    f=$(basename "$d")
    [ "$(rank "$f")" = none ] && { echo "lib/$f/ has no place in the layer line (test/unit/check-layers.sh, doc/MAP.md)"; fail=1; }
done

edges=$(top_srcdir="$src" sh "$here/import-graph.sh" -e) || { echo "import-graph.sh failed"; exit 99; }
bad=$(echo "$edges" | while read -r kind from to file what; do
    [ -n "$kind" ] || continue
    rf=$(rank "$from"); rt=$(rank "$to")
    [ "$rf" = none ] || [ "$rt" = none ] && continue
    [ "$rt" -lt "$rf" ] && continue
    case "$allowed_up" in *"
$file $to
"*) continue ;; esac
    echo "  $file ($from) $kind $what ($to): not below $from"
done)
[ -n "$bad" ] && { echo "upward or sideways arrows (doc/MAP.md: layers):"; echo "$bad"; fail=1; }

for am in "$lib"/*/*.am; do
    f=$(basename "$(dirname "$am")")
    # The library's sources: the lines of each libmpccl_la_SOURCES += (or
    # MPCCL_UTIL_SOURCES =) assignment, continuation lines included.
    other=$(awk '/^(libmpccl_la_SOURCES|MPCCL_UTIL_SOURCES)[[:space:]]*\+?=/ { on = 1 }
                 on { print; if (!/\\$/) on = 0 }' "$am" | tr ' \t\\' '\n\n\n' | grep '^lib/' | grep -v "^lib/$f/")
    [ -n "$other" ] && { echo "${am#$src/} builds other folders' files:" $other; fail=1; }
done

for f in comm.c group.c enqueue.c estimate.c; do
    c="$lib/core/$f"
    bad=$(grep -nE '#[[:space:]]*include[[:space:]]+"gpu/|MPCCL_HAVE_CUDA|->gpu\b' "$c")
    [ -n "$bad" ] && { echo "lib/core/$f knows the GPU (use comm->exec): $bad"; fail=1; }
done
[ $fail -eq 0 ] && echo "layers: ok"
exit $fail
