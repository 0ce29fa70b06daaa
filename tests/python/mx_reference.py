"""Inputs and f64 references shared by the Python tests: random MX operands with their
exact values (decoded from the format definitions, not by the library), the gemm_amax
oracle and SPEC §5's acceptance rule, and proj_rope's reference steps 1-3."""
import numpy as np

import ml_dtypes
import mxfuse

# The MXF_CONFIG values under which the CPU backend's sums do not depend on the problem's
# size, so that a split problem (heads, columns) gives the whole run's bits: the default
# core and cpu=c (SPEC §5.1); not the vendor cores (cpu=blas, cpu=onednn).
BITWISE_CONFIGS = ("", "cpu=c")

E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)


# ------------------------------------------------------------------ inputs and oracle
def mx_operand(rng, rows, k, fmt):
    """Random codes (rows, K) of fmt ('e4m3', 'e5m2' or 'e2m1' packed as uint8 (rows, K/2))
    and compact e8m0 scales (rows, ceil(K/32)); also their f64 values (rows, K). fmt
    'bf16': bf16 values and no scales (None), as an activation without scales."""
    if fmt == "bf16":
        x = (rng.standard_normal((rows, k)) * 2).astype(ml_dtypes.bfloat16)
        return x, None, x.astype(np.float64)
    kb = -(-k // 32)
    s = rng.integers(120, 132, size=(rows, kb), dtype=np.uint8)
    if fmt == "e2m1":
        nib = rng.integers(0, 16, size=(rows, k), dtype=np.uint8)
        codes = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
        vals = E2M1_VALUES[nib]
    else:
        dt = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
        v = rng.standard_normal((rows, k)) * 3
        codes = v.astype(dt)
        vals = codes.astype(np.float64)
    vals = vals * np.exp2(np.repeat(s.astype(np.float64) - 127, 32, axis=1)[:, :k])
    return codes, s, vals


def encode(x, c_dtype):
    """f64 -> the C dtype's values (RNE through f32, which is exact for what is compared)."""
    x32 = x.astype(np.float32)
    if c_dtype == "float32":
        return x32
    if c_dtype == "float8_e4m3fn":  # fp8 encoding saturates (SPEC §0)
        x32 = np.clip(x32, -448, 448)
    return x32.astype({"bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
                       "float8_e4m3fn": ml_dtypes.float8_e4m3fn}[c_dtype]).astype(np.float64)


def check_gemm(c, ref, delta, c_dtype):
    """SPEC §5 for gemm_amax's C: f32 within δ + ulp; narrower C equal to encode(ref) where
    encode(ref − δ) = encode(ref + δ), else between the two (either neighbour is right there).
    SPEC §5's share of exact matches (>= 99.9 % on typical data) needs many codes: the C
    tests check it over all their cases; here a product of a few thousand codes holds only a
    few undetermined ones, so it is not asked. The check must not be vacuous: most codes of
    a random product are determined, so a δ grown by mistake fails here."""
    c = np.asarray(c).astype(np.float64)
    if c_dtype == "float32":
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(c - ref) <= delta + ulp), np.max(np.abs(c - ref) - delta - ulp)
        return
    lo, hi = encode(ref - delta, c_dtype), encode(ref + delta, c_dtype)
    det = lo == hi
    assert np.array_equal(c[det], lo[det]), f"{np.count_nonzero(c[det] != lo[det])} determined codes differ"
    assert np.all((c[~det] >= lo[~det]) & (c[~det] <= hi[~det]))
    assert np.mean(det) >= 0.9, f"only {np.mean(det):.3f} of the codes are determined"


def oracle(av, bv, alpha=1.0):
    """ref = alpha · Â B̂ᵀ in f64, and δ of SPEC §5."""
    ref = alpha * (av @ bv.T)
    k = av.shape[1]
    sq = np.sqrt((av ** 2) @ (bv ** 2).T)
    delta = 2.0 ** -24 * (8 * np.sqrt(k) * sq + (k / 8 + 2) * np.abs(ref)) * abs(alpha)
    return ref, delta


def proj_inputs(rng, t, k, h, d=192, rope=64, mxfp8=False):
    bf = ml_dtypes.bfloat16
    x = (rng.standard_normal((t, k)) * 0.5).astype(np.float32)
    w = (rng.standard_normal((h * d, k)) * 0.05).astype(np.float32)
    ang = rng.uniform(0, 6.3, size=(t, rope))
    cos, sin = np.cos(ang).astype(bf), np.sin(ang).astype(bf)
    if not mxfp8:
        return dict(x=x.astype(bf), w=w.astype(bf), cos=cos, sin=sin)
    q = mxfuse.quantize(x, cols=False)
    qw = mxfuse.quantize(w, cols=False)
    return dict(x=q.q_row, w=qw.q_row, cos=cos, sin=sin, x_scale=q.s_row, w_scale=qw.s_row)


def proj_reference(x, w, cos, sin, d=192, rope=64, xs=None, ws=None):
    """f64 GEMM, bf16 staging, RoPE (SPEC §2.3 steps 1-3): (T, H, D) f64."""
    xv = np.asarray(x).astype(np.float64)
    wv = np.asarray(w).astype(np.float64)
    if xs is not None:
        xv = xv * np.exp2(np.repeat(xs.astype(np.float64) - 127, 32, axis=1))
        wv = wv * np.exp2(np.repeat(ws.astype(np.float64) - 127, 32, axis=1))
    y = (xv @ wv.T).astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    t = y.shape[0]
    y = y.reshape(t, -1, d)
    nope, half = d - rope, rope // 2
    p, q = y[:, :, nope::2], y[:, :, nope + 1::2]
    c = cos.astype(np.float64)[:, None, :]
    s = sin.astype(np.float64)[:, None, :]
    out = y.copy()
    out[:, :, nope:nope + half] = p * c[..., :half] - q * s[..., :half]
    out[:, :, nope + half:] = p * s[..., half:] + q * c[..., half:]
    return out


def dequant_rows(codes, s):
    n = codes.shape[-1]
    return codes.astype(np.float64) * np.exp2(np.repeat(s.astype(np.float64) - 127, 32, axis=-1)[..., :n])




# ------------------------------------------------------------------ torch <-> NumPy, bit for bit
def to_torch(arr, device="cuda"):
    """A torch tensor with the bits of a NumPy (ml_dtypes) array."""
    import torch

    arr = np.ascontiguousarray(arr)
    if arr.dtype == np.float32:
        return torch.from_numpy(arr).to(device)
    t = torch.from_numpy(arr.view(np.uint8)).to(device)
    dt = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "bfloat16": torch.bfloat16,
          "uint8": torch.uint8}[arr.dtype.name]
    return t if dt == torch.uint8 else t.view(dt)


def to_numpy(t):
    """The NumPy (ml_dtypes) array with the bits of a torch tensor."""
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.float32:
        return t.numpy()
    np_dt = {torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn, torch.float8_e5m2: ml_dtypes.float8_e5m2,
             torch.bfloat16: ml_dtypes.bfloat16, torch.uint8: np.uint8, torch.float16: np.float16}[t.dtype]
    return t.contiguous().view(torch.uint8).numpy().view(np_dt)


