"""Point-to-point, groups, communicator creation (unique id, MPI, split) and
lifecycle."""

import numpy as np
import pytest

import mpccl
from conftest import rank_data


def test_properties(comm, world):
    assert comm.rank == world.Get_rank()
    assert comm.nranks == world.Get_size()
    assert comm.device < 0  # a host communicator
    assert comm.is_valid and comm.ptr != 0
    assert isinstance(comm.gin_type, mpccl.NcclGinType)
    assert isinstance(comm.railed_gin_type, mpccl.NcclGinType)
    assert comm.gin_type == mpccl.NcclGinType.NONE
    assert "rank %d" % comm.rank in repr(comm)


def test_enum_values():
    assert [int(v) for v in (mpccl.NcclGinType.NONE, mpccl.NcclGinType.PROXY,
                             mpccl.NcclGinType.GDAKI, mpccl.NcclGinType.GPI)] == [0, 2, 3, 4]
    assert [int(v) for v in mpccl.NcclGinConnectionType] == [0, 1, 2]
    assert int(mpccl.WindowFlag.COLL_SYMMETRIC) == 1 and int(mpccl.WindowFlag.DEFAULT) == 0
    assert mpccl.NcclDataType.from_numpy_dtype(np.float16) == mpccl.FLOAT16
    assert mpccl.FLOAT64.numpy_dtype == np.dtype("float64")
    assert mpccl.get_version() >= 22700


def test_library_info():
    path, reason = mpccl.library_info()
    assert "libmpccl.so" in path
    assert reason


def test_ring_send_recv(comm, rng):
    n, r = comm.nranks, comm.rank
    data = rank_data(rng, n, 100, "float64")
    got = np.zeros(100)
    with mpccl.group():
        comm.send(data[r], (r + 1) % n)
        comm.recv(got, (r - 1) % n)
    np.testing.assert_array_equal(got, data[(r - 1) % n])


def test_exchange_all_pairs(comm, rng):
    n, r = comm.nranks, comm.rank
    data = rank_data(rng, n * n, 8, "int32")  # data[src * n + dst]
    got = [np.zeros(8, dtype=np.int32) for _ in range(n)]
    with mpccl.group():
        for peer in range(n):
            comm.send(data[r * n + peer], peer)
            comm.recv(got[peer], peer)
    for peer in range(n):
        np.testing.assert_array_equal(got[peer], data[peer * n + r])


def test_nested_groups(comm):
    out = np.zeros(2, dtype=np.int64)
    with mpccl.group():
        with mpccl.group():
            comm.allreduce(np.ones(2, dtype=np.int64), out, mpccl.SUM)
    np.testing.assert_array_equal(out, [comm.nranks] * 2)


def test_group_body_error_keeps_groups_balanced(comm):
    with pytest.raises(ZeroDivisionError):
        with mpccl.group():
            1 / 0
    out = np.zeros(1)
    comm.allreduce(np.ones(1), out, mpccl.SUM)  # not stuck inside a group
    assert out[0] == comm.nranks


def test_unique_id_init(world):
    uid = mpccl.get_unique_id() if world.Get_rank() == 0 else None
    uid = world.bcast(uid, root=0)  # UniqueId pickles
    assert isinstance(uid, mpccl.UniqueId) and len(bytes(uid)) == 128
    with mpccl.Communicator.init(world.Get_size(), world.Get_rank(), uid,
                                 config=mpccl.NCCLConfig(comm_name="pytest")) as c:
        assert c.rank == world.Get_rank() and c.nranks == world.Get_size()
        out = np.zeros(4, dtype=np.int32)
        c.allreduce(np.full(4, c.rank, dtype=np.int32), out, mpccl.SUM)
        np.testing.assert_array_equal(out, [sum(range(c.nranks))] * 4)
    assert not c.is_valid
    c.destroy()  # destroying twice is harmless


def test_unique_id_from_bytes(world):
    raw = bytes(mpccl.get_unique_id()) if world.Get_rank() == 0 else None
    raw = world.bcast(raw, root=0)
    c = mpccl.Communicator.init(world.Get_size(), world.Get_rank(), raw, config={"blocking": 1})
    try:
        assert c.nranks == world.Get_size()
    finally:
        c.destroy()


