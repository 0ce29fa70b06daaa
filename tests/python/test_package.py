"""The Python package on the CPU: NumPy arrays, JAX on the CPU (jit), DLPack producers,
torch CPU tensors (eager, the custom ops, torch.compile; skipped where torch is absent).

Every op through every entry point (one-call function, class API, mxfuse.jax under
jax.jit) must give the same bits as every other for the same inputs — they all run the C
library — and gemm_amax's C must meet SPEC §5 against an f64 oracle written here from
the format definitions (determined codes bit for bit, the others between the codes of
ref ± δ). Layouts (k-/m-major A, k-/n-major B, m-/n-major C, padded rows, L > 1, both
scale layouts) are exercised through NumPy views, errors for their type and message.
"""
import os

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
mxfuse = pytest.importorskip("mxfuse")

try:
    import jax
    import jax.numpy as jnp

    import mxfuse.jax as mj
except ImportError as e:  # CI installs jax; elsewhere it may be absent
    if os.environ.get("CI"):
        raise
    jax = None
    _why_no_jax = str(e)

needs_jax = pytest.mark.skipif(jax is None, reason="jax or mxfuse.jax not importable")
try:
    import torch
except ImportError:  # torch is optional: these tests then skip
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed (the torch tests on CPU tensors)")


@pytest.fixture(autouse=True)
def _jax_on_cpu():
    """These tests compare JAX with the NumPy (CPU backend) results bit for bit: JAX runs
    on the CPU here even where a GPU is its default (test_gpu.py covers that)."""
    if jax is None:
        yield
        return
    with jax.default_device(jax.devices("cpu")[0]):
        yield

from mx_reference import (check_gemm, dequant_rows, mx_operand, oracle, proj_inputs, proj_reference,  # noqa: E402
                          to_numpy, to_torch)

# ------------------------------------------------------------------ gemm_amax
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("c_dtype", ["float32", "bfloat16", "float8_e4m3fn"])
def test_gemm_amax_numpy(rng, fmt, c_dtype):
    m, n = 77, 45
    k = 224 if fmt == "e2m1" else 208  # 16-byte rows; fp8: a partial last block
    a, sa, av = mx_operand(rng, m, k, fmt)
    b, sb, bv = mx_operand(rng, n, k, fmt)
    r = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=c_dtype)
    c, amax = r
    assert r["c_tensor"] is c and r["amax_tensor"] is amax and r.keys() == ("c_tensor", "amax_tensor")
    assert c.shape == (m, n) and amax.shape == (1,) and amax.dtype == np.float32
    ref, delta = oracle(av, bv)
    check_gemm(c, ref, delta, c_dtype)
    assert abs(amax[0] - np.abs(ref).max()) <= 1e-6 * np.sqrt(k) * np.abs(ref).max()
    # swizzled scales, m-major C, alpha: the same values
    r2 = mxfuse.gemm_amax(a, b, mxfuse.swizzle_scales(sa, pad_byte=0xFF), mxfuse.swizzle_scales(sb, pad_byte=0xFF),
                          c_dtype=c_dtype, c_major="m")
    assert r2.c_tensor.strides[0] < r2.c_tensor.strides[1]
    check_gemm(r2.c_tensor, ref, delta, c_dtype)  # another summation order (C^T = B·A^T): SPEC §5 again
    r3 = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=c_dtype, alpha=0.5)
    ref3, delta3 = oracle(av, bv, 0.5)
    check_gemm(r3.c_tensor, ref3, delta3, c_dtype)


@pytest.mark.parametrize("fa,fb", [("bf16", "e2m1"), ("bf16", "e4m3"), ("e4m3", "e2m1"), ("e2m1", "e5m2")])
def test_gemm_amax_mixed_formats(rng, fa, fb):
    """A and B in different formats; a bf16 A has no scales (sfa None)."""
    m, n, k = 37, 50, 192
    a, sa, av = mx_operand(rng, m, k, fa)
    b, sb, bv = mx_operand(rng, n, k, fb)
    r = mxfuse.gemm_amax(a, b, sa, sb, c_dtype="bfloat16")
    ref, delta = oracle(av, bv)
    check_gemm(r.c_tensor, ref, delta, "bfloat16")
    assert abs(r.amax_tensor[0] - np.abs(ref).max()) <= 1e-6 * np.sqrt(k) * np.abs(ref).max()
    if fa == "bf16":
        with pytest.raises(mxfuse.InvalidValueError, match="a is bf16, so sfa must be absent"):
            mxfuse.gemm_amax(a, b, sb[:m], sb)
    else:
        with pytest.raises(mxfuse.InvalidValueError, match="so sfa is required"):
            mxfuse.gemm_amax(a, b, None, sb)


