#!/usr/bin/env python3
"""Point-to-point and Allgatherv from mpi4py on CuPy arrays, checked with numpy.

mpi4py hands MPI the device pointer of an object that exports
__cuda_array_interface__ (CuPy arrays do), so these calls put device buffers in
front of MPI: run under libmpccl_shim.so (or a CUDA-aware MPI).

    mpirun -np 2 -x LD_PRELOAD=/path/libmpccl_shim.so python3 shim_mpi4py.py
        [--tests send_recv,sendrecv,isend_irecv,mixed,allgatherv] [--quick]
        [--numpy]

Tests (every dtype and size below, data from seeded generators so the
receiver knows what the sender sent; compared byte for byte):
  send_recv    Send/Recv around a ring, received with ANY_SOURCE/ANY_TAG and
               the status (source, tag, byte count) checked (2+ ranks)
  sendrecv     Sendrecv around the ring (1 rank: with itself)
  isend_irecv  every rank to every rank, itself included, all sizes of a
               dtype in flight at once, then Waitall
  mixed        a device array sent into a host (numpy) receive buffer and a
               host array into a device one
  allgatherv   uneven counts, a zero count among them

--numpy runs the same with numpy arrays in place of CuPy ones: a check of the
script itself on a machine without a GPU.  Exit status: 0 pass, 1 failure,
77 skipped (mpi4py, numpy or CuPy not importable, or no GPU).
"""
import argparse
import sys
import traceback

SKIP = 77
ALL_TESTS = ("send_recv", "sendrecv", "isend_irecv", "mixed", "allgatherv")
DTYPES = ("int8", "uint16", "int32", "int64", "float32", "float64", "complex128")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tests", default=",".join(ALL_TESTS),
                   help="comma-separated subset of: " + " ".join(ALL_TESTS))
    p.add_argument("--quick", action="store_true", help="fewer sizes")
    p.add_argument("--numpy", action="store_true",
                   help="host numpy arrays instead of CuPy (checks the script without a GPU)")
    a = p.parse_args()
    a.tests = [t for t in a.tests.split(",") if t]
    for t in a.tests:
        if t not in ALL_TESTS:
            p.error("unknown test %r" % t)
    return a


