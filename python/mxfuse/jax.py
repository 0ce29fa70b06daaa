"""The ops as XLA custom calls, for JAX: usable under jax.jit (and eagerly), on XLA's own
stream, outputs as fresh XLA arrays, capturable by XLA's command buffers (CUDA graphs).

    import mxfuse.jax as mj
    c, amax = jax.jit(lambda a, b, sa, sb: mj.gemm_amax(a, b, sa, sb, c_dtype=jnp.bfloat16))(a, b, sa, sb)

The handlers are C (src/xla/xla_ffi.c, built against the FFI header of the jaxlib found
at build time) and registered here for the CUDA and the host platforms. Each call is
validated and planned by the C library while it is traced, so a bad request raises
InvalidValueError / NotSupportedError at trace time with the library's message; the plan
also gives the size of the workspace, which the call asks XLA to allocate as its last
(dropped) result.

JAX arrays are row-major, so the layouts are those of the cuDNN frontend's JAX entry
points: a (M, K) or (M, K, 1) k-major, b (N, K[, 1]) k-major, c n-major, L = 1; e2m1
operands as uint8 arrays of packed pairs (M, K/2); scales compact (MN, Kb) or in the
physical swizzled shape (1, R, K', 32, 4, 4), e8m0 or uint8.
"""
import ctypes
import os

import jax
import jax.numpy as jnp
import numpy as np

from . import _lib as L
from . import _ops as O
from . import _tensors as T


def _xla_library():
    env = os.environ.get("MXFUSE_XLA_LIB", "")
    if env:
        return ctypes.CDLL(env)
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "libmxfuse_xla.so")
    if not os.path.exists(path):
        raise ImportError("mxfuse.jax: libmxfuse_xla.so is not installed: the package was built without jaxlib's FFI "
                          "header (install jax first, then `pip install --no-build-isolation .`)")
    return ctypes.CDLL(path)


_xla = _xla_library()
OPS = ("gemm_amax", "proj_rope", "quantize", "dequantize")
for _op in OPS:
    jax.ffi.register_ffi_target(f"mxfuse_{_op}", jax.ffi.pycapsule(getattr(_xla, f"mxf_xla_{_op}_host")),
                                platform="cpu")
    try:
        jax.ffi.register_ffi_target(f"mxfuse_{_op}", jax.ffi.pycapsule(getattr(_xla, f"mxf_xla_{_op}_cuda")),
                                    platform="CUDA")
    except Exception:  # a jaxlib without its CUDA plugin
        pass


def _devices():
    """The library devices a traced call may run on: JAX's default backend first (its plan
    decides whether the call is valid), then the host. The workspace asked of XLA is the
    largest of their plans' (the platform is fixed only when XLA lowers the call)."""
    gpu = [L.device_cuda(0)] if L.cuda_device_count() > 0 and any(d.platform == "gpu" for d in jax.devices()) else []
    return gpu + [0] if jax.default_backend() == "gpu" else [0] + gpu


def _meta(x, device):
    """The Meta of a (traced) array: row-major, on `device`."""
    shape = tuple(int(s) for s in x.shape)
    strides, s = [0] * len(shape), 1
    for i in reversed(range(len(shape))):
        strides[i] = s
        s *= shape[i]
    return T.Meta(T.dtype_code(x.dtype), device, shape, strides)


def _plan(spec, arrays, extra):
    """Validates and plans at trace time, for each device the call may run on; returns the
    largest workspace. The default backend's refusal is raised; another's is left to run time."""
    size = 0
    for i, dev in enumerate(_devices()):
        metas = tuple(_meta(x, dev) if x is not None else None for x in arrays)
        try:
            size = max(size, O._cached_plan(spec, ("jax", metas, tuple(extra.items())), metas, extra).workspace_size)
        except L.MxfuseError:
            if i == 0:
                raise
    return size


def _out(shape, code):
    return jax.ShapeDtypeStruct(shape, T.numpy_dtype(code))


def _ws(size):
    return jax.ShapeDtypeStruct((max(int(size), 1),), np.uint8)