def test_from_mpi_subcommunicator_and_dup_release(world):
    from mpccl.communicator import _MpiOob
    sub = world.Split(world.Get_rank() % 2, world.Get_rank())
    before = set(_MpiOob._LIVE)
    c = mpccl.Communicator.from_mpi(sub)
    assert c.nranks == sub.Get_size() and c.rank == sub.Get_rank()
    assert len(set(_MpiOob._LIVE) - before) == 1  # callbacks kept alive
    out = np.zeros(3)
    c.allreduce(np.full(3, 1.0), out, mpccl.SUM)
    np.testing.assert_array_equal(out, [sub.Get_size()] * 3)
    c.destroy()
    assert set(_MpiOob._LIVE) == before  # release ran: the dup is freed
    sub.Free()


def test_split(comm, rng):
    r, n = comm.rank, comm.nranks
    child = comm.split(r % 2, -r)  # key reverses the order
    try:
        members = [q for q in range(n) if q % 2 == r % 2]
        assert child.nranks == len(members)
        assert child.rank == sorted(members, reverse=True).index(r)
        out = np.zeros(2, dtype=np.int64)
        child.allreduce(np.full(2, r, dtype=np.int64), out, mpccl.SUM)
        np.testing.assert_array_equal(out, [sum(members)] * 2)
    finally:
        child.destroy()


def test_split_nocolor(comm):
    color = mpccl.SPLIT_NOCOLOR if comm.rank == 0 else 1
    child = comm.split(color, 0)
    if comm.rank == 0:
        assert not child.is_valid and child.ptr == 0
        with pytest.raises(mpccl.NcclInvalid, match="not initialized"):
            child.nranks
    else:
        assert child.nranks == comm.nranks - 1
        child.destroy()


def test_abort_and_use_after_destroy(comm):
    child = comm.split(0, comm.rank)
    op = child.create_pre_mul_sum(2.0, mpccl.FLOAT64)
    child.abort()
    assert not child.is_valid and not op.is_valid
    with pytest.raises(RuntimeError):
        op.op
    op.close()  # closing after abort is harmless
    with pytest.raises(mpccl.NcclInvalidUsage, match="not initialized"):
        child.allreduce(np.ones(1), np.ones(1), mpccl.SUM)
    child.abort()  # twice: nothing left to do


def test_context_manager_aborts_on_error(comm):
    with pytest.raises(KeyError):
        with comm.split(0, comm.rank) as child:
            raise KeyError("boom")
    assert not child.is_valid


def test_shrink_then_grow_back(comm, world):
    """shrink() without the last rank (which does not call), then grow() back
    with that rank joining through join_grow()."""
    n, r = comm.nranks, comm.rank
    if n < 2:
        pytest.skip("needs 2 ranks")
    last = n - 1
    small = None
    dup = comm.split(0, r)  # revoked below: the fixture's communicator stays usable
    if r != last:
        dup.revoke()
        with pytest.raises(mpccl.NcclInvalidUsage, match="revoked"):
            dup.allreduce(np.ones(1), np.zeros(1), mpccl.SUM)
        small = dup.shrink([last], flags=mpccl.CommShrinkFlag.DEFAULT)
        assert small.rank == r and small.nranks == n - 1
        out = np.zeros(3, dtype=np.int64)
        small.allreduce(np.full(3, r + 1, dtype=np.int64), out, mpccl.SUM)
        np.testing.assert_array_equal(out, [sum(range(1, n))] * 3)
    dup.destroy()
    world.Barrier()
    uid = small.get_unique_id() if r == 0 else None
    uid = world.bcast(uid, root=0)
    if r == last:
        grown = mpccl.Communicator.join_grow(n, last, uid)
    else:
        grown = small.grow(n, uid if r == 0 else None)
    assert grown.rank == r and grown.nranks == n
    out = np.zeros(2, dtype=np.float64)
    grown.allreduce(np.full(2, 1.0), out, mpccl.SUM)
    np.testing.assert_array_equal(out, [float(n)] * 2)
    grown.destroy()
    if small is not None:
        small.destroy()
    with pytest.raises(mpccl.NcclInvalidUsage, match="excludes itself"):
        comm.shrink([r])


def test_suspend_resume_and_mem_stats(comm):
    dup = comm.split(0, comm.rank)
    assert dup.mem_stats(3) == 0  # host communicator: no device memory
    dup.suspend()
    assert dup.mem_stats(1) == 1
    with pytest.raises(mpccl.NcclInvalidUsage, match="suspended"):
        dup.allreduce(np.ones(1), np.zeros(1), mpccl.SUM)
    dup.resume()
    out = np.zeros(1)
    dup.allreduce(np.ones(1), out, mpccl.SUM)
    assert out[0] == dup.nranks
    dup.destroy()
