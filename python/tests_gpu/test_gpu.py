"""GPU checks of the bindings with CuPy and PyTorch buffers and streams, one
process per rank (ranks share GPUs round-robin, as mpccl allows):

    MPCCL_LIBRARY=$PWD/.libs/libmpccl.so PYTHONPATH=python \
        mpirun -np 2 --oversubscribe python3 -m pytest -q -p no:cacheprovider python/tests_gpu

Needs a CUDA build of libmpccl.  Skips, with the reason, where CuPy, mpi4py
or a GPU is missing (every rank decides the same way)."""

import numpy as np
import pytest

import mpccl

cupy = pytest.importorskip("cupy")
MPI = pytest.importorskip("mpi4py.MPI")
if cupy.cuda.runtime.getDeviceCount() < 1:
    pytest.skip("no CUDA device", allow_module_level=True)


@pytest.fixture(scope="module")
def comm():
    world = MPI.COMM_WORLD
    local = world.Split_type(MPI.COMM_TYPE_SHARED)
    cupy.cuda.Device(local.Get_rank() % cupy.cuda.runtime.getDeviceCount()).use()
    local.Free()
    c = mpccl.Communicator.from_mpi(world)
    yield c
    c.destroy()


def test_properties(comm):
    assert comm.rank == MPI.COMM_WORLD.Get_rank()
    assert comm.device == cupy.cuda.Device().id
    assert isinstance(comm.gin_type, mpccl.NcclGinType)


def test_cupy_allreduce_on_stream(comm):
    n = comm.nranks
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        send = cupy.full(1 << 16, comm.rank + 1, dtype=cupy.float32)
        recv = cupy.zeros(1 << 16, dtype=cupy.float32)
    comm.allreduce(send, recv, mpccl.SUM, stream=stream)
    stream.synchronize()
    assert bool((recv == n * (n + 1) // 2).all())


def test_cupy_ring_and_allgather(comm):
    n, r = comm.nranks, comm.rank
    send = cupy.arange(100, dtype=cupy.int64) * (r + 1)
    got = cupy.zeros(100, dtype=cupy.int64)
    gath = cupy.zeros(100 * n, dtype=cupy.int64)
    with mpccl.group():
        comm.send(send, (r + 1) % n)
        comm.recv(got, (r - 1) % n)
    comm.allgather(send, gath)
    cupy.cuda.Device().synchronize()
    assert bool((got == cupy.arange(100) * ((r - 1) % n + 1)).all())
    want = cupy.concatenate([cupy.arange(100) * (q + 1) for q in range(n)])
    assert bool((gath == want).all())


def test_torch_tensors_and_stream(comm):
    torch = pytest.importorskip("torch")
    dev = "cuda:%d" % cupy.cuda.Device().id
    stream = torch.cuda.Stream(device=dev)
    send = torch.full((4096,), float(comm.rank + 1), device=dev, dtype=torch.bfloat16)
    recv = torch.zeros(4096, device=dev, dtype=torch.bfloat16)
    torch.cuda.synchronize(dev)
    comm.allreduce(send, recv, mpccl.MAX, stream=stream)
    stream.synchronize()
    assert bool((recv == comm.nranks).all())


def test_dlpack_only_and_stream_protocol(comm):
    class OnlyDLPack:
        def __init__(self, arr):
            self._a = arr

        def __dlpack__(self, **kw):
            return self._a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    raw = cupy.cuda.Stream(non_blocking=True)

    class Proto:
        def __cuda_stream__(self):
            return (0, raw.ptr)

    send = cupy.full(64, comm.rank + 5, dtype=cupy.int32)
    recv = cupy.zeros(64, dtype=cupy.int32)
    cupy.cuda.Device().synchronize()
    comm.allreduce(OnlyDLPack(send), OnlyDLPack(recv), mpccl.SUM, stream=Proto())
    raw.synchronize()
    n = comm.nranks
    assert bool((recv == 5 * n + n * (n - 1) // 2).all())


def test_host_buffer_on_gpu_comm_rejected(comm):
    with pytest.raises(mpccl.NcclInvalidArgument, match="host memory"):
        comm.allreduce(np.ones(4, np.float32), cupy.zeros(4, cupy.float32), mpccl.SUM)


def test_non_contiguous_device_rejected(comm):
    a = cupy.zeros((8, 8), dtype=cupy.float32)
    with pytest.raises(mpccl.NcclInvalidArgument, match="contiguous"):
        comm.allreduce(a[:, 0], cupy.zeros(8, cupy.float32), mpccl.SUM)


def test_window_put_signal_and_dev_comm(comm):
    """One-sided puts into a CuPy window of the next rank, then a device
    communicator (the device API) on the same GPU communicator."""
    n, r = comm.nranks, comm.rank
    blk = 257  # odd on purpose
    # Windows need NCCL_WIN_REQUIRED_ALIGNMENT: ncclMemAlloc memory (shared
    # with the other processes as a file descriptor), seen through CuPy.
    mem = mpccl.mem_alloc(n * blk * 4)
    win_buf = cupy.asarray(mem).view(cupy.float32)
    win_buf.fill(0)
    cupy.cuda.Device().synchronize()
    win = comm.register_window(mem)
    assert win.get_peer_device_pointer(r) == mem.ptr
    src = cupy.full(blk, r + 1, dtype=cupy.float32)
    comm.put_signal(src, (r + 1) % n, win, peer_window_offset=r * blk)
    prev = (r - 1) % n
    comm.wait_signal([mpccl.WaitSignalDesc(prev)])
    cupy.cuda.Device().synchronize()
    assert bool((win_buf[prev * blk:(prev + 1) * blk] == prev + 1).all())
    dc = comm.create_dev_comm({"lsaBarrierCount": 2})
    assert dc.is_valid and dc.ptr
    dc.close()
    dc.close()
    with pytest.raises(RuntimeError):
        dc.ptr
    with pytest.raises(mpccl.NcclInvalidUsage, match="GIN"):
        comm.create_dev_comm({"ginSignalCount": 1})
    win.close()
    mem.free()
