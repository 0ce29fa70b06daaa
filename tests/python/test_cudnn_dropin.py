"""The cuDNN frontend's names (mxfuse.cudnn) on torch CPU tensors, over the frontend's own
test matrices:

- gemm_amax (its test_gemm_amax_utils.py): FP4 — k-major e2m1 A/B, e8m0 or ue4m3 scales,
  sf_vec 16/32, C f32/bf16/e4m3/e2m1, m- or n-major C, cluster (1,1)/(2,2); FP8 — k/m-major
  e5m2 A, k/n-major B, e8m0 scales, sf_vec 32, C f32/bf16, m/n-major C, tiles (128,128) /
  (128,256), cluster (1,1)/(2,2); each through the wrapper and the class API, at the
  frontend's N = 256, K = 256 and five M (its 512 and its dynamic-shape M values), L = 1
  and 2. Scales in the frontend's 6-D atom layout (the logical view of the physical
  swizzled bytes), values 1 or 2 as its tests draw them. The matrix is 2 560 calls; the
  hint axes (mma_tiler_mn, cluster_shape_mn), which mxfuse checks and ignores, are
  sampled (each case takes one hint pair in turn), and L = 2 runs at two of the five M:
  672 calls, ~25 s on two cores; MXF_FULL_MATRIX=1 runs all 2 560. C equals, byte for byte, mxfuse's own function on the
  compact form of the same data (batch by batch), f32 C and the amax meet SPEC §5 against
  an f64 oracle. mxfuse refuses only combinations the frontend refuses too.
- proj_rope (its test_gemm_proj_rope_mxfp8.py): bf16 class and wrapper for both w
  layouts, MXFP8 class and wrapper, the check_support failures and the wrapper's dtype
  asserts. Sizes are cut for the CPU (4 heads, K = 256, T = 128 and 256, not the
  frontend's 128 heads, K = 1536, T = 2048/4096), plus a T the frontend refuses (T % 128
  != 0), which runs here. Outputs equal mxfuse.proj_rope's on NumPy, byte for byte.
"""
import itertools
import os

import numpy as np
import pytest

mxfuse = pytest.importorskip("mxfuse")
torch = pytest.importorskip("torch")
import mxfuse.cudnn as cd  # noqa: E402

from mx_reference import check_gemm, dequant_rows, proj_inputs, proj_reference, to_numpy, to_torch  # noqa: E402

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)
N, K = 256, 256
M_VALUES = (512, 64, 320, 576, 832)
FULL = os.environ.get("MXF_FULL_MATRIX") == "1"  # every hint pair too (4x the fp8 cases, 2x the fp4 ones)

FP4 = [dict(family="fp4", a_major="k", b_major="k", c_major=cm, sf=sf, c=c, sf_vec=v, tiler=(128, 128), cluster=cl)
       for cm, sf, c, v, cl in itertools.product("mn", ("e8m0", "e4m3"), ("float32", "bfloat16", "float8_e4m3fn",
                                                                          "e2m1"), (16, 32), ((1, 1), (2, 2)))]
FP8 = [dict(family="fp8", a_major=am, b_major=bm, c_major=cm, sf="e8m0", c=c, sf_vec=32, tiler=t, cluster=cl)
       for am, bm, cm, c, t, cl in itertools.product("km", "kn", "mn", ("float32", "bfloat16"), ((128, 128),
                                                                                                  (128, 256)),
                                                     ((1, 1), (2, 2)))]


def cudnn_refuses(cfg):
    """The frontend's documented constraints (its gemm_amax page), for this matrix."""
    return (cfg["sf"] == "e4m3" and cfg["sf_vec"] == 32) or (cfg["c"] == "e2m1" and cfg["c_major"] != "n")


_TORCH_C = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn,
            "e2m1": torch.float4_e2m1fn_x2}


