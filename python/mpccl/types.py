"""Datatypes, reduction operators and the other enums of the C API, with the
NumPy/DLPack/CUDA-array-interface type mappings buffers need."""

import enum


class NcclDataType(enum.IntEnum):
    """ncclDataType_t."""
    INT8 = 0
    CHAR = 0
    UINT8 = 1
    INT32 = 2
    INT = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    HALF = 6
    FLOAT32 = 7
    FLOAT = 7
    FLOAT64 = 8
    DOUBLE = 8
    BFLOAT16 = 9
    FLOAT8E4M3 = 10
    FLOAT8E5M2 = 11

    @property
    def itemsize(self):
        return _ITEMSIZE[self]

    @property
    def numpy_dtype(self):
        import numpy
        if self in _NUMPY_NAMES:
            return numpy.dtype(_NUMPY_NAMES[self])
        try:  # bfloat16 / float8 live in ml_dtypes when installed
            import ml_dtypes
            return numpy.dtype(getattr(ml_dtypes, _ML_NAMES[self]))
        except (ImportError, AttributeError):
            raise TypeError("no NumPy dtype for %s (install ml_dtypes)" % self.name)

    @classmethod
    def from_numpy_dtype(cls, dtype):
        import numpy
        dtype = numpy.dtype(dtype)
        dt = _from_name(dtype.name)
        if dt is None:
            raise TypeError("NumPy dtype %s has no NCCL datatype" % dtype)
        return dt


_ITEMSIZE = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}
_NUMPY_NAMES = {0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64",
                6: "float16", 7: "float32", 8: "float64"}
_ML_NAMES = {9: "bfloat16", 10: "float8_e4m3fn", 11: "float8_e5m2"}
_BY_NAME = {name: NcclDataType(v) for v, name in list(_NUMPY_NAMES.items()) + list(_ML_NAMES.items())}
_BY_NAME["float8_e4m3"] = NcclDataType.FLOAT8E4M3


def _from_name(name):
    """'float32', 'bfloat16', also PyTorch's 'torch.bfloat16' -> NcclDataType or None."""
    if name.startswith("torch."):
        name = name[len("torch."):]
    return _BY_NAME.get(name)


# Module-level constants, as nccl4py offers them.
INT8, CHAR, UINT8 = NcclDataType.INT8, NcclDataType.CHAR, NcclDataType.UINT8
INT32, INT, UINT32 = NcclDataType.INT32, NcclDataType.INT, NcclDataType.UINT32
INT64, UINT64 = NcclDataType.INT64, NcclDataType.UINT64
FLOAT16, HALF, BFLOAT16 = NcclDataType.FLOAT16, NcclDataType.HALF, NcclDataType.BFLOAT16
FLOAT32, FLOAT = NcclDataType.FLOAT32, NcclDataType.FLOAT
FLOAT64, DOUBLE = NcclDataType.FLOAT64, NcclDataType.DOUBLE
FLOAT8E4M3, FLOAT8E5M2 = NcclDataType.FLOAT8E4M3, NcclDataType.FLOAT8E5M2


def from_typestr(typestr):
    """Array-interface type string ('<f4', '|u1', ...) -> NcclDataType, or None."""
    if len(typestr) < 3 or typestr[0] == ">":
        return None
    kind, size = typestr[1], int(typestr[2:])
    return _KIND_SIZE.get((kind, size))


_KIND_SIZE = {("i", 1): INT8, ("u", 1): UINT8, ("i", 4): INT32, ("u", 4): UINT32,
              ("i", 8): INT64, ("u", 8): UINT64, ("f", 2): FLOAT16, ("f", 4): FLOAT32,
              ("f", 8): FLOAT64}


def from_dlpack(code, bits, lanes):
    """DLDataType -> NcclDataType, or None (code 0 int, 1 uint, 2 float, 4 bfloat)."""
    if lanes != 1:
        return None
    if code == 4 and bits == 16:
        return BFLOAT16
    kind = {0: "i", 1: "u", 2: "f"}.get(code)
    return _KIND_SIZE.get((kind, bits // 8)) if kind and bits % 8 == 0 else None


def from_buffer_format(fmt, itemsize):
    """struct-module format of a memoryview -> NcclDataType, or None."""
    fmt = fmt.lstrip("@=<")
    if len(fmt) != 1:
        return None
    if fmt in "bBhHiIlLqQnN":
        return _KIND_SIZE.get(("u" if fmt.isupper() else "i", itemsize))
    if fmt in "efd":
        return _KIND_SIZE.get(("f", itemsize))
    if fmt == "c":
        return INT8
    return None


class NcclRedOp(enum.IntEnum):
    """ncclRedOp_t's built-in operators."""
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


SUM, PROD, MAX, MIN, AVG = NcclRedOp.SUM, NcclRedOp.PROD, NcclRedOp.MAX, NcclRedOp.MIN, NcclRedOp.AVG


class NcclScalarResidence(enum.IntEnum):
    """Where create_pre_mul_sum's scalar lives."""
    DEVICE = 0
    HOST_IMMEDIATE = 1


class CommShrinkFlag(enum.IntEnum):
    """shrinkFlags of ncclCommShrink."""
    DEFAULT = 0x00
    ABORT = 0x01


class WindowFlag(enum.IntFlag):
    """winFlags of ncclCommWindowRegister."""
    DEFAULT = 0x00
    COLL_SYMMETRIC = 0x01
    STRICT_ORDERING = 0x02


WINDOW_REQUIRED_ALIGNMENT = 4096


class NcclGinType(enum.IntEnum):
    """GPU-initiated networking a communicator offers."""
    NONE = 0
    PROXY = 2
    GDAKI = 3
    GPI = 4


class NcclGinConnectionType(enum.IntEnum):
    NONE = 0
    FULL = 1
    RAIL = 2


def gin_type(value):
    """An int from the C side as NcclGinType (unknown values stay ints)."""
    try:
        return NcclGinType(value)
    except ValueError:
        return int(value)