def test_gemm_amax_layouts(rng):
    """m-major A, n-major B, padded rows, batch L = 3 through NumPy views."""
    m, n, k, lb = 48, 32, 96, 3  # m- and n-major rows of 16 bytes
    ops = [mx_operand(rng, m * lb, k, "e4m3"), mx_operand(rng, n * lb, k, "e4m3")]
    a = ops[0][0].reshape(lb, m, k)
    b = ops[1][0].reshape(lb, n, k)
    sa = ops[0][1].reshape(lb, m, 3)
    sb = ops[1][1].reshape(lb, n, 3)
    # k-major (M, K, L) views of batch-outermost memory: strides (K, 1, M·K)
    a_k = a.transpose(1, 2, 0)
    b_k = b.transpose(1, 2, 0)
    base = mxfuse.gemm_amax(a_k, b_k, sa, sb, c_dtype="float32")
    assert base.c_tensor.shape == (m, n, lb) and base.amax_tensor.shape == (1, 1, 1)
    for l_ in range(lb):
        av = ops[0][2].reshape(lb, m, k)[l_]
        bv = ops[1][2].reshape(lb, n, k)[l_]
        ref, delta = oracle(av, bv)
        check_gemm(base.c_tensor[:, :, l_], ref, delta, "float32")
    # m-major A and n-major B: the same codes in the other order
    a_m = np.ascontiguousarray(a.transpose(0, 2, 1)).transpose(2, 1, 0)  # (M, K, L), stride over m = 1
    b_n = np.ascontiguousarray(b.transpose(0, 2, 1)).transpose(2, 1, 0)
    assert a_m.strides[0] == 1 and b_n.strides[0] == 1
    other = mxfuse.gemm_amax(a_m, b_n, sa, sb, c_dtype="float32", c_major="m")
    assert other.c_tensor.strides[0] == 4 and other.c_tensor.shape == (m, n, lb)
    for l_ in range(lb):
        ref, delta = oracle(ops[0][2].reshape(lb, m, k)[l_], ops[1][2].reshape(lb, n, k)[l_])
        check_gemm(other.c_tensor[:, :, l_], ref, delta, "float32")
    # padded leading dimension: a (M, K) view of a (M, K + 32) array
    wide = np.zeros((m, k + 32), ml_dtypes.float8_e4m3fn)
    wide[:, :k] = a[0]
    padded = mxfuse.gemm_amax(wide[:, :k], b[0], sa[0], sb[0], c_dtype="float32")
    plain = mxfuse.gemm_amax(np.ascontiguousarray(a[0]), b[0], sa[0], sb[0], c_dtype="float32")
    assert np.array_equal(padded.c_tensor, plain.c_tensor)


def test_gemm_amax_class_api(rng):
    a, sa, _ = mx_operand(rng, 50, 64, "e4m3")
    b, sb, _ = mx_operand(rng, 33, 64, "e4m3")
    want = mxfuse.gemm_amax(a, b, sa, sb, c_dtype="bfloat16")
    c = np.full((50, 40), 7, ml_dtypes.bfloat16)[:, :33]  # rows padded to 80 bytes
    amax = np.full((1,), -1, np.float32)
    op = mxfuse.GemmAmax(a, b, sa, sb, c, amax)
    assert op.check_support() and op.backend.startswith("cpu/")
    op.compile()
    for _ in range(2):
        op.execute(a, b, sa, sb, c, amax)
        assert np.array_equal(c.view(np.uint16), want.c_tensor.view(np.uint16)) and amax[0] == want.amax_tensor[0]
    # accumulate: max(previous, new)
    acc = mxfuse.GemmAmax(a, b, sa, sb, c, amax, accumulate=True)
    amax[0] = 1e30
    acc.execute(a, b, sa, sb, c, amax)
    assert amax[0] == np.float32(1e30)
    # another geometry than the samples: refused, nothing written
    c[:] = 7
    with pytest.raises(ValueError, match="the plan was made for"):
        op.execute(a[:10], b, sa[:10], sb, c, amax)
    assert np.all(c.astype(np.float32) == 7)


