"""Requests at the edges of the contract (SPEC §4) from NumPy, DLPack and torch: read-only
and aliased outputs refused naming the tensors, Python integers range-checked before they
reach C, empty batches run (amax 0, or left with accumulate), the library's messages for
bad head_dim, meta tensors and missing MXFP8 scales."""
import ml_dtypes
import numpy as np
import pytest

import mxfuse

E4M3 = ml_dtypes.float8_e4m3fn


def _gemm_inputs(m=64, n=48, k=64):
    return (np.ones((m, k), E4M3), np.ones((n, k), E4M3), np.full((m, k // 32), 127, np.uint8),
            np.full((n, k // 32), 127, np.uint8))


class _DLPackOnly:
    """A producer seen through DLPack alone (the package's generic path)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


# ------------------------------------------------------------------ 1. read-only outputs
def test_read_only_outputs_refused():
    a, b, sfa, sfb = _gemm_inputs()
    c = np.frombuffer(bytes(64 * 48 * 4), np.float32).reshape(64, 48)
    with pytest.raises(mxfuse.InvalidValueError, match="gemm_amax: c is read-only"):
        mxfuse.gemm_amax(a, b, sfa, sfb, c=c)
    assert not c.any()
    amax = np.zeros(1, np.float32)
    amax.setflags(write=False)
    with pytest.raises(mxfuse.InvalidValueError, match="amax is read-only"):
        mxfuse.gemm_amax(a, b, sfa, sfb, amax=amax)
    x = np.ones((64, 64), np.float32)
    q, s, _, _ = mxfuse.quantize(x, cols=False)
    q.setflags(write=False)
    op = mxfuse.Quantize(x, q, s, None, None) if hasattr(mxfuse, "Quantize") else None
    if op is not None:
        with pytest.raises(mxfuse.InvalidValueError, match="q_row is read-only"):
            op.execute(x, q, s, None, None)
    y = np.zeros((64, 64), np.float32)
    q2, s2, _, _ = mxfuse.quantize(x, cols=False)
    y.setflags(write=False)
    with pytest.raises(mxfuse.InvalidValueError, match="y is read-only"):
        mxfuse.Dequantize(q2, s2, y).execute(q2, s2, y)
    assert not y.any()


def test_read_only_dlpack_output_refused():
    """DLPack 1.0's read-only flag, on the generic path (a producer seen through
    __dlpack__ only; NumPy >= 2.1 sets the flag for read-only arrays)."""
    from mxfuse import _spec as S
    from mxfuse import _tensors as T

    y = np.zeros((64, 64), np.float32)
    keep = []
    assert T.data_ptrs(S.DEQUANTIZE, (None, None, _DLPackOnly(y)), "dlpack", keep)[2] == y.ctypes.data
    y.setflags(write=False)
    try:
        y.__dlpack__(max_version=(1, 0))
    except (TypeError, BufferError):
        pytest.skip("this NumPy exports no DLPack 1.0 capsule of a read-only array")
    with pytest.raises(mxfuse.InvalidValueError, match="dequantize: y is read-only"):
        T.data_ptrs(S.DEQUANTIZE, (None, None, _DLPackOnly(y)), "dlpack", keep)
    # an input may be read-only
    assert T.data_ptrs(S.DEQUANTIZE, (_DLPackOnly(y), None, None), "dlpack", keep)[0] == y.ctypes.data


# ------------------------------------------------------------------ 2. aliased outputs
def test_aliased_outputs_refused():
    a, b, sfa, sfb = _gemm_inputs()
    c = np.zeros((64, 48), np.float32)
    with pytest.raises(mxfuse.InvalidValueError, match=r"c \[.*overlaps amax \["):
        mxfuse.gemm_amax(a, b, sfa, sfb, c=c, amax=c.reshape(-1)[:1])
    assert not c.any()
    # an m-major C laid over B's bytes
    bc = np.zeros(64 * 48 * 4, np.uint8)
    b_view = bc[:48 * 64].view(E4M3).reshape(48, 64)
    b_view[...] = 1
    c_view = bc.view(np.float32).reshape(48, 64).T
    with pytest.raises(mxfuse.InvalidValueError, match=r"c \[.*overlaps b \["):
        mxfuse.gemm_amax(a, b_view, sfa, sfb, c=c_view)
    # q_row over the bytes of x
    x = np.ones((64, 64), np.float32)
    q = x.reshape(-1).view(np.uint8)[:64 * 64].view(E4M3).reshape(64, 64)
    s = np.zeros((64, 2), np.uint8)
    op = mxfuse.Quantize(x, q, s, None, None)
    with pytest.raises(mxfuse.InvalidValueError, match=r"q_row \[.*overlaps x \["):
        op.execute(x, q, s, None, None)
    assert (x == 1).all()


# ------------------------------------------------------------------ 3. integers
@pytest.mark.parametrize("kw, msg", [
    (dict(sf_vec_size=2**32 + 32), "sf_vec_size=4294967328"),
    (dict(sf_vec_size=2**31), "sf_vec_size=2147483648"),
    (dict(mma_tiler_mn=(2**32 + 128, 128)), "mma_tile_m=4294967424"),
])
def test_integers_range_checked(kw, msg):
    a, b, sfa, sfb = _gemm_inputs()
    with pytest.raises(mxfuse.InvalidValueError, match=msg):
        mxfuse.gemm_amax(a, b, sfa, sfb, **kw)


def test_pad_byte_range_checked():
    with pytest.raises(mxfuse.InvalidValueError, match="pad_byte=256"):
        mxfuse.swizzle_scales(np.zeros((128, 4), np.uint8), pad_byte=256)
    with pytest.raises(mxfuse.InvalidValueError, match="head_dim=4294967488"):
        mxfuse.proj_rope(np.zeros((4, 64), ml_dtypes.bfloat16), np.zeros((192, 64), ml_dtypes.bfloat16),
                         np.zeros((4, 64), ml_dtypes.bfloat16), np.zeros((4, 64), ml_dtypes.bfloat16),
                         head_dim=2**32 + 192)


# ------------------------------------------------------------------ 4. empty batches
@pytest.mark.parametrize("m, n", [(0, 48), (64, 0)])
def test_empty_gemm(m, n):
    a, b, sfa, sfb = _gemm_inputs(m, n)
    c, amax = mxfuse.gemm_amax(a, b, sfa, sfb)
    assert c.shape == (m, n) and amax[0] == 0
    amax[0] = 7
    c, amax2 = mxfuse.gemm_amax(a, b, sfa, sfb, amax=amax, accumulate=True)
    assert amax2[0] == 7


def test_empty_quantize_dequantize_proj():
    q_row, s_row, q_col, s_col = mxfuse.quantize(np.zeros((0, 64), np.float32))
    assert q_row.shape == (0, 64) and s_row.shape == (0, 2) and s_col.shape == (0, 64)
    y = mxfuse.dequantize(q_row, s_row)
    assert y.shape == (0, 64)
    bf = ml_dtypes.bfloat16
    out = mxfuse.proj_rope(np.zeros((0, 64), bf), np.zeros((192, 64), bf), np.zeros((0, 64), bf),
                           np.zeros((0, 64), bf))
    assert out[0].shape == (0, 1, 192)


def test_k_zero_refused():
    a, b, sfa, sfb = _gemm_inputs(64, 48, 64)
    with pytest.raises(mxfuse.InvalidValueError, match="K=0 is refused"):
        mxfuse.gemm_amax(a[:, :0], b[:, :0], sfa[:, :0], sfb[:, :0])


# ------------------------------------------------------------------ 5. messages
@pytest.mark.parametrize("head_dim", [0, -192, 100])
def test_head_dim_message(head_dim):
    bf = ml_dtypes.bfloat16
    with pytest.raises(mxfuse.InvalidValueError, match=f"proj_rope: head_dim={head_dim}; expected a multiple of 32"):
        mxfuse.proj_rope(np.zeros((4, 64), bf), np.zeros((192, 64), bf), np.zeros((4, 64), bf),
                         np.zeros((4, 64), bf), head_dim=head_dim)


def test_mxfp8_proj_without_scales_message():
    bf = ml_dtypes.bfloat16
    with pytest.raises(mxfuse.InvalidValueError, match="x is e4m3.*x_scale"):
        mxfuse.proj_rope(np.zeros((4, 64), E4M3), np.zeros((192, 64), E4M3), np.zeros((4, 64), bf),
                         np.zeros((4, 64), bf))


def test_torch_meta_and_empty():
    torch = pytest.importorskip("torch")
    x = torch.empty((64, 64), device="meta")
    with pytest.raises(mxfuse.InvalidValueError, match="meta device"):
        mxfuse.quantize(x)
    class Elsewhere(torch.Tensor):  # a tensor that says it is on another device (XPU here)
        device = torch.device("xpu", 0)

    with pytest.raises(mxfuse.NotSupportedError, match="device 'xpu:0'; mxfuse runs on CPU and CUDA"):
        mxfuse.quantize(torch.Tensor._make_subclass(Elsewhere, torch.zeros((64, 64))))
    q_row, s_row, q_col, s_col = mxfuse.quantize(torch.zeros((0, 64)))
    assert tuple(q_row.shape) == (0, 64)
    a = torch.zeros((0, 64), dtype=torch.float8_e4m3fn)
    b = torch.ones((48, 64), dtype=torch.float8_e4m3fn)
    c, amax = mxfuse.gemm_amax(a, b, torch.zeros((0, 2), dtype=torch.uint8), torch.zeros((48, 2), dtype=torch.uint8))
    assert tuple(c.shape) == (0, 48) and amax.item() == 0
