"""The ops as XLA custom calls, for JAX: usable under jax.jit (and eagerly), on XLA's own
stream, outputs as fresh XLA arrays, capturable by XLA's command buffers (CUDA graphs).

    import mxfuse.jax as mj
    c, amax = jax.jit(lambda a, b, sa, sb: mj.gemm_amax(a, b, sa, sb, c_dtype=jnp.bfloat16))(a, b, sa, sb)

The handlers are C (src/xla/xla_ffi.c, built against the FFI header of the jaxlib found
at build time) and registered here for the CUDA and the host platforms. The functions
have the signatures of mxfuse's (their spec, _spec), less c= and stream=. Each call is
validated and planned by the C library while it is traced (for each kind of device it
may run on), so a bad request raises InvalidValueError / NotSupportedError at trace time
with the library's message; the plans give the size of the workspace, which the call
asks XLA to allocate as its last (dropped) result. At run time the handler plans for
the device XLA runs it on, as XLA's FFI names it, and refuses where the FFI cannot say.

JAX arrays are row-major, so the layouts are those of the cuDNN frontend's JAX entry
points: a (M, K) or (M, K, 1) k-major, b (N, K[, 1]) k-major, c n-major, L = 1; e2m1
operands as uint8 arrays of packed pairs (M, K/2); scales compact (MN, Kb) or in the
physical swizzled shape (1, R, K', 32, 4, 4), e8m0 or uint8.
"""
import ctypes
import os

import jax
import numpy as np

from . import _abi as A
from . import _plans as P
from . import _spec as S
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
for _op in A.OPS:
    jax.ffi.register_ffi_target(f"mxfuse_{_op}", jax.ffi.pycapsule(getattr(_xla, f"mxf_xla_{_op}_host")),
                                platform="cpu")
    try:
        jax.ffi.register_ffi_target(f"mxfuse_{_op}", jax.ffi.pycapsule(getattr(_xla, f"mxf_xla_{_op}_cuda")),
                                    platform="CUDA")
    except Exception:  # a jaxlib without its CUDA plugin
        pass

jax.ffi.register_ffi_target("mxfuse_grouped_gemm_amax", jax.ffi.pycapsule(_xla.mxf_xla_grouped_gemm_amax_host),
                            platform="cpu")


def _trace_devices():
    """The library devices a traced call may run on, one of each kind: the CPU and one GPU
    of each model (the library's choices depend on the model only). The first is JAX's
    default device's, whose refusal is raised at trace time."""
    default = jax.config.jax_default_device
    platform = getattr(default, "platform", None) or (default if isinstance(default, str) else None) or \
        jax.default_backend()
    gpus = {}
    if A.cuda_device_count() > 0:
        try:
            devices = jax.local_devices(backend="gpu")
        except RuntimeError:  # no GPU backend
            devices = []
        if getattr(default, "platform", None) == "gpu":
            devices = [default] + devices
        for d in devices:
            gpus.setdefault(d.device_kind, A.device_cuda(d.local_hardware_id))
    gpus = list(gpus.values())
    return gpus + [A.DEVICE_CPU] if platform in ("gpu", "cuda") else [A.DEVICE_CPU] + gpus


def _meta(x, device):
    """The Meta of a (traced) array: row-major, on `device`."""
    shape = tuple(int(s) for s in x.shape)
    strides, s = [0] * len(shape), 1
    for i in reversed(range(len(shape))):
        strides[i] = s
        s *= shape[i]
    return T.Meta(S.dtype_code(x.dtype), device, shape, strides)


def _plan(op, arrays, extra):
    """Validates and plans at trace time, for each kind of device the call may run on;
    returns the largest workspace, which XLA allocates. The default device's refusal is
    raised; another's is left to run time, where the handler plans for the device XLA runs
    the call on (the C library's one-call cache) and refuses with the library's message."""
    size = 0
    for i, dev in enumerate(_trace_devices()):
        metas = tuple(_meta(x, dev) if x is not None else None for x in arrays)
        try:
            size = max(size, P.cached(op, metas, extra).workspace_size)
        except A.MxfuseError:
            if i == 0:
                raise
    return size


def _out(shape, code):
    return jax.ShapeDtypeStruct(tuple(shape), T.numpy_dtype(code))


def _ws(size):
    return jax.ShapeDtypeStruct((max(int(size), 1),), np.uint8)


def _xla_stream(call):
    if call.stream is not None:
        raise ValueError("mxfuse.jax: stream= is not taken; XLA runs the call on its own stream")


def _shape(x):
    return tuple(int(s) for s in x.shape)