def gemm_amax(a, b, sfa, sfb, *, c_major="n", c_dtype="float32", sf_vec_size=32, alpha=None, amax=None,
              accumulate=False, mma_tiler_mn=None, cluster_shape_mn=None, acc_dtype=None):
    """gemm_amax (SPEC §1) as an XLA custom call: returns (c_tensor, amax_tensor), also by
    name. With accumulate, `amax` is the previous value (its buffer is reused)."""
    O._check_acc(acc_dtype)
    if c_major != "n":
        raise ValueError(f"gemm_amax: c_major={c_major!r}; JAX arrays are row-major, so C is n-major ('n')")
    if accumulate and amax is None:
        raise ValueError("gemm_amax: accumulate=True reads the previous amax; pass it as amax=")
    c_code = T.dtype_code(c_dtype)
    m, n = int(a.shape[0]), int(b.shape[0])
    c_shape = (m, (n + 1) // 2 if c_code == L.E2M1X2 else n) + ((1,) if a.ndim == 3 else ())
    amax_shape = (1, 1, 1) if a.ndim == 3 else (1,)
    if amax is None:
        amax_struct = jax.ShapeDtypeStruct(amax_shape, np.float32)
    else:
        amax_struct = jax.ShapeDtypeStruct(tuple(amax.shape), amax.dtype)
    c_struct = _out(c_shape, L.U8 if c_code == L.E2M1X2 else c_code)
    extra = O._gemm_extra(sf_vec_size, accumulate, mma_tiler_mn, cluster_shape_mn)
    ws = _plan(O._GEMM, (a, b, sfa, sfb, c_struct, amax_struct), extra)
    attrs = {k: np.int32(v) for k, v in extra.items()}
    attrs.update(alpha=np.float32(1.0 if alpha is None else alpha), has_alpha=np.int32(alpha is not None),
                 has_sfa=np.int32(sfa is not None))
    operands = (a, b) + ((sfa,) if sfa is not None else ()) + (sfb,) + ((amax,) if accumulate else ())
    call = jax.ffi.ffi_call("mxfuse_gemm_amax", (c_struct, amax_struct, _ws(ws)),
                            input_output_aliases={len(operands) - 1: 1} if accumulate else None)
    c, amax_out, _ = call(*operands, **attrs)
    return O.GemmAmaxResult(c, amax_out)


def proj_rope(x, w, cos, sin, *, x_scale=None, w_scale=None, w_out_in=True, fp32_epilogue=False, head_dim=192):
    """proj_rope (SPEC §2) as an XLA custom call; returns (out_fp8_row, out_scales_row,
    out_fp8_col, out_scales_col), also by name. w_out_in=False ((K, H·D) weights) is
    taken as well: the kernels read either orientation."""
    if (x_scale is None) != (w_scale is None):
        raise ValueError("proj_rope: give both x_scale and w_scale (MXFP8 inputs) or neither (bf16 inputs)")
    hd = int(w.shape[0] if w_out_in else w.shape[1])
    outs = tuple(_out(shp, code) for shp, code in O.proj_layout(int(x.shape[0]), hd, int(head_dim)))
    flags = O._proj_flags(w_out_in, fp32_epilogue)
    ws = _plan(O._PROJ, (x, w, x_scale, w_scale, cos, sin) + outs, {"flags": flags})
    operands = (x, w, cos, sin) + ((x_scale, w_scale) if x_scale is not None else ())
    r = jax.ffi.ffi_call("mxfuse_proj_rope", outs + (_ws(ws),))(*operands, flags=np.int32(flags))
    return O.ProjRopeResult(*r[:4])


def quantize(x, *, rows=True, cols=True):
    """MXFP8 quantize (SPEC §3) as an XLA custom call; returns (q_row, s_row, q_col, s_col),
    also by name, None for a direction not asked."""
    d = O._directions(rows, cols)
    r, c = (int(s) for s in x.shape)
    outs = []
    if d & L.QUANT_ROWS:
        outs += [_out((r, c), L.E4M3), _out((r, (c + 31) // 32), L.U8)]
    if d & L.QUANT_COLS:
        outs += [_out((r, c), L.E4M3), _out(((r + 31) // 32, c), L.U8)]
    structs = outs[:2] if d == L.QUANT_ROWS else outs
    metas_in = (x,) + ((outs[0], outs[1]) if d & L.QUANT_ROWS else (None, None)) + (
        (outs[-2], outs[-1]) if d & L.QUANT_COLS else (None, None))
    ws = _plan(O._QUANT, metas_in, {"directions": d})
    got = list(jax.ffi.ffi_call("mxfuse_quantize", tuple(structs) + (_ws(ws),))(x, directions=np.int32(d))[:-1])
    row = (got.pop(0), got.pop(0)) if d & L.QUANT_ROWS else (None, None)
    col = (got.pop(0), got.pop(0)) if d & L.QUANT_COLS else (None, None)
    return O.QuantizeResult(*row, *col)


def dequantize(q, s, *, direction="rows", dtype="float32"):
    """MXFP8 dequantize as an XLA custom call: y = e4m3(q) · 2^(s − 127), f32 or bf16."""
    d = O._direction(direction)
    y = _out(tuple(int(v) for v in q.shape), T.dtype_code(dtype))
    ws = _plan(O._DEQUANT, (q, s, y), {"direction": d})
    return jax.ffi.ffi_call("mxfuse_dequantize", (y, _ws(ws)))(q, s, direction=np.int32(d))[0]
