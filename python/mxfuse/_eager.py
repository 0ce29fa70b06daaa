"""The ops run at once, for torch tensors, NumPy arrays and DLPack producers.

Each op has a one-call form (`gemm_amax(call)` & co., on a call normalized by _spec) that
allocates its outputs with the framework of its inputs and returns them as the op's
named tuple, and a class form (`GemmAmax`, `ProjRope`, `Quantize`, `Dequantize`: sample
tensors in, `check_support()`, `compile()`, `execute(...)` on preallocated outputs; one C
plan underneath, its workspace from the framework's allocator). One-call plans come from
the cache of _plans, keyed by the tensors' dtypes, devices, shapes and strides; torch
tensors seen before with the same call take a shorter path keyed by torch's own
description of them. Every check of the contract is the C library's.
"""
import ctypes
import sys

from . import _abi as A
from . import _plans as P
from . import _spec as S
from . import _tensors as T


def _framework(tensors):
    fws = {T.framework(x) for x in tensors if x is not None} - {None}
    if len(fws) > 1:
        raise TypeError(f"mxfuse: tensors of one call come from different frameworks: {sorted(fws)}")
    return fws.pop() if fws else None


def _metas(tensors, fw):
    return tuple(T.meta(x, fw) if x is not None else None for x in tensors)


def _run(plan, op, fw, tensors, metas, stream, extra_args=(), keep=None, ptrs=None):
    keep = [] if keep is None else keep
    ptrs = T.data_ptrs(op, tensors, fw, keep) if ptrs is None else ptrs
    device = T.call_device(metas)
    ws, ws_ptr = T.workspace(fw, plan.workspace_size, device)
    plan.run(op.args(*ptrs, *extra_args), ws_ptr, T.stream_handle(fw, device, stream))
    del ws, keep


def refuse_grad(op, tensors):
    """Raises where a torch tensor of the call requires grad with grad mode on: no op has a
    backward formula, and a result without grad_fn would drop the gradient silently."""
    t = sys.modules.get("torch")
    if t is not None and t.is_grad_enabled():
        for n, x in zip(op.tensors, tensors):
            if getattr(x, "requires_grad", False):
                raise RuntimeError(S.no_backward(op.name, n))


def _alpha_ptr(alpha):
    return ctypes.pointer(ctypes.c_float(alpha)) if alpha is not None else None


def _describe(m):
    if m is None:
        return "absent"
    return f"{A.DTYPES[m[0]].name} {m[2]} strides {m[3]} on {A.device_name(m[1])}"


# ------------------------------------------------------------------ class API base
class _ClassOp:
    """check_support / compile / execute over one C plan made from sample tensors."""

    _op = None

    def _setup(self, samples, extra):
        self._fw = _framework(samples)
        if self._fw == "jax":
            raise TypeError(f"mxfuse: the class API takes torch tensors, NumPy arrays or DLPack producers; for JAX "
                            f"use mxfuse.jax.{self._op.name}")
        self._metas = _metas(samples, self._fw)
        keep = []
        # a plan may depend on their alignment (proj_rope on CUDA)
        self._sample_ptrs = T.data_ptrs(self._op, samples, self._fw, keep, samples=True)
        self._device = T.call_device(self._metas)
        self._extra = extra
        self._plan = None
        self._ws = self._ws_ptr = None
        # torch: the samples' keys, compared per call instead of their Metas (cheaper)
        self._tkeys = tuple(T.torch_key(x) if x is not None else None for x in samples) if self._fw == "torch" \
            else None

    def check_support(self):
        """Validates and plans; True, or the library's error as an exception."""
        if self._plan is None:
            self._plan = P.make(self._op, self._metas, self._extra, self._sample_ptrs)
        return True

    def compile(self):
        """Plans (if not yet) and takes the workspace from the framework's allocator."""
        self.check_support()
        if self._ws is None and self._plan.workspace_size:
            self._ws, self._ws_ptr = T.workspace(self._fw, self._plan.workspace_size, self._device)
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
        refuse_grad(self._op, tensors)
        if self._plan is None or (self._plan.workspace_size and self._ws is None):
            self.compile()
        if self._tkeys is not None and _same_torch_geometry(tensors, self._tkeys):
            ptrs = [T.data_ptr(x) if x is not None else None for x in tensors]
            self._plan.run(self._op.args(*ptrs, *extra_args), self._ws_ptr,
                           T.stream_handle("torch", self._device, stream))
            return
        fw = _framework(tensors)
        for n, x, m in zip(self._op.tensors, tensors, self._metas):
            got = T.meta(x, fw) if x is not None else None
            if got != m:
                raise ValueError(f"{self._op.name}.execute: {n} is {_describe(got)}; the plan was made for "
                                 f"{_describe(m)}")
        keep = []
        ptrs = T.data_ptrs(self._op, tensors, fw, keep)
        self._plan.run(self._op.args(*ptrs, *extra_args), self._ws_ptr, T.stream_handle(fw, self._device, stream))


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