class Problem:
    """One draw of the frontend's inputs for (family, scale dtype, sf_vec, M, L): codes and
    scale bytes, their f64 values, and torch tensors in its layouts."""

    def __init__(self, rng, family, sf, sf_vec, m, lb):
        self.m, self.lb, self.sf_vec = m, lb, sf_vec
        kb = K // sf_vec
        if family == "fp4":
            na, nb = (rng.integers(0, 16, size=(lb, r, K), dtype=np.uint8) for r in (m, N))
            self.codes = [(x[..., 0::2] | (x[..., 1::2] << 4)).astype(np.uint8) for x in (na, nb)]
            vals = [E2M1[x] for x in (na, nb)]
        else:
            import ml_dtypes

            self.codes = [rng.uniform(-2, 2, size=(lb, r, K)).astype(ml_dtypes.float8_e5m2) for r in (m, N)]
            vals = [x.astype(np.float64) for x in self.codes]
        two = [rng.integers(0, 2, size=(lb, r, kb)) for r in (m, N)]  # scale 1 or 2
        self.sbytes = [(np.where(t == 1, 0x40, 0x38) if sf == "e4m3" else 127 + t).astype(np.uint8) for t in two]
        self.vals = [v * np.repeat(2.0 ** t, sf_vec, axis=2) for v, t in zip(vals, two)]
        va, vb = self.vals
        self.ref = (va @ vb.transpose(0, 2, 1)).transpose(1, 2, 0)  # (M, N, L)
        sq = ((va ** 2) @ (vb ** 2).transpose(0, 2, 1)).transpose(1, 2, 0)
        self.delta = 2.0 ** -24 * (8 * np.sqrt(K) * np.sqrt(sq) + (K / 8 + 2) * np.abs(self.ref))
        self.sf_dtype = torch.float8_e4m3fn if sf == "e4m3" else torch.float8_e8m0fnu
        self.family = family
        self._numpy = {}

    def operand(self, i, major):
        """A (i=0) or B (i=1), (MN, K, L), k-major or MN-major as the frontend permutes."""
        x = self.codes[i]
        if self.family == "fp4":
            return torch.from_numpy(np.ascontiguousarray(x)).view(torch.float4_e2m1fn_x2).permute(1, 2, 0)
        t = to_torch(np.ascontiguousarray(x), "cpu") if major == "k" else \
            to_torch(np.ascontiguousarray(x.transpose(0, 2, 1)), "cpu")
        return t.permute(1, 2, 0) if major == "k" else t.permute(2, 1, 0)

    def scales(self, i):
        """The frontend's 6-D logical view (32, 4, R, 4, K', L) of the physical swizzled bytes."""
        phys = mxfuse.swizzle_scales(self.sbytes[i])
        return torch.from_numpy(np.ascontiguousarray(phys)).view(self.sf_dtype).permute(3, 4, 1, 5, 2, 0)

    def numpy_c(self, c, l):
        """mxfuse.gemm_amax on the compact NumPy form of batch l: C's bytes."""
        key = (c, l)
        if key not in self._numpy:
            import ml_dtypes

            sdt = ml_dtypes.float8_e4m3fn if self.sf_dtype == torch.float8_e4m3fn else np.uint8
            a, b = (x[l] for x in self.codes)
            sa, sb = (s[l].view(sdt) for s in self.sbytes)
            r = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=c, sf_vec_size=self.sf_vec)
            self._numpy[key] = np.ascontiguousarray(r.c_tensor).view(np.uint8)
        return self._numpy[key]


