"""mem_alloc / mem_free: device memory from ncclMemAlloc (suited to
registration and windows).  The buffer exposes the CUDA array interface as
bytes, so CuPy/PyTorch can wrap it and every communicator call accepts it."""

import ctypes

from . import _lib


class Buffer:
    """Bytes of device memory from ncclMemAlloc; freed by mem_free(), free()
    or when garbage collected."""

    def __init__(self, ptr, size, device):
        self._ptr = ptr
        self.size = size
        self.device = device  # the CUDA device current at allocation (None: unknown)

    @property
    def ptr(self):
        if not self._ptr:
            raise RuntimeError("this mpccl.Buffer has been freed")
        return self._ptr

    @property
    def is_valid(self):
        return bool(self._ptr)

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.ptr, False),
                "strides": None, "version": 3}

    def free(self):
        """Idempotent."""
        ptr, self._ptr = self._ptr, 0
        if ptr:
            _lib.call("ncclMemFree", ptr)

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass  # never raise from a finalizer (e.g. at interpreter exit)

    def __repr__(self):
        return "<mpccl.Buffer %s bytes at %#x>" % (self.size, self._ptr) if self._ptr else \
            "<mpccl.Buffer freed>"


def mem_alloc(size, device=None):
    """ncclMemAlloc(size) on `device` (default: the current CUDA device).  The
    library may round the size up; Buffer.size is the size asked for."""
    if device is not None:
        _set_device(int(device))
    out = ctypes.c_void_p()
    _lib.call("ncclMemAlloc", ctypes.byref(out), ctypes.c_size_t(int(size)))
    return Buffer(out.value, int(size), device)


def mem_free(buf):
    buf.free()


def _set_device(device):
    try:
        rt = ctypes.CDLL("libcudart.so", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        from . import errors
        raise errors.invalid_usage("mem_alloc(device=%d): libcudart.so not found to select the "
                                   "device; select it with CuPy/PyTorch and pass device=None"
                                   % device)
    rc = rt.cudaSetDevice(ctypes.c_int(device))
    if rc != 0:
        from . import errors
        raise errors.error_for(errors.UNHANDLED_CUDA_ERROR, "cudaSetDevice(%d) failed: %d"
                               % (device, rc), function="mem_alloc")
