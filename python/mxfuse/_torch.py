"""The ops as torch custom ops (namespace `mxfuse`), so that torch.compile traces them
without a graph break: each is a torch.library.custom_op over the eager path of _ops,
with a fake implementation giving its outputs' shapes, strides and dtypes.

Imported by `import mxfuse` when torch is already imported, else on the first call with
torch tensors (or by `import mxfuse.torch`). In eager mode mxfuse.gemm_amax & co. call
the library directly (no dispatcher on the way); under torch.compile they call the ops
below. Each runs on torch.cuda.current_stream() and can be captured in a CUDA graph.
"""
from typing import List, Optional, Tuple

import torch

from . import _lib as L
from . import _ops as O
from . import _tensors as T


def _torch_dtype(d):
    return d if isinstance(d, torch.dtype) else T._torch_dtype(T.dtype_code(d))


def _hints(v):
    return (0, 0) if v is None else (int(v[0]), int(v[1]))


@torch.library.custom_op("mxfuse::gemm_amax", mutates_args=("amax",))
def gemm_amax_op(a: torch.Tensor, b: torch.Tensor, sfa: Optional[torch.Tensor], sfb: torch.Tensor,
                 amax: torch.Tensor, c_major: str, c_dtype: torch.dtype, sf_vec_size: int, alpha: Optional[float],
                 accumulate: bool, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int) -> torch.Tensor:
    hints = (tile_m, tile_n) if tile_m or tile_n else None
    cl = (cluster_m, cluster_n) if cluster_m or cluster_n else None
    return O.gemm_amax(a, b, sfa, sfb, c_major=c_major, c_dtype=c_dtype, sf_vec_size=sf_vec_size, alpha=alpha,
                       amax=amax, accumulate=accumulate, mma_tiler_mn=hints, cluster_shape_mn=cl)[0]


@gemm_amax_op.register_fake
def _(a, b, sfa, sfb, amax, c_major, c_dtype, sf_vec_size, alpha, accumulate, tile_m, tile_n, cluster_m, cluster_n):
    mem, extent, perm = O.gemm_c_layout(tuple(a.shape), b.shape[0], T.dtype_code(c_dtype), c_major)
    c = a.new_empty(mem, dtype=c_dtype)[..., :extent]
    return c.permute(perm) if perm else c


def gemm_amax_traced(a, b, sfa, sfb, c_major, c_dtype, sf_vec_size, alpha, amax, accumulate, mma_tiler_mn,
                     cluster_shape_mn):
    if accumulate and amax is None:
        raise ValueError("gemm_amax: accumulate=True reads the previous amax; pass it as amax=")
    if amax is None:
        amax = a.new_empty((1, 1, 1) if a.dim() == 3 else (1,), dtype=torch.float32)
    tm, tn = _hints(mma_tiler_mn)
    cm, cn = _hints(cluster_shape_mn)
    c = gemm_amax_op(a, b, sfa, sfb, amax, c_major, _torch_dtype(c_dtype), sf_vec_size, alpha, accumulate, tm, tn, cm,
                     cn)
    return O.GemmAmaxResult(c, amax)


@torch.library.custom_op("mxfuse::proj_rope", mutates_args=())
def proj_rope_op(x: torch.Tensor, w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 x_scale: Optional[torch.Tensor], w_scale: Optional[torch.Tensor], w_out_in: bool,
                 fp32_epilogue: bool, head_dim: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(O.proj_rope(x, w, cos, sin, x_scale=x_scale, w_scale=w_scale, w_out_in=w_out_in,
                             fp32_epilogue=fp32_epilogue, head_dim=head_dim))


@proj_rope_op.register_fake
def _(x, w, cos, sin, x_scale, w_scale, w_out_in, fp32_epilogue, head_dim):
    hd = w.shape[0] if w_out_in else w.shape[1]
    return tuple(x.new_empty(shape, dtype=T._torch_dtype(code))
                 for shape, code in O.proj_layout(x.shape[0], hd, head_dim))


def proj_rope_traced(x, w, cos, sin, x_scale, w_scale, w_out_in, fp32_epilogue, head_dim):
    return O.ProjRopeResult(*proj_rope_op(x, w, cos, sin, x_scale, w_scale, w_out_in, fp32_epilogue, head_dim))


@torch.library.custom_op("mxfuse::quantize", mutates_args=())
def quantize_op(x: torch.Tensor, rows: bool, cols: bool) -> List[torch.Tensor]:
    return [t for t in O.quantize(x, rows=rows, cols=cols) if t is not None]


@quantize_op.register_fake
def _(x, rows, cols):
    r, c = x.shape
    out = []
    if rows:
        out += [x.new_empty((r, c), dtype=T._torch_dtype(L.E4M3)), x.new_empty((r, (c + 31) // 32), dtype=torch.uint8)]
    if cols:
        out += [x.new_empty((r, c), dtype=T._torch_dtype(L.E4M3)), x.new_empty(((r + 31) // 32, c), dtype=torch.uint8)]
    return out


def quantize_traced(x, rows, cols):
    got = iter(quantize_op(x, rows, cols))
    row = (next(got), next(got)) if rows else (None, None)
    col = (next(got), next(got)) if cols else (None, None)
    return O.QuantizeResult(*row, *col)


@torch.library.custom_op("mxfuse::dequantize", mutates_args=())
def dequantize_op(q: torch.Tensor, s: torch.Tensor, direction: str, dtype: torch.dtype) -> torch.Tensor:
    return O.dequantize(q, s, direction=direction, dtype=dtype)


@dequantize_op.register_fake
def _(q, s, direction, dtype):
    return q.new_empty(q.shape, dtype=dtype)


def dequantize_traced(q, s, direction, dtype):
    return dequantize_op(q, s, direction, _torch_dtype(dtype))


O._traced.update(gemm_amax=gemm_amax_traced, proj_rope=proj_rope_traced, quantize=quantize_traced,
                 dequantize=dequantize_traced)
O._torch_module = torch
