"""mxfuse_ctypes — a small ctypes binding of libmxfuse for the Python tests.

Covers what the tests call: mxf_convert (host arrays) and the one-call forms of
mxf_quantize / mxf_dequantize on host tensors, with the structs of include/mxfuse.h
mirrored below. Arrays are numpy arrays; every call checks the returned status and
raises MxfError with mxf_last_error()'s message.
"""
import ctypes
import os

import numpy as np

# mxf_dtype (include/mxfuse.h)
F32, F16, BF16, E4M3, E5M2, E2M1, E2M1X2, E8M0, U8, I8 = range(1, 11)
# mxf_status
OK, ERR_INVALID_VALUE, ERR_NOT_SUPPORTED, ERR_CUDA, ERR_NO_MEMORY, ERR_INTERNAL = range(6)
QUANT_ROWS, QUANT_COLS = 1, 2
MAX_DIMS = 6


class MxfError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"status {status}: {message}")
        self.status = status
        self.message = message


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("device", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("stride", ctypes.c_int64 * MAX_DIMS),
    ]


class QuantizeDesc(ctypes.Structure):
    _fields_ = [
        ("x", Tensor),
        ("q_row", Tensor),
        ("s_row", Tensor),
        ("q_col", Tensor),
        ("s_col", Tensor),
        ("directions", ctypes.c_uint),
    ]


class DequantizeDesc(ctypes.Structure):
    _fields_ = [("q", Tensor), ("s", Tensor), ("y", Tensor), ("direction", ctypes.c_uint)]


def host_tensor(arr, dtype):
    """A C-contiguous host tensor over a numpy array (shape as the array's)."""
    assert arr.flags["C_CONTIGUOUS"]
    t = Tensor()
    t.data = arr.ctypes.data
    t.dtype = dtype
    t.device = 0
    t.ndim = arr.ndim
    for i, s in enumerate(arr.shape):
        t.shape[i] = s
    return t


class Mxfuse:
    """The loaded library with typed wrappers."""

    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self._last_error = self._fn("mxf_last_error", ctypes.c_char_p, [])
        self._convert = self._fn("mxf_convert", ctypes.c_int,
                                 [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64])

    def _fn(self, name, restype, argtypes):
        # looked up on first use, so that a missing symbol fails only the tests needing it
        f = getattr(self.lib, name)
        f.restype = restype
        f.argtypes = argtypes
        return f

    def last_error(self):
        return self._last_error().decode("utf-8", "replace")

    def _check(self, status):
        if status != OK:
            raise MxfError(status, self.last_error())

    def convert_raw(self, src, src_dtype, dst, dst_dtype, n):
        """mxf_convert on numpy buffers; returns the status (no raise)."""
        sp = src.ctypes.data if src is not None else None
        dp = dst.ctypes.data if dst is not None else None
        return self._convert(sp, src_dtype, dp, dst_dtype, n)

    def convert(self, src, src_dtype, dst_dtype, n, dst_storage):
        """Converts n values; dst_storage is the numpy array to fill (returned)."""
        self._check(self.convert_raw(src, src_dtype, dst_storage, dst_dtype, n))
        return dst_storage

    def quantize(self, x, directions=QUANT_ROWS | QUANT_COLS):
        """MXFP8-quantizes a (rows, cols) float32 or bfloat16 matrix; returns
        (q_row, s_row, q_col, s_col) as uint8 arrays (None for a direction not asked)."""
        import ml_dtypes

        rows, cols = x.shape
        xd = F32 if x.dtype == np.float32 else BF16
        assert xd == F32 or x.dtype == ml_dtypes.bfloat16
        x = np.ascontiguousarray(x)
        out = [None] * 4
        desc = QuantizeDesc()
        desc.x = host_tensor(x, xd)
        desc.directions = directions
        if directions & QUANT_ROWS:
            out[0] = np.full((rows, cols), 0xA5, np.uint8)
            out[1] = np.full((rows, -(-cols // 32)), 0xA5, np.uint8)
            desc.q_row = host_tensor(out[0], E4M3)
            desc.s_row = host_tensor(out[1], E8M0)
        if directions & QUANT_COLS:
            out[2] = np.full((rows, cols), 0xA5, np.uint8)
            out[3] = np.full((-(-rows // 32), cols), 0xA5, np.uint8)
            desc.q_col = host_tensor(out[2], E4M3)
            desc.s_col = host_tensor(out[3], E8M0)
        fn = self._fn("mxf_quantize", ctypes.c_int, [ctypes.POINTER(QuantizeDesc), ctypes.c_void_p])
        self._check(fn(ctypes.byref(desc), None))
        return tuple(out)

    def dequantize(self, q, s, direction):
        """e4m3 codes q (rows, cols) with e8m0 scales s -> float32 (rows, cols)."""
        y = np.full(q.shape, np.nan, np.float32)
        desc = DequantizeDesc()
        desc.q = host_tensor(q, E4M3)
        desc.s = host_tensor(s, E8M0)
        desc.y = host_tensor(y, F32)
        desc.direction = direction
        fn = self._fn("mxf_dequantize", ctypes.c_int, [ctypes.POINTER(DequantizeDesc), ctypes.c_void_p])
        self._check(fn(ctypes.byref(desc), None))
        return y


def load_from_env():
    """The library named by $MXFUSE_LIB, or None when the variable is unset or empty.
    Raises (never skips) when it is set but cannot be loaded."""
    path = os.environ.get("MXFUSE_LIB", "")
    if not path:
        return None
    if not os.path.exists(path):
        raise RuntimeError(f"MXFUSE_LIB={path} does not exist")
    return Mxfuse(path)
