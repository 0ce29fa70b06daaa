"""The C ABI of include/mxfuse.h in ctypes, loaded once: its enums and flags, the dtype
table, its structs, every function with its prototype, and its statuses as Python
exceptions. The one mirror of the header: the package and its tests use it.

The library is the one installed beside this file by `pip install .`; MXFUSE_LIB names
another build (a development tree's build/libmxfuse.so) and takes precedence.
"""
import ctypes
import os
from collections import namedtuple

MAX_DIMS = 6

# mxf_status
OK, ERR_INVALID_VALUE, ERR_NOT_SUPPORTED, ERR_CUDA, ERR_NO_MEMORY, ERR_INTERNAL = range(6)
# mxf_dtype
F32, F16, BF16, E4M3, E5M2, E2M1, E2M1X2, E8M0, U8, I8, I32 = range(1, 12)
# flags
AMAX_ACCUMULATE = 1
AMAX_B_PACKED = 2
PROJ_W_OUT_IN = 1
PROJ_FP32_EPILOGUE = 2
QUANT_ROWS = 1
QUANT_COLS = 2
# mxf_sf_layout
SF_COMPACT, SF_SWIZZLED = 0, 1

# The dtype table: per mxf_dtype, the name of the torch / NumPy (ml_dtypes) / JAX dtype
# holding the same elements (None: no framework array holds them) and its DLPack (type code,
# bits); the library's name and bits per element are added from the library below.
_ARRAYS = {
    F32: ("float32", (2, 32)),
    F16: ("float16", (2, 16)),
    BF16: ("bfloat16", (4, 16)),
    E4M3: ("float8_e4m3fn", (10, 8)),
    E5M2: ("float8_e5m2", (12, 8)),
    # logical e2m1 values: DLPack's float4_e2m1fn tensors; a NumPy float4_e2m1fn array
    # holds one value per byte, which the library does not read
    E2M1: (None, (17, 4)),
    E2M1X2: ("float4_e2m1fn_x2", None),
    E8M0: ("float8_e8m0fnu", (14, 8)),
    U8: ("uint8", (1, 8)),
    I8: ("int8", (0, 8)),
    I32: ("int32", (0, 32)),
}
Dtype = namedtuple("Dtype", ("name", "bits", "array_name", "dlpack"))


# MXF_DEVICE_CPU, MXF_DEVICE_CUDA(i), MXF_DEVICE_IS_CUDA(d), MXF_DEVICE_ORDINAL(d)
DEVICE_CPU = 0


def device_cuda(i):
    return 1 + i


def device_is_cuda(d):
    return d >= 1


def device_ordinal(d):
    return d - 1


def device_name(d):
    return f"cuda:{device_ordinal(d)}" if device_is_cuda(d) else "cpu"


