"""The operations in Python, for torch tensors, NumPy arrays and DLPack producers.

Each op has a class form (`GemmAmax`, `ProjRope`, `Quantize`, `Dequantize`: sample
tensors in, `check_support()`, `compile()`, `execute(...)` on preallocated outputs — one C
plan underneath, its workspace from the framework's allocator) and a one-call function
that allocates its outputs with the framework of its inputs and returns them as a
named tuple whose items are also reachable by name (the cuDNN frontend's TupleDict). One-call plans are cached by the tensors' dtypes, devices, shapes and strides;
the cache holds no workspace (a call's workspace comes from the framework's allocator).
JAX arrays are routed to mxfuse.jax (XLA custom calls). Every check of the contract is
the C library's; its errors arrive as the exceptions of _lib with its message.
"""
import ctypes
import sys
from collections import OrderedDict, namedtuple

from . import _lib as L
from . import _tensors as T


def _result_type(name, fields):
    """A namedtuple whose items are also reachable by name: `c, amax = r` or
    `r["c_tensor"]` (as the TupleDict of the cuDNN frontend)."""
    base = namedtuple(name, fields)

    def __getitem__(self, k):
        return getattr(self, k) if isinstance(k, str) else base.__getitem__(self, k)

    def keys(self):
        return self._fields

    return type(name, (base,), {"__slots__": (), "__getitem__": __getitem__, "keys": keys})


GemmAmaxResult = _result_type("GemmAmaxResult", ("c_tensor", "amax_tensor"))
ProjRopeResult = _result_type("ProjRopeResult", ("out_fp8_row", "out_scales_row", "out_fp8_col", "out_scales_col"))
QuantizeResult = _result_type("QuantizeResult", ("q_row", "s_row", "q_col", "s_col"))


# ------------------------------------------------------------------ shared machinery
def _stream(fw, metas, stream):
    """The CUDA stream handle (an int, 0 = the legacy stream) of a call."""
    if stream is not None or fw != "torch":
        return _cuda_stream(0, stream)
    return _cuda_stream(next((m[1] for m in metas if m and m[1] > 0), 0), None)


def _cuda_stream(device, stream):
    """The handle of `stream` (a torch.cuda.Stream or a raw handle), else torch's current
    stream on the library device `device` (None for the CPU)."""
    if stream is not None:
        s = getattr(stream, "cuda_stream", stream)
        return int(s) if s else None
    if not device:
        return None
    raw = getattr(_torch_module._C, "_cuda_getCurrentRawStream", None)
    return raw(device - 1) if raw else _torch_module.cuda.current_stream(device - 1).cuda_stream


def _frameworks(tensors):
    fws = {T.framework(x) for x in tensors if x is not None}
    if len(fws) > 1:
        raise TypeError(f"mxfuse: tensors of one call come from different frameworks: {sorted(fws)}")
    fw = fws.pop() if fws else None
    if fw == "torch" and _torch_module is None:
        from . import _torch  # noqa: F401  registers the custom ops
    return fw


def _workspace(fw, size, device):
    """(holder, pointer) of a workspace from the framework's allocator."""
    if not size:
        return None, None
    if fw == "torch":
        t = sys.modules["torch"]
        w = t.empty(size, dtype=t.uint8, device="cpu" if device == 0 else f"cuda:{device - 1}")
        return w, w.data_ptr()
    if device != 0:
        raise TypeError("mxfuse: a CUDA workspace can be allocated for torch tensors only; use torch or mxfuse.jax")
    import numpy as np

    w = np.empty(size, np.uint8)
    return w, w.ctypes.data


class _OpSpec:
    """What the machinery needs of one op: its C functions, structs and tensor names."""

    def __init__(self, name, plan_fn, run_fn, desc_cls, args_cls, tensors):
        self.name, self.plan_fn, self.run_fn = name, plan_fn, run_fn
        self.desc_cls, self.args_cls, self.tensors = desc_cls, args_cls, tensors

    def plan(self, metas, extra):
        """A C plan for tensors of these Metas (None = absent) and the desc's other fields."""
        d = self.desc_cls()
        for n, m in zip(self.tensors, metas):
            if m is not None:
                T.fill(getattr(d, n), m)
        for k, v in extra.items():
            setattr(d, k, v)
        return L.Plan(self.plan_fn, self.run_fn, d)