def test_clear_cache(rng):
    a, sa, _ = mx_operand(rng, 40, 64, "e4m3")
    b, sb, _ = mx_operand(rng, 24, 64, "e4m3")
    want = mxfuse.gemm_amax(a, b, sa, sb)
    mxfuse.clear_cache()
    from mxfuse import _plans

    assert not _plans._cache
    assert np.array_equal(mxfuse.gemm_amax(a, b, sa, sb).c_tensor, want.c_tensor)


def test_gemm_amax_into_given_outputs(rng):
    a, sa, _ = mx_operand(rng, 40, 64, "e4m3")
    b, sb, _ = mx_operand(rng, 24, 64, "e4m3")
    want = mxfuse.gemm_amax(a, b, sa, sb, c_dtype="bfloat16")
    c = np.zeros((40, 24), ml_dtypes.bfloat16)
    amax = np.zeros((1,), np.float32)
    got = mxfuse.gemm_amax(a, b, sa, sb, c=c, amax=amax)
    assert got.c_tensor is c and got.amax_tensor is amax
    assert np.array_equal(c.view(np.uint16), want.c_tensor.view(np.uint16)) and amax[0] == want.amax_tensor[0]


def test_gemm_amax_errors(rng):
    a, sa, _ = mx_operand(rng, 32, 64, "e4m3")
    b, sb, _ = mx_operand(rng, 32, 64, "e4m3")
    with pytest.raises(mxfuse.InvalidValueError, match=r"gemm_amax: b has shape \(32, 32\), K=32; expected K=64"):
        mxfuse.gemm_amax(a, b[:, :32], sa, sb)
    with pytest.raises(ValueError, match="gemm_amax: sfa"):
        mxfuse.gemm_amax(a, b, sa[:, :1], sb)
    with pytest.raises(ValueError, match="accumulate=True"):
        mxfuse.gemm_amax(a, b, sa, sb, accumulate=True)
    with pytest.raises(mxfuse.InvalidValueError, match=r"gemm_amax: hint mma_tile_n=64; expected 0 \(choose\), 128 or "
                       "256"):
        mxfuse.gemm_amax(a, b, sa, sb, mma_tiler_mn=(128, 64))
    with pytest.raises(mxfuse.InvalidValueError, match=r"hint cluster_m=3; expected 0 \(choose\), 1, 2 or 4"):
        mxfuse.GemmAmax(a, b, sa, sb, np.zeros((32, 32), np.float32), np.zeros(1, np.float32), cluster_shape_mn=(3, 1))
    with pytest.raises(TypeError, match="unexpected options"):
        mxfuse.GemmAmax(a, b, sa, sb, np.zeros((32, 32), np.float32), np.zeros(1, np.float32), c_dtype="bfloat16")
    with pytest.raises(TypeError, match="no counterpart"):
        mxfuse.gemm_amax(a, b, sa, sb, c_dtype="float64")
    with pytest.raises(TypeError, match="expected a torch tensor, a NumPy array"):
        mxfuse.gemm_amax(a, b, sa, [1, 2])
    with pytest.raises(TypeError, match="different frameworks"):
        mxfuse.gemm_amax(a, b, sa, Producer(sb))
    # a misaligned row start: the C library refuses at run time, nothing is written
    buf = np.zeros(32 * 64 + 1, np.uint8)
    a_off = buf[1:].view(ml_dtypes.float8_e4m3fn).reshape(32, 64)
    a_off[:] = a
    c = np.full((32, 32), 3, np.float32)
    amax = np.full((1,), 5, np.float32)
    op = mxfuse.GemmAmax(a_off, b, sa, sb, c, amax)
    with pytest.raises(mxfuse.InvalidValueError, match="gemm_amax_run: a"):
        op.execute(a_off, b, sa, sb, c, amax)
    assert np.all(c == 3) and amax[0] == 5