# ------------------------------------------------------------------ exceptions
class MxfuseError(Exception):
    """A failed mxfuse call; `status` is the C status, `message` mxf_last_error()."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class InvalidValueError(MxfuseError, ValueError):
    """The request breaks a rule of the contract (MXF_ERR_INVALID_VALUE)."""


class NotSupportedError(MxfuseError, NotImplementedError):
    """Valid, but the backend or device cannot run it (MXF_ERR_NOT_SUPPORTED)."""


class CudaError(MxfuseError, RuntimeError):
    """A CUDA call failed (MXF_ERR_CUDA)."""


class OutOfMemoryError(MxfuseError, MemoryError):
    """A host or device allocation failed (MXF_ERR_NO_MEMORY)."""


class InternalError(MxfuseError, RuntimeError):
    """A bug in mxfuse (MXF_ERR_INTERNAL)."""


EXCEPTIONS = {ERR_INVALID_VALUE: InvalidValueError, ERR_NOT_SUPPORTED: NotSupportedError, ERR_CUDA: CudaError,
              ERR_NO_MEMORY: OutOfMemoryError, ERR_INTERNAL: InternalError}


def error(status, message):
    """The exception of a status, with a message."""
    return EXCEPTIONS.get(status, MxfuseError)(status, message)


# ------------------------------------------------------------------ structs
class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("device", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("shape", ctypes.c_int64 * MAX_DIMS),
                ("stride", ctypes.c_int64 * MAX_DIMS)]


GEMM_AMAX_TENSORS = ("a", "b", "sfa", "sfb", "c", "amax")
PROJ_ROPE_TENSORS = ("x", "w", "x_scale", "w_scale", "cos", "sin", "out_row", "out_scales_row", "out_col",
                     "out_scales_col")
QUANTIZE_TENSORS = ("x", "q_row", "s_row", "q_col", "s_col")
DEQUANTIZE_TENSORS = ("q", "s", "y")
GROUPED_GEMM_AMAX_TENSORS = ("a", "b", "sfa", "sfb", "c", "amax", "offs", "counts", "group_alpha", "group_amax")


def _tensor_fields(names, ctype):
    return [(n, ctype) for n in names]


class GemmAmaxDesc(ctypes.Structure):
    _fields_ = _tensor_fields(GEMM_AMAX_TENSORS, Tensor) + [
        ("sf_vec", ctypes.c_int), ("flags", ctypes.c_uint), ("alpha", ctypes.POINTER(ctypes.c_float))]


class GemmAmaxArgs(ctypes.Structure):
    _fields_ = _tensor_fields(GEMM_AMAX_TENSORS, ctypes.c_void_p) + [("alpha", ctypes.POINTER(ctypes.c_float))]


class ProjRopeDesc(ctypes.Structure):
    _fields_ = _tensor_fields(PROJ_ROPE_TENSORS, Tensor) + [("flags", ctypes.c_uint)]


class ProjRopeArgs(ctypes.Structure):
    _fields_ = _tensor_fields(PROJ_ROPE_TENSORS, ctypes.c_void_p)


class QuantizeDesc(ctypes.Structure):
    _fields_ = _tensor_fields(QUANTIZE_TENSORS, Tensor) + [("directions", ctypes.c_uint)]


class QuantizeArgs(ctypes.Structure):
    _fields_ = _tensor_fields(QUANTIZE_TENSORS, ctypes.c_void_p)


class DequantizeDesc(ctypes.Structure):
    _fields_ = _tensor_fields(DEQUANTIZE_TENSORS, Tensor) + [("direction", ctypes.c_uint)]


class DequantizeArgs(ctypes.Structure):
    _fields_ = _tensor_fields(DEQUANTIZE_TENSORS, ctypes.c_void_p)


class GroupedGemmAmaxDesc(ctypes.Structure):
    _fields_ = _tensor_fields(GROUPED_GEMM_AMAX_TENSORS, Tensor) + [
        ("sf_vec", ctypes.c_int), ("flags", ctypes.c_uint), ("alpha", ctypes.POINTER(ctypes.c_float))]


class GroupedGemmAmaxArgs(ctypes.Structure):
    _fields_ = _tensor_fields(GROUPED_GEMM_AMAX_TENSORS, ctypes.c_void_p) + [
        ("alpha", ctypes.POINTER(ctypes.c_float))]


# ------------------------------------------------------------------ the library
def library_path():
    env = os.environ.get("MXFUSE_LIB", "")
    if env:
        if not os.path.exists(env):
            raise ImportError(f"mxfuse: MXFUSE_LIB={env} does not exist")
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libmxfuse.so", "libmxfuse.so.0", "libmxfuse.dylib"):
        p = os.path.join(here, name)
        if os.path.exists(p):
            return p
    raise ImportError(f"mxfuse: libmxfuse.so is not installed in {here}; reinstall the package "
                      "(pip install .) or point MXFUSE_LIB at a build of the library")


lib = ctypes.CDLL(library_path())
PATH = lib._name

_p = ctypes.POINTER
_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_i32 = ctypes.c_int
_i64 = ctypes.c_int64
_str = ctypes.c_char_p
_PROTOS = {
    "mxf_version": (_i32, []),
    "mxf_version_string": (_str, []),
    "mxf_status_string": (_str, [_i32]),
    "mxf_last_error": (_str, []),
    "mxf_dtype_name": (_str, [_i32]),
    "mxf_dtype_bits": (_i32, [_i32]),
    "mxf_plan_workspace_size": (_sz, [_vp]),
    "mxf_plan_backend": (_str, [_vp]),
    "mxf_plan_destroy": (None, [_vp]),
    "mxf_plan_cache_clear": (None, []),
    "mxf_plan_cache_workspace_bytes": (_sz, []),
    "mxf_sf_size": (_sz, [_i64, _i64, _i64, _i32, _i32]),
    "mxf_sf_swizzled_offset": (_i64, [_i64, _i64, _i64, _i64, _i64, _i32]),
    "mxf_sf_swizzle": (_i32, [_vp, _vp, _i64, _i64, _i64, _i32, ctypes.c_uint8]),
    "mxf_sf_unswizzle": (_i32, [_vp, _vp, _i64, _i64, _i64, _i32]),
    "mxf_convert": (_i32, [_vp, _i32, _vp, _i32, _i64]),
    "mxf_pack_weights_size": (_i32, [_p(Tensor), _p(Tensor), _i32, _p(_sz)]),
    "mxf_pack_weights": (_i32, [_p(Tensor), _p(Tensor), _i32, _vp, _sz]),
    "mxf_cuda_device_count": (_i32, []),
    "mxf_has_cuda": (_i32, []),
}
# per op: its tensors in the desc's order, its desc and args structs
OPS = {"gemm_amax": (GEMM_AMAX_TENSORS, GemmAmaxDesc, GemmAmaxArgs),
       "proj_rope": (PROJ_ROPE_TENSORS, ProjRopeDesc, ProjRopeArgs),
       "quantize": (QUANTIZE_TENSORS, QuantizeDesc, QuantizeArgs),
       "dequantize": (DEQUANTIZE_TENSORS, DequantizeDesc, DequantizeArgs)}
# with the ops that have no XLA handler yet (mxfuse.jax registers those of OPS)
ALL_OPS = dict(OPS, grouped_gemm_amax=(GROUPED_GEMM_AMAX_TENSORS, GroupedGemmAmaxDesc, GroupedGemmAmaxArgs))
# and its functions: mxf_<op>_plan, _run, the one call, _workspace_size, _with_workspace
for _op, (_, _desc, _args) in ALL_OPS.items():
    _PROTOS.update({
        f"mxf_{_op}_plan": (_i32, [_p(_vp), _p(_desc)]),
        f"mxf_{_op}_run": (_i32, [_vp, _p(_args), _vp, _sz, _vp]),
        f"mxf_{_op}": (_i32, [_p(_desc), _vp]),
        f"mxf_{_op}_workspace_size": (_i32, [_p(_desc), _p(_sz)]),
        f"mxf_{_op}_with_workspace": (_i32, [_p(_desc), _vp, _sz, _vp]),
    })
for _name, (_res, _argtypes) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _argtypes


# mxf_dtype_name, mxf_dtype_bits and the framework names, by mxf_dtype
DTYPES = {code: Dtype(lib.mxf_dtype_name(code).decode(), lib.mxf_dtype_bits(code), *arrays)
          for code, arrays in _ARRAYS.items()}


def last_error():
    return lib.mxf_last_error().decode("utf-8", "replace")


def check(status):
    """Raises the exception of a failed status, with the library's message."""
    if status != OK:
        raise error(status, last_error())


def version():
    return lib.mxf_version_string().decode()


def cuda_device_count():
    return lib.mxf_cuda_device_count()
