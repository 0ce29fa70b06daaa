"""The C library, loaded once: libmxfuse's structs (include/mxfuse.h) mirrored in ctypes,
its functions with their prototypes, and its statuses turned into Python exceptions.

The library is the one installed beside this file by `pip install .`; MXFUSE_LIB names
another build (a development tree's build/libmxfuse.so) and takes precedence.
"""
import ctypes
import os

MAX_DIMS = 6

# mxf_dtype
F32, F16, BF16, E4M3, E5M2, E2M1, E2M1X2, E8M0, U8, I8 = range(1, 11)
DTYPE_NAMES = {F32: "f32", F16: "f16", BF16: "bf16", E4M3: "e4m3", E5M2: "e5m2", E2M1: "e2m1",
               E2M1X2: "e2m1x2", E8M0: "e8m0", U8: "u8", I8: "i8"}
# mxf_status
OK, ERR_INVALID_VALUE, ERR_NOT_SUPPORTED, ERR_CUDA, ERR_NO_MEMORY, ERR_INTERNAL = range(6)
# flags
AMAX_ACCUMULATE = 1
PROJ_W_OUT_IN = 1
PROJ_FP32_EPILOGUE = 2
QUANT_ROWS = 1
QUANT_COLS = 2
SF_COMPACT, SF_SWIZZLED = 0, 1


def device_cuda(i):
    return 1 + i


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


_EXC = {ERR_INVALID_VALUE: InvalidValueError, ERR_NOT_SUPPORTED: NotSupportedError, ERR_CUDA: CudaError,
        ERR_NO_MEMORY: OutOfMemoryError, ERR_INTERNAL: InternalError}


# ------------------------------------------------------------------ structs
class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("device", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("shape", ctypes.c_int64 * MAX_DIMS),
                ("stride", ctypes.c_int64 * MAX_DIMS)]


class GemmAmaxDesc(ctypes.Structure):
    _fields_ = [("a", Tensor), ("b", Tensor), ("sfa", Tensor), ("sfb", Tensor), ("c", Tensor), ("amax", Tensor),
                ("sf_vec", ctypes.c_int), ("flags", ctypes.c_uint), ("alpha", ctypes.POINTER(ctypes.c_float)),
                ("mma_tile_m", ctypes.c_int), ("mma_tile_n", ctypes.c_int), ("cluster_m", ctypes.c_int),
                ("cluster_n", ctypes.c_int)]


class GemmAmaxArgs(ctypes.Structure):
    _fields_ = [("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("sfa", ctypes.c_void_p), ("sfb", ctypes.c_void_p),
                ("c", ctypes.c_void_p), ("amax", ctypes.c_void_p), ("alpha", ctypes.POINTER(ctypes.c_float))]


PROJ_TENSORS = ("x", "w", "x_scale", "w_scale", "cos", "sin", "out_row", "out_scales_row", "out_col",
                "out_scales_col")


class ProjRopeDesc(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in PROJ_TENSORS] + [("flags", ctypes.c_uint)]


class ProjRopeArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in PROJ_TENSORS]


class QuantizeDesc(ctypes.Structure):
    _fields_ = [("x", Tensor), ("q_row", Tensor), ("s_row", Tensor), ("q_col", Tensor), ("s_col", Tensor),
                ("directions", ctypes.c_uint)]


class QuantizeArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("q_row", ctypes.c_void_p), ("s_row", ctypes.c_void_p),
                ("q_col", ctypes.c_void_p), ("s_col", ctypes.c_void_p)]


class DequantizeDesc(ctypes.Structure):
    _fields_ = [("q", Tensor), ("s", Tensor), ("y", Tensor), ("direction", ctypes.c_uint)]


class DequantizeArgs(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("s", ctypes.c_void_p), ("y", ctypes.c_void_p)]


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


_p = ctypes.POINTER
_vp = ctypes.c_void_p
_sz = ctypes.c_size_t

lib = ctypes.CDLL(library_path())
PATH = lib._name

_PROTOS = {
    "mxf_version_string": (ctypes.c_char_p, []),
    "mxf_last_error": (ctypes.c_char_p, []),
    "mxf_cuda_device_count": (ctypes.c_int, []),
    "mxf_has_cuda": (ctypes.c_int, []),
    "mxf_plan_workspace_size": (_sz, [_vp]),
    "mxf_plan_backend": (ctypes.c_char_p, [_vp]),
    "mxf_plan_destroy": (None, [_vp]),
    "mxf_plan_cache_clear": (None, []),
    "mxf_plan_cache_workspace_bytes": (_sz, []),
    "mxf_gemm_amax_plan": (ctypes.c_int, [_p(_vp), _p(GemmAmaxDesc)]),
    "mxf_gemm_amax_run": (ctypes.c_int, [_vp, _p(GemmAmaxArgs), _vp, _sz, _vp]),
    "mxf_proj_rope_plan": (ctypes.c_int, [_p(_vp), _p(ProjRopeDesc)]),
    "mxf_proj_rope_run": (ctypes.c_int, [_vp, _p(ProjRopeArgs), _vp, _sz, _vp]),
    "mxf_quantize_plan": (ctypes.c_int, [_p(_vp), _p(QuantizeDesc)]),
    "mxf_quantize_run": (ctypes.c_int, [_vp, _p(QuantizeArgs), _vp, _sz, _vp]),
    "mxf_dequantize_plan": (ctypes.c_int, [_p(_vp), _p(DequantizeDesc)]),
    "mxf_dequantize_run": (ctypes.c_int, [_vp, _p(DequantizeArgs), _vp, _sz, _vp]),
    "mxf_sf_size": (_sz, [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_int]),
    "mxf_sf_swizzle": (ctypes.c_int, [_vp, _vp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                      ctypes.c_uint8]),
    "mxf_sf_unswizzle": (ctypes.c_int, [_vp, _vp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]),
}
for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def last_error():
    return lib.mxf_last_error().decode("utf-8", "replace")


def check(status):
    """Raises the exception of a failed status, with the library's message."""
    if status != OK:
        raise _EXC.get(status, MxfuseError)(status, last_error())


def version():
    return lib.mxf_version_string().decode()


def cuda_device_count():
    return lib.mxf_cuda_device_count()


class Plan:
    """Owns one C plan: its workspace size, backend name, and the run function of its op."""

    __slots__ = ("handle", "workspace_size", "backend", "_run", "__weakref__")

    def __init__(self, plan_fn, run_fn, desc):
        self.handle = None
        h = ctypes.c_void_p()
        check(plan_fn(ctypes.byref(h), ctypes.byref(desc)))
        self.handle = h
        self.workspace_size = lib.mxf_plan_workspace_size(h)
        self.backend = lib.mxf_plan_backend(h).decode()
        self._run = run_fn

    def run(self, args, workspace_ptr, stream):
        check(self._run(self.handle, ctypes.byref(args), workspace_ptr, self.workspace_size, stream))

    def __del__(self, _destroy=lib.mxf_plan_destroy):
        if self.handle:
            _destroy(self.handle)
            self.handle = None
