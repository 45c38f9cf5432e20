#!/usr/bin/env python3
"""NVIDIA's nccl4py (nccl.core) and CuPy's cupy.cuda.nccl on libmpccl
(make check-gpu, part "ecosystem").

Usage: ecosystem.py LIBMPCCL [nccl4py|cupy|all] [preload|ctypes]

  LIBMPCCL  path of libmpccl.so (a CUDA build)
  preload   (default) the ranks run with LD_PRELOAD=LIBMPCCL
  ctypes    no LD_PRELOAD: each rank loads LIBMPCCL with
            ctypes.CDLL(path, mode=RTLD_GLOBAL) before importing nccl or
            cupy.cuda.nccl (doc/PYTHON.md, "nccl4py and CuPy")

Two ranks are started as subprocesses (device = rank % device_count, so one
GPU is enough); rank 0 writes the unique id to a file that rank 1 reads.
Every check prints one PASS/FAIL line; the driver prints a summary and exits
0 (all passed), 1 (a failure, a crash or a rank past its time limit) or 77
(nccl4py or CuPy not importable, or no GPU).
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

NRANKS = 2
RANK_LIMIT_S = 240  # per part; a hang fails instead of blocking
FAILED_GRACE_S = 20


# ---------------------------------------------------------------- checks
class Checks:
    def __init__(self, rank, part):
        self.rank, self.part, self.failed, self.count = rank, part, 0, 0

    def check(self, name, fn):
        """Runs fn(); a false result or an exception is a failure."""
        self.count += 1
        try:
            ok = fn()
            detail = "" if ok in (True, None) else f": {ok}"
            ok = ok in (True, None)
        except Exception as e:  # the check's failure, reported with its reason
            ok, detail = False, f": {type(e).__name__}: {e}"
            traceback.print_exc(file=sys.stderr)
        if not ok:
            self.failed += 1
        say(f"[rank {self.rank}] {'PASS' if ok else 'FAIL'} {self.part}: {name}{detail}")
        return ok


def say(line):
    """One write per line, so that the ranks' lines do not interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def equal(got, want):
    import numpy as np
    if np.array_equal(got, want):
        return True
    bad = np.flatnonzero(got != want)
    return f"{bad.size} elements differ, first at {bad[0]}: {got.flat[bad[0]]} != {want.flat[bad[0]]}"


def wait_file(path, limit_s=60):
    end = time.time() + limit_s
    while not os.path.exists(path):
        if time.time() > end:
            raise TimeoutError(f"{path} did not appear within {limit_s} s")
        time.sleep(0.05)
    time.sleep(0.05)  # the writer renames a complete file into place
    with open(path) as f:
        return f.read()