def _new_c(m, lb, c, c_major):
    if c == "e2m1":  # packed along the unit-stride dimension, as the frontend's tests allocate it
        fp4 = torch.float4_e2m1fn_x2
        if c_major == "n":
            return torch.empty((lb, m, N // 2), dtype=torch.uint8).view(fp4).permute(1, 2, 0)
        return torch.empty((lb, N, m // 2), dtype=torch.uint8).view(fp4).permute(2, 1, 0)
    if c_major == "n":
        return torch.empty((lb, m, N), dtype=_TORCH_C[c]).permute(1, 2, 0)
    return torch.empty((lb, N, m), dtype=_TORCH_C[c]).permute(2, 1, 0)


def _run(p, cfg, api):
    a, b = p.operand(0, cfg["a_major"]), p.operand(1, cfg["b_major"])
    sa, sb = p.scales(0), p.scales(1)
    hints = dict(mma_tiler_mn=cfg["tiler"], cluster_shape_mn=cfg["cluster"], sf_vec_size=cfg["sf_vec"])
    if api == "wrapper":
        for _ in range(2):  # the second call takes the cached path, as the frontend's test does
            c, amax = cd.gemm_amax_wrapper_sm100(a_tensor=a, b_tensor=b, sfa_tensor=sa, sfb_tensor=sb,
                                                 c_major=cfg["c_major"], c_dtype=_TORCH_C[cfg["c"]],
                                                 acc_dtype=torch.float32, stream=None, **hints)
        return c, amax
    c = _new_c(p.m, p.lb, cfg["c"], cfg["c_major"])
    amax = torch.full((1, 1, 1), -float("inf"))
    op = cd.GemmAmaxSm100(sample_a=a, sample_b=b, sample_sfa=sa, sample_sfb=sb, sample_c=c, sample_amax=amax,
                          acc_dtype=torch.float32, **hints)
    assert op.check_support()
    op.compile()
    op.execute(a_tensor=a, b_tensor=b, sfa_tensor=sa, sfb_tensor=sb, c_tensor=c, amax_tensor=amax,
               current_stream=None)
    return c, amax


def _check(p, cfg, c, amax):
    assert c.shape == (p.m, N // 2 if cfg["c"] == "e2m1" else N, p.lb) and amax.shape == (1, 1, 1)
    if cfg["c_major"] == "m":
        assert c.stride(0) == 1
    for l in range(p.lb):
        got = to_numpy(c[:, :, l].contiguous().view(torch.uint8) if cfg["c"] == "e2m1" else c[:, :, l])
        assert np.array_equal(np.ascontiguousarray(got).view(np.uint8), p.numpy_c(cfg["c"], l)), f"batch {l}"
    if cfg["c"] == "float32":
        check_gemm(c.numpy(), p.ref, p.delta, "float32")
    ref_amax = np.abs(p.ref).max()
    assert abs(float(amax) - ref_amax) <= p.delta.max() + np.spacing(np.float32(ref_amax))


@pytest.mark.parametrize("family", ["fp4", "fp8"])
@pytest.mark.parametrize("m, lb", [(m, 1) for m in M_VALUES] + [(m, 2) for m in M_VALUES[:2 + 3 * FULL]])
def test_gemm_amax_matrix(rng, family, m, lb):
    cases = FP4 if family == "fp4" else FP8
    if not FULL:  # the hint axes, checked and ignored by mxfuse: each case takes one hint pair in turn
        hints = sorted({(c["tiler"], c["cluster"]) for c in cases})
        cases = [c for c in cases if (c["tiler"], c["cluster"]) == hints[0]]
        cases = [dict(c, tiler=hints[i % len(hints)][0], cluster=hints[i % len(hints)][1]) for i, c in
                 enumerate(cases)]
    problems = {}
    ran = refused = 0
    for cfg, api in itertools.product(cases, ("class", "wrapper")):
        key = (cfg["sf"], cfg["sf_vec"])
        if key not in problems:
            problems[key] = Problem(rng, family, cfg["sf"], cfg["sf_vec"], m, lb)
        p = problems[key]
        try:
            c, amax = _run(p, cfg, api)
        except (ValueError, NotImplementedError) as e:  # the frontend's test skips these too
            assert cudnn_refuses(cfg), f"{cfg} {api}: mxfuse refuses what the frontend runs: {e}"
            refused += 1
            continue
        _check(p, cfg, c, amax)
        ran += 1
    print(f"{family} M={m} L={lb}: {ran} ran, {refused} refused (the frontend refuses "
          f"{sum(cudnn_refuses(c) for c in cases) * 2})")
    assert ran + refused == 2 * len(cases)


def test_gemm_amax_amax_accumulates(rng):
    """The frontend's amax rule: execute() leaves max(given amax, max|C|)."""
    p = Problem(rng, "fp8", "e8m0", 32, 128, 1)
    a, b, sa, sb = p.operand(0, "k"), p.operand(1, "k"), p.scales(0), p.scales(1)
    c = _new_c(128, 1, "float32", "n")
    big = float(np.float32(np.abs(p.ref).max() * 4))
    amax = torch.full((1, 1, 1), big)
    op = cd.GemmAmaxSm100(a, b, sa, sb, c, amax)
    op.compile()
    op.execute(a, b, sa, sb, c, amax)
    assert float(amax) == big
    amax.fill_(-float("inf"))
    op.execute(a, b, sa, sb, c, amax)
    assert float(amax) == float(c.abs().max())


# ------------------------------------------------------------------ proj_rope
H, Q_LORA = 4, 256


def _proj_outputs(t):
    return (torch.empty((t, H, 192), dtype=torch.float8_e4m3fn), torch.empty((t, H, 6), dtype=torch.uint8),
            torch.empty((t, H, 192), dtype=torch.float8_e4m3fn), torch.empty(((t + 31) // 32, H, 192),
                                                                            dtype=torch.uint8))


def _proj_check(outs, want, ref):
    for o, w in zip(outs, want):
        assert o.shape == w.shape and np.array_equal(to_numpy(o).view(np.uint8), np.asarray(w).view(np.uint8))
    row = dequant_rows(to_numpy(outs[0]).astype(np.float64).reshape(ref.shape[0], -1),
                       to_numpy(outs[1]).reshape(ref.shape[0], -1)).reshape(ref.shape)
    assert np.all(np.abs(row - ref) <= 2.0 ** -3 * np.abs(ref) + 2.0 ** -6 * np.abs(ref).max())


@pytest.mark.parametrize("tokens", [128, 256, 160])
@pytest.mark.parametrize("w_out_in", [False, True])
def test_proj_rope_bf16in(rng, tokens, w_out_in):
    inp = proj_inputs(rng, tokens, Q_LORA, H)
    w_np = inp["w"] if w_out_in else np.ascontiguousarray(inp["w"].T)
    want = mxfuse.proj_rope(inp["x"], w_np, inp["cos"], inp["sin"], w_out_in=w_out_in)
    ref = proj_reference(inp["x"], inp["w"], inp["cos"], inp["sin"])
    x, w, cos, sin = (to_torch(v, "cpu") for v in (inp["x"], w_np, inp["cos"], inp["sin"]))
    outs = _proj_outputs(tokens)
    op = cd.GemmProjRopeMxfp8Bf16InSm100(sample_x=x, sample_w=w, sample_cos=cos, sample_sin=sin,
                                         sample_out_fp8_row=outs[0], sample_out_scales_row=outs[1],
                                         sample_out_fp8_col=outs[2], sample_out_scales_col=outs[3], w_out_in=w_out_in)
    assert op.check_support()
    op.compile()
    op.execute(x, w, cos, sin, *outs, current_stream=None)
    _proj_check(outs, want, ref)
    for _ in range(2):
        r = cd.gemm_proj_rope_mxfp8_wrapper_sm100(x, w, cos, sin, w_out_in=w_out_in, stream=None)
    _proj_check((r["out_fp8_row"], r["out_scales_row"], r["out_fp8_col"], r["out_scales_col"]), want, ref)


@pytest.mark.parametrize("tokens", [128, 256])
def test_proj_rope_mxfp8in(rng, tokens):
    inp = proj_inputs(rng, tokens, Q_LORA, H, mxfp8=True)
    want = mxfuse.proj_rope(inp["x"], inp["w"], inp["cos"], inp["sin"], x_scale=inp["x_scale"],
                            w_scale=inp["w_scale"])
    ref = proj_reference(inp["x"], inp["w"], inp["cos"], inp["sin"], xs=inp["x_scale"], ws=inp["w_scale"])
    xc, xs, wc, ws, cos, sin = (to_torch(inp[n], "cpu") for n in ("x", "x_scale", "w", "w_scale", "cos", "sin"))
    outs = _proj_outputs(tokens)
    op = cd.GemmProjRopeMxfp8Mxfp8InSm100(sample_x_code=xc, sample_x_scale=xs, sample_w_code=wc, sample_w_scale=ws,
                                          sample_cos=cos, sample_sin=sin, sample_out_fp8_row=outs[0],
                                          sample_out_scales_row=outs[1], sample_out_fp8_col=outs[2],
                                          sample_out_scales_col=outs[3])
    assert op.check_support()
    op.compile()
    op.execute(xc, xs, wc, ws, cos, sin, *outs, current_stream=None)
    _proj_check(outs, want, ref)
    r = cd.gemm_proj_rope_mxfp8_wrapper_sm100(xc, wc, cos, sin, x_scale=xs, w_scale=ws, w_out_in=True, stream=None)
    _proj_check(tuple(r), want, ref)


def test_proj_rope_refusals(rng):
    """The frontend's failure cases: a K that does not match w, a bf16 x_code on the MXFP8
    class (check_support raises), and the wrapper's dtype / scale asserts."""
    inp = {n: to_torch(v, "cpu") for n, v in proj_inputs(rng, 128, Q_LORA, H).items()}
    x8 = torch.randn(128, Q_LORA + 8).to(torch.bfloat16)
    outs = _proj_outputs(128)
    op = cd.GemmProjRopeMxfp8Bf16InSm100(x8, inp["w"], inp["cos"], inp["sin"], *outs, w_out_in=True)
    with pytest.raises(ValueError):
        op.check_support()
    q = {n: to_torch(v, "cpu") for n, v in proj_inputs(rng, 128, Q_LORA, H, mxfp8=True).items()}
    op = cd.GemmProjRopeMxfp8Mxfp8InSm100(q["x"].to(torch.bfloat16), q["x_scale"], q["w"], q["w_scale"], q["cos"],
                                          q["sin"], *outs)
    with pytest.raises((ValueError, TypeError, NotImplementedError)):
        op.check_support()
    with pytest.raises(AssertionError, match="must share a dtype"):
        cd.gemm_proj_rope_mxfp8_wrapper_sm100(inp["x"], q["w"], inp["cos"], inp["sin"], w_out_in=True)
    with pytest.raises(AssertionError, match="require x_scale and w_scale"):
        cd.gemm_proj_rope_mxfp8_wrapper_sm100(q["x"], q["w"], inp["cos"], inp["sin"], w_out_in=True)
    with pytest.raises(AssertionError, match="must not be given MXFP8 scales"):
        cd.gemm_proj_rope_mxfp8_wrapper_sm100(inp["x"], inp["w"], inp["cos"], inp["sin"], x_scale=q["x_scale"],
                                              w_scale=q["w_scale"], w_out_in=True)


def test_names_and_jax_entry_points(rng):
    """Every name of the frontend's pages exists; the JAX entry points under jax.jit and the
    class API on JAX arrays give the torch bits."""
    for name in ("gemm_amax_wrapper_sm100", "GemmAmaxSm100", "gemm_amax_jax_sm100",
                 "gemm_proj_rope_mxfp8_wrapper_sm100", "GemmProjRopeMxfp8Bf16InSm100",
                 "GemmProjRopeMxfp8Mxfp8InSm100", "gemm_proj_rope_mxfp8_jax_sm100"):
        assert hasattr(cd, name), name
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    p = Problem(rng, "fp8", "e8m0", 32, 256, 1)
    a, b = (np.ascontiguousarray(x.transpose(1, 2, 0)) for x in p.codes)  # (MN, K, 1) k-major
    sa, sb = (mxfuse.swizzle_scales(s) for s in p.sbytes)  # physical (1, R, K', 32, 4, 4)
    with jax.default_device(jax.devices("cpu")[0]):
        ja, jb, jsa, jsb = (jnp.asarray(x) for x in (a, b, sa, sb))
        cj, aj = jax.jit(lambda *x: cd.gemm_amax_jax_sm100(*x, c_dtype=jnp.bfloat16))(ja, jb, jsa, jsb)
        ct, at = cd.gemm_amax_wrapper_sm100(*(to_torch(x, "cpu") for x in (a, b, sa, sb)), c_dtype=torch.bfloat16)
        assert np.array_equal(np.asarray(cj[..., 0]).view(np.uint8), to_numpy(ct[..., 0]).view(np.uint8))
        assert float(aj[0, 0, 0]) == float(at)
        cw, aw = cd.gemm_amax_wrapper_sm100(ja, jb, jsa, jsb, c_dtype=jnp.bfloat16)
        assert np.array_equal(np.asarray(cw), np.asarray(cj)) and float(aw[0, 0, 0]) == float(at)
        c, amax = jnp.zeros(cj.shape, jnp.bfloat16), jnp.full((1, 1, 1), -jnp.inf, jnp.float32)
        op = cd.GemmAmaxSm100(ja, jb, jsa, jsb, c, amax)
        op.compile()
        op.execute(ja, jb, jsa, jsb, c, amax)  # written through DLPack, as the frontend's class API does
        assert np.array_equal(np.asarray(c), np.asarray(cj)) and float(amax[0, 0, 0]) == float(at)
        with pytest.raises(ValueError, match="L = 2"):
            cd.gemm_amax_jax_sm100(jnp.zeros((256, 256, 2), jnp.float8_e5m2), jb, jsa, jsb)
        inp = proj_inputs(rng, 128, Q_LORA, H)
        r = jax.jit(cd.gemm_proj_rope_mxfp8_jax_sm100)(*(jnp.asarray(inp[n]) for n in ("x", "w", "cos", "sin")))
        want = mxfuse.proj_rope(inp["x"], inp["w"], inp["cos"], inp["sin"])
        assert all(np.array_equal(np.asarray(g).view(np.uint8), w.view(np.uint8)) for g, w in zip(r, want))
