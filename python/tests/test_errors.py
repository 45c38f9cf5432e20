"""Errors: Python-side argument checks happen before anything is sent; the
library's errors arrive as exceptions with its result code and message."""

import os
import subprocess
import sys

import numpy as np
import pytest

import mpccl
from mpccl import errors


def test_result_classes():
    cases = {1: mpccl.NcclUnhandledCudaError, 2: mpccl.NcclSystemError,
             3: mpccl.NcclInternalError, 4: mpccl.NcclInvalidArgument,
             5: mpccl.NcclInvalidUsage, 6: mpccl.NcclRemoteError}
    for result, cls in cases.items():
        exc = errors.error_for(result, "why", function="ncclX")
        assert type(exc) is cls and exc.result == result
        assert isinstance(exc, mpccl.NcclError) and isinstance(exc, RuntimeError)
        assert "why" in str(exc) and "ncclX" in str(exc)
    assert issubclass(mpccl.NcclInvalidArgument, mpccl.NcclInvalid)
    assert issubclass(mpccl.NcclInvalidUsage, mpccl.NcclInvalid)
    assert not issubclass(mpccl.NcclSystemError, mpccl.NcclInvalid)
    assert mpccl.get_error_string(4).startswith("invalid argument")


def test_library_error_carries_message(comm):
    """An operator the library does not know: its own check answers."""
    with pytest.raises(mpccl.NcclInvalidArgument) as info:
        comm.allreduce(np.ones(4), np.zeros(4), 77)
    assert info.value.result == 4
    assert info.value.message  # ncclGetLastError's text
    assert "op" in info.value.message


def test_peer_out_of_range(comm):
    with pytest.raises(mpccl.NcclInvalid, match="peer"):
        comm.send(np.ones(1), comm.nranks)


def test_read_only_recvbuf(comm):
    ro = np.zeros(4)
    ro.setflags(write=False)
    with pytest.raises(mpccl.NcclInvalidArgument, match="read-only"):
        comm.allreduce(np.ones(4), ro, mpccl.SUM)
    with pytest.raises(mpccl.NcclInvalidArgument, match="read-only"):
        comm.recv(bytes(8), 0)
    # A read-only *send* buffer is fine.
    out = np.zeros(4)
    comm.allreduce(ro, out, mpccl.SUM)
    np.testing.assert_array_equal(out, 0)


def test_non_contiguous(comm):
    a = np.zeros((4, 4))
    with pytest.raises(mpccl.NcclInvalidArgument, match="contiguous"):
        comm.allreduce(a[:, 0], np.zeros(4), mpccl.SUM)
    with pytest.raises(mpccl.NcclInvalidArgument, match="contiguous"):
        comm.allreduce(np.zeros(4), memoryview(bytearray(64)).cast("d")[::2], mpccl.SUM)


def test_wrong_device(comm):
    class FakeCuda:  # a CUDA array (interface only): wrong for a host communicator
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (4096, False),
                                    "version": 3, "strides": None}

    with pytest.raises(mpccl.NcclInvalidArgument, match="CUDA memory.*host communicator"):
        comm.allreduce(FakeCuda(), np.zeros(4, np.float32), mpccl.SUM)


def test_shape_and_type_mismatches(comm):
    with pytest.raises(mpccl.NcclInvalidArgument, match="FLOAT64"):
        comm.allreduce(np.ones(4), np.zeros(4, np.float32), mpccl.SUM)
    with pytest.raises(mpccl.NcclInvalidArgument, match="expected 4"):
        comm.allreduce(np.ones(4), np.zeros(5), mpccl.SUM)
    with pytest.raises(mpccl.NcclInvalidArgument, match="expected %d" % (3 * comm.nranks)):
        comm.allgather(np.ones(3), np.zeros(3 * comm.nranks + 1))
    with pytest.raises(mpccl.NcclInvalidArgument, match="count = 9"):
        comm.allreduce(mpccl.BufferSpec(np.ones(4), count=9), np.zeros(9), mpccl.SUM)
    with pytest.raises(mpccl.NcclInvalidArgument, match="no NCCL datatype"):
        comm.allreduce(np.ones(4, dtype=np.int16), np.zeros(4, dtype=np.int16), mpccl.SUM)
    with pytest.raises(mpccl.NcclInvalidArgument, match="not a buffer"):
        comm.allreduce([1.0, 2.0], np.zeros(2), mpccl.SUM)
    with pytest.raises(mpccl.NcclInvalidArgument, match="root"):
        comm.broadcast(np.ones(1), np.ones(1), comm.nranks)
    with pytest.raises(mpccl.NcclInvalidArgument, match="raw address"):
        comm.send(mpccl.BufferSpec(1234), 0)
    with pytest.raises(mpccl.NcclInvalidArgument, match="op"):
        comm.allreduce(np.ones(1), np.zeros(1), "sum")


def test_missing_library_diagnostic(tmp_path):
    """A bad MPCCL_LIBRARY is an error naming the path, not a silent fallback."""
    env = dict(os.environ, MPCCL_LIBRARY=str(tmp_path / "nope.so"),
               PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
    code = ("import mpccl\n"
            "try:\n    mpccl.get_unique_id()\n"
            "except mpccl.LibraryNotFoundError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert "ERR" in out.stdout and "nope.so" in out.stdout and "MPCCL_LIBRARY" in out.stdout
