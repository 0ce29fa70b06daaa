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

jax.vmap over a leading axis runs each op once per element (a batching rule: lax.map over
the custom call), but gemm_amax with f32 C on a batch of A against one B: one call, the batch
stacked along M. Under jax.jit with sharded operands, gemm_amax (with MX A) keeps A's split
along M and B's along N (whole 128-row blocks with swizzled scales): each device computes its
block of C, the amax is reduced over the mesh (pmax), nothing is gathered; K is not split.

Packed weights (SPEC §7): mxfuse.jax.pack_weights packs on the host, eagerly (once, when
the weights are loaded); the PackedWeights it returns is a pytree (its bytes the array),
which gemm_amax takes as b with sfb=None under jax.jit and jax.vmap, on the CPU platform.

JAX arrays are row-major, so the layouts are those of the cuDNN frontend's JAX entry
points: a (M, K) or (M, K, 1) k-major, b (N, K[, 1]) k-major, c n-major, L = 1; e2m1
operands as uint8 arrays of packed pairs (M, K/2); scales compact (MN, Kb) or in the
physical swizzled shape (1, R, K', 32, 4, 4), e8m0 or uint8.
"""
import ctypes
import functools
import os

import jax
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning

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
    """The Meta of a (traced) array: row-major, on `device` (packed weights and their
    scales: the b and sfb they were packed from, SPEC §7)."""
    if isinstance(x, (S.PackedWeights, S.PackedScales)):
        m = x.b_meta if isinstance(x, S.PackedWeights) else x.meta
        return T.Meta(m.dtype, device, m.shape, m.strides)
    shape = tuple(int(s) for s in x.shape)
    return T.Meta(S.dtype_code(x.dtype), device, shape, _row_major(shape))


def _row_major(shape):
    strides, s = [0] * len(shape), 1
    for i in reversed(range(len(shape))):
        strides[i] = s
        s *= shape[i]
    return tuple(strides)


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


def _batched(fn, as_one=None):
    """fn(*arrays) -> tuple of arrays, with a batching rule: jax.vmap runs the batch as one
    call where as_one(f, in_batched, *args) can (it returns the outputs, else None), else as
    a sequence of calls (lax.map: one custom call in a loop), each on one element. Inputs
    without the batch axis are passed whole to every call."""
    f = jax.custom_batching.custom_vmap(fn)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        outs = as_one(f, in_batched, *args) if as_one is not None else None
        if outs is not None:
            return outs, tuple(True for _ in outs)

        def one(xs):
            it = iter(xs)
            return f(*(next(it) if b else x for x, b in zip(args, in_batched)))

        outs = jax.lax.map(one, tuple(x for x, b in zip(args, in_batched) if b))
        return outs, tuple(True for _ in outs)

    return f


# ------------------------------------------------------------------ packed weights
# PackedWeights through jax.jit and jax.tree_util: the packed bytes are the array, the
# descriptions of the b and sfb they stand for and sf_vec static.
jax.tree_util.register_pytree_node(S.PackedWeights, lambda p: ((p.data,), (p.b_meta, p.sfb_meta, p.sf_vec)),
                                   lambda aux, children: S.PackedWeights(children[0], *aux))


@S.front_end(S.pack_weights, __name__)
def pack_weights(call):
    """Packs on the host (SPEC §7), eagerly: b and sfb are read back from their device,
    the packed bytes come back as a uint8 array on b's device. Not traceable (a step of
    loading a model): call it outside jax.jit."""
    if isinstance(call.b, jax.core.Tracer) or isinstance(call.sfb, jax.core.Tracer):
        raise TypeError("mxfuse.jax.pack_weights: b or sfb is a traced array; pack outside jax.jit (once, when the "
                        "weights are loaded) and pass the result in")
    from . import _eager as E

    host = E.pack_weights(S.PackCall(np.asarray(call.b), np.asarray(call.sfb), call.sf_vec))
    device = next(iter(call.b.devices())) if hasattr(call.b, "devices") else None
    return S.PackedWeights(jax.device_put(host.data, device), host.b_meta, host.sfb_meta, host.sf_vec)


def _gemm_packed_ffi(params, has_sfa, a, data, *rest):
    """The custom call with packed weights (SPEC §7): rest = [sfa] [, amax]; the packed
    bytes stand for b, described by attributes, and hold sfb."""
    sf_vec, flags, alpha, c_code, b_meta, sfb_meta = params[:6]
    rest = list(rest)
    sfa = rest.pop(0) if has_sfa else None
    amax = rest.pop(0) if rest else None
    c_struct = _out(S.gemm_c_shape(_shape(a), b_meta.shape, c_code), c_code)
    amax_shape = params[6] if len(params) > 6 else S.gemm_amax_shape(_shape(a))
    amax_struct = _out(amax_shape, A.F32) if amax is None else jax.ShapeDtypeStruct(_shape(amax), amax.dtype)
    w = S.PackedWeights(data, b_meta, sfb_meta, sf_vec)
    ws = _plan(S.GEMM_AMAX, (a, w, sfa, S.PackedScales(sfb_meta), c_struct, amax_struct),
               (("sf_vec", sf_vec), ("flags", flags)))
    attrs = {"sf_vec": np.int32(sf_vec), "flags": np.int32(flags), "alpha": np.float32(1.0 if alpha is None else alpha),
             "has_alpha": np.int32(alpha is not None), "has_sfa": np.int32(has_sfa)}
    for p, m in (("b", b_meta), ("sfb", sfb_meta)):
        if 0 not in m.shape and tuple(m.strides) != _row_major(m.shape):
            raise ValueError(f"gemm_amax: the packed weights' {p} was not row-major ({m.shape}, strides "
                             f"{m.strides}); mxfuse.jax describes every array row-major: pack with "
                             "mxfuse.jax.pack_weights")
        attrs.update({f"{p}_dtype": np.int32(m.dtype), f"{p}_ndim": np.int32(len(m.shape))})
        attrs.update({f"{p}_d{i}": np.int64(d) for i, d in enumerate(m.shape)})
    operands = (a, data) + ((sfa,) if has_sfa else ()) + ((amax,) if amax is not None else ())
    xla_call = jax.ffi.ffi_call("mxfuse_gemm_amax", (c_struct, amax_struct, _ws(ws)),
                                input_output_aliases={len(operands) - 1: 1} if amax is not None else None)
    c, amax_out, _ = xla_call(*operands, **attrs)
    return c, amax_out


@S.front_end(S.gemm_amax, __name__)
def gemm_amax(call):
    _xla_stream(call)
    if call.c is not None:
        raise ValueError("gemm_amax: c= is not taken by mxfuse.jax; XLA's outputs are new arrays")
    if call.c_major != "n":
        raise ValueError(f"gemm_amax: c_major={call.c_major!r}; JAX arrays are row-major, so C is n-major ('n')")
    packed = isinstance(call.b, S.PackedWeights)
    for name, x in (("a", call.a), ("b", call.b)):
        if len(x.shape) == 3 and x.shape[2] != 1:
            raise ValueError(f"gemm_amax: {name} has shape {_shape(x)}, L = {x.shape[2]}; a JAX array is "
                             "row-major, so (M, K, L) with L > 1 is not a k-major batch; batch with jax.vmap over "
                             "a leading axis ((L, M, K) arrays, one call per element), or pass torch / NumPy arrays")
    extra = dict(call.extra)
    params = (extra["sf_vec"], extra["flags"], call.alpha, call.c_code)
    if packed:  # the b and sfb the bytes stand for, static
        params += (call.b.b_meta, call.b.sfb_meta)
        operands = (call.a, call.b.data) + ((call.sfa,) if call.sfa is not None else ())
    else:
        operands = (call.a, call.b) + ((call.sfa,) if call.sfa is not None else ()) + (call.sfb,)
    accumulate = bool(extra["flags"] & A.AMAX_ACCUMULATE)
    if accumulate:
        operands += (call.amax,)
    elif call.amax is not None:  # only its shape counts: the result is a new array
        params += (_shape(call.amax),)
    if packed:  # on the host, whole: no sharding rule, vmap element by element
        return S.GemmAmaxResult(*_batched(functools.partial(_gemm_packed_ffi, params, call.sfa is not None))(*operands))
    fn = functools.partial(_gemm_ffi, params, call.sfa is not None)
    if call.sfa is not None and not accumulate:
        fn = functools.partial(_gemm_sharded, params)
    return S.GemmAmaxResult(*_batched(fn, functools.partial(_gemm_as_one, params))(*operands))


def _gemm_as_one(params, f, in_batched, a, b, *rest):
    """vmap of gemm_amax as one call: a batch of A (and compact SFA) against one B stacks
    the batch along M (row-major: a free reshape) and runs one product; each element's amax
    is then max|C| of its rows, which is the amax of SPEC §1 where C is f32 (C is the
    accumulator times alpha). Other cases (None) run element by element."""
    if params[3] != A.F32 or len(rest) != 2 or tuple(bool(x) for x in in_batched) != (True, False, True, False):
        return None
    sfa, sfb = rest
    if len(a.shape) != 3 or len(sfa.shape) != 3 or 0 in a.shape[:2]:
        return None  # (M, K, 1) operands or swizzled scales: element by element
    bt, m = a.shape[0], a.shape[1]
    c, _ = f(a.reshape(bt * m, a.shape[2]), b, sfa.reshape(bt * m, sfa.shape[2]), sfb)
    c = c.reshape(bt, m, c.shape[-1])
    amax_shape = params[4] if len(params) > 4 else S.gemm_amax_shape(a.shape[1:])
    return c, jax.numpy.max(jax.numpy.abs(c), axis=(1, 2)).reshape((bt,) + tuple(amax_shape))


def _gemm_ffi(params, has_sfa, a, b, *rest):
    """The custom call on whole (or per-device) arrays: rest = [sfa,] sfb [, amax]."""
    sf_vec, flags, alpha, c_code = params[:4]
    rest = list(rest)
    sfa = rest.pop(0) if has_sfa else None
    sfb = rest.pop(0)
    amax = rest.pop(0) if rest else None
    c_struct = _out(S.gemm_c_shape(_shape(a), _shape(b), c_code), c_code)
    amax_shape = params[4] if len(params) > 4 else S.gemm_amax_shape(_shape(a))
    amax_struct = _out(amax_shape, A.F32) if amax is None else jax.ShapeDtypeStruct(_shape(amax), amax.dtype)
    ws = _plan(S.GEMM_AMAX, (a, b, sfa, sfb, c_struct, amax_struct), (("sf_vec", sf_vec), ("flags", flags)))
    attrs = {"sf_vec": np.int32(sf_vec), "flags": np.int32(flags), "alpha": np.float32(1.0 if alpha is None else alpha),
             "has_alpha": np.int32(alpha is not None), "has_sfa": np.int32(has_sfa)}
    operands = (a, b) + ((sfa,) if has_sfa else ()) + (sfb,) + ((amax,) if amax is not None else ())
    xla_call = jax.ffi.ffi_call("mxfuse_gemm_amax", (c_struct, amax_struct, _ws(ws)),
                                input_output_aliases={len(operands) - 1: 1} if amax is not None else None)
    c, amax_out, _ = xla_call(*operands, **attrs)
    return c, amax_out


# ------------------------------------------------------------------ gemm_amax under sharding
# jax.jit with sharded operands: A split along M and/or B along N (scales alike) gives C split
# the same way, each device computing its block; the amax is the pmax of the blocks' amaxes.
# K is never split here (a K split needs f32 partials summed before C and its amax:
# docs/multi-gpu.md); operands sharded otherwise are gathered first.
def _swizzled(x):
    return len(x.shape) == 6


def _gemm_rule(params, mesh, arg_types, result_types):
    a, b, sfa, sfb = (len(t.shape) for t in arg_types)
    l3 = " l" if a == 3 else ""
    sa = "sa0 m1 sa2 sa3 sa4 sa5" if sfa == 6 else "m kb"
    sb = "sb0 n1 sb2 sb3 sb4 sb5" if sfb == 6 else "n kb"
    amax = " ".join(f"x{i}" for i in range(len(result_types[1].shape)))
    rule = f"m k{l3}, n k{l3}, {sa}, {sb} -> m n{l3}, {amax}"
    tokens = dict.fromkeys(rule.replace(",", " ").replace("->", " ").split())  # in order: Shardy wants them sorted
    free = [f for f in tokens if f not in ("m", "n") and not f.startswith("x")]
    return rule, {"need_replication_factors": tuple(free)}


def _axes(spec_entry):
    if spec_entry is None:
        return ()
    return tuple(spec_entry) if isinstance(spec_entry, (tuple, list)) else (spec_entry,)


def _split(mesh, x, extent, rows_per_block, even=1):
    """The mesh axes x's dim 0 is split along, if every shard holds whole scale blocks
    (rows_per_block rows: 128 with swizzled scales) and an even count where C packs pairs."""
    spec = getattr(x.sharding, "spec", ())
    axes = _axes(spec[0]) if len(spec) else ()
    n = int(np.prod([mesh.shape[ax] for ax in axes])) if axes else 1
    if n == 1 or extent % n or (extent // n) % rows_per_block or (extent // n) % even:
        return ()
    return axes


def _gemm_partition(params, mesh, arg_shapes, result_shape):
    from jax.sharding import NamedSharding, PartitionSpec as P

    a, b, sfa, sfb = arg_shapes
    m, n = a.shape[0], b.shape[0]
    ma = _split(mesh, a, m, 128 if _swizzled(sfa) else 1)
    na = _split(mesh, b, n, 128 if _swizzled(sfb) else 1, 2 if params[3] == A.E2M1X2 else 1)
    if set(ma) & set(na):
        na = ()
    mx, nx = (ma or None), (na or None)
    rest = (None,) * (len(a.shape) - 1)

    def scale_spec(x, axes):
        return P(None, axes, *(None,) * 4) if _swizzled(x) else P(axes, None)

    args = (NamedSharding(mesh, P(mx, *rest)), NamedSharding(mesh, P(nx, *rest)),
            NamedSharding(mesh, scale_spec(sfa, mx)), NamedSharding(mesh, scale_spec(sfb, nx)))
    c_spec = P(mx, nx, *(None,) * (len(a.shape) - 2))
    results = (NamedSharding(mesh, c_spec), NamedSharding(mesh, P()))
    axes = ma + na

    def lower(a, b, sfa, sfb):
        c, amax = _gemm_ffi(params, True, a, b, sfa, sfb)
        return c, (jax.lax.pmax(amax, axes) if axes else amax)

    return mesh, lower, results, args


def _gemm_sharded(params, a, b, sfa, sfb):
    return _gemm_cp(params, a, b, sfa, sfb)


def _gemm_cp_impl(params, a, b, sfa, sfb):
    return _gemm_ffi(params, True, a, b, sfa, sfb)


_gemm_cp = custom_partitioning(_gemm_cp_impl, static_argnums=(0,))
_gemm_cp.def_partition(_gemm_partition, sharding_rule=_gemm_rule)


@S.front_end(S.proj_rope, __name__)
def proj_rope(call):
    # w_out_in=False ((K, H·D) weights) is taken as well: the kernels read either orientation
    _xla_stream(call)
    operands = (call.x, call.w, call.cos, call.sin) + ((call.x_scale, call.w_scale) if call.x_scale is not None
                                                         else ())
    return S.ProjRopeResult(*_batched(functools.partial(_proj_ffi, call))(*operands))


def _proj_ffi(call, x, w, cos, sin, x_scale=None, w_scale=None):
    outs = tuple(_out(*o) for o in S.proj_outputs(_shape(x), _shape(w), call.w_out_in, call.head_dim))
    ws = _plan(S.PROJ_ROPE, (x, w, x_scale, w_scale, cos, sin) + outs, call.extra)
    operands = (x, w, cos, sin) + ((x_scale, w_scale) if x_scale is not None else ())
    flags = dict(call.extra)["flags"]
    return tuple(jax.ffi.ffi_call("mxfuse_proj_rope", outs + (_ws(ws),))(*operands, flags=np.int32(flags))[:4])


@S.front_end(S.quantize, __name__)
def quantize(call):
    _xla_stream(call)
    got = iter(_batched(functools.partial(_quantize_ffi, call.directions, call.extra))(call.x))
    rows, cols = call.directions & A.QUANT_ROWS, call.directions & A.QUANT_COLS
    return S.QuantizeResult(*((next(got), next(got)) if rows else (None, None)),
                            *((next(got), next(got)) if cols else (None, None)))


def _quantize_ffi(directions, extra, x):
    outs = tuple(_out(*o) if o is not None else None for o in S.quantize_outputs(_shape(x), directions))
    ws = _plan(S.QUANTIZE, (x,) + outs, extra)
    given = tuple(o for o in outs if o is not None)
    return tuple(jax.ffi.ffi_call("mxfuse_quantize", given + (_ws(ws),))(x, directions=np.int32(directions))[:-1])


@S.front_end(S.dequantize, __name__)
def dequantize(call):
    _xla_stream(call)
    return _batched(functools.partial(_dequantize_ffi, call))(call.q, call.s)[0]


def _dequantize_ffi(call, q, s):
    y = _out(_shape(q), call.y_code)
    ws = _plan(S.DEQUANTIZE, (q, s, y), call.extra)
    return (jax.ffi.ffi_call("mxfuse_dequantize", (y, _ws(ws)))(q, s, direction=np.int32(call.direction))[0],)


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