# ------------------------------------------------------------------ proj_rope
@pytest.mark.parametrize("mxfp8", [False, True])
def test_proj_rope_numpy(rng, mxfp8):
    t, k, h = 77, 128, 2
    inp = proj_inputs(rng, t, k, h, mxfp8=mxfp8)
    r = mxfuse.proj_rope(**inp)
    row, srow, col, scol = r
    assert r["out_scales_col"] is scol
    assert row.shape == (t, h, 192) and srow.shape == (t, h, 6) and scol.shape == (3, h, 192)
    assert row.dtype == ml_dtypes.float8_e4m3fn and srow.dtype == np.uint8
    ref = proj_reference(inp["x"], inp["w"], inp["cos"], inp["sin"], xs=inp.get("x_scale"), ws=inp.get("w_scale"))
    rv = dequant_rows(row, srow)
    cv = col.astype(np.float64) * np.exp2(np.repeat(scol.astype(np.float64) - 127, 32, axis=0)[:t])
    for got in (rv, cv):  # the cuDNN acceptance criterion, per direction
        assert np.mean(np.abs(got - ref) <= 0.1 + 0.1 * np.abs(ref)) >= 0.95
    # the class API on preallocated outputs: the same bits
    outs = [np.full_like(o, 0xA5 if o.dtype == np.uint8 else 0) for o in (row, srow, col, scol)]
    kw = {"sample_x_scale": inp["x_scale"], "sample_w_scale": inp["w_scale"]} if mxfp8 else {}
    op = mxfuse.ProjRope(inp["x"], inp["w"], inp["cos"], inp["sin"], *outs, w_out_in=True, **kw)
    op.execute(inp["x"], inp["w"], inp["cos"], inp["sin"], *outs, x_scale=inp.get("x_scale"),
               w_scale=inp.get("w_scale"))
    for o, want in zip(outs, r):
        assert np.array_equal(o.view(np.uint8), want.view(np.uint8))
    # in-out weights (K, H·D)
    if not mxfp8:
        r2 = mxfuse.proj_rope(inp["x"], np.ascontiguousarray(inp["w"].T), inp["cos"], inp["sin"], w_out_in=False)
        for o, want in zip(r2, r):
            assert np.array_equal(o.view(np.uint8), want.view(np.uint8))


def test_proj_rope_errors(rng):
    inp = proj_inputs(rng, 40, 64, 1)
    with pytest.raises(ValueError, match="proj_rope"):
        mxfuse.proj_rope(inp["x"], inp["w"], inp["cos"][:, :32], inp["sin"])
    with pytest.raises(ValueError, match="proj_rope"):
        mxfuse.proj_rope(inp["x"], inp["w"], inp["cos"], inp["sin"], x_scale=np.zeros((40, 2), np.uint8))


# ------------------------------------------------------------------ quantize / dequantize / scales
def test_quantize_dequantize(rng):
    x = (rng.standard_normal((70, 100)) * 4).astype(np.float32)
    q = mxfuse.quantize(x)
    assert q.q_row.shape == (70, 100) and q.s_row.shape == (70, 4) and q.s_col.shape == (3, 100)
    only_rows = mxfuse.quantize(x, cols=False)
    assert only_rows.q_col is None and np.array_equal(only_rows.q_row.view(np.uint8), q.q_row.view(np.uint8))
    y = mxfuse.dequantize(q.q_row, q.s_row)
    yc = mxfuse.dequantize(q.q_col, q.s_col, direction="cols", dtype="bfloat16")
    assert y.dtype == np.float32 and yc.dtype == ml_dtypes.bfloat16
    assert np.array_equal(y, dequant_rows(q.q_row, q.s_row).astype(np.float32))
    # e4m3 keeps 3 mantissa bits: within 2^-4 relative of the block's scale step
    assert np.all(np.abs(y - x) <= np.abs(x) * 2.0 ** -4 + np.exp2(np.repeat(q.s_row - 127.0, 32, 1)[:, :100]) * 2 ** -9)
    with pytest.raises(ValueError, match="direction"):
        mxfuse.dequantize(q.q_row, q.s_row, direction="diag")