def main():
    args = parse_args()
    try:
        import numpy as np
        from mpi4py import MPI
    except ImportError as e:
        print("SKIP: %s" % e)
        return SKIP
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    # every rank decides the same way, so a skip never leaves a rank waiting
    xp, why = np, ""
    if not args.numpy:
        try:
            import cupy
            ndev = cupy.cuda.runtime.getDeviceCount()
            if ndev < 1:
                why = "no CUDA device"
            else:
                xp = cupy
        except Exception as e:  # ImportError, or CUDA without a driver
            why = "CuPy unusable: %s" % (str(e).splitlines() or ["?"])[0]
    usable = comm.allreduce(0 if why else 1, op=MPI.MIN)
    if not usable:
        if rank == 0:
            print("SKIP: %s (on at least one rank)" % (why or "CuPy unusable"))
        return SKIP

    on_gpu = xp is not np
    devname = "host (numpy)"
    if on_gpu:
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        lrank = local.Get_rank()
        local.Free()
        dev = lrank % xp.cuda.runtime.getDeviceCount()
        xp.cuda.Device(dev).use()
        props = xp.cuda.runtime.getDeviceProperties(dev)
        devname = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

    def sync():
        # MPI reads device memory the stream may still be writing: finished
        # first, as with any CUDA-aware MPI
        if on_gpu:
            xp.cuda.get_current_stream().synchronize()

    def dev(a):
        return xp.asarray(a)

    def host(a):
        return xp.asnumpy(a) if on_gpu else np.array(a, copy=True)

    sizes = [0, 1, 7, 1000, 65539] if args.quick else [0, 1, 7, 1000, 65539, 1 << 20]

    def gen(seed, dtype, n):
        rng = np.random.default_rng(seed)
        dt = np.dtype(dtype)
        if dt.kind in "iu":
            info = np.iinfo(dt)
            return rng.integers(info.min, info.max, size=n, dtype=dt, endpoint=True)
        if dt.kind == "c":
            return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
        return rng.standard_normal(n).astype(dt)

    def seed(test, sender, di, si, extra=0):
        return [ALL_TESTS.index(test), sender, di, si, extra]

    failures = []

    def check(what, got, want):
        got = np.ascontiguousarray(got)
        want = np.ascontiguousarray(want)
        if got.shape != want.shape or got.dtype != want.dtype:
            failures.append("%s: got %s %s, expected %s %s" % (what, got.dtype, got.shape, want.dtype, want.shape))
            return
        gb, wb = got.view(np.uint8), want.view(np.uint8)
        if not np.array_equal(gb, wb):
            bad = np.flatnonzero(got != want) if got.size else []
            first = int(bad[0]) if len(bad) else -1
            failures.append("%s: %d of %d elements differ, first at %d (got %r, expected %r)" % (
                what, len(bad), got.size, first, got[first] if first >= 0 else None,
                want[first] if first >= 0 else None))

    def sentinel(dtype, n):
        return dev(np.full(n, 7, dtype=dtype))

    nxt, prv = (rank + 1) % size, (rank - 1) % size

    def t_send_recv():
        if size < 2:
            return "skipped: needs 2 ranks (a blocking send to oneself may never return)"
        cases = 0
        for di, dt in enumerate(DTYPES):
            for si, n in enumerate(sizes):
                tag = 100 + di * 16 + si
                sbuf = dev(gen(seed("send_recv", rank, di, si), dt, n))
                rbuf = sentinel(dt, n)
                sync()
                st = MPI.Status()
                # even ranks send first: no cycle of blocking sends
                if rank % 2 == 0:
                    comm.Send(sbuf, dest=nxt, tag=tag)
                    comm.Recv(rbuf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
                else:
                    comm.Recv(rbuf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
                    comm.Send(sbuf, dest=nxt, tag=tag)
                what = "send_recv %s n=%d" % (dt, n)
                nbytes = n * np.dtype(dt).itemsize
                if (st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE)) != (prv, tag, nbytes):
                    failures.append("%s: status source %d tag %d bytes %d, expected %d %d %d" % (
                        what, st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE), prv, tag, nbytes))
                check(what, host(rbuf), gen(seed("send_recv", prv, di, si), dt, n))
                cases += 1
        return cases

    def t_sendrecv():
        cases = 0
        for di, dt in enumerate(DTYPES):
            for si, n in enumerate(sizes):
                sbuf = dev(gen(seed("sendrecv", rank, di, si), dt, n))
                rbuf = sentinel(dt, n)
                sync()
                st = MPI.Status()
                comm.Sendrecv(sbuf, dest=nxt, sendtag=7, recvbuf=rbuf, source=prv, recvtag=7, status=st)
                what = "sendrecv %s n=%d" % (dt, n)
                if st.Get_count(MPI.BYTE) != n * np.dtype(dt).itemsize:
                    failures.append("%s: status byte count %d" % (what, st.Get_count(MPI.BYTE)))
                check(what, host(rbuf), gen(seed("sendrecv", prv, di, si), dt, n))
                cases += 1
        return cases

    def t_isend_irecv():
        cases = 0
        for di, dt in enumerate(DTYPES):
            reqs, recvs, keep = [], [], []
            for si, n in enumerate(sizes):
                for peer in range(size):
                    tag = si * 1024 + peer
                    rbuf = sentinel(dt, n)
                    recvs.append((si, n, peer, rbuf))
                    reqs.append(comm.Irecv(rbuf, source=peer, tag=si * 1024 + rank))
                    sbuf = dev(gen(seed("isend_irecv", rank, di, si, peer), dt, n))
                    keep.append(sbuf)
                    sync()
                    reqs.append(comm.Isend(sbuf, dest=peer, tag=tag))
            MPI.Request.Waitall(reqs)
            for si, n, peer, rbuf in recvs:
                check("isend_irecv %s n=%d from %d" % (dt, n, peer), host(rbuf),
                      gen(seed("isend_irecv", peer, di, si, rank), dt, n))
                cases += 1
        return cases

    def t_mixed():
        # device -> host and host -> device between ring neighbours
        cases = 0
        for di, dt in enumerate(DTYPES):
            for si, n in enumerate(sizes):
                for kind in ("device-to-host", "host-to-device"):
                    data = gen(seed("mixed", rank, di, si, int(kind == "device-to-host")), dt, n)
                    sbuf = dev(data) if kind == "device-to-host" else data
                    rbuf = np.full(n, 7, dtype=dt) if kind == "device-to-host" else sentinel(dt, n)
                    sync()
                    comm.Sendrecv(sbuf, dest=nxt, sendtag=9, recvbuf=rbuf, source=prv, recvtag=9)
                    got = rbuf if kind == "device-to-host" else host(rbuf)
                    check("mixed %s %s n=%d" % (kind, dt, n), got,
                          gen(seed("mixed", prv, di, si, int(kind == "device-to-host")), dt, n))
                    cases += 1
        return cases

    def t_allgatherv():
        cases = 0
        for di, dt in enumerate(DTYPES):
            for si, n in enumerate(sizes):
                # rank r contributes n*r // size + r elements: rank 0 none when n is 0
                counts = [n * r // size + r for r in range(size)]
                displs = [sum(counts[:r]) for r in range(size)]
                sbuf = dev(gen(seed("allgatherv", rank, di, si), dt, counts[rank]))
                rbuf = sentinel(dt, sum(counts))
                sync()
                comm.Allgatherv(sbuf, [rbuf, (counts, displs)])
                want = np.concatenate([gen(seed("allgatherv", r, di, si), dt, counts[r]) for r in range(size)])
                check("allgatherv %s counts %s" % (dt, counts if size <= 4 else "..."), host(rbuf), want)
                cases += 1
        return cases

    runners = {"send_recv": t_send_recv, "sendrecv": t_sendrecv, "isend_irecv": t_isend_irecv,
               "mixed": t_mixed, "allgatherv": t_allgatherv}

    if rank == 0:
        vers = MPI.Get_library_version().strip().splitlines()[0]
        print("# shim_mpi4py: %s" % " ".join(sys.argv))
        print("# %d rank(s); arrays: %s on %s; mpi4py %s; numpy %s" % (
            size, "cupy " + xp.__version__ if on_gpu else "numpy", devname,
            sys.modules["mpi4py"].__version__, np.__version__))
        print("# MPI: %s" % vers)
        sys.stdout.flush()

    total_failed = 0
    for t in args.tests:
        before = len(failures)
        comm.Barrier()
        res = runners[t]()
        mine = failures[before:]
        for f in mine[:10]:
            sys.stderr.write("[rank %d] FAIL %s\n" % (rank, f))
        if len(mine) > 10:
            sys.stderr.write("[rank %d] ... %d more failures in %s\n" % (rank, len(mine) - 10, t))
        sys.stderr.flush()
        nfail = comm.allreduce(len(mine), op=MPI.SUM)
        total_failed += nfail
        if rank == 0:
            if isinstance(res, str):
                print("%-12s %s" % (t, res))
            else:
                print("%-12s %4d cases per rank: %s" % (t, res, "PASS" if nfail == 0 else "FAIL (%d)" % nfail))
            sys.stdout.flush()
    if rank == 0:
        print("# %s" % ("passed" if total_failed == 0 else "FAILED"))
    return 0 if total_failed == 0 else 1


if __name__ == "__main__":
    try:
        rc = main()
    except SystemExit:
        raise
    except BaseException:
        # one rank's exception would leave the others blocked in MPI
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None:
            mpi.COMM_WORLD.Abort(1)
        rc = 1
    sys.exit(rc)
