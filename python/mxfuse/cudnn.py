"""The cuDNN frontend's names for mxfuse's ops, as a drop-in:

    from mxfuse.cudnn import gemm_amax_wrapper_sm100, GemmAmaxSm100        # was: from cudnn import ...
    c, amax = gemm_amax_wrapper_sm100(a_tensor=a, b_tensor=b, sfa_tensor=sfa, sfb_tensor=sfb)

Every name takes the frontend's arguments, with its names and defaults, and returns what
it returns (TupleDict-like named tuples: unpacked in order, or read by key). Semantics are
the frontend's where they differ from mxfuse's own functions:
  - the amax is accumulated: the class API's execute() and the wrapper leave
    max(amax given, max|C|) in the amax tensor (the wrapper's own amax starts at -inf, as
    the frontend's does), where mxfuse.gemm_amax overwrites it by default;
  - the proj_rope wrapper checks its dtype and scale contract with AssertionError, as the
    frontend's does; its classes take sample_* tensors and execute(..., current_stream=).
What the frontend refuses and mxfuse does (the CPU and Hopper, T % 128 != 0, fp8 A/B with
fp8 C, mixed formats, sf_vec 32 with ue4m3 scales where the library takes it) runs.
Tensors: torch tensors, NumPy arrays and JAX arrays, in the wrapper and the class API
(JAX arrays in the class API are written through DLPack, eagerly, as the frontend does:
do not use them under jax.jit; the *_jax_sm100 functions are the jit entry points).
"""
import sys

from . import _abi as A
from . import _eager as E
from . import _spec as S

def _jax_array(x):
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


class _DLPackView:
    """A JAX array seen as a plain DLPack producer, so that the class API writes into its
    buffer (eager use only, as the frontend's class API)."""

    __slots__ = ("_x",)

    def __init__(self, x):
        self._x = x

    def __dlpack__(self, *args, **kwargs):
        return self._x.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._x.__dlpack_device__()


def _eager_tensors(tensors):
    return tuple(_DLPackView(x) if _jax_array(x) else x for x in tensors)


def _minus_inf_amax(like):
    """The (1, 1, 1) f32 amax the frontend's wrapper starts from: -inf, in like's framework."""
    t = sys.modules.get("torch")
    if t is not None and isinstance(like, t.Tensor):
        return t.full((1, 1, 1), -float("inf"), dtype=t.float32, device=like.device)
    import numpy as np

    if _jax_array(like):
        import jax.numpy as jnp

        return jnp.full((1, 1, 1), -np.inf, jnp.float32)
    return np.full((1, 1, 1), -np.inf, np.float32)


# ------------------------------------------------------------------ gemm_amax
def gemm_amax_wrapper_sm100(a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_major="n", c_dtype="float32",
                            acc_dtype="float32", mma_tiler_mn=(128, 128), cluster_shape_mn=(1, 1), sf_vec_size=32,
                            stream=None):
    """C = (A·SFA)(B·SFB)^T in c_dtype and the amax of C (SPEC §1), under the frontend's
    names. a_tensor (M, K, L), b_tensor (N, K, L), scales in the 6-D atom layout (logical or
    physical; compact is taken too). Returns (c_tensor, amax_tensor), also by key; the amax
    starts at -inf and is accumulated, as the frontend's. JAX arrays run as an XLA custom
    call (L = 1, c_major 'n')."""
    from . import gemm_amax

    return gemm_amax(a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_major=c_major, c_dtype=c_dtype,
                     sf_vec_size=sf_vec_size, amax=_minus_inf_amax(a_tensor), accumulate=True,
                     mma_tiler_mn=mma_tiler_mn, cluster_shape_mn=cluster_shape_mn, acc_dtype=acc_dtype,
                     stream=None if _jax_array(a_tensor) else stream)


class GemmAmaxSm100(E.GemmAmax):
    """The frontend's class API of gemm_amax: sample tensors in, check_support(),
    compile(), execute(a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_tensor, amax_tensor,
    current_stream=None), which accumulates into amax_tensor (pre-fill it with -inf)."""

    def __init__(self, sample_a, sample_b, sample_sfa, sample_sfb, sample_c, sample_amax, acc_dtype="float32",
                 mma_tiler_mn=(128, 128), cluster_shape_mn=(1, 1), sf_vec_size=32):
        samples = _eager_tensors((sample_a, sample_b, sample_sfa, sample_sfb, sample_c, sample_amax))
        super().__init__(*samples, acc_dtype=acc_dtype, mma_tiler_mn=mma_tiler_mn,
                         cluster_shape_mn=cluster_shape_mn, sf_vec_size=sf_vec_size, accumulate=True)

    def execute(self, a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_tensor, amax_tensor, current_stream=None):
        t = _eager_tensors((a_tensor, b_tensor, sfa_tensor, sfb_tensor, c_tensor, amax_tensor))
        super().execute(*t, current_stream=current_stream)


