"""mxfuse — block-scaled ("MX") GEMMs with fused epilogues, from PyTorch, JAX and NumPy.

    import mxfuse
    c, amax = mxfuse.gemm_amax(a, b, sfa, sfb, c_dtype=torch.bfloat16)      # GEMM + amax
    row, srow, col, scol = mxfuse.proj_rope(x, w, cos, sin)                 # GEMM + RoPE + dual MXFP8
    q_row, s_row, q_col, s_col = mxfuse.quantize(x)                         # MXFP8 both ways

Tensors are torch tensors (CUDA or CPU), NumPy arrays (the CPU backend; ml_dtypes for
bf16/fp8 dtypes) or JAX arrays (through mxfuse.jax's XLA custom calls); where they live
picks the backend. Class forms (GemmAmax, ProjRope, Quantize, Dequantize) plan once and
execute on preallocated outputs. Semantics: docs/spec.md of the source tree; errors are
the library's own messages as InvalidValueError (a ValueError) or NotSupportedError (a
NotImplementedError).
"""
import sys

from ._lib import (CudaError, InternalError, InvalidValueError, MxfuseError, NotSupportedError, OutOfMemoryError,
                   cuda_device_count, version)
from ._ops import (Dequantize, GemmAmax, GemmAmaxResult, ProjRope, ProjRopeResult, Quantize, QuantizeResult,
                   clear_cache, dequantize, gemm_amax, proj_rope, quantize, swizzle_scales, unswizzle_scales)

__version__ = version()

if "torch" in sys.modules:  # register the custom ops now, so that torch.compile finds them
    from . import _torch  # noqa: F401

__all__ = ["gemm_amax", "proj_rope", "quantize", "dequantize", "swizzle_scales", "unswizzle_scales", "GemmAmax",
           "ProjRope", "Quantize", "Dequantize", "GemmAmaxResult", "ProjRopeResult", "QuantizeResult",
           "MxfuseError", "InvalidValueError", "NotSupportedError", "CudaError", "OutOfMemoryError",
           "InternalError", "cuda_device_count", "clear_cache", "version", "__version__"]
