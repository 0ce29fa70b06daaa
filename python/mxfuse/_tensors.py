"""Tensors across the boundary: what the C library needs of an array (data pointer,
device, dtype, shape, strides in elements) read from torch tensors, NumPy arrays and any
DLPack producer; outputs, workspaces and streams from the framework the inputs came
from. Dtypes come from the table of _abi.

torch tensors and NumPy arrays are read through their own attributes (the cheapest way
per call); anything else through DLPack (`__dlpack__`), whose capsule is held for the
duration of the call. Nothing here converts values: dtypes map one to one onto the
library's, and a dtype with no counterpart is refused.
"""
import ctypes
import sys

from . import _abi as A
from . import _spec as S


# ------------------------------------------------------------------ frameworks
def _torch():
    return sys.modules.get("torch")


def _np():
    return sys.modules.get("numpy")


def unpacked(x):
    """The array whose bytes a call's argument is: packed weights' data (SPEC §7), None for
    their scales (PackedScales has no data), else x itself."""
    if isinstance(x, S.PackedWeights):
        return x.data
    return None if isinstance(x, S.PackedScales) else x


def geometry_key(x, key):
    """key(x), an array's geometry key; for packed weights the key of their bytes with the
    Metas they stand for, for their scales that Meta."""
    if isinstance(x, S.PackedWeights):
        return ("packed", key(x.data), x.b_meta, x.sfb_meta, x.sf_vec)
    if isinstance(x, S.PackedScales):
        return ("packed scales", x.meta)
    return key(x)


def framework(x):
    """'torch', 'numpy', 'jax' or 'dlpack' for an array-like (packed weights: their data's;
    PackedScales, which has no data: None); TypeError otherwise."""
    x = unpacked(x)
    if x is None:
        return None
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
    """{torch dtype: library dtype} for the dtypes this torch has."""
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        t = _torch()
        _TORCH_DTYPES = {getattr(t, d.array_name): code for code, d in A.DTYPES.items()
                         if d.array_name and hasattr(t, d.array_name)}
    return _TORCH_DTYPES


# {NumPy / ml_dtypes dtype name: library dtype}
_NUMPY_DTYPES = {d.array_name: code for code, d in A.DTYPES.items() if d.array_name}


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
    if x.is_meta:
        raise A.InvalidValueError(A.ERR_INVALID_VALUE, f"mxfuse: a tensor of shape {tuple(x.shape)} is on torch's "
                                  "meta device (shapes only, no data); run on CPU or CUDA tensors (torch.compile "
                                  "traces the custom ops through their fake implementations)")
    if x.device.type not in ("cpu", "cuda"):
        raise A.NotSupportedError(A.ERR_NOT_SUPPORTED, f"mxfuse: a tensor of shape {tuple(x.shape)} is on torch "
                                  f"device '{x.device}'; mxfuse runs on CPU and CUDA tensors")
    code = _torch_dtypes().get(x.dtype)
    if code is None:
        code = S.dtype_code(x.dtype)  # raises with the list
    dev = x.get_device()
    return Meta(code, A.DEVICE_CPU if dev < 0 else A.device_cuda(dev), x.shape, x.stride())