_GEMM = _OpSpec("gemm_amax", L.lib.mxf_gemm_amax_plan, L.lib.mxf_gemm_amax_run, L.GemmAmaxDesc, L.GemmAmaxArgs,
                ("a", "b", "sfa", "sfb", "c", "amax"))
_PROJ = _OpSpec("proj_rope", L.lib.mxf_proj_rope_plan, L.lib.mxf_proj_rope_run, L.ProjRopeDesc, L.ProjRopeArgs,
                L.PROJ_TENSORS)
_QUANT = _OpSpec("quantize", L.lib.mxf_quantize_plan, L.lib.mxf_quantize_run, L.QuantizeDesc, L.QuantizeArgs,
                 ("x", "q_row", "s_row", "q_col", "s_col"))
_DEQUANT = _OpSpec("dequantize", L.lib.mxf_dequantize_plan, L.lib.mxf_dequantize_run, L.DequantizeDesc,
                   L.DequantizeArgs, ("q", "s", "y"))

_CACHE_SIZE = 64
_cache = OrderedDict()


def _cached_plan(spec, key, metas, extra):
    p = _cache.get(key)
    if p is not None:
        _cache.move_to_end(key)
        return p
    p = spec.plan(metas, extra)
    _cache[key] = p
    if len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return p


def clear_cache():
    """Drops the one-call functions' plans (and the C library's one-call cache)."""
    _cache.clear()
    _torch_fast.clear()
    L.lib.mxf_plan_cache_clear()


def _run(spec, plan, fw, tensors, metas, stream, extra_args=()):
    keep = []
    ptrs = [T.data_ptr(x, fw, keep) if x is not None else None for x in tensors]
    args = spec.args_cls(*ptrs, *extra_args)
    ws, ws_ptr = _workspace(fw, plan.workspace_size, next((m[1] for m in metas if m), 0))
    plan.run(args, ws_ptr, _stream(fw, metas, stream))
    del ws, keep


def _alpha_ptr(alpha):
    return ctypes.pointer(ctypes.c_float(alpha)) if alpha is not None else None


def _pair(v, what):
    if v is None:
        return 0, 0
    if len(v) != 2:
        raise ValueError(f"mxfuse: {what} must be a pair; got {v!r}")
    return int(v[0]), int(v[1])


def _is_jax(x):
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


# ------------------------------------------------------------------ class API base
class _ClassOp:
    """check_support / compile / execute over one C plan made from sample tensors."""

    _spec = None

    def _setup(self, samples, extra):
        self._fw = _frameworks(samples)
        if self._fw == "jax":
            raise TypeError(f"mxfuse: the class API takes torch tensors, NumPy arrays or DLPack producers; for JAX "
                            f"use mxfuse.jax.{self._spec.name}")
        self._metas = tuple(T.meta(x) if x is not None else None for x in samples)
        self._extra = extra
        self._plan = None
        self._ws = self._ws_ptr = None
        # torch: the samples' keys, compared per call instead of their Metas (cheaper)
        self._tkeys = tuple(T.torch_key(x) if x is not None else None for x in samples) if self._fw == "torch" \
            else None

    def check_support(self):
        """Validates and plans; True, or the library's error as an exception."""
        if self._plan is None:
            self._plan = self._spec.plan(self._metas, self._extra)
        return True

    def compile(self):
        """Plans (if not yet) and takes the workspace from the framework's allocator."""
        self.check_support()
        if self._ws is None and self._plan.workspace_size:
            dev = next((m[1] for m in self._metas if m), 0)
            self._ws, self._ws_ptr = _workspace(self._fw, self._plan.workspace_size, dev)
        return self

    @property
    def backend(self):
        """The backend and kernel of the plan with its configuration, e.g. 'cuda/sm90 128x256 prepass'
        (after check_support); compare the first word."""
        return self.check_support() and self._plan.backend

    @property
    def workspace_size(self):
        return self.check_support() and self._plan.workspace_size

    def _execute(self, tensors, stream, extra_args=()):
        if self._plan is None or (self._plan.workspace_size and self._ws is None):
            self.compile()
        if self._tkeys is not None and _same_torch_geometry(tensors, self._tkeys):
            ptrs = [x.data_ptr() if x is not None else None for x in tensors]
            self._plan.run(self._spec.args_cls(*ptrs, *extra_args), self._ws_ptr,
                           _stream("torch", self._metas, stream))
            return
        fw = _frameworks(tensors)
        for n, x, m in zip(self._spec.tensors, tensors, self._metas):
            got = T.meta(x, fw) if x is not None else None
            if got != m:
                raise ValueError(f"{self._spec.name}.execute: {n} is {_describe(got)}; the plan was made for "
                                 f"{_describe(m)}")
        keep = []
        ptrs = [T.data_ptr(x, fw, keep) if x is not None else None for x in tensors]
        self._plan.run(self._spec.args_cls(*ptrs, *extra_args), self._ws_ptr, _stream(fw, self._metas, stream))


