"""Cross-check of mxfuse's number formats against ml_dtypes / numpy (SPEC §0, §2.3).

Through the shared library ($MXFUSE_LIB) and the package's mirror of its C ABI (mxfuse._abi):
  - mxf_convert decodes every code of e4m3, e5m2, e2m1, e8m0, bf16, f16 to the value
    ml_dtypes / numpy give (bitwise; NaN by isnan);
  - mxf_convert encodes a dense f32 sweep (random and strided bit patterns, specials,
    every code, every tie between adjacent codes and its f32 neighbours) to the code
    ml_dtypes' round-to-nearest-even cast gives. ml_dtypes' fp8/fp4 casts do not
    saturate, so they are compared where |x| <= max; beyond max (and inf) the SPEC rule
    (±max) and NaN -> 0x7F / 0x7 are checked on their own;
  - mxf_quantize (one call, host tensors) matches a numpy / ml_dtypes restatement of the
    MXFP8 rule of SPEC §2.3 step 4, scale bytes and codes, in both directions, and
    mxf_dequantize inverts it.
The module is skipped when MXFUSE_LIB is unset and fails when it is set but unloadable.
"""
import os

import numpy as np
import pytest

if not os.environ.get("MXFUSE_LIB"):
    pytest.skip("MXFUSE_LIB is not set: point it at the built libmxfuse.so", allow_module_level=True)

try:
    import ml_dtypes
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("ml_dtypes is not installed (python3 -m pip install ml_dtypes)", allow_module_level=True)

from mxfuse import _abi as abi  # noqa: E402  raises if MXFUSE_LIB is set but cannot be loaded


# ------------------------------------------------------------------ the C calls under test
def _ptr(a):
    return a.ctypes.data if a is not None else None


def convert_raw(src, src_dtype, dst, dst_dtype, n):
    """mxf_convert on numpy buffers; returns the status (no raise)."""
    return abi.lib.mxf_convert(_ptr(src), src_dtype, _ptr(dst), dst_dtype, n)


def convert(src, src_dtype, dst_dtype, n, dst_storage):
    """Converts n values; dst_storage is the numpy array to fill (returned)."""
    abi.check(convert_raw(src, src_dtype, dst_storage, dst_dtype, n))
    return dst_storage


def host_tensor(arr, dtype):
    """A C-contiguous host tensor over a numpy array (shape as the array's)."""
    assert arr.flags["C_CONTIGUOUS"]
    t = abi.Tensor(data=arr.ctypes.data, dtype=dtype, device=abi.DEVICE_CPU, ndim=arr.ndim)
    for i, s in enumerate(arr.shape):
        t.shape[i] = s
    return t