def gemm_amax_jax_sm100(a, b, sfa, sfb, c_dtype="float32", acc_dtype="float32", mma_tiler_mn=(128, 128),
                        cluster_shape_mn=(1, 1), sf_vec_size=32):
    """The jax.jit entry point: (c_tensor, amax_tensor) as new XLA arrays (mxfuse.jax's
    custom call: C n-major, L = 1; vmap and sharding rules as mxfuse.jax.gemm_amax)."""
    from . import jax as mj

    return mj.gemm_amax(a, b, sfa, sfb, c_dtype=c_dtype, acc_dtype=acc_dtype, mma_tiler_mn=mma_tiler_mn,
                        cluster_shape_mn=cluster_shape_mn, sf_vec_size=sf_vec_size)


# ------------------------------------------------------------------ proj_rope
def _dtype_name(x):
    return str(getattr(x, "dtype", "")).replace("torch.", "")


def gemm_proj_rope_mxfp8_wrapper_sm100(x, w, cos, sin, x_scale=None, w_scale=None, w_out_in=True, stream=None):
    """GEMM + per-head RoPE + dual MXFP8 (SPEC §2) under the frontend's names: bf16 x/w, or
    e4m3 codes with e8m0 x_scale/w_scale (w_scale in w's orientation). Returns
    (out_fp8_row, out_scales_row, out_fp8_col, out_scales_col), also by key."""
    from . import proj_rope

    assert _dtype_name(x) == _dtype_name(w), f"x ({_dtype_name(x)}) and w ({_dtype_name(w)}) must share a dtype"
    fp8 = "float8" in _dtype_name(x)
    if fp8:
        assert x_scale is not None and w_scale is not None, "float8_e4m3fn x/w require x_scale and w_scale"
    else:
        assert x_scale is None and w_scale is None, "bfloat16 x/w must not be given MXFP8 scales"
    return proj_rope(x, w, cos, sin, x_scale=x_scale, w_scale=w_scale, w_out_in=w_out_in,
                     stream=None if _jax_array(x) else stream)


class GemmProjRopeMxfp8Bf16InSm100(E.ProjRope):
    """The frontend's class API of proj_rope with bf16 x/w; w_out_in=False (w (K, H·D))
    by default, as the frontend's class."""

    def __init__(self, sample_x, sample_w, sample_cos, sample_sin, sample_out_fp8_row, sample_out_scales_row,
                 sample_out_fp8_col, sample_out_scales_col, w_out_in=False):
        super().__init__(*_eager_tensors((sample_x, sample_w, sample_cos, sample_sin, sample_out_fp8_row,
                                          sample_out_scales_row, sample_out_fp8_col, sample_out_scales_col)),
                         w_out_in=w_out_in)

    def execute(self, x, w, cos, sin, out_fp8_row, out_scales_row, out_fp8_col, out_scales_col, current_stream=None):
        super().execute(*_eager_tensors((x, w, cos, sin, out_fp8_row, out_scales_row, out_fp8_col, out_scales_col)),
                        current_stream=current_stream)


class GemmProjRopeMxfp8Mxfp8InSm100(E.ProjRope):
    """The frontend's class API of proj_rope with MXFP8 x/w (e4m3 codes, e8m0 scales); w_code
    and w_scale are out-in ((H·D, K) and (H·D, K/32)): no w_out_in, as the frontend's class."""

    def __init__(self, sample_x_code, sample_x_scale, sample_w_code, sample_w_scale, sample_cos, sample_sin,
                 sample_out_fp8_row, sample_out_scales_row, sample_out_fp8_col, sample_out_scales_col):
        t = _eager_tensors((sample_x_code, sample_x_scale, sample_w_code, sample_w_scale, sample_cos, sample_sin,
                            sample_out_fp8_row, sample_out_scales_row, sample_out_fp8_col, sample_out_scales_col))
        super().__init__(t[0], t[2], t[4], t[5], *t[6:], sample_x_scale=t[1], sample_w_scale=t[3], w_out_in=True)

    def execute(self, x_code, x_scale, w_code, w_scale, cos, sin, out_fp8_row, out_scales_row, out_fp8_col,
                out_scales_col, current_stream=None):
        t = _eager_tensors((x_code, x_scale, w_code, w_scale, cos, sin, out_fp8_row, out_scales_row, out_fp8_col,
                            out_scales_col))
        super().execute(t[0], t[2], t[4], t[5], *t[6:], x_scale=t[1], w_scale=t[3], current_stream=current_stream)


def gemm_proj_rope_mxfp8_jax_sm100(x, w, cos, sin, x_scale=None, w_scale=None):
    """The jax.jit entry point: the wrapper's contract with w_out_in=True, four new XLA
    arrays (out_fp8_row, out_scales_row, out_fp8_col, out_scales_col)."""
    from . import jax as mj

    return mj.proj_rope(x, w, cos, sin, x_scale=x_scale, w_scale=w_scale, w_out_in=True)


GemmAmaxResult, ProjRopeResult = S.GemmAmaxResult, S.ProjRopeResult
InvalidValueError, NotSupportedError = A.InvalidValueError, A.NotSupportedError

__all__ = ["gemm_amax_wrapper_sm100", "GemmAmaxSm100", "gemm_amax_jax_sm100", "gemm_proj_rope_mxfp8_wrapper_sm100",
           "GemmProjRopeMxfp8Bf16InSm100", "GemmProjRopeMxfp8Mxfp8InSm100", "gemm_proj_rope_mxfp8_jax_sm100"]
