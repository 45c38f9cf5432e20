"""Stream arguments -> cudaStream_t handles (an int; 0 is the default stream).

Accepted: None, an int handle, anything with __cuda_stream__ (the CUDA stream
protocol: returns (version, handle)), or objects with .cuda_stream (PyTorch)
or .ptr (CuPy).  Host communicators ignore the stream."""

from . import errors


def stream_handle(stream):
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise errors.invalid_argument("stream = %r: expected None, an int handle or a stream object"
                                      % (stream,))
    if isinstance(stream, int):
        if stream < 0:
            raise errors.invalid_argument("stream = %d: a handle cannot be negative" % stream)
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if isinstance(value, tuple) and len(value) == 2:
            return int(value[1])
        raise errors.invalid_argument("stream.__cuda_stream__() returned %r, expected (version, handle)"
                                      % (value,))
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise errors.invalid_argument(
        "stream of type %s: expected None, an int handle, an object with __cuda_stream__, "
        ".cuda_stream or .ptr" % type(stream).__name__)