def test_swizzle_roundtrip(rng):
    s = rng.integers(0, 255, size=(2, 300, 7), dtype=np.uint8)
    sw = mxfuse.swizzle_scales(s, pad_byte=0xFF)
    assert sw.shape == (2, 3, 2, 32, 4, 4)
    # the byte of row r, k-block kb, batch l (SPEC §1.1)
    for l_, r, kb in [(0, 0, 0), (1, 299, 6), (0, 130, 5), (1, 77, 3)]:
        off = (r // 128 * 2 + kb // 4) * 512 + (r % 32) * 16 + (r // 32 % 4) * 4 + kb % 4
        assert sw[l_].reshape(-1)[off] == s[l_, r, kb]
    assert np.array_equal(mxfuse.unswizzle_scales(sw, 300, 7), s)
    with pytest.raises(ValueError, match="unswizzle_scales"):
        mxfuse.unswizzle_scales(sw, 500, 7)


# ------------------------------------------------------------------ DLPack producers
class Producer:
    """A minimal DLPack producer over a NumPy array (as another framework would be)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_dlpack_producers(rng):
    """Every tensor through DLPack: MXFP4 operands as uint8 pairs (which NumPy exports),
    scales, C and amax; the same bits as the NumPy path."""
    a, sa, _ = mx_operand(rng, 40, 64, "e2m1")
    b, sb, _ = mx_operand(rng, 24, 64, "e2m1")
    want = mxfuse.gemm_amax(a, b, sa, sb, c_dtype="float32")
    c = np.zeros((40, 24), np.float32)
    amax = np.zeros((1,), np.float32)
    t = [Producer(v) for v in (a, b, sa, sb, c, amax)]
    op = mxfuse.GemmAmax(*t)
    op.execute(*t)
    assert np.array_equal(c, want.c_tensor) and amax[0] == want.amax_tensor[0]
    from mxfuse import _tensors

    m = _tensors.meta(Producer(c[:, 2:10]))
    assert m.shape == (40, 8) and m.strides == (24, 1) and m.device == 0


# ------------------------------------------------------------------ JAX (CPU)
@needs_jax
def test_jax_gemm_amax_jit(rng):
    for fmt, c_dtype in [("e4m3", jnp.bfloat16), ("e5m2", jnp.float32), ("e2m1", jnp.float16)]:
        a, sa, av = mx_operand(rng, 70, 128, fmt)
        b, sb, bv = mx_operand(rng, 40, 128, fmt)
        want = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=c_dtype)
        f = jax.jit(lambda a, b, sa, sb: mj.gemm_amax(a, b, sa, sb, c_dtype=c_dtype))
        got = f(jnp.asarray(a), jnp.asarray(b), jnp.asarray(sa), jnp.asarray(sb))
        assert got["c_tensor"].dtype == c_dtype
        assert np.array_equal(np.asarray(got.c_tensor), want.c_tensor)
        assert np.array_equal(np.asarray(got.amax_tensor), want.amax_tensor)
        # swizzled scales in the physical atom shape, (M, K, 1) operands
        sw = jax.jit(lambda a, b, sa, sb: mj.gemm_amax(a, b, sa, sb, c_dtype=c_dtype))(
            jnp.asarray(a)[:, :, None], jnp.asarray(b)[:, :, None], jnp.asarray(mxfuse.swizzle_scales(sa)),
            jnp.asarray(mxfuse.swizzle_scales(sb)))
        assert sw.c_tensor.shape[2] == 1 and np.array_equal(np.asarray(sw.c_tensor)[:, :, 0], want.c_tensor)
    # eager mxfuse.gemm_amax on JAX arrays goes through the same custom call
    eager = mxfuse.gemm_amax(jnp.asarray(a), jnp.asarray(b), jnp.asarray(sa), jnp.asarray(sb), c_dtype=c_dtype)
    assert np.array_equal(np.asarray(eager.c_tensor), want.c_tensor)


@needs_jax
def test_jax_gemm_amax_mixed_formats(rng):
    for fa, fb in [("bf16", "e2m1"), ("e4m3", "e2m1")]:
        a, sa, _ = mx_operand(rng, 33, 128, fa)
        b, sb, _ = mx_operand(rng, 48, 128, fb)
        want = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=jnp.bfloat16)
        if sa is None:
            got = jax.jit(lambda a, b, sb: mj.gemm_amax(a, b, None, sb, c_dtype=jnp.bfloat16))(
                jnp.asarray(a), jnp.asarray(b), jnp.asarray(sb))
        else:
            got = jax.jit(lambda a, b, sa, sb: mj.gemm_amax(a, b, sa, sb, c_dtype=jnp.bfloat16))(
                jnp.asarray(a), jnp.asarray(b), jnp.asarray(sa), jnp.asarray(sb))
        assert np.array_equal(np.asarray(got.c_tensor), want.c_tensor)
        assert np.array_equal(np.asarray(got.amax_tensor), want.amax_tensor)
    # accumulate with no sfa operand: the aliased amax is the last operand
    x = mx_operand(rng, 33, 128, "bf16")[0]
    acc = mj.gemm_amax(jnp.asarray(x), jnp.asarray(b), None, jnp.asarray(sb), amax=jnp.full((1,), 1e30, jnp.float32),
                       accumulate=True)
    assert acc.amax_tensor[0] == np.float32(1e30)


@needs_jax
def test_jax_gemm_amax_accumulate_alpha(rng):
    a, sa, _ = mx_operand(rng, 33, 64, "e4m3")
    b, sb, _ = mx_operand(rng, 20, 64, "e4m3")  # row-major f32 C: N·4 bytes a multiple of 16
    want = mxfuse.gemm_amax(a, b, sa, sb, alpha=0.25)
    args = [jnp.asarray(v) for v in (a, b, sa, sb)]
    got = jax.jit(lambda *v: mj.gemm_amax(*v, alpha=0.25))(*args)
    assert np.array_equal(np.asarray(got.c_tensor), want.c_tensor)
    hi = jax.jit(lambda *v: mj.gemm_amax(*v[:4], amax=v[4], accumulate=True))(*args, jnp.array([1e9], jnp.float32))
    assert float(hi.amax_tensor[0]) == 1e9
    lo = jax.jit(lambda *v: mj.gemm_amax(*v[:4], amax=v[4], accumulate=True))(*args, jnp.array([0.0], jnp.float32))
    assert float(lo.amax_tensor[0]) == float(mxfuse.gemm_amax(a, b, sa, sb).amax_tensor[0])


@needs_jax
def test_jax_errors_at_trace_time(rng):
    a, sa, _ = mx_operand(rng, 32, 64, "e4m3")
    b, sb, _ = mx_operand(rng, 32, 96, "e4m3")
    f = jax.jit(lambda *v: mj.gemm_amax(*v))
    with pytest.raises(mxfuse.InvalidValueError, match="gemm_amax: b has shape"):
        f(jnp.asarray(a), jnp.asarray(b), jnp.asarray(sa), jnp.asarray(sb))
    with pytest.raises(ValueError, match="row-major"):
        mj.gemm_amax(jnp.asarray(a), jnp.asarray(a), jnp.asarray(sa), jnp.asarray(sa), c_major="m")


@needs_jax
@pytest.mark.parametrize("mxfp8", [False, True])
def test_jax_proj_rope_jit(rng, mxfp8):
    inp = proj_inputs(rng, 45, 64, 2, mxfp8=mxfp8)
    want = mxfuse.proj_rope(**inp)
    j = {k: jnp.asarray(v) for k, v in inp.items()}
    got = jax.jit(lambda j: mj.proj_rope(**j))(j)
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g).view(np.uint8), w.view(np.uint8))
    assert got["out_fp8_row"].dtype == jnp.float8_e4m3fn


@needs_jax
def test_jax_quantize_dequantize_jit(rng):
    x = (rng.standard_normal((50, 70)) * 2).astype(np.float32)
    want = mxfuse.quantize(x)
    got = jax.jit(mj.quantize)(jnp.asarray(x))
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g).view(np.uint8), w.view(np.uint8))
    cols = jax.jit(lambda v: mj.quantize(v, rows=False))(jnp.asarray(x))
    assert cols.q_row is None and np.array_equal(np.asarray(cols.s_col), want.s_col)
    y = jax.jit(lambda q, s: mj.dequantize(q, s, direction="cols"))(got.q_col, got.s_col)
    assert np.array_equal(np.asarray(y), mxfuse.dequantize(want.q_col, want.s_col, direction="cols"))


# ------------------------------------------------------------------ the XLA handler's device
def _fake_xla_call(handler, ordinal):
    """Calls a CUDA handler of libmxfuse_xla on a call frame built here, as XLA's FFI
    would: quantize of an f32 (32, 64) x into q_row, s_row and a workspace (host memory),
    the FFI's XLA_FFI_DeviceOrdinal_Get answering `ordinal`, or absent (None). Returns
    the message of the error the handler returns (None when it returned none)."""
    import ctypes as C

    vp, sz, i64 = C.c_void_p, C.c_size_t, C.c_int64
    fns = ("Error_Create", "Error_GetMessage", "Error_Destroy", "Handler_Register", "Stream_Get", "Type_Register",
           "ExecutionContext_Get", "State_Set", "State_Get", "DeviceMemory_Allocate", "DeviceMemory_Free",
           "ThreadPool_Schedule", "ThreadPool_NumThreads", "Future_Create", "Future_SetAvailable", "Future_SetError",
           "RunId_Get", "DeviceOrdinal_Get")

    def struct(*fields):
        return type("S", (C.Structure,), {"_fields_": list(fields)})

    head = [("struct_size", sz), ("ext", vp)]
    Api = struct(*head, ("version", struct(*head, ("major", C.c_int), ("minor", C.c_int))), ("internal", vp),
                 *[(n, vp) for n in fns])
    Items = struct(*head, ("size", i64), ("types", C.POINTER(C.c_int)), ("items", C.POINTER(vp)))
    Attrs = struct(*head, ("size", i64), ("types", C.POINTER(C.c_int)), ("names", C.POINTER(vp)),
                   ("attrs", C.POINTER(vp)))
    Frame = struct(*head, ("api", C.POINTER(Api)), ("ctx", vp), ("stage", C.c_int), ("args", Items),
                   ("rets", Items), ("attrs", Attrs), ("future", vp))
    Buffer = struct(*head, ("dtype", C.c_int), ("data", vp), ("rank", i64), ("dims", C.POINTER(i64)))
    ErrorArgs = struct(*head, ("message", C.c_char_p), ("errc", C.c_int))
    StreamArgs = struct(*head, ("ctx", vp), ("stream", vp))
    OrdinalArgs = struct(*head, ("ctx", vp), ("device_ordinal", C.c_int32))
    messages = []

    @C.CFUNCTYPE(vp, C.POINTER(ErrorArgs))
    def error_create(a):
        messages.append(a.contents.message.decode())
        return 1

    @C.CFUNCTYPE(vp, C.POINTER(StreamArgs))
    def stream_get(a):
        a.contents.stream = None
        return None

    @C.CFUNCTYPE(vp, C.POINTER(OrdinalArgs))
    def ordinal_get(a):
        a.contents.device_ordinal = ordinal
        return None

    api = Api(Error_Create=C.cast(error_create, vp), Stream_Get=C.cast(stream_get, vp))
    api.struct_size = Api.DeviceOrdinal_Get.offset  # an FFI of before XLA_FFI_DeviceOrdinal_Get
    if ordinal is not None:
        api.struct_size, api.DeviceOrdinal_Get = C.sizeof(Api), C.cast(ordinal_get, vp)
    arrays = [np.ones((32, 64), np.float32), np.zeros((32, 64), np.uint8), np.zeros((32, 2), np.uint8),
              np.zeros(16, np.uint8)]
    dtypes = [11, 20, 6, 6]  # XLA_FFI_DataType F32, F8E4M3FN, U8, U8
    dims = [(i64 * x.ndim)(*x.shape) for x in arrays]
    bufs = [Buffer(C.sizeof(Buffer), None, t, x.ctypes.data, x.ndim, d) for x, t, d in zip(arrays, dtypes, dims)]

    def items(objs):
        return Items(C.sizeof(Items), None, len(objs), (C.c_int * len(objs))(*[1] * len(objs)),
                     (vp * len(objs))(*[C.addressof(o) for o in objs]))

    name = b"directions"
    span = struct(("ptr", C.c_char_p), ("len", sz))(name, len(name))
    value = C.c_int32(1)  # MXF_QUANT_ROWS
    scalar = struct(("dtype", C.c_int), ("value", vp))(4, C.addressof(value))  # S32
    attrs = Attrs(C.sizeof(Attrs), None, 1, (C.c_int * 1)(3), (vp * 1)(C.addressof(span)),
                  (vp * 1)(C.addressof(scalar)))
    frame = Frame(C.sizeof(Frame), None, C.pointer(api), None, 3, items(bufs[:1]), items(bufs[1:]), attrs, None)
    handler.restype, handler.argtypes = vp, [C.POINTER(Frame)]
    err = handler(C.byref(frame))
    assert (err is None) == (not messages)
    return messages[-1] if messages else None


@needs_jax
def test_xla_handler_runs_on_the_device_xla_names():
    """The CUDA handler runs on the GPU whose ordinal XLA's FFI gives it (here one that
    does not exist, so the library names it in its refusal), and refuses where the FFI
    cannot say which GPU, rather than guessing one."""
    handler = mj._xla.mxf_xla_quantize_cuda
    assert "CUDA device 99" in _fake_xla_call(handler, 99)
    msg = _fake_xla_call(handler, None)
    assert "does not say which GPU" in msg and "XLA_FFI_DeviceOrdinal_Get" in msg
    # the host handler on the same frame runs (no device to ask for)
    assert _fake_xla_call(mj._xla.mxf_xla_quantize_host, None) is None


# ------------------------------------------------------------------ torch on CPU tensors
@needs_torch
def test_torch_cpu_eager_ops_and_class_api(rng):
    """torch CPU tensors through the one call, the custom ops and the class API: the bits of
    the NumPy path; cuDNN's hints are accepted and change nothing."""
    a, sa, _ = mx_operand(rng, 70, 128, "e4m3")
    b, sb, _ = mx_operand(rng, 56, 128, "e4m3")  # bf16 rows of 112 bytes
    want = mxfuse.gemm_amax(a, b, sa, sb, c_dtype="bfloat16")
    t = [to_torch(v, "cpu") for v in (a, b, sa, sb)]
    for kw in ({}, {"mma_tiler_mn": (128, 256), "cluster_shape_mn": (2, 1)}):
        for _ in range(2):  # the second call takes the path of calls seen before
            got = mxfuse.gemm_amax(*t, c_dtype=torch.bfloat16, **kw)
            assert got.c_tensor.dtype == torch.bfloat16 and got.c_tensor.device.type == "cpu"
            assert np.array_equal(to_numpy(got.c_tensor).view(np.uint16), want.c_tensor.view(np.uint16))
            assert float(got.amax_tensor[0]) == float(want.amax_tensor[0])
    amax = torch.full((1,), float("nan"))
    c = torch.ops.mxfuse.gemm_amax(*t, amax, "n", torch.bfloat16, 32, None, False)
    assert np.array_equal(to_numpy(c).view(np.uint16), want.c_tensor.view(np.uint16)) and float(amax[0]) == float(
        want.amax_tensor[0])
    cm = mxfuse.gemm_amax(*t, c_dtype=torch.float32, c_major="m").c_tensor
    assert cm.stride(0) == 1 and cm.shape == (70, 56)
    c2, amax2 = torch.empty((70, 56), dtype=torch.bfloat16), torch.empty(1)
    mxfuse.GemmAmax(*t, c2, amax2).compile().execute(*t, c2, amax2)
    assert torch.equal(c2.view(torch.uint16), c.view(torch.uint16)) and torch.equal(amax2, amax)
    x = torch.from_numpy((rng.standard_normal((64, 96)) * 3).astype(np.float32))
    q = mxfuse.quantize(x)
    qn = mxfuse.quantize(x.numpy())
    for g, w in zip(q, qn):
        assert np.array_equal(to_numpy(g).view(np.uint8), w.view(np.uint8))
    assert torch.equal(mxfuse.dequantize(q.q_col, q.s_col, direction="cols"),
                       torch.from_numpy(mxfuse.dequantize(qn.q_col, qn.s_col, direction="cols")))