def _same_torch_geometry(tensors, keys):
    try:
        for x, k in zip(tensors, keys):
            if k is None:
                if x is not None:
                    return False
            elif x is None or T.torch_key(x) != k:
                return False
    except (AttributeError, TypeError):  # not a torch tensor: the general path says what is wrong
        return False
    return True


def _describe(m):
    if m is None:
        return "absent"
    dev = "cpu" if m[1] == 0 else f"cuda:{m[1] - 1}"
    return f"{L.DTYPE_NAMES.get(m[0], m[0])} {m[2]} strides {m[3]} on {dev}"


# ------------------------------------------------------------------ gemm_amax
def _gemm_extra(sf_vec_size, accumulate, mma_tiler_mn, cluster_shape_mn):
    tm, tn = _pair(mma_tiler_mn, "mma_tiler_mn")
    cm, cn = _pair(cluster_shape_mn, "cluster_shape_mn")
    return {"sf_vec": int(sf_vec_size), "flags": L.AMAX_ACCUMULATE if accumulate else 0, "mma_tile_m": tm,
            "mma_tile_n": tn, "cluster_m": cm, "cluster_n": cn}


def _check_acc(acc_dtype):
    if acc_dtype is not None and T.dtype_code(acc_dtype) != L.F32:
        raise ValueError(f"gemm_amax: acc_dtype {acc_dtype!r}; only float32 accumulation is supported")


class GemmAmax(_ClassOp):
    """Class form of gemm_amax (SPEC §1) over sample tensors of the shapes, strides, dtypes
    and device of later `execute` calls."""

    _spec = _GEMM

    def __init__(self, sample_a, sample_b, sample_sfa, sample_sfb, sample_c, sample_amax, *, sf_vec_size=32,
                 accumulate=False, mma_tiler_mn=None, cluster_shape_mn=None, acc_dtype=None):
        _check_acc(acc_dtype)
        self._setup((sample_a, sample_b, sample_sfa, sample_sfb, sample_c, sample_amax),
                    _gemm_extra(sf_vec_size, accumulate, mma_tiler_mn, cluster_shape_mn))

    def execute(self, a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_tensor, amax_tensor, current_stream=None,
                alpha=None):
        """Runs on the given tensors (same geometry as the samples); writes c and amax."""
        self._execute((a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_tensor, amax_tensor), current_stream,
                      (_alpha_ptr(alpha),))


_ITEM_BYTES = {L.F32: 4, L.F16: 2, L.BF16: 2, L.E4M3: 1, L.E5M2: 1, L.E2M1X2: 1, L.U8: 1}


