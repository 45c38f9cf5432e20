"""Turning user buffers into (pointer, count, datatype, device).

Accepted, in this order of preference:
  * __cuda_array_interface__ (CuPy, Numba, PyTorch CUDA tensors): device memory;
  * __array_interface__ (NumPy): host memory;
  * __dlpack__ / __dlpack_device__ (PyTorch, JAX, ...): CPU, CUDA, pinned or managed;
  * the buffer protocol (bytearray, memoryview, array.array): host memory;
  * BufferSpec(buffer_or_pointer, count=None, dtype=None): explicit overrides.
Everything is checked here, before a call reaches the library: the buffer is
contiguous, writable where the call writes it, of a datatype NCCL knows, and
on the communicator's kind of memory."""

import ctypes

from . import errors
from .types import NcclDataType, from_typestr, from_dlpack, from_buffer_format, _from_name

HOST = "host"
CUDA = "cuda"

# DLPack device types.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


class BufferSpec:
    """A buffer with explicit element count and/or datatype.  `buffer` may also
    be a raw int address, then count and dtype are required and `device` says
    where it lives (None: host memory, an int: that CUDA device)."""

    def __init__(self, buffer, count=None, dtype=None, device=None):
        self.buffer = buffer
        self.count = count
        self.dtype = dtype
        self.device = device


class ResolvedBuffer:
    __slots__ = ("ptr", "count", "dtype", "nbytes", "kind", "device", "readonly", "keep")

    def __init__(self, ptr, count, dtype, nbytes, kind, device, readonly, keep):
        self.ptr = ptr
        self.count = count
        self.dtype = dtype
        self.nbytes = nbytes
        self.kind = kind
        self.device = device
        self.readonly = readonly
        self.keep = keep  # what must stay alive while the library uses ptr


def _bad(what, why):
    return errors.invalid_argument("%s: %s" % (what, why))


def _c_contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    expected = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _nelems(shape):
    n = 1
    for dim in shape:
        n *= int(dim)
    return n


def _from_array_interface(obj, iface, kind, what):
    shape = tuple(iface["shape"])
    ptr, readonly = iface["data"] if iface.get("data") is not None else (0, False)
    typestr = iface["typestr"]
    dtype = from_typestr(typestr)
    if dtype is None and hasattr(obj, "dtype"):
        dtype = _from_name(getattr(obj.dtype, "name", str(obj.dtype)))
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    if not _c_contiguous(shape, iface.get("strides"), itemsize):
        raise _bad(what, "the buffer is not C-contiguous (strides %s for shape %s); pass a "
                         "contiguous copy" % (iface.get("strides"), shape))
    device = None
    if kind == CUDA:
        device = _cuda_device_of(obj)
    n = _nelems(shape)
    return ptr, n, dtype, n * itemsize, kind, device, bool(readonly), typestr


def _cuda_device_of(obj):
    dev = getattr(obj, "device", None)
    for attr in ("id", "index"):
        value = getattr(dev, attr, None)
        if isinstance(value, int):
            return value
    return None  # unknown: the library checks the pointer itself


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj, what):
    dev_type, dev_id = obj.__dlpack_device__()
    if dev_type not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
        raise _bad(what, "DLPack device type %d is neither host nor CUDA memory" % dev_type)
    capsule = obj.__dlpack__()
    # The capsule keeps the tensor alive; it is not consumed, so its own
    # destructor releases the DLManagedTensor when we drop it.
    addr = _capsule_pointer(capsule, b"dltensor")
    t = _DLTensor.from_address(addr)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    itemsize = (t.dtype.bits * t.dtype.lanes + 7) // 8
    strides = None
    if t.strides:
        strides = tuple(t.strides[i] * itemsize for i in range(t.ndim))
    if not _c_contiguous(shape, strides, itemsize):
        raise _bad(what, "the tensor is not contiguous (shape %s); pass a contiguous copy" % (shape,))
    dtype = from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    n = _nelems(shape)
    ptr = (t.data or 0) + t.byte_offset
    kind = HOST if dev_type == _DL_CPU else CUDA
    device = dev_id if dev_type == _DL_CUDA else None
    desc = "DLPack(code=%d, bits=%d)" % (t.dtype.code, t.dtype.bits)
    return ptr, n, dtype, n * itemsize, kind, device, False, desc, capsule


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