# ------------------------------------------------------------------ gemm_amax
class GemmAmax(_ClassOp):
    """Class form of gemm_amax (SPEC §1) over sample tensors of the shapes, strides, dtypes
    and device of later `execute` calls. Options: those of gemm_amax (sf_vec_size,
    accumulate, mma_tiler_mn, cluster_shape_mn, acc_dtype)."""

    _op = S.GEMM_AMAX

    def __init__(self, sample_a, sample_b, sample_sfa, sample_sfb, sample_c, sample_amax, **options):
        unknown = sorted(set(options) - set(S.GEMM_OPTIONS))
        if unknown:
            raise TypeError(f"GemmAmax: unexpected options {unknown}; expected some of {list(S.GEMM_OPTIONS)}")
        call = S.gemm_amax(sample_a, sample_b, sample_sfa, sample_sfb, c=sample_c, amax=sample_amax, **options)
        self._setup((sample_a, call.b, sample_sfa, call.sfb, sample_c, sample_amax), call.extra)

    def execute(self, a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_tensor, amax_tensor, current_stream=None,
                alpha=None):
        """Runs on the given tensors (same geometry as the samples; packed weights where the
        sample b was, with sfb_tensor None); writes c and amax."""
        b_tensor, sfb_tensor, _ = S.packed_b(b_tensor, sfb_tensor, 0)
        self._execute((a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_tensor, amax_tensor), current_stream,
                      (_alpha_ptr(alpha),))


def gemm_amax(call):
    a = call.a
    t = sys.modules.get("torch")
    if t is not None and isinstance(a, t.Tensor):
        refuse_grad(S.GEMM_AMAX, (a, call.b, call.sfa, call.sfb, call.c, call.amax))  # packed b: uint8, no grad
        fast = _gemm_fast(call, "torch")
        if fast is not None:
            return fast
    elif type(a).__name__ == "ndarray" and type(a).__module__ == "numpy":
        fast = _gemm_fast(call, "numpy")
        if fast is not None:
            return fast
    fw = _framework((a, call.b, call.sfa, call.sfb, call.amax, call.c))
    ins = (a, call.b, call.sfa, call.sfb)
    in_metas = _metas(ins, fw)
    c, amax = call.c, call.amax
    c_alloc = amax_shape = None
    if c is None:
        c_alloc = S.gemm_c_layout(in_metas[0][2], in_metas[1][2], call.c_code, call.c_major) + (call.c_code,)
        c = T.empty(fw, a, c_alloc[0], c_alloc[2], call.c_code, c_alloc[1])
    if amax is None:
        amax_shape = S.gemm_amax_shape(in_metas[0][2])
        amax = T.empty(fw, a, amax_shape, None, A.F32)
    metas = in_metas + (T.meta(c, fw), T.meta(amax, fw))
    plan = P.cached(S.GEMM_AMAX, metas, call.extra)
    _run(plan, S.GEMM_AMAX, fw, ins + (c, amax), metas, call.stream, (_alpha_ptr(call.alpha),))
    if fw in _FAST:
        c_alloc = c_alloc and c_alloc[:3] + (c.dtype,)
        P.put(_fast_key(call, fw), (plan, c_alloc, amax_shape, T.call_device(metas)))
    return S.GemmAmaxResult(c, amax)


def _numpy_key(x):
    return T.geometry_key(x, _numpy_geometry)


def _numpy_geometry(a):
    return (a.dtype, a.shape, a.strides)


def _numpy_ptr(x):
    x = T.unpacked(x)
    return None if x is None else x.ctypes.data


# framework: (geometry key of one tensor, its data pointer)
_FAST = {"torch": (T.torch_key, T.data_ptr), "numpy": (_numpy_key, _numpy_ptr)}


