"""The ops as torch custom ops (namespace `mxfuse`), so that torch.compile traces them
without a graph break: each is a torch.library.custom_op over the eager form (_eager),
with a fake implementation giving its outputs' shapes, strides and dtypes from _spec.

Imported by `import mxfuse` when torch is already imported, else on the first call with
torch tensors (or by `import mxfuse.torch`). In eager mode mxfuse.gemm_amax & co. call
the library directly (no dispatcher on the way); under torch.compile mxfuse routes them
to the functions at the end of this file, which call the ops. Each runs on
torch.cuda.current_stream() and can be captured in a CUDA graph.

No op has a backward formula: an input that requires grad (with grad mode on) is refused
with an error naming the op and the input, by the eager forms (_eager.refuse_grad) and by
the custom ops' autograd kernels registered here, so that no path drops a gradient.
"""
from typing import List, Optional, Tuple

import torch

from . import _abi as A
from . import _eager as E
from . import _spec as S
from . import _tensors as T


_impl = torch.library.Library("mxfuse", "IMPL")
_AUTOGRAD_KEYS = ("AutogradCPU", "AutogradCUDA", "AutogradMeta")  # the devices the ops take, and meta tensors


def _no_backward(op_name, names):
    """The Autograd-key kernel of the custom op mxfuse::<op_name>: where an input requires
    grad, it raises naming the op and the input (eager, torch.ops.mxfuse and torch.compile
    alike, at the op's call), rather than returning a result whose gradient is lost; else it
    runs the op below autograd. (torch.library.register_autograd refuses ops that mutate an
    input, as gemm_amax does its amax: one mechanism serves the four.)"""
    overload = getattr(torch.ops.mxfuse, op_name).default

    def kernel(*args, **kwargs):
        if torch.is_grad_enabled():
            for n, x in zip(names, args):
                if isinstance(x, torch.Tensor) and x.requires_grad:
                    raise RuntimeError(S.no_backward(op_name, n))
        with torch._C._AutoDispatchBelowAutograd():
            return overload(*args, **kwargs)

    # On the backends' own autograd keys: a kernel there comes before the Autograd-alias
    # kernel that custom_op registers, and needs no override of it (which Library.impl
    # refuses in torch 2.11 unless asked, and in releases before allow_override always).
    for key in _AUTOGRAD_KEYS:
        _impl.impl(op_name, kernel, key)


def _new(like, shape_code):
    shape, code = shape_code
    return like.new_empty(shape, dtype=T.torch_dtype(code))


# ------------------------------------------------------------------ gemm_amax
@torch.library.custom_op("mxfuse::gemm_amax", mutates_args=("amax",))
def gemm_amax_op(a: torch.Tensor, b: torch.Tensor, sfa: Optional[torch.Tensor], sfb: torch.Tensor,
                 amax: torch.Tensor, c_major: str, c_dtype: torch.dtype, sf_vec_size: int, alpha: Optional[float],
                 accumulate: bool) -> torch.Tensor:
    return E.gemm_amax(S.gemm_amax(a, b, sfa, sfb, c_major=c_major, c_dtype=c_dtype, sf_vec_size=sf_vec_size,
                                   alpha=alpha, amax=amax, accumulate=accumulate)).c_tensor


@gemm_amax_op.register_fake
def _(a, b, sfa, sfb, amax, c_major, c_dtype, sf_vec_size, alpha, accumulate):
    mem, extent, perm = S.gemm_c_layout(tuple(a.shape), tuple(b.shape), S.dtype_code(c_dtype), c_major)
    c = a.new_empty(mem, dtype=c_dtype)[..., :extent]
    return c.permute(perm) if perm else c


_no_backward("gemm_amax", ("a", "b", "sfa", "sfb", "amax"))


