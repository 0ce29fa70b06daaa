"""Tensors across the boundary: what the C library needs of an array (data pointer,
device, dtype, shape, strides in elements) read from torch tensors, NumPy arrays and any
DLPack producer, and outputs allocated by the framework the inputs came from.

torch tensors and NumPy arrays are read through their own attributes (the cheapest way
per call); anything else through DLPack (`__dlpack__`), whose capsule is held for the
duration of the call. Nothing here converts values: dtypes map one to one onto the
library's, and a dtype with no counterpart is refused.
"""
import ctypes
import sys

from . import _lib as L

# ------------------------------------------------------------------ dtype names
# Every spelling a user may give for a dtype (c_dtype=..., dtype=...), by name.
_BY_NAME = {
    "float32": L.F32, "f32": L.F32, "float": L.F32,
    "float16": L.F16, "f16": L.F16, "half": L.F16,
    "bfloat16": L.BF16, "bf16": L.BF16,
    "float8_e4m3fn": L.E4M3, "e4m3": L.E4M3,
    "float8_e5m2": L.E5M2, "e5m2": L.E5M2,
    "float4_e2m1fn_x2": L.E2M1X2, "e2m1x2": L.E2M1X2, "e2m1": L.E2M1X2, "fp4": L.E2M1X2,
    "float8_e8m0fnu": L.E8M0, "e8m0": L.E8M0,
    "uint8": L.U8, "u8": L.U8, "int8": L.I8, "i8": L.I8,
}


def dtype_code(d):
    """The library's dtype for a torch / NumPy / JAX dtype, a type or a name."""
    if isinstance(d, int) and d in L.DTYPE_NAMES:
        return d
    name = d if isinstance(d, str) else getattr(d, "name", None) or getattr(d, "__name__", None) or str(d)
    name = str(name).replace("torch.", "").replace("jnp.", "")
    if name in _BY_NAME:
        return _BY_NAME[name]
    try:  # numpy / ml_dtypes / jax dtypes and scalar types
        import numpy as np

        n = np.dtype(d).name
        if n in _BY_NAME:
            return _BY_NAME[n]
    except Exception:
        pass
    raise TypeError(f"mxfuse: dtype {d!r} has no counterpart in mxfuse; expected one of "
                    "float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, float4_e2m1fn_x2 (packed pairs), "
                    "float8_e8m0fnu, uint8, int8")


# ------------------------------------------------------------------ frameworks
def _torch():
    return sys.modules.get("torch")


def _np():
    return sys.modules.get("numpy")


def framework(x):
    """'torch', 'numpy', 'jax' or 'dlpack' for an array-like; TypeError otherwise."""
    t = _torch()
    if t is not None and isinstance(x, t.Tensor):
        return "torch"
    n = _np()
    if n is not None and isinstance(x, n.ndarray):
        return "numpy"
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, jax.Array):
        return "jax"
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    raise TypeError(f"mxfuse: expected a torch tensor, a NumPy array, a JAX array or a DLPack producer; "
                    f"got {type(x).__name__}")


_TORCH_DTYPES = None


def _torch_dtypes():
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        t = _torch()
        m = {t.float32: L.F32, t.float16: L.F16, t.bfloat16: L.BF16, t.uint8: L.U8, t.int8: L.I8}
        for name, code in (("float8_e4m3fn", L.E4M3), ("float8_e5m2", L.E5M2), ("float8_e8m0fnu", L.E8M0),
                           ("float4_e2m1fn_x2", L.E2M1X2)):
            if hasattr(t, name):
                m[getattr(t, name)] = code
        _TORCH_DTYPES = m
    return _TORCH_DTYPES


class Meta(tuple):
    """(dtype, device, shape, strides) of one tensor as the library reads it; hashable."""

    __slots__ = ()

    def __new__(cls, dtype, device, shape, strides):
        return tuple.__new__(cls, (dtype, device, tuple(shape), tuple(strides)))

    dtype = property(lambda s: s[0])
    device = property(lambda s: s[1])
    shape = property(lambda s: s[2])
    strides = property(lambda s: s[3])


def _torch_meta(x):
    code = _torch_dtypes().get(x.dtype)
    if code is None:
        dtype_code(x.dtype)  # raises with the list
    dev = x.get_device()
    return Meta(code, 0 if dev < 0 else dev + 1, x.shape, x.stride())


