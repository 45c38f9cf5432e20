#!/bin/sh
# make check (builds with CUDA): the API ranges under a recording NVTX tool
# (test/unit/nvtx_record.c): domain NCCL, the message of an ncclAllReduce on a
# GPU communicator, none for a host communicator, pushes and pops balanced; and
# no ranges with MPCCL_NVTX=0 or NCCL_NVTX_DISABLE=1.
set -eu
b=${top_builddir:-.}
tool=$b/test/unit/.libs/libnvtx_record.so
[ -f "$tool" ] || { echo "nvtx-ranges: $tool not built (a build without CUDA): skipped"; exit 77; }
log=$(mktemp "${TMPDIR:-/tmp}/mpccl-nvtx.XXXXXX")
trap 'rm -f "$log"' EXIT
fail() { echo "nvtx-ranges: FAIL: $*" >&2; echo "--- recorded:" >&2; head -n 20 "$log" >&2; exit 1; }

env -u MPCCL_NVTX -u NCCL_NVTX_DISABLE NVTX_INJECTION64_PATH=$tool MPCCL_TEST_NVTX_LOG=$log \
    "$b/test/unit/bench_nvtx" 20 || fail "bench_nvtx under the tool exited with $?"
grep -qx 'domain NCCL' "$log" || fail "no domain NCCL created"
grep -qx 'push ncclAllReduce(): commHash 0x1234abcd5678ef90, count 42, datatype float32, op sum' "$log" ||
    fail "the first ncclAllReduce range is missing or its message differs"
if grep -q 'commHash 0x1111,' "$log"; then fail "a host communicator got a range"; fi
pushes=$(grep -c '^push ' "$log" || true)
pops=$(grep -c '^pop' "$log" || true)
[ "$pushes" -gt 0 ] && [ "$pushes" = "$pops" ] || fail "$pushes pushes, $pops pops"

for off in MPCCL_NVTX=0 NCCL_NVTX_DISABLE=1; do
    : >"$log"
    env -u MPCCL_NVTX -u NCCL_NVTX_DISABLE "$off" NVTX_INJECTION64_PATH=$tool MPCCL_TEST_NVTX_LOG=$log \
        "$b/test/unit/bench_nvtx" 100 >/dev/null || fail "bench_nvtx with $off exited with $?"
    if grep -q '^push' "$log"; then fail "$off: ranges were still pushed"; fi
done
echo "nvtx-ranges: ok ($pushes ranges recorded)"