# with packed weights (SPEC §7): their bytes, and the b and sfb they stand for as ints
@torch.library.custom_op("mxfuse::gemm_amax_packed", mutates_args=("amax",))
def gemm_amax_packed_op(a: torch.Tensor, b_packed: torch.Tensor, sfa: Optional[torch.Tensor], amax: torch.Tensor,
                        b_meta: List[int], sfb_meta: List[int], c_major: str, c_dtype: torch.dtype,
                        sf_vec_size: int, alpha: Optional[float], accumulate: bool) -> torch.Tensor:
    w = S.PackedWeights(b_packed, _meta_of(b_meta), _meta_of(sfb_meta), sf_vec_size)
    return E.gemm_amax(S.gemm_amax(a, w, sfa, None, c_major=c_major, c_dtype=c_dtype, sf_vec_size=sf_vec_size,
                                   alpha=alpha, amax=amax, accumulate=accumulate)).c_tensor


@gemm_amax_packed_op.register_fake
def _(a, b_packed, sfa, amax, b_meta, sfb_meta, c_major, c_dtype, sf_vec_size, alpha, accumulate):
    mem, extent, perm = S.gemm_c_layout(tuple(a.shape), _meta_of(b_meta).shape, S.dtype_code(c_dtype), c_major)
    c = a.new_empty(mem, dtype=c_dtype)[..., :extent]
    return c.permute(perm) if perm else c


_no_backward("gemm_amax_packed", ("a", "b_packed", "sfa", "amax"))


def _ints_of(m):
    """A Meta as a list of ints: dtype, device, ndim, shape, strides."""
    return [m.dtype, m.device, len(m.shape), *m.shape, *m.strides]


def _meta_of(v):
    n = v[2]
    return T.Meta(v[0], v[1], tuple(v[3:3 + n]), tuple(v[3 + n:3 + 2 * n]))


def gemm_amax(call):
    if call.c is not None:
        raise ValueError("gemm_amax: c= (an output to write into) is not traced by torch.compile; use the returned "
                         "c_tensor")
    a, amax = call.a, call.amax
    if amax is None:
        amax = a.new_empty(S.gemm_amax_shape(a.shape), dtype=torch.float32)
    extra = dict(call.extra)
    accumulate = bool(extra["flags"] & A.AMAX_ACCUMULATE)
    if isinstance(call.b, S.PackedWeights):
        c = gemm_amax_packed_op(a, call.b.data, call.sfa, amax, _ints_of(call.b.b_meta), _ints_of(call.b.sfb_meta),
                                call.c_major, T.torch_dtype(call.c_code), extra["sf_vec"], call.alpha, accumulate)
    else:
        c = gemm_amax_op(a, call.b, call.sfa, call.sfb, amax, call.c_major, T.torch_dtype(call.c_code),
                         extra["sf_vec"], call.alpha, accumulate)
    return S.GemmAmaxResult(c, amax)


# Packing is a step of loading a model, not of its graph: run eagerly.
pack_weights = torch.compiler.disable(E.pack_weights)