@S.front_end(S.gemm_amax, __name__)
def gemm_amax(call):
    _xla_stream(call)
    if call.c is not None:
        raise ValueError("gemm_amax: c= is not taken by mxfuse.jax; XLA's outputs are new arrays")
    if call.c_major != "n":
        raise ValueError(f"gemm_amax: c_major={call.c_major!r}; JAX arrays are row-major, so C is n-major ('n')")
    a, amax = call.a, call.amax
    extra = dict(call.extra)
    accumulate = bool(extra["flags"] & A.AMAX_ACCUMULATE)
    c_struct = _out(S.gemm_c_shape(_shape(a), _shape(call.b), call.c_code), call.c_code)
    amax_struct = _out(S.gemm_amax_shape(_shape(a)), A.F32) if amax is None else \
        jax.ShapeDtypeStruct(_shape(amax), amax.dtype)
    ws = _plan(S.GEMM_AMAX, (a, call.b, call.sfa, call.sfb, c_struct, amax_struct), call.extra)
    attrs = {"sf_vec": np.int32(extra["sf_vec"]), "flags": np.int32(extra["flags"]),
             "alpha": np.float32(1.0 if call.alpha is None else call.alpha),
             "has_alpha": np.int32(call.alpha is not None), "has_sfa": np.int32(call.sfa is not None)}
    operands = (a, call.b) + ((call.sfa,) if call.sfa is not None else ()) + (call.sfb,) + \
        ((amax,) if accumulate else ())
    xla_call = jax.ffi.ffi_call("mxfuse_gemm_amax", (c_struct, amax_struct, _ws(ws)),
                                input_output_aliases={len(operands) - 1: 1} if accumulate else None)
    c, amax_out, _ = xla_call(*operands, **attrs)
    return S.GemmAmaxResult(c, amax_out)


@S.front_end(S.proj_rope, __name__)
def proj_rope(call):
    # w_out_in=False ((K, H·D) weights) is taken as well: the kernels read either orientation
    _xla_stream(call)
    outs = tuple(_out(*o) for o in S.proj_outputs(_shape(call.x), _shape(call.w), call.w_out_in, call.head_dim))
    ws = _plan(S.PROJ_ROPE, (call.x, call.w, call.x_scale, call.w_scale, call.cos, call.sin) + outs, call.extra)
    operands = (call.x, call.w, call.cos, call.sin) + ((call.x_scale, call.w_scale) if call.x_scale is not None
                                                         else ())
    flags = dict(call.extra)["flags"]
    r = jax.ffi.ffi_call("mxfuse_proj_rope", outs + (_ws(ws),))(*operands, flags=np.int32(flags))
    return S.ProjRopeResult(*r[:4])


@S.front_end(S.quantize, __name__)
def quantize(call):
    _xla_stream(call)
    outs = tuple(_out(*o) if o is not None else None for o in S.quantize_outputs(_shape(call.x), call.directions))
    ws = _plan(S.QUANTIZE, (call.x,) + outs, call.extra)
    given = [o for o in outs if o is not None]
    got = iter(jax.ffi.ffi_call("mxfuse_quantize", tuple(given) + (_ws(ws),))(call.x,
                                                                               directions=np.int32(call.directions)))
    return S.QuantizeResult(*(next(got) if o is not None else None for o in outs))


@S.front_end(S.dequantize, __name__)
def dequantize(call):
    _xla_stream(call)
    y = _out(_shape(call.q), call.y_code)
    ws = _plan(S.DEQUANTIZE, (call.q, call.s, y), call.extra)
    return jax.ffi.ffi_call("mxfuse_dequantize", (y, _ws(ws)))(call.q, call.s, direction=np.int32(call.direction))[0]


def grouped_gemm_amax(a, b, sfa, sfb, group_sizes, *, c_dtype="float32", sf_vec_size=32, alpha=None,
                      group_alpha=None):
    """grouped_gemm_amax (SPEC §6, the contiguous layout) as an XLA custom call, with
    jax.lax.ragged_dot's group sizes: group g holds rows [sum(group_sizes[:g]),
    sum(group_sizes[:g+1])) of a (M, K); b (G, N, K); sfa compact (M, Kb) or swizzled over
    a's rows (None for a bf16 a), sfb (G, N, Kb) or swizzled with L = G. The groups' ends
    are computed inside the traced graph (jnp.cumsum), so one jitted function serves every
    routing. Returns (c_tensor, amax_tensor, group_amax_tensor); rows of c past
    sum(group_sizes) are not written (unspecified). Runs on the CPU platform."""
    import jax.numpy as jnp

    call = S.grouped_gemm_amax(a, b, sfa, sfb, offs=group_sizes, c_dtype=c_dtype, sf_vec_size=sf_vec_size,
                               alpha=alpha, group_alpha=group_alpha)
    offs = jnp.cumsum(jnp.asarray(group_sizes), dtype=jnp.int32)
    mem, extent = S.grouped_c_layout(_shape(a), _shape(b), call.c_code)
    c_struct = _out(mem[:-1] + (extent,), call.c_code)
    amax_struct, gamax_struct = _out((1,), A.F32), _out((S.grouped_groups(_shape(b)),), A.F32)
    ws = _plan(S.GROUPED_GEMM_AMAX, (a, b, sfa, sfb, c_struct, amax_struct, offs, None, group_alpha, gamax_struct),
               call.extra)
    operands = (a, b) + ((sfa,) if sfa is not None else ()) + (sfb, offs) + \
        ((group_alpha,) if group_alpha is not None else ())
    attrs = {"sf_vec": np.int32(sf_vec_size), "alpha": np.float32(1.0 if alpha is None else alpha),
             "has_alpha": np.int32(alpha is not None), "has_sfa": np.int32(sfa is not None),
             "has_group_alpha": np.int32(group_alpha is not None)}
    c, amax, gamax, _ = jax.ffi.ffi_call("mxfuse_grouped_gemm_amax",
                                         (c_struct, amax_struct, gamax_struct, _ws(ws)))(*operands, **attrs)
    return S.GroupedGemmAmaxResult(c, amax, gamax)