def gemm_c_layout(a_shape, n, c_code, c_major):
    """How gemm_amax's C is allocated for A of a_shape (2-D or 3-D) and N columns:
    (memory shape, extent of its last dimension, permutation to the logical (M, N[, L])
    view). Memory is C-contiguous with its rows padded to 16 bytes (the library's row
    alignment); the view takes the first `extent` elements of each row."""
    m = a_shape[0]
    nc = (n + 1) // 2 if c_code == L.E2M1X2 else n
    if c_major not in ("n", "m"):
        raise ValueError(f"gemm_amax: c_major={c_major!r}; expected 'n' or 'm'")
    inner = nc if c_major == "n" else m
    per16 = 16 // _ITEM_BYTES.get(c_code, 1)
    padded = -(-inner // per16) * per16
    if len(a_shape) == 3:
        lb = a_shape[2]
        return ((lb, m, padded), nc, (1, 2, 0)) if c_major == "n" else ((lb, nc, padded), m, (2, 1, 0))
    return ((m, padded), nc, None) if c_major == "n" else ((nc, padded), m, (1, 0))


def gemm_amax(a, b, sfa, sfb, *, c_major="n", c_dtype="float32", sf_vec_size=32, alpha=None, amax=None,
              accumulate=False, mma_tiler_mn=None, cluster_shape_mn=None, acc_dtype=None, stream=None, c=None):
    """C = alpha * (A·SFA)(B·SFB)^T in c_dtype and amax = max|C| (SPEC §1). Returns
    (c_tensor, amax_tensor), also by name. a (M, K[, L]), b (N, K[, L]), each in its own
    format (a bf16 a has no scales: sfa=None); sfa/sfb compact (MN, Kb) / (L, MN, Kb) or
    swizzled; amax: an f32 tensor to write (with accumulate,
    also read), else a new one; c: a tensor to write C into (its dtype and layout are
    then C's), else a new one with rows padded to 16 bytes. JAX arrays run through
    mxfuse.jax.gemm_amax."""
    if _torch_compiling():
        if c is not None:
            raise ValueError("gemm_amax: c= (an output to write into) is not traced by torch.compile; use the "
                             "returned c_tensor")
        return _traced["gemm_amax"](a, b, sfa, sfb, c_major, c_dtype, sf_vec_size, alpha, amax, accumulate,
                                    mma_tiler_mn, cluster_shape_mn)
    if _is_jax(a):
        from . import jax as mj

        return mj.gemm_amax(a, b, sfa, sfb, c_major=c_major, c_dtype=c_dtype, sf_vec_size=sf_vec_size, alpha=alpha,
                            amax=amax, accumulate=accumulate, mma_tiler_mn=mma_tiler_mn,
                            cluster_shape_mn=cluster_shape_mn, acc_dtype=acc_dtype)
    if acc_dtype is not None:
        _check_acc(acc_dtype)
    if _torch_module is not None and isinstance(a, _torch_module.Tensor):
        fast = _gemm_torch_fast(a, b, sfa, sfb, c, amax, c_major, c_dtype, sf_vec_size, alpha, accumulate,
                                mma_tiler_mn, cluster_shape_mn, stream)
        if fast is not None:
            return fast
    _check_acc(acc_dtype)
    if accumulate and amax is None:
        raise ValueError("gemm_amax: accumulate=True reads the previous amax; pass it as amax=")
    fw = _frameworks((a, b, sfa, sfb, amax, c))
    c_code = T.dtype_code(c_dtype)
    ins = (a, b, sfa, sfb)
    in_metas = tuple(T.meta(x, fw) if x is not None else None for x in ins)
    given_c, given_amax = c is not None, amax is not None
    if c is None:
        mem, extent, perm = gemm_c_layout(in_metas[0][2], in_metas[1][2][0] if in_metas[1][2] else 0, c_code,
                                          c_major)
        c = T.empty(fw, a, mem, perm, c_code, extent)
    if amax is None:
        amax = T.empty(fw, a, (1, 1, 1) if len(in_metas[0][2]) == 3 else (1,), None, L.F32)
    metas = in_metas + (T.meta(c, fw), T.meta(amax, fw))
    extra = _gemm_extra(sf_vec_size, accumulate, mma_tiler_mn, cluster_shape_mn)
    plan = _cached_plan(_GEMM, ("gemm", metas, tuple(extra.values())), metas, extra)
    _run(_GEMM, plan, fw, ins + (c, amax), metas, stream, (_alpha_ptr(alpha),))
    if fw == "torch":
        _torch_fast[_torch_fast_key(a, b, sfa, sfb, c if given_c else None, amax if given_amax else None, c_major,
                                    c_dtype, sf_vec_size, accumulate, mma_tiler_mn, cluster_shape_mn)] = (
            plan, None if given_c else (mem, extent, perm, c.dtype), None if given_amax else tuple(amax.shape),
            next((m[1] for m in metas if m), 0))
        if len(_torch_fast) > _CACHE_SIZE:
            _torch_fast.pop(next(iter(_torch_fast)))
    return GemmAmaxResult(c, amax)


# torch one-call fast path: per call signature, the plan and how to allocate the outputs
_torch_fast = {}


def _hashable(v):
    return None if v is None else tuple(v)


def _torch_fast_key(a, b, sfa, sfb, c, amax, c_major, c_dtype, sf_vec_size, accumulate, tiles, clusters):
    k = T.torch_key
    return (k(a), k(b), None if sfa is None else k(sfa), k(sfb), None if c is None else k(c),
            None if amax is None else k(amax), c_major, c_dtype, sf_vec_size, bool(accumulate), _hashable(tiles),
            _hashable(clusters))


def _gemm_torch_fast(a, b, sfa, sfb, c, amax, c_major, c_dtype, sf_vec_size, alpha, accumulate, tiles, clusters,
                     stream):
    """The one call on torch tensors seen before with this signature: no Metas, no
    validation in Python (the plan was validated when it was made). None on a miss."""
    try:
        key = _torch_fast_key(a, b, sfa, sfb, c, amax, c_major, c_dtype, sf_vec_size, accumulate, tiles, clusters)
        hit = _torch_fast.get(key)
    except (AttributeError, TypeError):  # not all torch tensors, or unhashable arguments: the general path
        return None
    if hit is None:
        return None
    plan, c_alloc, amax_shape, dev = hit
    t = _torch_module
    device = a.device
    if c is None:
        mem, extent, perm, dt = c_alloc
        c = t.empty(mem, dtype=dt, device=device)
        if extent != mem[-1]:
            c = c[..., :extent]
        if perm:
            c = c.permute(perm)
    if amax is None:
        amax = t.empty(amax_shape, dtype=t.float32, device=device)
    ws = ws_ptr = None
    if plan.workspace_size:
        ws = t.empty(plan.workspace_size, dtype=t.uint8, device=device)
        ws_ptr = ws.data_ptr()
    args = L.GemmAmaxArgs(a.data_ptr(), b.data_ptr(), None if sfa is None else sfa.data_ptr(), sfb.data_ptr(),
                          c.data_ptr(), amax.data_ptr(), _alpha_ptr(alpha))
    plan.run(args, ws_ptr, _cuda_stream(dev, stream))
    return GemmAmaxResult(c, amax)


# Set by mxfuse._torch when it registers the custom ops: the torch module, and per op the
# function that calls its custom op (what torch.compile traces instead of the eager path).
_torch_module = None
_traced = {}


def _torch_compiling():
    return _torch_module is not None and _torch_module.compiler.is_compiling()


# ------------------------------------------------------------------ proj_rope
def proj_layout(t_tokens, hd, head_dim):
    """(shape, dtype) of the four proj_rope outputs for T tokens and H·D projected features."""
    h, d = hd // head_dim, head_dim
    tb = (t_tokens + 31) // 32
    return (((t_tokens, h, d), L.E4M3), ((t_tokens, h, d // 32), L.E8M0), ((t_tokens, h, d), L.E4M3),
            ((tb, h, d), L.E8M0))


def _proj_flags(w_out_in, fp32_epilogue):
    return (L.PROJ_W_OUT_IN if w_out_in else 0) | (L.PROJ_FP32_EPILOGUE if fp32_epilogue else 0)


class ProjRope(_ClassOp):
    """Class form of proj_rope (SPEC §2). The bf16 path passes no scales; the MXFP8 path
    passes sample_x_scale and sample_w_scale."""

    _spec = _PROJ

    def __init__(self, sample_x, sample_w, sample_cos, sample_sin, sample_out_fp8_row, sample_out_scales_row,
                 sample_out_fp8_col, sample_out_scales_col, *, sample_x_scale=None, sample_w_scale=None,
                 w_out_in=False, fp32_epilogue=False):
        self._setup((sample_x, sample_w, sample_x_scale, sample_w_scale, sample_cos, sample_sin, sample_out_fp8_row,
                     sample_out_scales_row, sample_out_fp8_col, sample_out_scales_col),
                    {"flags": _proj_flags(w_out_in, fp32_epilogue)})

    def execute(self, x, w, cos, sin, out_fp8_row, out_scales_row, out_fp8_col, out_scales_col, *, x_scale=None,
                w_scale=None, current_stream=None):
        self._execute((x, w, x_scale, w_scale, cos, sin, out_fp8_row, out_scales_row, out_fp8_col, out_scales_col),
                      current_stream)


def proj_rope(x, w, cos, sin, *, x_scale=None, w_scale=None, w_out_in=True, fp32_epilogue=False, head_dim=192,
              stream=None):
    """DeepSeek-V3 Q up-projection (SPEC §2): GEMM, bf16 staging, per-head RoPE on the
    trailing cos.shape[1] features of each head_dim-wide head, MXFP8 along features and
    along tokens. bf16 x/w, or e4m3 x/w with e8m0 x_scale/w_scale. Returns
    (out_fp8_row, out_scales_row, out_fp8_col, out_scales_col)."""
    if _torch_compiling():
        return _traced["proj_rope"](x, w, cos, sin, x_scale, w_scale, w_out_in, fp32_epilogue, head_dim)
    if _is_jax(x):
        from . import jax as mj

        return mj.proj_rope(x, w, cos, sin, x_scale=x_scale, w_scale=w_scale, w_out_in=w_out_in,
                            fp32_epilogue=fp32_epilogue, head_dim=head_dim)
    fw = _frameworks((x, w, cos, sin, x_scale, w_scale))
    ins = (x, w, x_scale, w_scale, cos, sin)
    in_metas = tuple(T.meta(v, fw) if v is not None else None for v in ins)
    xs, ws_ = in_metas[0][2], in_metas[1][2]
    if len(xs) < 1 or len(ws_) != 2:
        raise ValueError(f"proj_rope: x has shape {xs} and w {ws_}; expected (T, K) and a 2-D w")
    hd = ws_[0] if w_out_in else ws_[1]
    outs = tuple(T.empty(fw, x, shp, None, code) for shp, code in proj_layout(xs[0], hd, int(head_dim)))
    metas = in_metas + tuple(T.meta(o, fw) for o in outs)
    extra = {"flags": _proj_flags(w_out_in, fp32_epilogue)}
    plan = _cached_plan(_PROJ, ("proj", metas, extra["flags"]), metas, extra)
    _run(_PROJ, plan, fw, ins + outs, metas, stream)
    return ProjRopeResult(*outs)


# ------------------------------------------------------------------ quantize / dequantize
def _directions(rows, cols):
    d = (L.QUANT_ROWS if rows else 0) | (L.QUANT_COLS if cols else 0)
    if not d:
        raise ValueError("quantize: rows and cols are both False; ask for at least one direction")
    return d


class Quantize(_ClassOp):
    """Class form of MXFP8 quantize (SPEC §3); tensors of a direction not asked are None."""

    _spec = _QUANT

    def __init__(self, sample_x, sample_q_row=None, sample_s_row=None, sample_q_col=None, sample_s_col=None):
        d = (L.QUANT_ROWS if sample_q_row is not None else 0) | (L.QUANT_COLS if sample_q_col is not None else 0)
        self._setup((sample_x, sample_q_row, sample_s_row, sample_q_col, sample_s_col), {"directions": d})

    def execute(self, x, q_row=None, s_row=None, q_col=None, s_col=None, current_stream=None):
        self._execute((x, q_row, s_row, q_col, s_col), current_stream)


def quantize(x, *, rows=True, cols=True, stream=None):
    """MXFP8-quantizes a (rows, cols) bf16/f32 matrix along rows, columns or both (SPEC §3).
    Returns (q_row, s_row, q_col, s_col), also by name; a direction not asked is None."""
    if _torch_compiling():
        return _traced["quantize"](x, rows, cols)
    if _is_jax(x):
        from . import jax as mj

        return mj.quantize(x, rows=rows, cols=cols)
    d = _directions(rows, cols)
    fw = _frameworks((x,))
    xm = T.meta(x, fw)
    if len(xm[2]) != 2:
        raise ValueError(f"quantize: x has shape {xm[2]}; expected (rows, cols)")
    r, c = xm[2]
    outs = [None] * 4
    if d & L.QUANT_ROWS:
        outs[0] = T.empty(fw, x, (r, c), None, L.E4M3)
        outs[1] = T.empty(fw, x, (r, (c + 31) // 32), None, L.E8M0)
    if d & L.QUANT_COLS:
        outs[2] = T.empty(fw, x, (r, c), None, L.E4M3)
        outs[3] = T.empty(fw, x, ((r + 31) // 32, c), None, L.E8M0)
    metas = (xm,) + tuple(T.meta(o, fw) if o is not None else None for o in outs)
    plan = _cached_plan(_QUANT, ("quant", metas, d), metas, {"directions": d})
    _run(_QUANT, plan, fw, (x, *outs), metas, stream)
    return QuantizeResult(*outs)


class Dequantize(_ClassOp):
    """Class form of MXFP8 dequantize."""

    _spec = _DEQUANT

    def __init__(self, sample_q, sample_s, sample_y, *, direction="rows"):
        self._setup((sample_q, sample_s, sample_y), {"direction": _direction(direction)})

    def execute(self, q, s, y, current_stream=None):
        self._execute((q, s, y), current_stream)


def _direction(direction):
    if direction not in ("rows", "cols"):
        raise ValueError(f"dequantize: direction={direction!r}; expected 'rows' or 'cols'")
    return L.QUANT_ROWS if direction == "rows" else L.QUANT_COLS


def dequantize(q, s, *, direction="rows", dtype="float32", stream=None):
    """y = e4m3(q) · 2^(s − 127) for MXFP8 codes q (rows, cols) with scales s of one
    direction ('rows': (rows, ceil(cols/32)), 'cols': (ceil(rows/32), cols)); y f32 or bf16."""
    if _torch_compiling():
        return _traced["dequantize"](q, s, direction, dtype)
    if _is_jax(q):
        from . import jax as mj

        return mj.dequantize(q, s, direction=direction, dtype=dtype)
    d = _direction(direction)
    fw = _frameworks((q, s))
    qm, sm = T.meta(q, fw), T.meta(s, fw)
    y = T.empty(fw, q, qm[2], None, T.dtype_code(dtype))
    metas = (qm, sm, T.meta(y, fw))
    plan = _cached_plan(_DEQUANT, ("dequant", metas, d), metas, {"direction": d})
    _run(_DEQUANT, plan, fw, (q, s, y), metas, stream)
    return y


# ------------------------------------------------------------------ scale-factor layouts
def _host_bytes(sf):
    """(numpy uint8 view of host memory, framework, the original) of a scale tensor."""
    import numpy as np

    fw = _frameworks((sf,))
    if fw == "torch":
        h = sf.detach().contiguous().cpu()
        return h.view(sys.modules["torch"].uint8).numpy(), fw, sf
    if fw == "numpy":
        return np.ascontiguousarray(sf).view(np.uint8), fw, sf
    if fw == "jax":
        return np.asarray(sf).view(np.uint8), fw, sf
    raise TypeError("mxfuse: swizzle_scales / unswizzle_scales take torch tensors, NumPy or JAX arrays")


def _host_back(out, fw, like):
    if fw == "torch":
        t = sys.modules["torch"]
        return t.from_numpy(out).view(like.dtype).to(like.device)
    if fw == "jax":
        import jax.numpy as jnp

        return jnp.asarray(out.view(like.dtype))
    return out.view(like.dtype)


def swizzle_scales(sf, *, pad_byte=0):
    """Compact scale factors (MN, Kb) or (L, MN, Kb) -> the 128x4 swizzled layout of
    cuBLASLt / TransformerEngine, physical shape (L, ceil(MN/128), ceil(Kb/4), 32, 4, 4);
    padding bytes set to pad_byte. Runs on the host (device tensors are copied)."""
    import numpy as np

    h, fw, like = _host_bytes(sf)
    if h.ndim == 2:
        h = h[None]
    if h.ndim != 3:
        raise ValueError(f"swizzle_scales: sf has shape {tuple(sf.shape)}; expected (MN, Kb) or (L, MN, Kb)")
    lb, mn, kb = h.shape
    out = np.empty((lb, (mn + 127) // 128, (kb + 3) // 4, 32, 4, 4), np.uint8)
    L.check(L.lib.mxf_sf_swizzle(h.ctypes.data, out.ctypes.data, mn, kb * 32, lb, 32, pad_byte))
    return _host_back(out, fw, like)


def unswizzle_scales(sf, mn, k_blocks):
    """Swizzled scale factors (physical (L, R, K', 32, 4, 4)) -> compact (MN, Kb) when L = 1,
    else (L, MN, Kb); padding bytes dropped. Runs on the host (device tensors are copied)."""
    import numpy as np

    h, fw, like = _host_bytes(sf)
    if h.ndim != 6 or h.shape[3:] != (32, 4, 4):
        raise ValueError(f"unswizzle_scales: sf has shape {tuple(sf.shape)}; expected (L, R, K', 32, 4, 4)")
    lb = h.shape[0]
    if h.shape[1] != (mn + 127) // 128 or h.shape[2] != (k_blocks + 3) // 4:
        raise ValueError(f"unswizzle_scales: sf has shape {tuple(sf.shape)}; MN={mn}, Kb={k_blocks} need "
                         f"({lb}, {(mn + 127) // 128}, {(k_blocks + 3) // 4}, 32, 4, 4)")
    out = np.empty((lb, mn, k_blocks), np.uint8)
    L.check(L.lib.mxf_sf_unswizzle(np.ascontiguousarray(h).ctypes.data, out.ctypes.data, mn, k_blocks * 32, lb,
                                   32))
    return _host_back(out[0] if lb == 1 else out, fw, like)