def quantize(x, directions=abi.QUANT_ROWS | abi.QUANT_COLS):
    """mxf_quantize (one call) of a (rows, cols) float32 or bfloat16 matrix; returns
    (q_row, s_row, q_col, s_col) as uint8 arrays (None for a direction not asked)."""
    rows, cols = x.shape
    xd = abi.F32 if x.dtype == np.float32 else abi.BF16
    assert xd == abi.F32 or x.dtype == ml_dtypes.bfloat16
    x = np.ascontiguousarray(x)
    out = [None] * 4
    desc = abi.QuantizeDesc(x=host_tensor(x, xd), directions=directions)
    if directions & abi.QUANT_ROWS:
        out[0] = np.full((rows, cols), 0xA5, np.uint8)
        out[1] = np.full((rows, -(-cols // 32)), 0xA5, np.uint8)
        desc.q_row, desc.s_row = host_tensor(out[0], abi.E4M3), host_tensor(out[1], abi.E8M0)
    if directions & abi.QUANT_COLS:
        out[2] = np.full((rows, cols), 0xA5, np.uint8)
        out[3] = np.full((-(-rows // 32), cols), 0xA5, np.uint8)
        desc.q_col, desc.s_col = host_tensor(out[2], abi.E4M3), host_tensor(out[3], abi.E8M0)
    abi.check(abi.lib.mxf_quantize(desc, None))
    return tuple(out)


def dequantize(q, s, direction):
    """mxf_dequantize (one call): e4m3 codes q (rows, cols) with e8m0 scales s -> float32."""
    y = np.full(q.shape, np.nan, np.float32)
    desc = abi.DequantizeDesc(q=host_tensor(q, abi.E4M3), s=host_tensor(s, abi.E8M0), y=host_tensor(y, abi.F32),
                              direction=direction)
    abi.check(abi.lib.mxf_dequantize(desc, None))
    return y


# name: (mxf dtype, numpy dtype, storage bits, largest finite value, saturating, NaN code)
FORMATS = {
    "e4m3": (abi.E4M3, ml_dtypes.float8_e4m3fn, 8, 448.0, True, 0x7F),
    "e5m2": (abi.E5M2, ml_dtypes.float8_e5m2, 8, 57344.0, True, 0x7F),
    "e2m1": (abi.E2M1, ml_dtypes.float4_e2m1fn, 4, 6.0, True, 0x7),
    "e8m0": (abi.E8M0, ml_dtypes.float8_e8m0fnu, 8, None, None, 0xFF),
    "bf16": (abi.BF16, ml_dtypes.bfloat16, 16, None, False, None),
    "f16": (abi.F16, np.float16, 16, None, False, None),
}
ENCODABLE = ["e4m3", "e5m2", "e2m1", "bf16", "f16"]
INV_448 = np.uint32(0x3B124925).view(np.float32)


def all_codes(bits):
    return np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)


def pack_e2m1(codes):
    c = np.asarray(codes, np.uint8) & 0xF
    if len(c) % 2:
        c = np.append(c, np.uint8(0))
    return (c[0::2] | (c[1::2] << 4)).astype(np.uint8)


def unpack_e2m1(packed, n):
    out = np.empty(2 * len(packed), np.uint8)
    out[0::2] = packed & 0xF
    out[1::2] = packed >> 4
    return out[:n]


def mxf_decode(name, codes):
    dt, _, bits, *_ = FORMATS[name]
    n = len(codes)
    src = pack_e2m1(codes) if bits == 4 else np.ascontiguousarray(codes)
    out = np.full(n + 2, np.nan, np.float32)
    convert(src, dt, abi.F32, n, out)
    return out[:n]


def mxf_encode(name, x):
    dt, _, bits, *_ = FORMATS[name]
    x = np.ascontiguousarray(x, np.float32)
    n = len(x)
    if bits == 4:
        buf = np.full((n + 1) // 2 + 1, 0xA5, np.uint8)
        convert(x, abi.F32, dt, n, buf)
        assert buf[-1] == 0xA5, "wrote past n"
        return unpack_e2m1(buf[:-1], n)
    buf = np.full(n + 1, 0xA5A5 if bits == 16 else 0xA5, np.uint16 if bits == 16 else np.uint8)
    convert(x, abi.F32, dt, n, buf)
    assert buf[-1] == buf.dtype.type(0xA5A5 if bits == 16 else 0xA5), "wrote past n"
    return buf[:n]


def ref_decode(name, codes):
    _, npdt, bits, *_ = FORMATS[name]
    with np.errstate(invalid="ignore"):  # NaN codes
        return np.asarray(codes).astype(np.uint16 if bits == 16 else np.uint8).view(npdt).astype(np.float32)


def same_f32(a, b):
    """Elementwise: bitwise equal, or both NaN."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def first_bad(mask, *cols):
    idx = np.flatnonzero(~mask)[:5]
    return [tuple(c[i] for c in cols) for i in idx]


# ------------------------------------------------------------------ decode
@pytest.mark.parametrize("name", list(FORMATS))
def test_decode_every_code(name):
    codes = all_codes(FORMATS[name][2])
    ours, ref = mxf_decode(name, codes), ref_decode(name, codes)
    ok = same_f32(ours, ref)
    assert ok.all(), f"{name}: {np.count_nonzero(~ok)} codes differ, e.g. {first_bad(ok, codes, ours, ref)}"
    assert np.isnan(ours).any() or name == "e2m1"


# ------------------------------------------------------------------ encode
def finite_values(name):
    """Every finite value of the format, ascending, without duplicates (±0 merged)."""
    v = ref_decode(name, all_codes(FORMATS[name][2]))
    return np.unique(v[np.isfinite(v)].astype(np.float64))  # (casting signalling NaNs would warn)


def sweep(rng):
    parts = [
        rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32),
        np.arange(int(rng.integers(0, 4099)), 1 << 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32),
        (rng.integers(0, 1 << 23, 1 << 14) | (rng.integers(0, 2, 1 << 14) << 31)).astype(np.uint32).view(np.float32),
        (rng.standard_normal(1 << 16) * np.exp2(rng.integers(-30, 20, 1 << 16))).astype(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45], np.float32),
        np.array([0x7F800001, 0xFFBFFFFF, 0x7FC00001], np.uint32).view(np.float32),
    ]
    for name in ENCODABLE:
        v = finite_values(name)
        mids = (v[:-1] + v[1:]) / 2  # exact in f64 and in f32 for every format here
        top = v[-1] + (v[-1] - v[-2]) / 2  # the tie just beyond max
        pts = np.concatenate([v, mids, [top, v[-1] * 1.0625, v[-1] * 2, v[v > 0][0] / 2, v[v > 0][0] / 4]])
        pts = pts[np.abs(pts) < 3.4e38].astype(np.float32)
        pts = np.concatenate([pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))])
        parts += [pts, -pts]
    return np.concatenate(parts).astype(np.float32)


def count_ties(name, x):
    v = finite_values(name)
    a = np.abs(x.astype(np.float64))
    inr = a < v[-1]
    i = np.clip(np.searchsorted(v, a[inr], side="right") - 1, 0, len(v) - 2)
    return int(np.count_nonzero((v[i] + v[i + 1]) / 2 == a[inr]))


@pytest.mark.parametrize("name", ENCODABLE)
def test_encode_sweep(name, rng):
    dt, npdt, bits, vmax, saturating, nan_code = FORMATS[name]
    x = sweep(rng)
    ours = mxf_encode(name, x).astype(np.uint32)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(npdt).view(np.uint16 if bits == 16 else np.uint8).astype(np.uint32)
    nan = np.isnan(x)
    ties = count_ties(name, x[~nan])
    assert ties > 100, f"the sweep holds only {ties} ties of {name}"
    if saturating:
        sign = np.signbit(x).astype(np.uint32) << (bits - 1)
        maxcode = ((1 << (bits - 1)) - 1) if name == "e2m1" else (0x7E if name == "e4m3" else 0x7B)
        inr = ~nan & (np.abs(x) <= vmax)
        ok = ours[inr] == ref[inr]
        assert ok.all(), f"{name}: {np.count_nonzero(~ok)} of {inr.sum()} in range differ from ml_dtypes, " \
                         f"e.g. (x, ours, ml_dtypes) {first_bad(ok, x[inr], ours[inr], ref[inr])}"
        beyond = ~nan & (np.abs(x) > vmax)
        assert beyond.sum() > 1000
        ok = ours[beyond] == (sign[beyond] | maxcode)
        assert ok.all(), f"{name}: saturation wrong for {first_bad(ok, x[beyond], ours[beyond])}"
        assert (ours[nan] == nan_code).all(), f"{name}: NaN must encode to {nan_code:#x}"
    else:
        ok = ours[~nan] == ref[~nan]
        assert ok.all(), f"{name}: {np.count_nonzero(~ok)} differ from reference, " \
                         f"e.g. (x, ours, ref) {first_bad(ok, x[~nan], ours[~nan], ref[~nan])}"
        assert np.isnan(mxf_decode(name, ours[nan].astype(np.uint16))).all(), f"{name}: NaN must stay NaN"
        # overflow goes to inf, never saturates
        big = np.array([np.inf, -np.inf, 3.4028235e38], np.float32)
        assert np.isinf(mxf_decode(name, mxf_encode(name, big))).all()


def test_e2m1_odd_count_keeps_last_high_nibble(rng):
    n = 2 * int(rng.integers(50, 500)) + 1
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    buf = np.full((n + 1) // 2, 0xA5, np.uint8)
    convert(x, abi.F32, abi.E2M1X2, n, buf)
    assert buf[-1] >> 4 == 0xA
    with np.errstate(over="ignore"):
        ref = np.clip(x, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert (unpack_e2m1(buf, n) == ref).all()


def test_e8m0_encode_not_supported():
    x = np.ones(4, np.float32)
    dst = np.full(8, 0xA5, np.uint8)
    st = convert_raw(x, abi.F32, dst, abi.E8M0, 4)
    assert st == abi.ERR_NOT_SUPPORTED and "e8m0" in abi.last_error()
    assert (dst == 0xA5).all()


def test_invalid_arguments_write_nothing():
    x = np.ones(4, np.float32)
    dst = np.full(16, 0xA5, np.uint8)
    for args in [(x, abi.F32, dst, abi.E4M3, -1), (None, abi.F32, dst, abi.E4M3, 4), (x, 0, dst, abi.E4M3, 4),
                 (x, abi.BF16, dst, abi.E4M3, 4), (x, abi.U8, dst, abi.F32, 1)]:
        assert convert_raw(*args) == abi.ERR_INVALID_VALUE, args
        assert "mxf_convert" in abi.last_error()
        assert (dst == 0xA5).all()


# ------------------------------------------------------------------ MXFP8 rule
POW2 = np.ldexp(1.0, np.arange(255) - 127)  # 2^(b-127), b = 0..254


def ref_quantize_rows(x):
    """SPEC §2.3 step 4 over blocks of 32 along each row of float32 x."""
    rows, cols = x.shape
    nb = -(-cols // 32)
    blocks = np.pad(x, ((0, 0), (0, nb * 32 - cols))).reshape(rows, nb, 32)  # zero padding never raises amax
    a = np.abs(blocks)
    amax = np.where(np.isnan(a), np.float32(0), a).max(axis=2)
    s = (amax * INV_448).astype(np.float32)  # one f32 rounding
    b = np.minimum(np.searchsorted(POW2, s.astype(np.float64), side="left"), 254)
    b = np.where(np.isnan(s), 255, b)
    inv = np.where(b >= 254, 0.0, np.ldexp(1.0, 127 - np.minimum(b, 253))).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = (blocks * inv[:, :, None]).astype(np.float32)
        codes = np.clip(scaled, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    codes = np.where(np.isnan(scaled), np.uint8(0x7F), codes)
    return codes.reshape(rows, nb * 32)[:, :cols], b.astype(np.uint8)


def random_matrix(rng, rows, cols):
    """Gaussian rows of random magnitude, with NaN / inf / zero blocks / huge / tiny values."""
    x = rng.standard_normal((rows, cols)) * np.exp2(rng.integers(-60, 60, (rows, 1)))
    x = x.astype(np.float32)
    n = rows * cols
    flat = x.reshape(-1)
    for val, k in [(np.nan, 3), (np.inf, 2), (-np.inf, 2), (3.0e38, 2), (1e-40, 4), (0.0, 5)]:
        flat[rng.integers(0, n, min(k, n))] = val
    if rows > 2:
        x[rng.integers(0, rows)] = 0.0  # an all-zero row: byte 0 everywhere
    # values that sit exactly on the power-of-two boundaries of the rule
    r = rng.integers(0, rows)
    x[r, : min(cols, 8)] = (448.0 * np.exp2(rng.integers(-100, 100, min(cols, 8)))).astype(np.float32)
    return x


SHAPES = [(1, 1), (1, 45), (31, 33), (67, 101), (96, 64), (45, 257), (130, 7)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("in_dtype", ["f32", "bf16"])
def test_quantize_matches_rule(shape, in_dtype, rng):
    x = random_matrix(rng, *shape)
    if in_dtype == "bf16":
        xin = x.astype(ml_dtypes.bfloat16)
        x = xin.astype(np.float32)
    else:
        xin = x
    q_row, s_row, q_col, s_col = quantize(xin)
    rq, rs = ref_quantize_rows(x)
    cq, cs = ref_quantize_rows(np.ascontiguousarray(x.T))
    cq, cs = cq.T, cs.T
    assert (s_row == rs).all(), f"row scales differ at {np.argwhere(s_row != rs)[:5].tolist()}"
    assert (q_row == rq).all(), f"row codes differ at {np.argwhere(q_row != rq)[:5].tolist()}"
    assert (s_col == cs).all(), f"col scales differ at {np.argwhere(s_col != cs)[:5].tolist()}"
    assert (q_col == cq).all(), f"col codes differ at {np.argwhere(q_col != cq)[:5].tolist()}"


def test_quantize_one_direction_and_dequantize(rng):
    rows, cols = 37, 70
    x = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
    q_row, s_row, q_col, s_col = quantize(x, abi.QUANT_ROWS)
    assert q_col is None and s_col is None
    rq, rs = ref_quantize_rows(x)
    assert (q_row == rq).all() and (s_row == rs).all()
    y = dequantize(q_row, s_row, abi.QUANT_ROWS)
    scale = np.repeat(np.ldexp(np.float32(1), s_row.astype(np.int32) - 127), 32, axis=1)[:, :cols]
    ref = (q_row.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * scale.astype(np.float32)).astype(np.float32)
    assert same_f32(y, ref).all()
    # a quantized value is within half an e4m3 step (2^-4 relative) of the input
    assert (np.abs(y - x) <= np.abs(x) * 2.0**-4 + np.ldexp(1.0, s_row.astype(np.int32) - 127 - 9).repeat(32, 1)[:, :cols]).all()
