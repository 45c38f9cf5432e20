#!/bin/sh
# make check: mpccl-info runs without a GPU, its --json output is valid JSON
# with the expected fields, and each setting names where its value came from
# (default, MPCCL_ variable, NCCL_ alias, including NCCL_NVTX_DISABLE's inverted
# sense).
set -eu
info=${top_builddir:-.}/tools/mpccl-info
out=$(mktemp -d "${TMPDIR:-/tmp}/mpccl-info-test.XXXXXX")
trap 'rm -rf "$out"' EXIT
fail() { echo "test-mpccl-info: FAIL: $*" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "test-mpccl-info: python3 not found: skipped"; exit 77; }

env -u MPCCL_ALGO -u NCCL_ALGO -u MPCCL_NVTX -u NCCL_NVTX_DISABLE "$info" >"$out/text" ||
    fail "mpccl-info exited with $?"
for field in mpccl_version nccl_api_version cuda: ucx: runtime_version transports: settings: MPCCL_ALGO; do
    grep -q "$field" "$out/text" || fail "the text output lacks '$field'"
done
"$info" --help >/dev/null || fail "mpccl-info --help exited with $?"
if "$info" --bogus >/dev/null 2>&1; then fail "mpccl-info accepted an unknown argument"; fi

env -u MPCCL_ALGO -u NCCL_ALGO MPCCL_CHUNK_BYTES=1M NCCL_DEBUG=INFO NCCL_NVTX_DISABLE=1 "$info" --json >"$out/json" ||
    fail "mpccl-info --json exited with $?"
python3 -m json.tool "$out/json" >/dev/null || fail "mpccl-info --json printed invalid JSON"
python3 - "$out/json" <<'PY' || fail "mpccl-info --json: fields or sources wrong (above)"
import json, sys
d = json.load(open(sys.argv[1]))
errors = []
for key in ("mpccl_version", "nccl_api_version", "nccl_version_code", "cuda", "ucx", "settings"):
    if key not in d:
        errors.append("missing key %s" % key)
if not str(d.get("nccl_api_version", "")).startswith("2."):
    errors.append("nccl_api_version %r" % d.get("nccl_api_version"))
cuda, ucx = d.get("cuda", {}), d.get("ucx", {})
for key in ("status", "gpu_count"):
    if key not in cuda:
        errors.append("cuda lacks %s" % key)
for key in ("build_api_version", "runtime_version", "cuda_memory", "transports"):
    if key not in ucx:
        errors.append("ucx lacks %s" % key)
if not any(t.get("transport") == "self" for t in ucx.get("transports", [])):
    errors.append("UCX's self transport is not listed: %r" % ucx.get("transports"))
s = {e["name"]: e for e in d.get("settings", [])}
def expect(name, value, source):
    e = s.get(name)
    if e is None:
        errors.append("setting %s missing" % name)
    elif (e["value"], e["source"]) != (value, source):
        errors.append("%s: value %r from %r, expected %r from %r" % (name, e["value"], e["source"], value, source))
expect("MPCCL_CHUNK_BYTES", "1M", "MPCCL_CHUNK_BYTES")
expect("MPCCL_DEBUG", "INFO", "NCCL_DEBUG")
expect("MPCCL_NVTX", "0", "NCCL_NVTX_DISABLE")
expect("MPCCL_ALGO", "", "default")
for e in errors:
    print("test-mpccl-info:", e)
sys.exit(1 if errors else 0)
PY

# MPCCL_NVTX wins over its alias; NCCL_NVTX_DISABLE=0 means on.
MPCCL_NVTX=1 NCCL_NVTX_DISABLE=1 "$info" | grep -Eq '^ *- name=MPCCL_NVTX, value=1, source=MPCCL_NVTX,' ||
    fail "MPCCL_NVTX=1 does not win over NCCL_NVTX_DISABLE=1"
env -u MPCCL_NVTX NCCL_NVTX_DISABLE=0 "$info" | grep -Eq '^ *- name=MPCCL_NVTX, value=1, source=NCCL_NVTX_DISABLE,' ||
    fail "NCCL_NVTX_DISABLE=0 does not show as MPCCL_NVTX=1 from NCCL_NVTX_DISABLE"
echo "test-mpccl-info: ok"
