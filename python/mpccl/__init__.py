"""mpccl: Python bindings for libmpccl in the shape of NVIDIA's nccl4py
(nccl.core): `import mpccl as nccl` and nccl4py programs run on mpccl.

Pure Python over the C ABI (ctypes); the library is found through
$MPCCL_LIBRARY, the install prefix or the loader path (see library_info())."""

from ._lib import LibraryNotFoundError, library_info
from .errors import (NcclError, NcclInvalid, NcclInvalidArgument, NcclInvalidUsage,
                     NcclInternalError, NcclRemoteError, NcclSystemError, NcclUnhandledCudaError)
from .types import (NcclDataType, NcclRedOp, NcclScalarResidence, WindowFlag, CommShrinkFlag, NcclGinType,
                    NcclGinConnectionType, WINDOW_REQUIRED_ALIGNMENT,
                    INT8, CHAR, UINT8, INT32, INT, UINT32, INT64, UINT64, FLOAT16, HALF,
                    BFLOAT16, FLOAT32, FLOAT, FLOAT64, DOUBLE, FLOAT8E4M3, FLOAT8E5M2,
                    SUM, PROD, MAX, MIN, AVG)
from .buffers import BufferSpec
from .streams import stream_handle
from .resources import (CommResource, RegisteredBufferHandle, RegisteredWindowHandle,
                        CustomRedOp, DevCommRequirements, DevCommResource)
from .communicator import (Communicator, UniqueId, NCCLConfig, WaitSignalDesc, get_unique_id,
                           SPLIT_NOCOLOR)
from ._group import group, group_start, group_end
from .memory import Buffer, mem_alloc, mem_free

__version__ = "0.2.0"


def get_version():
    """libmpccl's NCCL version code (e.g. 22907)."""
    import ctypes
    from . import _lib
    out = ctypes.c_int()
    _lib.call("ncclGetVersion", ctypes.byref(out))
    return out.value


def get_error_string(result):
    from . import _lib
    msg = _lib.function("ncclGetErrorString")(int(result))
    return msg.decode() if msg else ""


__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and type(value).__name__ != "module"]