def _fast_key(call, fw):
    k = _FAST[fw][0]
    return ("gemm_amax/" + fw, k(call.a), k(call.b), None if call.sfa is None else k(call.sfa), k(call.sfb),
            None if call.c is None else k(call.c), None if call.amax is None else k(call.amax), call.c_major,
            call.c_code, call.extra)


def _gemm_fast(call, fw):
    """The one call on torch tensors or NumPy arrays seen before with this call's geometry:
    no Metas, no validation in Python (the plan was validated when it was made). None on a
    miss."""
    try:
        hit = P.get(_fast_key(call, fw))
    except (AttributeError, TypeError):  # not all of one framework: the general path
        return None
    if hit is None:
        return None
    plan, c_alloc, amax_shape, dev = hit
    c, amax = call.c, call.amax
    torch = fw == "torch"
    if torch:
        t = sys.modules["torch"]
        device = call.a.device
        if c is None:
            c = t.empty(c_alloc[0], dtype=c_alloc[3], device=device)
        if amax is None:
            amax = t.empty(amax_shape, dtype=t.float32, device=device)
    else:
        np = sys.modules["numpy"]
        if c is None:
            c = np.empty(c_alloc[0], dtype=c_alloc[3])
        if amax is None:
            amax = np.empty(amax_shape, dtype=np.float32)
    if call.c is None:
        mem, extent, perm = c_alloc[:3]
        if extent != mem[-1]:
            c = c[..., :extent]
        if perm:
            c = c.permute(perm) if torch else c.transpose(perm)
    ptr = _FAST[fw][1]
    ws = ws_ptr = None
    if plan.workspace_size:
        ws, ws_ptr = T.workspace(fw, plan.workspace_size, dev)
    sfa = call.sfa
    args = A.GemmAmaxArgs(ptr(call.a), ptr(call.b), None if sfa is None else ptr(sfa), ptr(call.sfb), ptr(c),
                          ptr(amax), _alpha_ptr(call.alpha))
    plan.run(args, ws_ptr, T.stream_handle(fw, dev, call.stream))
    del ws
    return S.GemmAmaxResult(c, amax)


# ------------------------------------------------------------------ packed weights
class _PackOp:
    name, tensors = "pack_weights", ("b", "sfb")


def pack_weights(call):
    """mxfuse.pack_weights on torch tensors, NumPy arrays or DLPack producers: the packed
    bytes in a new uint8 array of b's framework (NumPy for other DLPack producers)."""
    fw = _framework((call.b, call.sfb))
    if fw == "jax":
        raise TypeError("mxfuse: pack JAX arrays with mxfuse.jax.pack_weights")
    metas = _metas((call.b, call.sfb), fw)
    keep = []
    ptrs = T.data_ptrs(_PackOp, (call.b, call.sfb), fw, keep, samples=True)
    tb, ts = A.Tensor(), A.Tensor()
    T.fill(tb, metas[0], ptrs[0])
    T.fill(ts, metas[1], ptrs[1])
    n = ctypes.c_size_t(0)
    A.check(A.lib.mxf_pack_weights_size(ctypes.byref(tb), ctypes.byref(ts), call.sf_vec, ctypes.byref(n)))
    out_fw = "torch" if fw == "torch" else "numpy"
    out = T.empty(out_fw, call.b, (n.value,), None, A.U8)
    A.check(A.lib.mxf_pack_weights(ctypes.byref(tb), ctypes.byref(ts), call.sf_vec,
                                   T.data_ptrs(_PackOp, (out, None), out_fw, keep, samples=True)[0], n.value))
    del keep
    return S.PackedWeights(out, metas[0], metas[1], call.sf_vec)


# ------------------------------------------------------------------ proj_rope
class ProjRope(_ClassOp):
    """Class form of proj_rope (SPEC §2). The bf16 path passes no scales; the MXFP8 path
    passes sample_x_scale and sample_w_scale."""

    _op = S.PROJ_ROPE

    def __init__(self, sample_x, sample_w, sample_cos, sample_sin, sample_out_fp8_row, sample_out_scales_row,
                 sample_out_fp8_col, sample_out_scales_col, *, sample_x_scale=None, sample_w_scale=None,
                 w_out_in=False, fp32_epilogue=False):
        self._setup((sample_x, sample_w, sample_x_scale, sample_w_scale, sample_cos, sample_sin, sample_out_fp8_row,
                     sample_out_scales_row, sample_out_fp8_col, sample_out_scales_col),
                    (("flags", S.proj_flags(w_out_in, fp32_epilogue)),))

    def execute(self, x, w, cos, sin, out_fp8_row, out_scales_row, out_fp8_col, out_scales_col, *, x_scale=None,
                w_scale=None, current_stream=None):
        self._execute((x, w, x_scale, w_scale, cos, sin, out_fp8_row, out_scales_row, out_fp8_col, out_scales_col),
                      current_stream)


