"""mxfuse — block-scaled ("MX") GEMMs with fused epilogues, from PyTorch, JAX and NumPy.

    import mxfuse
    c, amax = mxfuse.gemm_amax(a, b, sfa, sfb, c_dtype=torch.bfloat16)      # GEMM + amax
    row, srow, col, scol = mxfuse.proj_rope(x, w, cos, sin)                 # GEMM + RoPE + dual MXFP8
    q_row, s_row, q_col, s_col = mxfuse.quantize(x)                         # MXFP8 both ways
    c, amax, group_amax = mxfuse.grouped_gemm_amax(a, b, sfa, sfb, offs=offs)  # MoE: one GEMM per expert
    w = mxfuse.pack_weights(b, sfb); c, amax = mxfuse.gemm_amax(a, w, sfa, None)  # CPU decode weights

Tensors are torch tensors (CUDA or CPU), NumPy arrays (the CPU backend; ml_dtypes for
bf16/fp8 dtypes) or JAX arrays (through mxfuse.jax's XLA custom calls); where they live
picks the backend. Class forms (GemmAmax, ProjRope, Quantize, Dequantize) plan once and
execute on preallocated outputs. Semantics: docs/spec.md of the source tree; errors are
the library's own messages as InvalidValueError (a ValueError) or NotSupportedError (a
NotImplementedError).

This module routes each call by its first tensor: JAX arrays to mxfuse.jax, torch
tensors under torch.compile to the torch custom ops (mxfuse._torch), everything else to
the eager forms (mxfuse._eager). The layers below, each importing only those under it:
_abi (the C ABI) < _spec (the ops' signatures and outputs) < _tensors < _plans < _eager
< _torch, jax.
"""
import sys

from . import _eager, _plans, _spec
from ._abi import (CudaError, InternalError, InvalidValueError, MxfuseError, NotSupportedError, OutOfMemoryError,
                   cuda_device_count, version)
from ._eager import Dequantize, GemmAmax, GroupedGemmAmax, ProjRope, Quantize, swizzle_scales, unswizzle_scales
from ._spec import GemmAmaxResult, GroupedGemmAmaxResult, PackedWeights, ProjRopeResult, QuantizeResult

__version__ = version()
_torch_ops = None  # mxfuse._torch once imported


def _torch_front():
    global _torch_ops
    if _torch_ops is None:
        from . import _torch

        _torch_ops = _torch
    return _torch_ops


if "torch" in sys.modules:  # register the custom ops now, so that torch.compile finds them
    _torch_front()


def _route(op, x):
    """The function running the normalized call of `op` whose first tensor is x."""
    if _torch_ops is not None and _torch_ops.torch.compiler.is_compiling():
        return getattr(_torch_ops, op)
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, jax.Array):
        from . import jax as mj

        return getattr(mj, op).call
    if _torch_ops is None:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            _torch_front()  # registers the custom ops
    return getattr(_eager, op)


def _router(op):
    """The public function of `op`: its spec's signature, run by the front end of the
    call's first tensor."""

    @_spec.front_end(getattr(_spec, op), __name__)
    def route(call):
        return _route(op, call[0])(call)

    return route


gemm_amax = _router("gemm_amax")
proj_rope = _router("proj_rope")
quantize = _router("quantize")
dequantize = _router("dequantize")
grouped_gemm_amax = _router("grouped_gemm_amax")
pack_weights = _router("pack_weights")


def clear_cache():
    """Drops the one-call functions' plans (and the C library's one-call cache)."""
    _plans.clear()


__all__ = ["gemm_amax", "proj_rope", "quantize", "dequantize", "grouped_gemm_amax", "swizzle_scales",
           "unswizzle_scales", "GemmAmax", "GroupedGemmAmax", "GroupedGemmAmaxResult",
           "ProjRope", "Quantize", "Dequantize", "GemmAmaxResult", "ProjRopeResult", "QuantizeResult",
           "MxfuseError", "InvalidValueError", "NotSupportedError", "CudaError", "OutOfMemoryError",
           "InternalError", "cuda_device_count", "clear_cache", "version", "__version__"]
