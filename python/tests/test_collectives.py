"""Every collective on NumPy buffers over a host communicator, checked against
NumPy's own reduction of every rank's data."""

import numpy as np
import pytest

import mpccl
from conftest import rank_data

DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]
REDUCE = {mpccl.SUM: lambda a: np.sum(a, axis=0), mpccl.PROD: lambda a: np.prod(a, axis=0),
          mpccl.MAX: lambda a: np.max(a, axis=0), mpccl.MIN: lambda a: np.min(a, axis=0)}


def expected(op, data, dtype):
    stacked = np.stack(data)
    if op == mpccl.AVG:
        return (np.sum(stacked.astype(np.float64), axis=0) / len(data)).astype(dtype)
    return REDUCE[op](stacked).astype(dtype)


def small_for_prod(op, data):
    # Products of random ints overflow small types: keep factors in {-1, 1, 2}.
    if op == mpccl.PROD:
        return [np.clip(d, -1, 2) if d.dtype.kind != "u" else np.clip(d, 1, 2) for d in data]
    return data


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [mpccl.SUM, mpccl.PROD, mpccl.MAX, mpccl.MIN])
def test_allreduce(comm, rng, dtype, op):
    data = small_for_prod(op, rank_data(rng, comm.nranks, 37, dtype))
    out = np.zeros(37, dtype=dtype)
    comm.allreduce(data[comm.rank], out, op)
    np.testing.assert_array_equal(out, expected(op, data, dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_allreduce_avg(comm, rng, dtype):
    data = rank_data(rng, comm.nranks, 64, dtype)
    out = np.zeros(64, dtype=dtype)
    comm.allreduce(data[comm.rank], out, mpccl.AVG)
    # The library may divide before summing: rounding differs from NumPy's by a
    # few ulps of the inputs (|x| <= 8), also where the exact mean is 0.
    tol = 8 * 8 * np.finfo(dtype).eps
    np.testing.assert_allclose(out, expected(mpccl.AVG, data, dtype), rtol=tol, atol=tol)


def test_allreduce_in_place_and_alias(comm, rng):
    data = rank_data(rng, comm.nranks, 1000, "float32")
    buf = data[comm.rank].copy()
    comm.all_reduce(buf, buf, mpccl.SUM)  # nccl4py's spelling
    np.testing.assert_array_equal(buf, expected(mpccl.SUM, data, "float32"))


def test_allreduce_large(comm, rng):
    n = 1 << 18
    data = rank_data(rng, comm.nranks, n, "float64")
    out = np.empty(n)
    comm.allreduce(data[comm.rank], out, mpccl.SUM)
    np.testing.assert_array_equal(out, expected(mpccl.SUM, data, "float64"))


def test_allreduce_multidim(comm, rng):
    data = [d.reshape(4, 5) for d in rank_data(rng, comm.nranks, 20, "int32")]
    out = np.zeros((4, 5), dtype=np.int32)
    comm.allreduce(data[comm.rank], out, mpccl.MAX)
    np.testing.assert_array_equal(out, np.max(np.stack(data), axis=0))


def test_reduce_every_root(comm, rng):
    for root in range(comm.nranks):
        data = rank_data(rng, comm.nranks, 50, "int64")
        out = np.full(50, -1, dtype=np.int64)
        # Non-roots may pass None for recvbuf.
        comm.reduce(data[comm.rank], out if comm.rank == root else None, mpccl.SUM, root)
        if comm.rank == root:
            np.testing.assert_array_equal(out, expected(mpccl.SUM, data, "int64"))


def test_reduce_root_none_is_allreduce(comm, rng):
    data = rank_data(rng, comm.nranks, 9, "float32")
    out = np.zeros(9, dtype=np.float32)
    comm.reduce(data[comm.rank], out, mpccl.MIN, None)
    np.testing.assert_array_equal(out, expected(mpccl.MIN, data, "float32"))


def test_broadcast_every_root(comm, rng):
    for root in range(comm.nranks):
        data = rank_data(rng, comm.nranks, 33, "uint32")
        out = np.zeros(33, dtype=np.uint32)
        comm.broadcast(data[comm.rank] if comm.rank == root else None, out, root)
        np.testing.assert_array_equal(out, data[root])


def test_broadcast_in_place(comm, rng):
    data = rank_data(rng, comm.nranks, 10, "float64")
    buf = data[comm.rank].copy()
    comm.broadcast(buf, buf, 0)
    np.testing.assert_array_equal(buf, data[0])


def test_allgather(comm, rng):
    data = rank_data(rng, comm.nranks, 21, "float32")
    out = np.zeros(21 * comm.nranks, dtype=np.float32)
    comm.allgather(data[comm.rank], out)
    np.testing.assert_array_equal(out, np.concatenate(data))
    out2 = np.zeros((comm.nranks, 21), dtype=np.float32)
    comm.all_gather(data[comm.rank], out2)
    np.testing.assert_array_equal(out2, np.stack(data))


@pytest.mark.parametrize("op", [mpccl.SUM, mpccl.MAX])
def test_reduce_scatter(comm, rng, op):
    n = comm.nranks
    data = rank_data(rng, n, 16 * n, "int32")
    out = np.zeros(16, dtype=np.int32)
    comm.reduce_scatter(data[comm.rank], out, op)
    full = expected(op, data, "int32")
    np.testing.assert_array_equal(out, full[16 * comm.rank:16 * (comm.rank + 1)])


def test_alltoall(comm, rng):
    n = comm.nranks
    data = rank_data(rng, n, 5 * n, "int64")
    out = np.zeros(5 * n, dtype=np.int64)
    comm.alltoall(data[comm.rank], out)
    want = np.concatenate([data[j][5 * comm.rank:5 * (comm.rank + 1)] for j in range(n)])
    np.testing.assert_array_equal(out, want)


def test_gather_every_root(comm, rng):
    for root in range(comm.nranks):
        data = rank_data(rng, comm.nranks, 7, "uint8")
        out = np.zeros(7 * comm.nranks, dtype=np.uint8) if comm.rank == root else None
        comm.gather(data[comm.rank], out, root)
        if comm.rank == root:
            np.testing.assert_array_equal(out, np.concatenate(data))


def test_scatter_every_root(comm, rng):
    for root in range(comm.nranks):
        data = rank_data(rng, comm.nranks, 6 * comm.nranks, "float64")
        out = np.zeros(6, dtype=np.float64)
        comm.scatter(data[root] if comm.rank == root else None, out, root)
        np.testing.assert_array_equal(out, data[root][6 * comm.rank:6 * (comm.rank + 1)])


def test_pre_mul_sum_host_scalar(comm, rng):
    data = rank_data(rng, comm.nranks, 12, "float32")
    op = comm.create_pre_mul_sum(3.0, mpccl.FLOAT32)
    try:
        out = np.zeros(12, dtype=np.float32)
        comm.allreduce(data[comm.rank], out, op)
        np.testing.assert_array_equal(out, 3 * expected(mpccl.SUM, data, "float32"))
    finally:
        op.close()


def test_pre_mul_sum_numpy_scalar(comm, rng):
    data = rank_data(rng, comm.nranks, 8, "float64")
    op = comm.create_pre_mul_sum(np.array([0.5]), residence=mpccl.NcclScalarResidence.HOST_IMMEDIATE)
    try:
        out = np.zeros(8)
        comm.allreduce(data[comm.rank], out, op)
        np.testing.assert_array_equal(out, 0.5 * expected(mpccl.SUM, data, "float64"))
    finally:
        op.close()


def test_other_buffer_kinds(comm):
    """bytearray, array.array and DLPack-only objects work like NumPy arrays."""
    import array
    n = comm.nranks
    b = bytearray([comm.rank + 1] * 8)
    out = bytearray(8)
    comm.allreduce(b, out, mpccl.SUM)
    assert list(out) == [n * (n + 1) // 2] * 8

    a = array.array("d", [float(comm.rank)] * 4)
    o = array.array("d", [0.0] * 4)
    comm.allreduce(a, o, mpccl.MAX)
    assert list(o) == [float(n - 1)] * 4

    class OnlyDLPack:  # no buffer protocol, no array interface
        def __init__(self, arr):
            self._a = arr

        def __dlpack__(self, **kw):
            return self._a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    if not hasattr(np.ndarray, "__dlpack__"):
        pytest.skip("NumPy %s has no DLPack export" % np.__version__)
    src = np.arange(6, dtype=np.int32) * (comm.rank + 1)
    dst = np.zeros(6, dtype=np.int32)
    comm.allreduce(OnlyDLPack(src), OnlyDLPack(dst), mpccl.SUM)
    np.testing.assert_array_equal(dst, np.arange(6) * (n * (n + 1) // 2))


def test_buffer_spec_overrides(comm):
    # count: only the first 3 elements take part.
    src = np.full(10, comm.rank + 1, dtype=np.int32)
    out = np.zeros(10, dtype=np.int32)
    comm.allreduce(mpccl.BufferSpec(src, count=3), mpccl.BufferSpec(out, count=3), mpccl.SUM)
    n = comm.nranks
    np.testing.assert_array_equal(out, [n * (n + 1) // 2] * 3 + [0] * 7)
    # dtype given explicitly, as an NcclDataType and as a NumPy name.
    src = np.full(2, comm.rank, dtype=np.uint8)
    out = np.zeros(2, dtype=np.uint8)
    comm.allreduce((src, None, mpccl.UINT8), (out, None, "uint8"), mpccl.MAX)
    np.testing.assert_array_equal(out, [n - 1] * 2)
    # raw address with explicit count and dtype.
    src = np.full(4, 2.0)
    out = np.zeros(4)
    comm.allreduce(mpccl.BufferSpec(src.ctypes.data, 4, mpccl.FLOAT64),
                   mpccl.BufferSpec(out.ctypes.data, 4, mpccl.FLOAT64), mpccl.SUM)
    np.testing.assert_array_equal(out, [2.0 * n] * 4)


def test_groups_of_collectives(comm, rng):
    data = rank_data(rng, comm.nranks, 30, "float32")
    a = np.zeros(30, dtype=np.float32)
    b = np.zeros(30 * comm.nranks, dtype=np.float32)
    c = np.zeros(30, dtype=np.float32)
    with mpccl.group():
        comm.allreduce(data[comm.rank], a, mpccl.SUM)
        comm.allgather(data[comm.rank], b)
        comm.broadcast(data[comm.rank], c, comm.nranks - 1)
    np.testing.assert_array_equal(a, expected(mpccl.SUM, data, "float32"))
    np.testing.assert_array_equal(b, np.concatenate(data))
    np.testing.assert_array_equal(c, data[-1])


def test_streams_accepted(comm):
    """Host communicators ignore the stream, but every accepted form must parse."""

    class CudaStreamProto:
        def __cuda_stream__(self):
            return (0, 0)

    class TorchLike:
        cuda_stream = 0

    class CupyLike:
        ptr = 0

    src = np.ones(3, dtype=np.float32)
    for stream in (None, 0, CudaStreamProto(), TorchLike(), CupyLike()):
        out = np.zeros(3, dtype=np.float32)
        comm.allreduce(src, out, mpccl.SUM, stream=stream)
        np.testing.assert_array_equal(out, [comm.nranks] * 3)
    assert mpccl.stream_handle(CudaStreamProto()) == 0
    with pytest.raises(mpccl.NcclInvalid, match="stream"):
        comm.allreduce(src, np.zeros(3, np.float32), mpccl.SUM, stream="default")