def proj_rope(call):
    fw = _framework((call.x, call.w, call.cos, call.sin, call.x_scale, call.w_scale))
    ins = (call.x, call.w, call.x_scale, call.w_scale, call.cos, call.sin)
    if fw == "torch":
        refuse_grad(S.PROJ_ROPE, ins)
    in_metas = _metas(ins, fw)
    outs = tuple(T.empty(fw, call.x, shape, None, code)
                 for shape, code in S.proj_outputs(in_metas[0][2], in_metas[1][2], call.w_out_in, call.head_dim))
    metas = in_metas + _metas(outs, fw)
    keep = []
    ptrs = T.data_ptrs(S.PROJ_ROPE, ins + outs, fw, keep)
    plan = P.cached(S.PROJ_ROPE, metas, call.extra, ptrs)  # the kernel may depend on their alignment
    _run(plan, S.PROJ_ROPE, fw, ins + outs, metas, call.stream, keep=keep, ptrs=ptrs)
    return S.ProjRopeResult(*outs)


# ------------------------------------------------------------------ quantize / dequantize
class Quantize(_ClassOp):
    """Class form of MXFP8 quantize (SPEC §3); tensors of a direction not asked are None."""

    _op = S.QUANTIZE

    def __init__(self, sample_x, sample_q_row=None, sample_s_row=None, sample_q_col=None, sample_s_col=None):
        d = (A.QUANT_ROWS if sample_q_row is not None else 0) | (A.QUANT_COLS if sample_q_col is not None else 0)
        self._setup((sample_x, sample_q_row, sample_s_row, sample_q_col, sample_s_col), (("directions", d),))

    def execute(self, x, q_row=None, s_row=None, q_col=None, s_col=None, current_stream=None):
        self._execute((x, q_row, s_row, q_col, s_col), current_stream)


def quantize(call):
    fw = _framework((call.x,))
    if fw == "torch":
        refuse_grad(S.QUANTIZE, (call.x,))
    xm = T.meta(call.x, fw)
    outs = tuple(T.empty(fw, call.x, o[0], None, o[1]) if o is not None else None
                 for o in S.quantize_outputs(xm[2], call.directions))
    metas = (xm,) + _metas(outs, fw)
    plan = P.cached(S.QUANTIZE, metas, call.extra)
    _run(plan, S.QUANTIZE, fw, (call.x,) + outs, metas, call.stream)
    return S.QuantizeResult(*outs)


class Dequantize(_ClassOp):
    """Class form of MXFP8 dequantize."""

    _op = S.DEQUANTIZE

    def __init__(self, sample_q, sample_s, sample_y, *, direction="rows"):
        self._setup((sample_q, sample_s, sample_y), (("direction", S.direction_flag(direction)),))

    def execute(self, q, s, y, current_stream=None):
        self._execute((q, s, y), current_stream)


def dequantize(call):
    fw = _framework((call.q, call.s))
    if fw == "torch":
        refuse_grad(S.DEQUANTIZE, (call.q, call.s))
    qm, sm = T.meta(call.q, fw), T.meta(call.s, fw)
    y = T.empty(fw, call.q, qm[2], None, call.y_code)
    metas = (qm, sm, T.meta(y, fw))
    plan = P.cached(S.DEQUANTIZE, metas, call.extra)
    _run(plan, S.DEQUANTIZE, fw, (call.q, call.s, y), metas, call.stream)
    return y


# ------------------------------------------------------------------ scale-factor layouts
def _host_bytes(sf):
    """(numpy uint8 view of host memory, framework, the original) of a scale tensor."""
    import numpy as np

    fw = _framework((sf,))
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
    pad_byte = S.int_arg("swizzle_scales", "pad_byte", pad_byte, 0, 255)
    A.check(A.lib.mxf_sf_swizzle(h.ctypes.data, out.ctypes.data, mn, kb * 32, lb, 32, pad_byte))
    return _host_back(out, fw, like)