def _buffer_address(obj):
    view = _PyBuffer()
    _get_buffer(obj, ctypes.byref(view), 0)  # PyBUF_SIMPLE: contiguity checked before
    try:
        return view.buf or 0
    finally:
        _release_buffer(ctypes.byref(view))


def _from_buffer_protocol(obj, what):
    mv = memoryview(obj)
    if not mv.c_contiguous:
        raise _bad(what, "the buffer is not C-contiguous; pass a contiguous copy")
    dtype = from_buffer_format(mv.format, mv.itemsize)
    ptr = _buffer_address(obj)
    return ptr, mv.nbytes // max(mv.itemsize, 1), dtype, mv.nbytes, HOST, None, mv.readonly, \
        "format %r" % mv.format


def _raw(obj, what):
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_array_interface(obj, cai, CUDA, what) + (obj,)
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        return _from_array_interface(obj, ai, HOST, what) + (obj,)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        res = _from_dlpack(obj, what)
        return res[:-1] + ((obj, res[-1]),)
    try:
        return _from_buffer_protocol(obj, what) + (obj,)
    except TypeError:
        pass
    raise _bad(what, "object of type %s is not a buffer: expected an array with DLPack, the CUDA "
                     "array interface or the buffer protocol (or a BufferSpec)" % type(obj).__name__)


def resolve(obj, what, *, writable, comm_device=None):
    """obj -> ResolvedBuffer.  `what` names the argument in messages; writable
    buffers are those the call writes; comm_device is the communicator's CUDA
    device (None or negative: a host communicator)."""
    count = dtype = None
    explicit_device = None
    if isinstance(obj, BufferSpec):
        count, dtype, explicit_device = obj.count, obj.dtype, obj.device
        obj = obj.buffer
    elif isinstance(obj, tuple) and len(obj) in (2, 3):
        obj, count, dtype = (obj + (None,))[:3]
    if obj is None:
        raise _bad(what, "a buffer is required here")
    if dtype is not None:
        try:
            dtype = NcclDataType(dtype) if isinstance(dtype, int) else _dtype_of(dtype)
        except (ValueError, TypeError):
            raise _bad(what, "dtype = %r is not an NCCL datatype" % (dtype,))
    if isinstance(obj, int) and not isinstance(obj, bool):
        if count is None or dtype is None:
            raise _bad(what, "a raw address needs an explicit count and dtype (BufferSpec)")
        kind = HOST if explicit_device is None else CUDA
        rb = ResolvedBuffer(obj, int(count), dtype, int(count) * dtype.itemsize, kind,
                            explicit_device, False, None)
        _check_device(rb, what, comm_device)
        return rb
    ptr, n, own_dtype, nbytes, kind, device, readonly, desc, keep = _raw(obj, what)
    if dtype is None:
        if own_dtype is None:
            raise _bad(what, "element type %s has no NCCL datatype; pass dtype= in a BufferSpec"
                             % desc)
        dtype = own_dtype
        avail = n
    else:
        avail = nbytes // dtype.itemsize
    if count is None:
        count = avail
    else:
        count = int(count)
        if count < 0 or count > avail:
            raise _bad(what, "count = %d, but the buffer holds %d elements of %s"
                             % (count, avail, dtype.name))
    if writable and readonly:
        raise _bad(what, "the buffer is read-only, but this call writes into it")
    rb = ResolvedBuffer(ptr, count, dtype, count * dtype.itemsize, kind, device, readonly, keep)
    _check_device(rb, what, comm_device)
    return rb


def _dtype_of(dtype):
    if isinstance(dtype, NcclDataType):
        return dtype
    return NcclDataType.from_numpy_dtype(dtype)


def _check_device(rb, what, comm_device):
    host_comm = comm_device is None or comm_device < 0
    if host_comm and rb.kind == CUDA:
        raise _bad(what, "the buffer is in CUDA memory (device %s), but the communicator is a "
                         "host communicator" % rb.device)
    if not host_comm and rb.kind == HOST:
        raise _bad(what, "the buffer is in host memory, but the communicator uses CUDA device %d"
                         % comm_device)
    if not host_comm and rb.device is not None and rb.device != comm_device:
        raise _bad(what, "the buffer is on CUDA device %d, but the communicator uses device %d"
                         % (rb.device, comm_device))
