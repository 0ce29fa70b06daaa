"""`import mxfuse.torch` registers the torch custom ops (torch.ops.mxfuse.gemm_amax,
proj_rope, quantize, dequantize); `import mxfuse` does it too when torch is imported first."""
from ._torch import dequantize_op, gemm_amax_op, proj_rope_op, quantize_op  # noqa: F401