def unswizzle_scales(sf, mn, k_blocks):
    """Swizzled scale factors (physical (L, R, K', 32, 4, 4)) -> compact (MN, Kb) when L = 1,
    else (L, MN, Kb); padding bytes dropped. Runs on the host (device tensors are copied)."""
    import numpy as np

    mn = S.int_arg("unswizzle_scales", "mn", mn, 0, S.INT64[1])
    k_blocks = S.int_arg("unswizzle_scales", "k_blocks", k_blocks, 0, S.INT64[1])
    h, fw, like = _host_bytes(sf)
    if h.ndim != 6 or h.shape[3:] != (32, 4, 4):
        raise ValueError(f"unswizzle_scales: sf has shape {tuple(sf.shape)}; expected (L, R, K', 32, 4, 4)")
    lb = h.shape[0]
    if h.shape[1] != (mn + 127) // 128 or h.shape[2] != (k_blocks + 3) // 4:
        raise ValueError(f"unswizzle_scales: sf has shape {tuple(sf.shape)}; MN={mn}, Kb={k_blocks} need "
                         f"({lb}, {(mn + 127) // 128}, {(k_blocks + 3) // 4}, 32, 4, 4)")
    out = np.empty((lb, mn, k_blocks), np.uint8)
    A.check(A.lib.mxf_sf_unswizzle(np.ascontiguousarray(h).ctypes.data, out.ctypes.data, mn, k_blocks * 32, lb,
                                   32))
    return _host_back(out[0] if lb == 1 else out, fw, like)


# ------------------------------------------------------------------ grouped_gemm_amax
class GroupedGemmAmax(_ClassOp):
    """Class form of grouped_gemm_amax (SPEC §6): planned once for the samples' shapes,
    strides, dtypes and device (offs or counts give the layout; their values are read by
    each `execute`). group_alpha and group_amax samples may be None (not used).
    Options: sf_vec_size, accumulate."""

    _op = S.GROUPED_GEMM_AMAX

    def __init__(self, sample_a, sample_b, sample_sfa, sample_sfb, sample_c, sample_amax, *, sample_offs=None,
                 sample_counts=None, sample_group_alpha=None, sample_group_amax=None, **options):
        unknown = sorted(set(options) - set(S.GROUPED_OPTIONS))
        if unknown:
            raise TypeError(f"GroupedGemmAmax: unexpected options {unknown}; expected some of "
                            f"{list(S.GROUPED_OPTIONS)}")
        call = S.grouped_gemm_amax(sample_a, sample_b, sample_sfa, sample_sfb, offs=sample_offs,
                                   counts=sample_counts, amax=sample_amax, **options)
        self._setup((sample_a, sample_b, sample_sfa, sample_sfb, sample_c, sample_amax, sample_offs, sample_counts,
                     sample_group_alpha, sample_group_amax), call.extra)

    def execute(self, a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_tensor, amax_tensor, offs_tensor=None,
                counts_tensor=None, group_alpha_tensor=None, group_amax_tensor=None, current_stream=None, alpha=None):
        """Runs on the given tensors (same geometry as the samples) and the routing they
        hold now; writes c (the groups' rows), amax and group_amax."""
        self._execute((a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_tensor, amax_tensor, offs_tensor, counts_tensor,
                       group_alpha_tensor, group_amax_tensor), current_stream, (_alpha_ptr(alpha),))


def grouped_gemm_amax(call):
    a = call.a
    fw = _framework((a, call.b, call.sfa, call.sfb, call.offs, call.counts, call.group_alpha, call.c, call.amax,
                     call.group_amax))
    ins = (a, call.b, call.sfa, call.sfb)
    in_metas = _metas(ins, fw)
    c, amax, gamax = call.c, call.amax, call.group_amax
    if c is None:
        mem, extent = S.grouped_c_layout(in_metas[0][2], in_metas[1][2], call.c_code)
        c = T.empty(fw, a, mem, None, call.c_code, extent)
    if amax is None:
        amax = T.empty(fw, a, (1,), None, A.F32)
    if gamax is None:
        gamax = T.empty(fw, a, (S.grouped_groups(in_metas[1][2]),), None, A.F32)
    tensors = ins + (c, amax, call.offs, call.counts, call.group_alpha, gamax)
    metas = _metas(tensors, fw)
    plan = P.cached(S.GROUPED_GEMM_AMAX, metas, call.extra)
    _run(plan, S.GROUPED_GEMM_AMAX, fw, tensors, metas, call.stream, (_alpha_ptr(call.alpha),))
    return S.GroupedGemmAmaxResult(c, amax, gamax)
