"""Communicator-owned resources.  Each is tracked by its communicator and
released by close() (idempotent) or by the communicator's destroy()/abort();
using one after that raises RuntimeError."""

import abc
import ctypes

from . import _lib


class CommResource(abc.ABC):
    def __init__(self, comm):
        self._comm = comm
        self._valid = True
        comm._track(self)

    @property
    def is_valid(self):
        """Whether the resource is initialized and not closed."""
        return self._valid

    def _require_valid(self, what):
        if not self._valid:
            raise RuntimeError("%s: this %s has been closed (or its communicator destroyed)"
                               % (what, type(self).__name__))

    def close(self):
        """Releases the resource.  Safe to call more than once."""
        if not self._valid:
            return
        self._valid = False
        comm, self._comm = self._comm, None
        try:
            if comm is not None and comm.is_valid:
                self._release(comm.ptr)
        finally:
            if comm is not None:
                comm._forget(self)

    def _invalidate(self):
        """The communicator went away (abort): the library freed everything."""
        self._valid = False
        self._comm = None

    @abc.abstractmethod
    def _release(self, comm_ptr):
        """Frees the C object (called once, with the communicator still valid)."""

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__, "valid" if self._valid else "closed")


class _RegisteredMemory(CommResource):
    """Memory registered with the communicator: a handle and a size in bytes;
    keeps the Python buffer alive while registered."""

    def __init__(self, comm, handle, buffer_ptr, size, keep):
        self._handle = handle
        self._buffer_ptr = buffer_ptr
        self._size = size
        self._keep = keep
        super().__init__(comm)

    @property
    def handle(self):
        self._require_valid("handle")
        return self._handle

    @property
    def size(self):
        """Registered size in bytes."""
        self._require_valid("size")
        return self._size


class RegisteredBufferHandle(_RegisteredMemory):
    """A buffer registered with ncclCommRegister (zero-copy hint)."""

    def _release(self, comm_ptr):
        handle, self._handle, self._keep = self._handle, None, None
        _lib.call("ncclCommDeregister", comm_ptr, handle, comm_ptr=comm_ptr)


class RegisteredWindowHandle(_RegisteredMemory):
    """A window registered collectively with ncclCommWindowRegister, the
    target of put_signal (handle: the ncclWindow_t, as an int)."""

    @property
    def user_ptr(self):
        """The address the window was registered with (ncclWinGetUserPtr)."""
        self._require_valid("user_ptr")
        out = ctypes.c_void_p()
        comm_ptr = self._comm.ptr
        _lib.call("ncclWinGetUserPtr", comm_ptr, self._handle, ctypes.byref(out), comm_ptr=comm_ptr)
        return out.value or 0

    def _device_pointer(self, name, offset, peer):
        fn = getattr(_lib.lib(), name, None)
        if fn is None:
            from . import errors
            raise errors.invalid_usage(
                "%s is not provided by %s: device pointers into windows come with mpccl's "
                "device API" % (name, _lib.library_info()[0]))
        out = ctypes.c_void_p()
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
        _lib.check(fn(self._handle, offset, peer, ctypes.byref(out)), name, self._comm.ptr)
        return out.value or 0

    def get_lsa_device_pointer(self, peer, offset=0):
        """Device address of `offset` bytes into LSA peer `peer`'s window."""
        self._require_valid("get_lsa_device_pointer")
        return self._device_pointer("ncclGetLsaDevicePointer", offset, peer)

    def get_peer_device_pointer(self, peer, offset=0):
        """Device address of `offset` bytes into rank `peer`'s window."""
        self._require_valid("get_peer_device_pointer")
        return self._device_pointer("ncclGetPeerDevicePointer", offset, peer)

    def get_lsa_multimem_device_pointer(self, offset=0):
        """Multimem (NVLS) address: mpccl has no multimem support, so None."""
        self._require_valid("get_lsa_multimem_device_pointer")
        return None

    def _release(self, comm_ptr):
        handle, self._handle, self._keep = self._handle, None, None
        _lib.call("ncclCommWindowDeregister", comm_ptr, handle, comm_ptr=comm_ptr)


class CustomRedOp(CommResource):
    """A reduction operator made by create_pre_mul_sum; pass it as `op`."""

    def __init__(self, comm, op, keep=None):
        self._op = op
        self._keep = keep  # a device scalar must outlive the operator
        super().__init__(comm)

    @property
    def op(self):
        self._require_valid("op")
        return self._op

    def _release(self, comm_ptr):
        op, self._keep = self._op, None
        _lib.call("ncclRedOpDestroy", op, comm_ptr, comm_ptr=comm_ptr)


class DevCommRequirements(ctypes.Structure):
    """ncclDevCommRequirements (nccl_device/core.h), filled as
    NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER does; set fields by name, e.g.
    DevCommRequirements(lsaBarrierCount=16)."""

    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("resourceRequirementsList", ctypes.c_void_p), ("teamRequirementsList", ctypes.c_void_p),
                ("lsaMultimem", ctypes.c_bool), ("barrierCount", ctypes.c_int),
                ("lsaBarrierCount", ctypes.c_int), ("railGinBarrierCount", ctypes.c_int),
                ("lsaLLA2ABlockCount", ctypes.c_int), ("lsaLLA2ASlotCount", ctypes.c_int),
                ("ginForceEnable", ctypes.c_bool), ("ginContextCount", ctypes.c_int),
                ("ginSignalCount", ctypes.c_int), ("ginCounterCount", ctypes.c_int),
                ("ginConnectionType", ctypes.c_int), ("ginExclusiveContexts", ctypes.c_bool),
                ("ginQueueDepth", ctypes.c_int), ("worldGinBarrierCount", ctypes.c_int)]

    _API_MAGIC = 0xcafebeef

    def __init__(self, **fields):
        super().__init__()
        self.size = ctypes.sizeof(self)
        self.magic = self._API_MAGIC
        self.version = _lib.HEADER_VERSION
        self.ginContextCount = 4
        for name, value in fields.items():
            if not hasattr(self, name):
                raise TypeError("DevCommRequirements has no field %r" % name)
            setattr(self, name, value)


class DevCommResource(CommResource):
    """A device communicator (ncclDevCommCreate) for user kernels."""

    # Room for the C struct ncclDevComm, whose layout is the device API's.
    _STORAGE_BYTES = 4096

    def __init__(self, comm, storage):
        self._storage = storage
        super().__init__(comm)

    @property
    def ptr(self):
        self._require_valid("ptr")
        return ctypes.addressof(self._storage)

    def _release(self, comm_ptr):
        storage, self._storage = self._storage, None
        _lib.call("ncclDevCommDestroy", comm_ptr, ctypes.addressof(storage), comm_ptr=comm_ptr)