def _numpy_meta(x):
    name = x.dtype.name
    if name == "float4_e2m1fn":
        raise TypeError("mxfuse: a NumPy float4_e2m1fn array holds one value per byte; e2m1 operands are packed "
                        "two values per byte (element 2i in the low nibble): pass them as uint8 pairs")
    code = _BY_NAME.get(name) if name in ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                                          "float8_e8m0fnu", "uint8", "int8") else None
    if code is None:
        dtype_code(x.dtype)
    size = x.itemsize
    if any(s % size for s in x.strides):
        raise ValueError(f"mxfuse: array strides {x.strides} (bytes) are not multiples of its item size {size}")
    return Meta(code, 0, x.shape, tuple(s // size for s in x.strides))


# DLPack: the C structs, and dtype codes (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
# kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12, kDLFloat8_e8m0fnu 14, kDLFloat4_e2m1fn 17).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DL_DTYPES = {(2, 32): L.F32, (2, 16): L.F16, (4, 16): L.BF16, (10, 8): L.E4M3, (12, 8): L.E5M2, (14, 8): L.E8M0,
              (1, 8): L.U8, (0, 8): L.I8, (17, 4): L.E2M1}
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype = ctypes.c_void_p
_capsule_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dlpack(x):
    """(Meta, data pointer, capsule) of a DLPack producer; keep the capsule while the
    pointer is in use."""
    cap = x.__dlpack__()
    name = _capsule_name(cap)
    p = _capsule_ptr(cap, name)
    if name == b"dltensor_versioned":  # DLManagedTensorVersioned: version (2 x u32), manager_ctx, deleter, flags
        p += 8 + 2 * ctypes.sizeof(ctypes.c_void_p) + 8
    elif name != b"dltensor":
        raise TypeError(f"mxfuse: DLPack capsule named {name!r}; expected 'dltensor'")
    t = _DLTensor.from_address(p)
    code = _DL_DTYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if code is None:
        raise TypeError(f"mxfuse: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, {t.dtype.lanes} lanes) "
                        "has no counterpart in mxfuse")
    dt = t.device.device_type
    if dt in (_DL_CPU, _DL_CUDA_HOST):
        dev = 0
    elif dt in (_DL_CUDA, _DL_CUDA_MANAGED):
        dev = L.device_cuda(t.device.device_id)
    else:
        raise TypeError(f"mxfuse: DLPack device type {dt} is neither CPU nor CUDA")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:
        strides, s = [0] * t.ndim, 1
        for i in reversed(range(t.ndim)):
            strides[i] = s
            s *= shape[i]
        strides = tuple(strides)
    return Meta(code, dev, shape, strides), (t.data or 0) + t.byte_offset, cap


def meta(x, fw=None):
    """The Meta of one tensor (no data pointer)."""
    fw = fw or framework(x)
    if fw == "torch":
        return _torch_meta(x)
    if fw == "numpy":
        return _numpy_meta(x)
    return _dlpack(x)[0]


def torch_key(x):
    """The cheapest full description of a torch tensor's geometry (dtype, shape, strides,
    device): what the torch fast paths compare against their plan's."""
    return (x.dtype, x.shape, x.stride(), x.get_device())


def data_ptr(x, fw, keep):
    """The data pointer of one tensor; DLPack capsules are appended to `keep`."""
    if fw == "torch":
        return x.data_ptr()
    if fw == "numpy":
        return x.__array_interface__["data"][0]
    m, p, cap = _dlpack(x)
    keep.append(cap)
    return p


def fill(t, m, ptr=None):
    """Fills a C mxf_tensor from a Meta (and a data pointer)."""
    t.data = ptr
    t.dtype = m[0]
    t.device = m[1]
    shape, strides = m[2], m[3]
    if len(shape) > L.MAX_DIMS:
        raise ValueError(f"mxfuse: a tensor of {len(shape)} dimensions; at most {L.MAX_DIMS}")
    t.ndim = len(shape)
    for i, (n, s) in enumerate(zip(shape, strides)):
        if s == 0 and n > 1:
            raise ValueError(f"mxfuse: a tensor of shape {shape} has stride 0 in dimension {i} (a broadcast view); "
                             "materialize it first")
        t.shape[i] = n
        t.stride[i] = s


# ------------------------------------------------------------------ outputs
def _torch_dtype(code):
    t = _torch()
    m = {L.F32: t.float32, L.F16: t.float16, L.BF16: t.bfloat16, L.U8: t.uint8, L.E8M0: t.uint8, L.I8: t.int8,
         L.E4M3: getattr(t, "float8_e4m3fn", None), L.E5M2: getattr(t, "float8_e5m2", None),
         L.E2M1X2: getattr(t, "float4_e2m1fn_x2", t.uint8)}
    d = m.get(code)
    if d is None:
        raise TypeError(f"mxfuse: this torch has no dtype for {L.DTYPE_NAMES.get(code)}")
    return d


def numpy_dtype(code):
    import numpy as np

    if code in (L.F32, L.F16, L.U8, L.E8M0, L.E2M1X2, L.I8):
        return {L.F32: np.float32, L.F16: np.float16, L.U8: np.uint8, L.E8M0: np.uint8, L.E2M1X2: np.uint8,
                L.I8: np.int8}[code]
    import ml_dtypes

    return {L.BF16: ml_dtypes.bfloat16, L.E4M3: ml_dtypes.float8_e4m3fn, L.E5M2: ml_dtypes.float8_e5m2}[code]


def empty(fw, like, mem_shape, perm, code, extent=None):
    """A new array of the framework `fw` on the device of `like`: C-contiguous of shape
    mem_shape, its last dimension cut to `extent` (None: whole), returned as the view
    permuted by `perm` (None: as allocated)."""
    if fw == "torch":
        t = _torch()
        x = t.empty(mem_shape, dtype=_torch_dtype(code), device=like.device)
    elif fw == "numpy":
        import numpy as np

        x = np.empty(mem_shape, dtype=numpy_dtype(code))
    else:
        x = None
    if x is not None:
        if extent is not None and extent != mem_shape[-1]:
            x = x[..., :extent]
        if perm:
            x = x.permute(perm) if fw == "torch" else x.transpose(perm)
        return x
    raise TypeError("mxfuse: outputs can be allocated for torch and NumPy inputs (JAX goes through mxfuse.jax); "
                    "for other DLPack producers use the class API with preallocated outputs")