@needs_torch
def test_torch_cpu_compile_fullgraph(rng):
    """torch.compile(fullgraph=True) over the four ops on CPU tensors: the custom ops and
    their fake implementations, the eager results bit for bit."""
    a, sa, _ = mx_operand(rng, 64, 128, "e4m3")
    b, sb, _ = mx_operand(rng, 48, 128, "e4m3")
    t = [to_torch(v, "cpu") for v in (a, b, sa, sb)]
    inp = {n: to_torch(v, "cpu") for n, v in proj_inputs(rng, 40, 64, 2).items()}
    x = torch.from_numpy(rng.standard_normal((64, 96)).astype(np.float32))

    def f(a, b, sa, sb, inp, x):
        c, amax = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=torch.bfloat16, mma_tiler_mn=(128, 128))
        r = mxfuse.proj_rope(inp["x"], inp["w"], inp["cos"], inp["sin"])
        q = mxfuse.quantize(x, cols=False)
        y = mxfuse.dequantize(q.q_row, q.s_row)
        return c.float() * 2, amax, r.out_fp8_row, r["out_scales_col"], q.s_row, y

    eager = f(*t, inp, x)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)(*t, inp, x)
    for e, c in zip(eager, compiled):
        assert e.shape == c.shape and e.dtype == c.dtype and e.stride() == c.stride()
        assert np.array_equal(to_numpy(e).view(np.uint8), to_numpy(c).view(np.uint8))
