"""Shared fixtures.  Every rank runs the same tests in the same order (pytest
under mpirun), so collective calls match up; a test must therefore never skip
on one rank only."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

np = pytest.importorskip("numpy")
MPI = pytest.importorskip("mpi4py.MPI")

import mpccl  # noqa: E402


def _seed():
    # One seed for the run, agreed by all ranks, printed so a failure replays
    # with MPCCL_TEST_SEED=<seed>.
    seed = int(os.environ.get("MPCCL_TEST_SEED", "0")) or None
    if MPI.COMM_WORLD.Get_rank() == 0 and seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    return MPI.COMM_WORLD.bcast(seed, root=0)


SEED = _seed()


def pytest_report_header(config):
    return "mpccl: seed %d (MPCCL_TEST_SEED), rank %d of %d, library %s" % (
        SEED, MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size(), mpccl.library_info())


@pytest.fixture(scope="session")
def world():
    return MPI.COMM_WORLD


@pytest.fixture(scope="session")
def comm(world):
    c = mpccl.Communicator.from_mpi(world)
    yield c
    c.destroy()


@pytest.fixture
def rng(request):
    """A generator seeded by the run's seed and the test's name: the same on
    every rank, so each rank can compute every rank's data."""
    import zlib
    return np.random.default_rng([SEED, zlib.crc32(request.node.name.encode())])


def rank_data(rng, nranks, count, dtype):
    """Data for each rank (a list indexed by rank), drawn identically everywhere."""
    dtype = np.dtype(dtype)
    out = []
    for _ in range(nranks):
        if dtype.kind == "f":
            out.append(rng.integers(-8, 9, count).astype(dtype))  # exact sums
        elif dtype.kind == "u":
            out.append(rng.integers(0, 5, count).astype(dtype))
        else:
            out.append(rng.integers(-4, 5, count).astype(dtype))
    return out


def aligned_zeros(count, dtype, alignment=mpccl.WINDOW_REQUIRED_ALIGNMENT):
    """A zeroed host array whose data starts on `alignment` (windows need it)."""
    dtype = np.dtype(dtype)
    raw = np.zeros(count * dtype.itemsize + alignment, dtype=np.uint8)
    off = (-raw.ctypes.data) % alignment
    return raw[off:off + count * dtype.itemsize].view(dtype)