def publish(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def loaded_from_mpccl(lib, version):
    """A version from the library under test is libmpccl's own."""
    want = ctypes.c_int()
    ctypes.CDLL(lib).ncclGetVersion(ctypes.byref(want))
    return True if version == want.value else f"version {version}, libmpccl's is {want.value}"


# ---------------------------------------------------------------- nccl4py
def run_nccl4py(rank, lib, tmp, c):
    import cupy as cp
    import numpy as np
    import nccl.core as nccl
    from nccl.bindings import nccl as low

    world, peer = NRANKS, 1 - rank
    dev = rank % cp.cuda.runtime.getDeviceCount()
    cp.cuda.Device(dev).use()
    c.check("ncclGetVersion answers from libmpccl", lambda: loaded_from_mpccl(lib, low.get_version()))
    uid_file = os.path.join(tmp, "nccl4py.uid")
    if rank == 0:
        uid = nccl.get_unique_id()
        publish(uid_file, bytes(uid).hex())
    else:
        uid = nccl.UniqueId.from_bytes(bytes.fromhex(wait_file(uid_file)))
    comm = nccl.Communicator.init(world, rank, uid)
    c.check("Communicator.init from a unique id", lambda: (comm.rank, comm.nranks) == (rank, world) or
            f"rank {comm.rank} nranks {comm.nranks}")
    s = cp.cuda.Stream(non_blocking=True)
    n = 4099

    def sync():
        s.synchronize()

    def allreduce():
        x = cp.arange(n, dtype=cp.float32) + rank
        y = cp.empty_like(x)
        comm.allreduce(x, y, nccl.SUM, stream=s)
        sync()
        return equal(y.get(), np.arange(n, dtype=np.float32) * world + sum(range(world)))

    def broadcast():
        x = cp.full(n, 7 if rank == 1 else -1, dtype=cp.int32)
        y = cp.zeros_like(x)
        comm.broadcast(x, y, root=1, stream=s)
        sync()
        return equal(y.get(), np.full(n, 7, dtype=np.int32))

    def reduce():
        x = cp.full(n, rank + 1, dtype=cp.float64)
        y = cp.zeros_like(x)
        comm.reduce(x, y, nccl.MAX, root=0, stream=s)
        sync()
        return equal(y.get(), np.full(n, world, dtype=np.float64)) if rank == 0 else True

    def allgather():
        x = cp.full(n, rank, dtype=cp.int64)
        y = cp.empty(n * world, dtype=cp.int64)
        comm.allgather(x, y, stream=s)
        sync()
        return equal(y.get(), np.repeat(np.arange(world, dtype=np.int64), n))

    def reduce_scatter():
        x = cp.arange(n * world, dtype=cp.float32)
        y = cp.empty(n, dtype=cp.float32)
        comm.reduce_scatter(x, y, nccl.SUM, stream=s)
        sync()
        return equal(y.get(), world * np.arange(rank * n, (rank + 1) * n, dtype=np.float32))

    def alltoall():
        x = cp.arange(n * world, dtype=cp.int32) + 100000 * rank
        y = cp.empty_like(x)
        comm.alltoall(x, y, stream=s)
        sync()
        want = np.concatenate([np.arange(rank * n, (rank + 1) * n, dtype=np.int32) + 100000 * src
                               for src in range(world)])
        return equal(y.get(), want)

    def sendrecv_group():
        x = cp.full(n, 10 + rank, dtype=cp.float32)
        y = cp.zeros_like(x)
        with nccl.group():
            comm.send(x, peer, stream=s)
            comm.recv(y, peer, stream=s)
        sync()
        return equal(y.get(), np.full(n, 10 + peer, dtype=np.float32))

    c.check("allreduce float32 sum", allreduce)
    c.check("broadcast int32 root 1", broadcast)
    c.check("reduce float64 max root 0", reduce)
    c.check("allgather int64", allgather)
    c.check("reduce_scatter float32 sum", reduce_scatter)
    if hasattr(comm, "alltoall"):
        c.check("alltoall int32", alltoall)
    c.check("send/recv in a group", sendrecv_group)

    def register_buffer():
        x = cp.ones(n, dtype=cp.float32)
        h = comm.register_buffer(x)
        y = cp.empty_like(x)
        comm.allreduce(x, y, nccl.SUM, stream=s)
        sync()
        r = equal(y.get(), np.full(n, world, dtype=np.float32))
        h.close()
        return r

    c.check("register_buffer, allreduce on it, close", register_buffer)

    nbytes = n * 4
    mem = nccl.mem_alloc(nbytes)

    def as_cupy(buf, count, dtype):
        um = cp.cuda.UnownedMemory(int(buf.handle), count * cp.dtype(dtype).itemsize, buf)
        return cp.ndarray(count, dtype, cp.cuda.MemoryPointer(um, 0))

    win_arr = as_cupy(mem, n, cp.float32)
    win_arr.fill(-1)
    cp.cuda.Device(dev).synchronize()
    win = {}

    def register_window():
        win["w"] = comm.register_window(win_arr)
        return win["w"].handle != 0 or "window handle 0"

    def put_signal():
        src = cp.full(n, 1000 + rank, dtype=cp.float32)
        comm.put_signal(src, peer, win["w"], 0, stream=s)
        comm.wait_signal(nccl.WaitSignalDesc(peer=peer), stream=s)
        sync()
        return equal(win_arr.get(), np.full(n, 1000 + peer, dtype=np.float32))

    def signal_wait():
        comm.signal(peer, stream=s)
        comm.wait_signal([nccl.WaitSignalDesc(peer=peer, op_count=1)], stream=s)
        sync()
        return True

    if c.check("register_window on ncclMemAlloc memory", register_window):
        c.check("put_signal then wait_signal: the peer's data in my window", put_signal)
        c.check("signal then wait_signal", signal_wait)
        c.check("window close", lambda: win["w"].close())

    def queries():
        props = {k: getattr(comm, k) for k in ("gin_type", "railed_gin_type", "device_api_support",
                                                "multimem_support", "n_lsa_teams", "host_rma_support")}
        say(f"[rank {rank}] properties {props}")
        if int(props["gin_type"]) != int(nccl.NcclGinType.NONE):
            return f"gin_type {props['gin_type']}, expected NONE"
        if int(props["railed_gin_type"]) != int(nccl.NcclGinType.NONE):
            return f"railed_gin_type {props['railed_gin_type']}, expected NONE"
        return props["device_api_support"] is True or "device_api_support is not True"

    c.check("GIN type and property queries", queries)

    def dev_comm(reqs):
        d = comm.create_dev_comm(reqs)
        ok = d.ptr != 0 or "device communicator pointer 0"
        d.close()
        return ok

    c.check("create_dev_comm() with default requirements", lambda: dev_comm(None))
    c.check("create_dev_comm(lsa_barrier_count=16)",
            lambda: dev_comm(nccl.NCCLDevCommRequirements(lsa_barrier_count=16)))

    def gin_refused():
        try:
            comm.create_dev_comm(nccl.NCCLDevCommRequirements(world_gin_barrier_count=1))
        except Exception as e:  # expected: mpccl has no GIN
            say(f"[rank {rank}] refused as expected: {type(e).__name__}: {e}")
            return True
        return "a GIN barrier requirement was accepted"

    c.check("create_dev_comm refuses GIN requirements", gin_refused)
    comm.destroy()
    del win_arr
    nccl.mem_free(mem)


# ---------------------------------------------------------------- CuPy
def run_cupy(rank, lib, tmp, c):
    import cupy as cp
    import numpy as np
    from cupy.cuda import nccl

    world, peer = NRANKS, 1 - rank
    dev = rank % cp.cuda.runtime.getDeviceCount()
    cp.cuda.Device(dev).use()
    c.check("cupy.cuda.nccl.get_version answers from libmpccl", lambda: loaded_from_mpccl(lib, nccl.get_version()))
    uid_file = os.path.join(tmp, "cupy.uid")
    if rank == 0:  # bytes in CuPy 14, a tuple of ints before
        uid = nccl.get_unique_id()
        publish(uid_file, json.dumps({"bytes": bytes(uid).hex()} if isinstance(uid, bytes) else list(uid)))
    else:
        got = json.loads(wait_file(uid_file))
        uid = bytes.fromhex(got["bytes"]) if isinstance(got, dict) else tuple(got)
    comm = nccl.NcclCommunicator(world, uid, rank)
    c.check("NcclCommunicator from a unique id", lambda: (comm.rank_id(), comm.size()) == (rank, world))
    s = cp.cuda.Stream(non_blocking=True)
    n = 3001
    F32, I32 = nccl.NCCL_FLOAT32, nccl.NCCL_INT32

    def allreduce():
        x = cp.arange(n, dtype=cp.float32) * (rank + 1)
        y = cp.empty_like(x)
        comm.allReduce(x.data.ptr, y.data.ptr, n, F32, nccl.NCCL_SUM, s.ptr)
        s.synchronize()
        return equal(y.get(), np.arange(n, dtype=np.float32) * sum(r + 1 for r in range(world)))

    def bcast():
        x = cp.full(n, 5 if rank == 0 else 0, dtype=cp.int32)
        comm.bcast(x.data.ptr, n, I32, 0, s.ptr)
        s.synchronize()
        return equal(x.get(), np.full(n, 5, dtype=np.int32))

    def reduce():
        x = cp.full(n, rank + 3, dtype=cp.int32)
        y = cp.zeros_like(x)
        comm.reduce(x.data.ptr, y.data.ptr, n, I32, nccl.NCCL_MIN, 1, s.ptr)
        s.synchronize()
        return equal(y.get(), np.full(n, 3, dtype=np.int32)) if rank == 1 else True

    def allgather():
        x = cp.full(n, rank + 0.5, dtype=cp.float32)
        y = cp.empty(n * world, dtype=cp.float32)
        comm.allGather(x.data.ptr, y.data.ptr, n, F32, s.ptr)
        s.synchronize()
        return equal(y.get(), np.repeat(np.arange(world, dtype=np.float32) + 0.5, n))

    def reduce_scatter():
        x = cp.arange(n * world, dtype=cp.float32)
        y = cp.empty(n, dtype=cp.float32)
        comm.reduceScatter(x.data.ptr, y.data.ptr, n, F32, nccl.NCCL_SUM, s.ptr)
        s.synchronize()
        return equal(y.get(), world * np.arange(rank * n, (rank + 1) * n, dtype=np.float32))

    def sendrecv():
        x = cp.full(n, 40 + rank, dtype=cp.int32)
        y = cp.zeros_like(x)
        nccl.groupStart()
        comm.send(x.data.ptr, n, I32, peer, s.ptr)
        comm.recv(y.data.ptr, n, I32, peer, s.ptr)
        nccl.groupEnd()
        s.synchronize()
        return equal(y.get(), np.full(n, 40 + peer, dtype=np.int32))

    c.check("allReduce float32 sum", allreduce)
    c.check("bcast int32 root 0", bcast)
    c.check("reduce int32 min root 1", reduce)
    c.check("allGather float32", allgather)
    c.check("reduceScatter float32 sum", reduce_scatter)
    c.check("send/recv between groupStart and groupEnd", sendrecv)
    comm.destroy()


# ---------------------------------------------------------------- ranks
def worker(rank, lib, part, mode, tmp):
    if mode == "ctypes":  # the documented way without LD_PRELOAD
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    c = Checks(rank, part)
    try:
        (run_nccl4py if part == "nccl4py" else run_cupy)(rank, lib, tmp, c)
    except Exception as e:
        traceback.print_exc()
        c.failed += 1
        say(f"[rank {rank}] FAIL {part}: stopped by {type(e).__name__}: {e}")
    say(f"[rank {rank}] {part}: {c.count - c.failed} of {c.count} checks passed")
    return 1 if c.failed else 0


def importable(part):
    mod = "nccl.core" if part == "nccl4py" else "cupy.cuda.nccl"
    r = subprocess.run([sys.executable, "-c", f"import cupy, {mod}"], capture_output=True, text=True, timeout=120)
    return r.returncode == 0, (r.stderr.strip().splitlines() or [""])[-1]


def run_part(lib, part, mode):
    ok, why = importable(part)
    if not ok:
        say(f"SKIP {part}: not importable here ({why})")
        return 77
    tmp = tempfile.mkdtemp(prefix=f"mpccl-{part}-")
    env = dict(os.environ)
    if mode == "preload":
        env["LD_PRELOAD"] = lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(r), lib, part, mode, tmp],
                              env=env) for r in range(NRANKS)]
    # A rank that fails leaves its peer waiting in a collective: the peer gets
    # FAILED_GRACE_S more, then is killed, so a failure ends the part quickly.
    end, status = time.time() + RANK_LIMIT_S, 0
    while any(p.poll() is None for p in procs):
        if time.time() > end:
            for r, p in enumerate(procs):
                if p.poll() is None:
                    say(f"FAIL {part}: rank {r} still running after its time limit: killed")
                    p.kill()
            status = 1
            break
        if any(p.poll() not in (None, 0) for p in procs):
            end = min(end, time.time() + FAILED_GRACE_S)
        time.sleep(0.2)
    for r, p in enumerate(procs):
        rc = p.wait()
        if rc != 0:
            say(f"FAIL {part}: rank {r} exited with {rc}")
            status = 1
    return status


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, rank, lib, part, mode, tmp = sys.argv
        sys.exit(worker(int(rank), lib, part, mode, tmp))
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    lib = os.path.abspath(sys.argv[1])
    which = sys.argv[2] if len(sys.argv) > 2 else "all"
    mode = sys.argv[3] if len(sys.argv) > 3 else "preload"
    if which not in ("nccl4py", "cupy", "all") or mode not in ("preload", "ctypes") or not os.path.exists(lib):
        print(__doc__)
        sys.exit(2)
    parts = ["nccl4py", "cupy"] if which == "all" else [which]
    results = {p: run_part(lib, p, mode) for p in parts}
    for p, rc in results.items():
        say(f"SUMMARY {p} ({mode}): {'PASS' if rc == 0 else 'SKIP' if rc == 77 else 'FAIL'}")
    if any(rc not in (0, 77) for rc in results.values()):
        sys.exit(1)
    sys.exit(77 if all(rc == 77 for rc in results.values()) else 0)


if __name__ == "__main__":
    main()
