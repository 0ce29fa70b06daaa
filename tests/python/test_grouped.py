"""grouped_gemm_amax from Python on the CPU (SPEC §6): NumPy and torch (eager, the custom
op under torch.compile(fullgraph=True), the class form planned once) against each other
and against a loop of gemm_amax over the groups, bit for bit; both layouts; MXFP8 and
bf16 x MXFP4; routings refused with a message naming the group and nothing written.
The f64 reference itself is tests/test_grouped_gemm_amax_cpu.c's."""
import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
mxfuse = pytest.importorskip("mxfuse")

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch not importable")

G, N, K = 5, 40, 96


def operands(rng, fmt, rows_shape):
    """a (rows_shape + (K,)), b (G, N, K), compact sfa, sfb: MXFP8, or bf16 x MXFP4 (uint8 pairs)."""
    if fmt == "mxfp8":
        a = rng.integers(0, 0x77, rows_shape + (K,), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
        b = rng.integers(0, 0x77, (G, N, K), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
        sfa = rng.integers(118, 134, rows_shape + (K // 32,), dtype=np.uint8)
    else:
        a = rng.standard_normal(rows_shape + (K,)).astype(ml_dtypes.bfloat16)
        b = rng.integers(0, 256, (G, N, K // 2), dtype=np.uint8)
        sfa = None
    sfb = rng.integers(118, 134, (G, N, K // 32), dtype=np.uint8)
    return a, b, sfa, sfb


def bits(x):
    return np.asarray(x).view(np.uint16 if np.asarray(x).dtype.itemsize == 2 else np.uint8)


@pytest.mark.parametrize("fmt", ["mxfp8", "bf16xmxfp4"])
def test_contiguous_equals_gemm_amax_loop(fmt):
    rng = np.random.default_rng(52)
    M = 70
    a, b, sfa, sfb = operands(rng, fmt, (M,))
    offs = np.array([0, 21, 21, 60, 66], np.int32)  # empty groups, a tail past offs[-1]
    c, amax, gam = mxfuse.grouped_gemm_amax(a, b, sfa, sfb, offs=offs, c_dtype="bfloat16")
    assert c.shape == (M, N)
    start, top = 0, 0.0
    for g in range(G):
        end = offs[g]
        if end == start:
            assert gam[g] == 0
            continue
        cg, ag = mxfuse.gemm_amax(np.ascontiguousarray(a[start:end]), np.ascontiguousarray(b[g]),
                                  None if sfa is None else np.ascontiguousarray(sfa[start:end]),
                                  np.ascontiguousarray(sfb[g]), c_dtype="bfloat16")
        assert (bits(cg) == bits(c[start:end])).all(), g
        assert ag[0] == gam[g]
        top = max(top, float(ag[0]))
        start = end
    assert amax[0] == top


def test_masked_and_group_alpha():
    rng = np.random.default_rng(7)
    Mmax = 12
    a, b, sfa, sfb = operands(rng, "mxfp8", (G, Mmax))
    counts = np.array([3, 0, 12, 1, 7], np.int32)
    galpha = np.array([1.0, 2.0, 0.5, 0.25, 3.0], np.float32)
    c, amax, gam = mxfuse.grouped_gemm_amax(a, b, sfa, sfb, counts=counts, group_alpha=galpha, alpha=0.75)
    for g in range(G):
        n = counts[g]
        if n == 0:
            assert gam[g] == 0
            continue
        cg, ag = mxfuse.gemm_amax(np.ascontiguousarray(a[g, :n]), np.ascontiguousarray(b[g]),
                                  np.ascontiguousarray(sfa[g, :n]), np.ascontiguousarray(sfb[g]),
                                  alpha=float(np.float32(0.75) * galpha[g]))
        assert (cg.view(np.uint32) == c[g, :n].view(np.uint32)).all(), g
        assert ag[0] == gam[g]
    assert amax[0] == gam.max()


def test_bad_routing_refused_nothing_written():
    rng = np.random.default_rng(3)
    a, b, sfa, sfb = operands(rng, "mxfp8", (30,))
    c = np.full((30, N), 7.0, np.float32)
    amax = np.full((1,), -1.0, np.float32)
    with pytest.raises(mxfuse.InvalidValueError, match=r"offs\[2\]"):
        mxfuse.grouped_gemm_amax(a, b, sfa, sfb, offs=np.array([4, 9, 8, 20, 30], np.int32), c=c, amax=amax)
    with pytest.raises(mxfuse.InvalidValueError, match=r"offs\[4\]"):
        mxfuse.grouped_gemm_amax(a, b, sfa, sfb, offs=np.array([4, 9, 9, 20, 31], np.int32), c=c, amax=amax)
    assert (c == 7.0).all() and amax[0] == -1.0
    with pytest.raises(ValueError, match="exactly one"):
        mxfuse.grouped_gemm_amax(a, b, sfa, sfb)


@needs_torch
def test_torch_eager_compile_class_match_numpy():
    rng = np.random.default_rng(11)
    M = 45
    a, b, sfa, sfb = operands(rng, "mxfp8", (M,))
    offs = np.array([5, 5, 30, 44, 45], np.int32)
    c, amax, gam = mxfuse.grouped_gemm_amax(a, b, sfa, sfb, offs=offs, c_dtype="bfloat16")
    ta = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn)
    tb = torch.from_numpy(b.view(np.uint8)).view(torch.float8_e4m3fn)
    tsfa, tsfb, toffs = torch.from_numpy(sfa), torch.from_numpy(sfb), torch.from_numpy(offs)
    want = bits(c)
    ct, at, gt = mxfuse.grouped_gemm_amax(ta, tb, tsfa, tsfb, offs=toffs, c_dtype=torch.bfloat16)
    assert (ct.view(torch.int16).numpy().view(np.uint16) == want).all()
    assert at.item() == amax[0] and (gt.numpy() == gam).all()
    f = torch.compile(lambda x, y, s, t, o: mxfuse.grouped_gemm_amax(x, y, s, t, offs=o, c_dtype=torch.bfloat16),
                      fullgraph=True)
    cc, ac, gc = f(ta, tb, tsfa, tsfb, toffs)
    assert (cc.view(torch.int16).numpy().view(np.uint16) == want).all()
    assert ac.item() == amax[0] and (gc.numpy() == gam).all()
    # the class form: planned once, two routings
    out = torch.empty(M, N, dtype=torch.bfloat16)
    am, ga = torch.empty(1), torch.empty(G)
    op = mxfuse.GroupedGemmAmax(ta, tb, tsfa, tsfb, out, am, sample_offs=toffs, sample_group_amax=ga)
    op.compile()
    for route in ([5, 5, 30, 44, 45], [0, 45, 45, 45, 45]):
        o = torch.tensor(route, dtype=torch.int32)
        op.execute(ta, tb, tsfa, tsfb, out, am, offs_tensor=o, group_amax_tensor=ga)
        cn, an, gn = mxfuse.grouped_gemm_amax(a, b, sfa, sfb, offs=o.numpy(), c_dtype="bfloat16")
        assert (out.view(torch.int16).numpy().view(np.uint16) == bits(cn)).all()
        assert am.item() == an[0] and (ga.numpy() == gn).all()


def test_jax_ragged_group_sizes_match_numpy():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    mj = pytest.importorskip("mxfuse.jax")
    rng = np.random.default_rng(5)
    M = 40
    with jax.default_device(jax.devices("cpu")[0]):  # the grouped kernels are the CPU's
        for fmt in ("mxfp8", "bf16xmxfp4"):
            a, b, sfa, sfb = operands(rng, fmt, (M,))
            f = jax.jit(lambda x, y, s, t, sizes: mj.grouped_gemm_amax(x, y, s, t, sizes, c_dtype=jnp.bfloat16))
            if sfa is None:
                f = jax.jit(lambda x, y, t, sizes: mj.grouped_gemm_amax(x, y, None, t, sizes, c_dtype=jnp.bfloat16))
            for sizes in ([8, 0, 20, 12, 0], [0, 0, 40, 0, 0], [1, 2, 3, 4, 5]):
                sizes = np.array(sizes, np.int32)
                args = (a, b) + ((sfa,) if sfa is not None else ()) + (sfb, sizes)
                c, amax, gam = f(*args)
                cn, an, gn = mxfuse.grouped_gemm_amax(a, b, sfa, sfb, offs=np.cumsum(sizes).astype(np.int32),
                                                      c_dtype="bfloat16")
                rows = int(sizes.sum())
                assert (bits(np.asarray(c))[:rows] == bits(cn)[:rows]).all(), (fmt, sizes)
                assert np.asarray(amax)[0] == an[0] and (np.asarray(gam) == gn).all()


def test_cli_check(tmp_path):
    import os
    import subprocess

    cli = os.environ.get("MXFUSE_CLI")
    if not cli:
        pytest.skip("MXFUSE_CLI not set (ctest sets it)")
    rng = np.random.default_rng(9)
    a, b, sfa, sfb = operands(rng, "mxfp8", (33,))
    for name, x in (("a", a), ("b", b), ("sfa", sfa), ("sfb", sfb), ("offs", np.array([4, 4, 20, 31, 31], np.int32)),
                    ("bad", np.array([4, 3, 20, 31, 31], np.int32))):
        np.save(tmp_path / f"{name}.npy", x)
    base = [cli, "grouped-gemm-amax", "--device", "cpu", "--c-dtype", "bf16"] + \
        [x for n in ("a", "b", "sfa", "sfb") for x in (f"--{n}", str(tmp_path / f"{n}.npy"))]
    ok = subprocess.run(base + ["--offs", str(tmp_path / "offs.npy"), "--check"], capture_output=True, text=True)
    assert ok.returncode == 0 and "check: passed" in ok.stdout, ok.stdout + ok.stderr
    bad = subprocess.run(base + ["--offs", str(tmp_path / "bad.npy")], capture_output=True, text=True)
    assert bad.returncode != 0 and "offs[1]" in bad.stderr