# ------------------------------------------------------------------ proj_rope
@torch.library.custom_op("mxfuse::proj_rope", mutates_args=())
def proj_rope_op(x: torch.Tensor, w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 x_scale: Optional[torch.Tensor], w_scale: Optional[torch.Tensor], w_out_in: bool,
                 fp32_epilogue: bool, head_dim: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(E.proj_rope(S.proj_rope(x, w, cos, sin, x_scale=x_scale, w_scale=w_scale, w_out_in=w_out_in,
                                         fp32_epilogue=fp32_epilogue, head_dim=head_dim)))


@proj_rope_op.register_fake
def _(x, w, cos, sin, x_scale, w_scale, w_out_in, fp32_epilogue, head_dim):
    return tuple(_new(x, o) for o in S.proj_outputs(x.shape, w.shape, w_out_in, head_dim))


_no_backward("proj_rope", ("x", "w", "cos", "sin", "x_scale", "w_scale"))


def proj_rope(call):
    flags = dict(call.extra)["flags"]
    return S.ProjRopeResult(*proj_rope_op(call.x, call.w, call.cos, call.sin, call.x_scale, call.w_scale,
                                          call.w_out_in, bool(flags & A.PROJ_FP32_EPILOGUE), call.head_dim))


# ------------------------------------------------------------------ quantize / dequantize
@torch.library.custom_op("mxfuse::quantize", mutates_args=())
def quantize_op(x: torch.Tensor, rows: bool, cols: bool) -> List[torch.Tensor]:
    return [t for t in E.quantize(S.quantize(x, rows=rows, cols=cols)) if t is not None]


@quantize_op.register_fake
def _(x, rows, cols):
    d = S.quantize(x, rows=rows, cols=cols).directions
    return [_new(x, o) for o in S.quantize_outputs(x.shape, d) if o is not None]


_no_backward("quantize", ("x",))


def quantize(call):
    rows, cols = bool(call.directions & A.QUANT_ROWS), bool(call.directions & A.QUANT_COLS)
    got = iter(quantize_op(call.x, rows, cols))
    return S.QuantizeResult(*((next(got), next(got)) if rows else (None, None)),
                            *((next(got), next(got)) if cols else (None, None)))


@torch.library.custom_op("mxfuse::dequantize", mutates_args=())
def dequantize_op(q: torch.Tensor, s: torch.Tensor, direction: str, dtype: torch.dtype) -> torch.Tensor:
    return E.dequantize(S.dequantize(q, s, direction=direction, dtype=dtype))


@dequantize_op.register_fake
def _(q, s, direction, dtype):
    return q.new_empty(q.shape, dtype=dtype)


_no_backward("dequantize", ("q", "s"))


def dequantize(call):
    direction = "rows" if call.direction == A.QUANT_ROWS else "cols"
    return dequantize_op(call.q, call.s, direction, T.torch_dtype(call.y_code))


# ------------------------------------------------------------------ grouped_gemm_amax
@torch.library.custom_op("mxfuse::grouped_gemm_amax", mutates_args=("amax",))
def grouped_gemm_amax_op(a: torch.Tensor, b: torch.Tensor, sfa: Optional[torch.Tensor], sfb: torch.Tensor,
                         offs: Optional[torch.Tensor], counts: Optional[torch.Tensor],
                         group_alpha: Optional[torch.Tensor], amax: torch.Tensor, c_dtype: torch.dtype,
                         sf_vec_size: int, alpha: Optional[float], accumulate: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    r = E.grouped_gemm_amax(S.grouped_gemm_amax(a, b, sfa, sfb, offs=offs, counts=counts, c_dtype=c_dtype,
                                                sf_vec_size=sf_vec_size, alpha=alpha, group_alpha=group_alpha,
                                                amax=amax, accumulate=accumulate))
    return r.c_tensor, r.group_amax_tensor


@grouped_gemm_amax_op.register_fake
def _(a, b, sfa, sfb, offs, counts, group_alpha, amax, c_dtype, sf_vec_size, alpha, accumulate):
    mem, extent = S.grouped_c_layout(tuple(a.shape), tuple(b.shape), S.dtype_code(c_dtype))
    return a.new_empty(mem, dtype=c_dtype)[..., :extent], a.new_empty((b.shape[0],), dtype=torch.float32)


def grouped_gemm_amax(call):
    if call.c is not None or call.group_amax is not None:
        raise ValueError("grouped_gemm_amax: c= and group_amax= (outputs to write into) are not traced by "
                         "torch.compile; use the returned tensors")
    a, amax = call.a, call.amax
    if amax is None:
        amax = a.new_empty((1,), dtype=torch.float32)
    extra = dict(call.extra)
    c, gamax = grouped_gemm_amax_op(a, call.b, call.sfa, call.sfb, call.offs, call.counts, call.group_alpha, amax,
                                    T.torch_dtype(call.c_code), extra["sf_vec"], call.alpha,
                                    bool(extra["flags"] & A.AMAX_ACCUMULATE))
    return S.GroupedGemmAmaxResult(c, amax, gamax)
