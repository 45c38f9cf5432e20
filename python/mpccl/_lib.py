"""Finding and loading libmpccl, and the ctypes prototypes of its C ABI
(include/nccl.h, include/mpccl.h).

Search order, first hit wins:
  1. $MPCCL_LIBRARY: a path to the library (a failure to load it is an error,
     never a silent fall-back to another copy);
  2. the library directory recorded by `make install` in _install.py;
  3. the dynamic loader's search path (libmpccl.so.2, libmpccl.so, then
     ctypes.util.find_library("mpccl")).
The library is loaded on first use, so `import mpccl` always works and
mpccl.library_info() tells which file was loaded and why."""

import ctypes
import ctypes.util
import os
import threading

from . import errors

c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
P = ctypes.POINTER

UNIQUE_ID_BYTES = 128
API_MAGIC = 0xCAFEBEEF
CONFIG_UNDEF_INT = -(2 ** 31)


def nccl_version_code(major, minor, patch):
    if major <= 2 and minor <= 8:
        return major * 1000 + minor * 100 + patch
    return major * 10000 + minor * 100 + patch


# The header's version: the config/properties structs below are its layout.
HEADER_VERSION = nccl_version_code(2, 29, 7)


class UniqueIdStruct(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class ConfigStruct(ctypes.Structure):
    """ncclConfig_t (fields are appended by the C side, never reordered)."""
    _fields_ = [
        ("size", c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
        ("blocking", c_int), ("cgaClusterSize", c_int), ("minCTAs", c_int),
        ("maxCTAs", c_int), ("netName", c_char_p), ("splitShare", c_int),
        ("trafficClass", c_int), ("commName", c_char_p), ("collnetEnable", c_int),
        ("CTAPolicy", c_int), ("shrinkShare", c_int), ("nvlsCTAs", c_int),
        ("nChannelsPerNetPeer", c_int), ("nvlinkCentricSched", c_int),
        ("graphUsageMode", c_int), ("numRmaCtx", c_int),
    ]


class PropertiesStruct(ctypes.Structure):
    """ncclCommProperties_t."""
    _fields_ = [
        ("size", c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
        ("rank", c_int), ("nRanks", c_int), ("cudaDev", c_int), ("nvmlDev", c_int),
        ("deviceApiSupport", ctypes.c_bool), ("multimemSupport", ctypes.c_bool),
        ("ginType", c_int), ("nLsaTeams", c_int), ("hostRmaSupport", ctypes.c_bool),
        ("railedGinType", c_int),
    ]


class WaitSignalDescStruct(ctypes.Structure):
    _fields_ = [("opCnt", c_int), ("peer", c_int), ("sigIdx", c_int), ("ctx", c_int)]


OOB_ALLGATHER = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_size_t)
OOB_BARRIER = ctypes.CFUNCTYPE(c_int, c_void_p)
OOB_RELEASE = ctypes.CFUNCTYPE(None, c_void_p)


class OobOpsStruct(ctypes.Structure):
    """mpcclOobOps_t."""
    _fields_ = [("allgather", OOB_ALLGATHER), ("barrier", OOB_BARRIER),
                ("release", OOB_RELEASE)]


R = c_int  # ncclResult_t
comm_t = c_void_p
stream_t = c_void_p

# name: (restype, argtypes)
_PROTOTYPES = {
    "ncclGetVersion": (R, [P(c_int)]),
    "ncclMemAlloc": (R, [P(c_void_p), c_size_t]),
    "ncclMemFree": (R, [c_void_p]),
    "ncclGetUniqueId": (R, [P(UniqueIdStruct)]),
    "ncclCommInitRankConfig": (R, [P(comm_t), c_int, UniqueIdStruct, c_int, P(ConfigStruct)]),
    "mpcclCommInitOob": (R, [P(comm_t), c_int, c_int, P(OobOpsStruct), c_void_p, P(ConfigStruct)]),
    "ncclCommFinalize": (R, [comm_t]),
    "ncclCommDestroy": (R, [comm_t]),
    "ncclCommAbort": (R, [comm_t]),
    "ncclCommSplit": (R, [comm_t, c_int, c_int, P(comm_t), P(ConfigStruct)]),
    "ncclCommShrink": (R, [comm_t, P(c_int), c_int, P(comm_t), P(ConfigStruct), c_int]),
    "ncclCommGetUniqueId": (R, [comm_t, P(UniqueIdStruct)]),
    "ncclCommRevoke": (R, [comm_t, c_int]),
    "ncclCommSuspend": (R, [comm_t, c_int]),
    "ncclCommResume": (R, [comm_t]),
    "ncclCommMemStats": (R, [comm_t, c_int, P(ctypes.c_uint64)]),
    "ncclCommGrow": (R, [comm_t, c_int, P(UniqueIdStruct), c_int, P(comm_t), P(ConfigStruct)]),
    "ncclGetErrorString": (c_char_p, [R]),
    "ncclGetLastError": (c_char_p, [comm_t]),
    "ncclCommGetAsyncError": (R, [comm_t, P(c_int)]),
    "ncclCommCount": (R, [comm_t, P(c_int)]),
    "ncclCommCuDevice": (R, [comm_t, P(c_int)]),
    "ncclCommUserRank": (R, [comm_t, P(c_int)]),
    "ncclCommQueryProperties": (R, [comm_t, P(PropertiesStruct)]),
    "ncclCommRegister": (R, [comm_t, c_void_p, c_size_t, P(c_void_p)]),
    "ncclCommDeregister": (R, [comm_t, c_void_p]),
    "ncclCommWindowRegister": (R, [comm_t, c_void_p, c_size_t, P(c_void_p), c_int]),
    "ncclCommWindowDeregister": (R, [comm_t, c_void_p]),
    "ncclWinGetUserPtr": (R, [comm_t, c_void_p, P(c_void_p)]),
    "ncclRedOpCreatePreMulSum": (R, [P(c_int), c_void_p, c_int, c_int, comm_t]),
    "ncclRedOpDestroy": (R, [c_int, comm_t]),
    "ncclDevCommCreate": (R, [comm_t, c_void_p, c_void_p]),
    "ncclDevCommDestroy": (R, [comm_t, c_void_p]),
    "ncclReduce": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, comm_t, stream_t]),
    "ncclBroadcast": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, stream_t]),
    "ncclAllReduce": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, stream_t]),
    "ncclReduceScatter": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, stream_t]),
    "ncclAllGather": (R, [c_void_p, c_void_p, c_size_t, c_int, comm_t, stream_t]),
    "ncclAlltoAll": (R, [c_void_p, c_void_p, c_size_t, c_int, comm_t, stream_t]),
    "ncclGather": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, stream_t]),
    "ncclScatter": (R, [c_void_p, c_void_p, c_size_t, c_int, c_int, comm_t, stream_t]),
    "ncclSend": (R, [c_void_p, c_size_t, c_int, c_int, comm_t, stream_t]),
    "ncclRecv": (R, [c_void_p, c_size_t, c_int, c_int, comm_t, stream_t]),
    "ncclPutSignal": (R, [c_void_p, c_size_t, c_int, c_int, c_void_p, c_size_t, c_int, c_int,
                          ctypes.c_uint, comm_t, stream_t]),
    "ncclSignal": (R, [c_int, c_int, c_int, ctypes.c_uint, comm_t, stream_t]),
    "ncclWaitSignal": (R, [c_int, P(WaitSignalDescStruct), comm_t, stream_t]),
    "ncclGroupStart": (R, []),
    "ncclGroupEnd": (R, []),
}


