#!/usr/bin/env python3
"""Allreduce with mpccl's Python bindings, on GPUs when CuPy or PyTorch can
reach one, else on host memory with NumPy.

    mpirun -np 4 python3 examples/python/allreduce.py [COUNT]

(MPCCL_LIBRARY=/path/to/libmpccl.so and PYTHONPATH=python when not installed.)"""

import sys

import numpy as np
from mpi4py import MPI

import mpccl


def pick_backend(local_rank):
    """(name, make(host_array) -> device array, to_host, stream, sync)."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            cupy.cuda.Device(local_rank % cupy.cuda.runtime.getDeviceCount()).use()
            stream = cupy.cuda.Stream(non_blocking=True)
            return "cupy", cupy.asarray, cupy.asnumpy, stream, stream.synchronize
    except Exception:
        pass
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
            stream = torch.cuda.Stream()
            return ("torch", lambda a: torch.from_numpy(a).cuda(),
                    lambda t: t.cpu().numpy(), stream, stream.synchronize)
    except Exception:
        pass
    return "numpy", np.array, np.asarray, None, lambda: None


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
    world = MPI.COMM_WORLD
    local = world.Split_type(MPI.COMM_TYPE_SHARED)
    name, to_dev, to_host, stream, sync = pick_backend(local.Get_rank())
    local.Free()

    comm = mpccl.Communicator.from_mpi(world)
    try:
        rank, n = comm.rank, comm.nranks
        send = to_dev(np.full(count, rank + 1, dtype=np.float32))
        recv = to_dev(np.zeros(count, dtype=np.float32))
        comm.allreduce(send, recv, mpccl.SUM, stream=stream)
        sync()
        want = n * (n + 1) / 2
        ok = bool(np.all(to_host(recv) == want))
        ok = world.allreduce(ok, op=MPI.LAND)
        if rank == 0:
            path, _ = mpccl.library_info()
            print("allreduce of %d floats on %d ranks (%s buffers, %s): %s"
                  % (count, n, name, path, "OK" if ok else "WRONG"))
        return 0 if ok else 1
    finally:
        comm.destroy()


if __name__ == "__main__":
    sys.exit(main())
