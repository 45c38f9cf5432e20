"""Exceptions: one class per ncclResult_t, each carrying the result code and
the library's last-error message (ncclGetLastError), so that a Python user
sees why mpccl refused a call and not only that it did."""

SUCCESS = 0
UNHANDLED_CUDA_ERROR = 1
SYSTEM_ERROR = 2
INTERNAL_ERROR = 3
INVALID_ARGUMENT = 4
INVALID_USAGE = 5
REMOTE_ERROR = 6
IN_PROGRESS = 7

_NAMES = {
    SUCCESS: "ncclSuccess",
    UNHANDLED_CUDA_ERROR: "ncclUnhandledCudaError",
    SYSTEM_ERROR: "ncclSystemError",
    INTERNAL_ERROR: "ncclInternalError",
    INVALID_ARGUMENT: "ncclInvalidArgument",
    INVALID_USAGE: "ncclInvalidUsage",
    REMOTE_ERROR: "ncclRemoteError",
    IN_PROGRESS: "ncclInProgress",
}


class NcclError(RuntimeError):
    """A call into libmpccl failed.  `result` is the ncclResult_t value,
    `message` the library's explanation (may be empty)."""

    result = INTERNAL_ERROR

    def __init__(self, message="", result=None, function=None):
        if result is not None:
            self.result = int(result)
        self.message = message or ""
        self.function = function
        name = _NAMES.get(self.result, "ncclResult(%d)" % self.result)
        text = name
        if self.message:
            text += ": " + self.message
        # The library's messages usually start with the function's name already.
        if function and not self.message.startswith(function):
            text = "%s: %s" % (function, text)
        super().__init__(text)


class NcclUnhandledCudaError(NcclError):
    result = UNHANDLED_CUDA_ERROR


class NcclSystemError(NcclError):
    result = SYSTEM_ERROR


class NcclInternalError(NcclError):
    result = INTERNAL_ERROR


class NcclInvalid(NcclError, ValueError):
    """Invalid argument or usage: a programming error in the caller.  Also a
    ValueError, so generic argument handling catches it."""

    result = INVALID_ARGUMENT


class NcclInvalidArgument(NcclInvalid):
    result = INVALID_ARGUMENT


class NcclInvalidUsage(NcclInvalid):
    result = INVALID_USAGE


class NcclRemoteError(NcclError):
    result = REMOTE_ERROR


_BY_RESULT = {
    UNHANDLED_CUDA_ERROR: NcclUnhandledCudaError,
    SYSTEM_ERROR: NcclSystemError,
    INTERNAL_ERROR: NcclInternalError,
    INVALID_ARGUMENT: NcclInvalidArgument,
    INVALID_USAGE: NcclInvalidUsage,
    REMOTE_ERROR: NcclRemoteError,
}


def error_for(result, message="", function=None):
    """The exception instance for a non-success ncclResult_t."""
    cls = _BY_RESULT.get(int(result), NcclError)
    return cls(message, result=result, function=function)


def invalid_argument(message):
    """An argument error detected in Python before anything reaches the library."""
    return NcclInvalidArgument(message, result=INVALID_ARGUMENT)


def invalid_usage(message):
    return NcclInvalidUsage(message, result=INVALID_USAGE)


def result_name(result):
    return _NAMES.get(int(result), "ncclResult(%d)" % int(result))
