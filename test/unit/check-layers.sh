#!/bin/sh
# The layering rules of doc/MAP.md, checked over the sources' #include lines:
# core headers include no gpu/, onesided/, devapi/, api/ or host/ header (no
# include loop through the core), and the core's call path (comm.c, group.c,
# enqueue.c, estimate.c) reaches GPUs only through the executor table.
set -u
src=$(cd "${top_srcdir:-$(dirname "$0")/../..}" && pwd)
lib="$src/lib"
[ -d "$lib/core" ] || { echo "no $lib/core"; exit 99; }
fail=0
for h in "$lib"/core/*.h; do
    bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"(gpu|onesided|devapi|api|host)/' "$h")
    [ -n "$bad" ] && { echo "core header includes a higher layer: ${h#$src/}: $bad"; fail=1; }
done
for f in comm.c group.c enqueue.c estimate.c; do
    c="$lib/core/$f"
    bad=$(grep -nE '#[[:space:]]*include[[:space:]]+"gpu/|MPCCL_HAVE_CUDA|->gpu\b' "$c")
    [ -n "$bad" ] && { echo "lib/core/$f knows the GPU (use comm->exec): $bad"; fail=1; }
done
[ $fail -eq 0 ] && echo "layers: ok"
exit $fail