class LibraryNotFoundError(OSError):
    """libmpccl could not be loaded; the message lists every place tried."""


class _Loaded:
    def __init__(self, cdll, path, reason):
        self.cdll = cdll
        self.path = path
        self.reason = reason


_lock = threading.Lock()
_loaded = None


def _install_libdir():
    try:
        from . import _install  # written by `make install`
    except ImportError:
        return None
    return getattr(_install, "LIBDIR", None)


def _candidates():
    env = os.environ.get("MPCCL_LIBRARY")
    if env:
        yield env, "MPCCL_LIBRARY=%s" % env, True
        return
    libdir = _install_libdir()
    if libdir:
        for name in ("libmpccl.so.2", "libmpccl.so"):
            path = os.path.join(libdir, name)
            if os.path.exists(path):
                yield path, "the install prefix recorded by make install (%s)" % libdir, False
    for name in ("libmpccl.so.2", "libmpccl.so"):
        yield name, "the dynamic loader's search path (%s)" % name, False
    found = ctypes.util.find_library("mpccl")
    if found:
        yield found, "ctypes.util.find_library('mpccl')", False


def _load():
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        tried = []
        for path, reason, strict in _candidates():
            try:
                cdll = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                tried.append("%s (%s): %s" % (path, reason, exc))
                if strict:
                    raise LibraryNotFoundError(
                        "mpccl: cannot load the library named by MPCCL_LIBRARY: %s" % tried[-1])
                continue
            _bind(cdll)
            real = _real_path(cdll, path)
            _loaded = _Loaded(cdll, real, reason)
            return _loaded
        raise LibraryNotFoundError(
            "mpccl: libmpccl not found. Set MPCCL_LIBRARY to the path of libmpccl.so, "
            "install mpccl (make install) or add its lib directory to LD_LIBRARY_PATH. "
            "Tried: " + "; ".join(tried))


def _real_path(cdll, fallback):
    """The file the loader actually mapped (a bare soname says little)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libmpccl.so" in line and "libmpccl_" not in line:
                    return line.split()[-1]
    except OSError:
        pass
    return fallback


def _bind(cdll):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(cdll, name, None)
        if fn is None:
            continue  # an older library: calling it raises a clear error later
        fn.restype = restype
        fn.argtypes = argtypes


def lib():
    """The loaded CDLL (loads it on first use)."""
    return _load().cdll


def library_info():
    """(path, reason): which libmpccl was loaded and why that one."""
    loaded = _load()
    return loaded.path, loaded.reason


def function(name):
    fn = getattr(lib(), name, None)
    if fn is None:
        raise errors.invalid_usage("%s is not exported by %s" % (name, library_info()[0]))
    return fn


def last_error(comm_ptr=None):
    msg = function("ncclGetLastError")(comm_ptr)
    return msg.decode(errors="replace") if msg else ""


def check(result, name, comm_ptr=None):
    """Raises the exception for a failed call; ncclInProgress is not a failure
    (nonblocking communicators report it while work proceeds)."""
    if result == errors.SUCCESS or result == errors.IN_PROGRESS:
        return result
    raise errors.error_for(result, last_error(comm_ptr), function=name)


def call(name, *args, comm_ptr=None):
    return check(function(name)(*args), name, comm_ptr)
