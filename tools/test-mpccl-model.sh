#!/bin/sh
# make check: the scaling model (doc/SCALING.md) runs, prints a row per size
# and scale, keeps its physics (more nodes never make a call faster; busbw never
# exceeds what NVLink and the NICs together can carry), and refuses bad input.
set -eu
model="python3 ${srcdir:-.}/tools/mpccl-model"
command -v python3 >/dev/null 2>&1 || { echo "test-mpccl-model: python3 not found: skipped"; exit 77; }
fail() { echo "test-mpccl-model: FAIL: $*" >&2; exit 1; }
out=$($model) || fail "the default run exited with $?"
for c in allreduce allgather reduce_scatter broadcast reduce; do
    echo "$out" | grep -q "^## $c:" || fail "no table for $c"
done
[ "$(echo "$out" | grep -c '^| 1 GB |')" -eq 5 ] || fail "expected one 1 GB row per collective"
# Rows: "| size | t (bw) | t (bw) | ..." for 2, 8, 64, 1024 nodes.
echo "$out" | python3 -c '
import re, sys
for line in sys.stdin:
    if not line.startswith("| ") or "---" in line or line.startswith("| size"):
        continue
    cells = re.findall(r"([0-9.]+) \(([0-9.]+)\)", line)
    times = [float(t) for t, _ in cells]
    if times != sorted(times):
        sys.exit("more nodes made a call faster: " + line.strip())
    if any(float(b) > 8 * 46 + 360 for _, b in cells):
        sys.exit("busbw above NVLink plus the NICs: " + line.strip())
' || fail "a row breaks the model's physics"
sim=$($model --nodes 2 --gpus 1 --nic-gbs 2.96 --net-lat-us 25 --colls sendrecv --sizes 8) ||
    fail "the two-node simulation run exited with $?"
echo "$sim" | grep -q '^| 8 B | 25.0 ' || fail "sendrecv 8 B on the simulated wire is not its latency: $sim"
if $model --colls bogus >/dev/null 2>&1; then fail "an unknown collective was accepted"; fi
if $model --nodes 0 >/dev/null 2>&1; then fail "zero nodes were accepted"; fi
echo "test-mpccl-model: PASS"