def _numpy_meta(x):
    name = x.dtype.name
    if name == "float4_e2m1fn":
        raise TypeError("mxfuse: a NumPy float4_e2m1fn array holds one value per byte; e2m1 operands are packed "
                        "two values per byte (element 2i in the low nibble): pass them as uint8 pairs")
    code = _NUMPY_DTYPES.get(name)
    if code is None:
        code = S.dtype_code(x.dtype)
    size = x.itemsize
    if any(s % size for s in x.strides):
        raise ValueError(f"mxfuse: array strides {x.strides} (bytes) are not multiples of its item size {size}")
    return Meta(code, A.DEVICE_CPU, x.shape, tuple(s // size for s in x.strides))


# DLPack: the C structs (dtype codes in the table of _abi).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DL_DTYPES = {d.dlpack: code for code, d in A.DTYPES.items() if d.dlpack}
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype = ctypes.c_void_p
_capsule_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]


_DL_FLAG_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY of DLPack 1.0


def _dlpack(x):
    """(Meta, data pointer, capsule, read_only) of a DLPack producer; keep the capsule
    while the pointer is in use. DLPack 1.0 capsules are asked for first: only they carry
    the read-only flag."""
    try:
        cap = x.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0
        cap = x.__dlpack__()
    name = _capsule_name(cap)
    p = _capsule_ptr(cap, name)
    read_only = False
    if name == b"dltensor_versioned":  # DLManagedTensorVersioned: version (2 x u32), manager_ctx, deleter, flags
        flags = ctypes.c_uint64.from_address(p + 8 + 2 * ctypes.sizeof(ctypes.c_void_p)).value
        read_only = bool(flags & _DL_FLAG_READ_ONLY)
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
        dev = A.DEVICE_CPU
    elif dt in (_DL_CUDA, _DL_CUDA_MANAGED):
        dev = A.device_cuda(t.device.device_id)
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
    return Meta(code, dev, shape, strides), (t.data or 0) + t.byte_offset, cap, read_only


def meta(x, fw=None):
    """The Meta of one tensor (no data pointer); of packed weights and their scales, the
    b and sfb they were packed from (SPEC §7)."""
    if isinstance(x, S.PackedWeights):
        return x.b_meta
    if isinstance(x, S.PackedScales):
        return x.meta
    fw = fw or framework(x)
    if fw == "torch":
        return _torch_meta(x)
    if fw == "numpy":
        return _numpy_meta(x)
    return _dlpack(x)[0]


def torch_key(x):
    """The cheapest full description of a torch tensor's geometry (dtype, shape, strides,
    device): what the torch fast paths compare against their plan's (packed weights:
    geometry_key)."""
    return geometry_key(x, _torch_geometry)


def _torch_geometry(t):
    return (t.dtype, t.shape, t.stride(), t.get_device())


def data_ptr(x):
    """A torch tensor's data pointer (packed weights: their data's; PackedScales: None)."""
    x = unpacked(x)
    return None if x is None else x.data_ptr()


def data_ptrs(op, tensors, fw, keep, samples=False):
    """The data pointers of an op's tensors (None: absent), its outputs checked writable
    (SPEC §4): NumPy's writeable flag, DLPack 1.0's read-only flag, and torch inference
    tensors outside inference mode (which torch itself forbids writing); not checked for
    `samples` (the class API's, which are not written). DLPack capsules are appended to
    `keep`."""
    outputs = () if samples else S.OUTPUTS[op.name]
    ptrs = []
    for name, x in zip(op.tensors, tensors):
        x = unpacked(x)  # packed weights: their bytes stand for b (SPEC §7)
        if x is None:
            ptrs.append(None)
            continue
        read_only = False
        if fw == "torch":
            p = x.data_ptr()
            read_only = name in outputs and x.is_inference() and not _torch().is_inference_mode_enabled()
        elif fw == "numpy":
            p = x.__array_interface__["data"][0]
            read_only = not x.flags.writeable
        else:
            _, p, cap, read_only = _dlpack(x)
            keep.append(cap)
        if read_only and name in outputs:
            raise A.InvalidValueError(A.ERR_INVALID_VALUE, f"{op.name}: {name} is read-only; outputs must be "
                                      "writable")
        ptrs.append(p)
    return ptrs


def fill(t, m, ptr=None):
    """Fills a C mxf_tensor from a Meta (and a data pointer)."""
    t.data = ptr
    t.dtype = m[0]
    t.device = m[1]
    shape, strides = m[2], m[3]
    if len(shape) > A.MAX_DIMS:
        raise ValueError(f"mxfuse: a tensor of {len(shape)} dimensions; at most {A.MAX_DIMS}")
    t.ndim = len(shape)
    empty = 0 in shape  # addresses nothing: C-contiguous (all-zero strides) whatever it says
    for i, (n, s) in enumerate(zip(shape, strides)):
        if empty:
            s = 0
        elif s == 0 and n > 1:
            raise ValueError(f"mxfuse: a tensor of shape {shape} has stride 0 in dimension {i} (a broadcast view); "
                             "materialize it first")
        t.shape[i] = n
        t.stride[i] = s


# ------------------------------------------------------------------ outputs, streams, workspaces
def torch_dtype(code):
    """The torch dtype of a library dtype (packed e2m1 pairs as uint8 where torch has no
    float4_e2m1fn_x2)."""
    t = _torch()
    name = A.DTYPES[code].array_name
    d = getattr(t, name, None) if name else None
    if d is None and code == A.E2M1X2:
        d = t.uint8
    if d is None:
        raise TypeError(f"mxfuse: this torch has no dtype for {A.DTYPES[code].name}")
    return d


def numpy_dtype(code):
    """The NumPy (ml_dtypes) dtype of a library dtype (packed e2m1 pairs as uint8)."""
    import numpy as np

    name = A.DTYPES[code].array_name
    if name is None:
        raise TypeError(f"mxfuse: no NumPy dtype holds {A.DTYPES[code].name}")
    if hasattr(np, name):
        return np.dtype(name)
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name, np.uint8))


def empty(fw, like, mem_shape, perm, code, extent=None):
    """A new array of the framework `fw` on the device of `like`: C-contiguous of shape
    mem_shape, its last dimension cut to `extent` (None: whole), returned as the view
    permuted by `perm` (None: as allocated)."""
    if fw == "torch":
        x = _torch().empty(mem_shape, dtype=torch_dtype(code), device=like.device)
    elif fw == "numpy":
        import numpy as np

        x = np.empty(mem_shape, dtype=numpy_dtype(code))
    else:
        raise TypeError("mxfuse: outputs can be allocated for torch and NumPy inputs (JAX goes through mxfuse.jax); "
                        "for other DLPack producers use the class API with preallocated outputs")
    if extent is not None and extent != mem_shape[-1]:
        x = x[..., :extent]
    if perm:
        x = x.permute(perm) if fw == "torch" else x.transpose(perm)
    return x


def call_device(metas):
    """The library device of a call: that of its first tensor not on the CPU."""
    return next((m[1] for m in metas if m is not None and A.device_is_cuda(m[1])), A.DEVICE_CPU)


def stream_handle(fw, device, stream):
    """The CUDA stream of a call (an int; None: the legacy stream, or the CPU): `stream`
    (a torch.cuda.Stream or a raw handle) when given, else for torch tensors torch's
    current stream on their device."""
    if stream is not None:
        s = getattr(stream, "cuda_stream", stream)
        return int(s) if s else None
    if fw != "torch" or not A.device_is_cuda(device):
        return None
    t = _torch()
    raw = getattr(t._C, "_cuda_getCurrentRawStream", None)
    ordinal = A.device_ordinal(device)
    return raw(ordinal) if raw else t.cuda.current_stream(ordinal).cuda_stream


def workspace(fw, size, device):
    """(holder, pointer) of a workspace from the framework's allocator."""
    if not size:
        return None, None
    if fw == "torch":
        t = _torch()
        w = t.empty(size, dtype=t.uint8, device=A.device_name(device))
        return w, w.data_ptr()
    if A.device_is_cuda(device):
        raise TypeError("mxfuse: a CUDA workspace can be allocated for torch tensors only; use torch or mxfuse.jax")
    import numpy as np

    w = np.empty(size, np.uint8)
    return w, w.ctypes.data
