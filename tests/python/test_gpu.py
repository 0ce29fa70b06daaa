"""The Python package on a CUDA GPU: torch eager, torch.compile(fullgraph=True), CUDA
graph capture and replay, the class API reused, torch CPU tensors, JAX jit on the GPU and
under XLA's command buffers. Each test skips, saying why, where torch with CUDA (or
JAX's GPU backend) is missing; scripts/gpu-check.sh runs them on the H200.

gemm_amax's GPU results are judged against the f64 oracle by SPEC §5 (mx_reference);
proj_rope's against the CPU backend (SPEC §5's agreement rates) and the reference; and
every entry point equals the others bit for bit on the same device.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
mxfuse = pytest.importorskip("mxfuse")
from mx_reference import check_gemm, mx_operand, oracle, proj_inputs, proj_reference, to_numpy, to_torch  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
HAS_CUDA = torch is not None and torch.cuda.is_available() and mxfuse.cuda_device_count() > 0
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs torch with a CUDA GPU and mxfuse built with CUDA")


def same_bits(x, y):
    x, y = to_numpy(x) if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x), \
        to_numpy(y) if torch is not None and isinstance(y, torch.Tensor) else np.asarray(y)
    return x.shape == y.shape and np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                                                 np.ascontiguousarray(y).view(np.uint8))


def gemm_inputs(rng, m, n, k, fmt):
    a, sa, av = mx_operand(rng, m, k, fmt)
    b, sb, bv = mx_operand(rng, n, k, fmt)
    return [to_torch(v) for v in (a, b, sa, sb)], av, bv


# ------------------------------------------------------------------ torch eager
@needs_cuda
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("c_dtype", ["bfloat16", "float32"])
def test_torch_gemm_amax_eager(rng, fmt, c_dtype):
    m, n, k = 300, 200, 224  # not multiples of any tile; 16-byte rows for e2m1
    (a, b, sa, sb), av, bv = gemm_inputs(rng, m, n, k, fmt)
    cdt = getattr(torch, c_dtype)
    c, amax = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=cdt)
    assert c.is_cuda and c.dtype == cdt and c.shape == (m, n) and amax.is_cuda
    ref, delta = oracle(av, bv)
    check_gemm(to_numpy(c).astype(np.float64), ref, delta, c_dtype)
    assert abs(float(amax[0]) - np.abs(ref).max()) <= 1e-6 * np.sqrt(k) * np.abs(ref).max()
    # the class API on poisoned outputs (NaN everywhere) gives the same bits
    cp = torch.full((m, n), float("nan"), dtype=cdt, device="cuda")
    ap = torch.full((1,), float("nan"), device="cuda")
    op = mxfuse.GemmAmax(a, b, sa, sb, cp, ap)
    assert op.check_support() and op.backend.startswith("cuda/")
    op.compile().execute(a, b, sa, sb, cp, ap)
    assert same_bits(cp, c) and same_bits(ap, amax)
    # m-major C, swizzled scales: SPEC §5 again
    sw = [to_torch(mxfuse.swizzle_scales(to_numpy(s), pad_byte=0xFF)) for s in (sa, sb)]
    cm, _ = mxfuse.gemm_amax(a, b, *sw, c_dtype=cdt, c_major="m")
    assert cm.stride(0) == 1
    check_gemm(to_numpy(cm).astype(np.float64), ref, delta, c_dtype)


@needs_cuda
@pytest.mark.parametrize("fa,fb,m", [("bf16", "e2m1", 16), ("bf16", "e2m1", 300), ("e4m3", "e2m1", 16),
                                     ("bf16", "e4m3", 77)])
def test_torch_gemm_amax_mixed_formats(rng, fa, fb, m):
    """bf16 activations (sfa None) or MXFP8 x MXFP4 / MXFP8 weights on torch CUDA tensors."""
    n, k = 1000, 512
    a, sa, av = mx_operand(rng, m, k, fa)
    b, sb, bv = mx_operand(rng, n, k, fb)
    c, amax = mxfuse.gemm_amax(to_torch(a), to_torch(b), None if sa is None else to_torch(sa), to_torch(sb),
                               c_dtype=torch.bfloat16)
    ref, delta = oracle(av, bv)
    check_gemm(to_numpy(c).astype(np.float64), ref, delta, "bfloat16")
    assert abs(float(amax[0]) - np.abs(ref).max()) <= 1e-6 * np.sqrt(k) * np.abs(ref).max()
    # torch.ops path (custom op) gives the same bits
    amax2 = torch.full((1,), float("nan"), device="cuda")
    c2 = torch.ops.mxfuse.gemm_amax(to_torch(a), to_torch(b), None if sa is None else to_torch(sa), to_torch(sb),
                                    amax2, "n", torch.bfloat16, 32, None, False)
    assert same_bits(c2, c) and same_bits(amax2, amax)


@needs_cuda
def test_torch_class_api_reuse(rng):
    m, n, k = 256, 384, 512
    (a, b, sa, sb), _, _ = gemm_inputs(rng, m, n, k, "e4m3")
    c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    amax = torch.empty((1,), device="cuda")
    op = mxfuse.GemmAmax(a, b, sa, sb, c, amax).compile()
    for _ in range(3):
        (a2, b2, sa2, sb2), av, bv = gemm_inputs(rng, m, n, k, "e4m3")
        c.fill_(float("nan"))
        op.execute(a2, b2, sa2, sb2, c, amax)
        ref, delta = oracle(av, bv)
        check_gemm(to_numpy(c).astype(np.float64), ref, delta, "bfloat16")
        one = mxfuse.gemm_amax(a2, b2, sa2, sb2, c_dtype=torch.bfloat16)
        assert same_bits(one.c_tensor, c) and same_bits(one.amax_tensor, amax)


@needs_cuda
def test_torch_streams_and_devices(rng):
    (a, b, sa, sb), av, bv = gemm_inputs(rng, 130, 96, 256, "e4m3")
    want = mxfuse.gemm_amax(a, b, sa, sb)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # runs on the current stream
        got = mxfuse.gemm_amax(a, b, sa, sb)
    s.synchronize()
    assert same_bits(got.c_tensor, want.c_tensor)
    got2 = mxfuse.gemm_amax(a, b, sa, sb, stream=s)
    s.synchronize()
    assert same_bits(got2.c_tensor, want.c_tensor)
    with pytest.raises(ValueError, match="gemm_amax"):  # tensors on two devices
        mxfuse.gemm_amax(a, b.cpu(), sa, sb)


@needs_cuda
def test_torch_cpu_tensors(rng):
    a, sa, _ = mx_operand(rng, 70, 128, "e4m3")
    b, sb, _ = mx_operand(rng, 50, 128, "e4m3")
    want = mxfuse.gemm_amax(a, b, sa, sb, c_dtype="bfloat16")
    got = mxfuse.gemm_amax(*[to_torch(v, "cpu") for v in (a, b, sa, sb)], c_dtype=torch.bfloat16)
    assert not got.c_tensor.is_cuda and same_bits(got.c_tensor, want.c_tensor)


@needs_cuda
def test_torch_errors_nothing_written(rng):
    (a, b, sa, sb), _, _ = gemm_inputs(rng, 64, 64, 128, "e4m3")
    with pytest.raises(mxfuse.InvalidValueError, match=r"gemm_amax: b has shape \(64, 64\)"):
        mxfuse.gemm_amax(a, b[:, :64].contiguous(), sa, sb)
    c = torch.full((64, 64), 3.0, device="cuda")
    amax = torch.full((1,), 5.0, device="cuda")
    op = mxfuse.GemmAmax(a, b, sa, sb, c, amax)
    with pytest.raises(ValueError, match="the plan was made for"):
        op.execute(a[:32], b, sa[:32], sb, c, amax)
    torch.cuda.synchronize()
    assert bool((c == 3).all()) and float(amax[0]) == 5.0


# ------------------------------------------------------------------ proj_rope on the GPU
@needs_cuda
@pytest.mark.parametrize("mxfp8", [False, True])
def test_torch_proj_rope(rng, mxfp8):
    t, k, h = 777, 1536, 4  # T not a multiple of 32 (a partial column block)
    inp = proj_inputs(rng, t, k, h, mxfp8=mxfp8)
    gpu = mxfuse.proj_rope(**{n: to_torch(v) for n, v in inp.items()})
    cpu = mxfuse.proj_rope(**inp)
    assert gpu.out_fp8_row.is_cuda and gpu.out_fp8_row.dtype == torch.float8_e4m3fn
    scales = np.concatenate([to_numpy(gpu[i]).ravel() == cpu[i].ravel() for i in (1, 3)])
    codes = np.concatenate([to_numpy(gpu[i]).view(np.uint8).ravel() == cpu[i].view(np.uint8).ravel() for i in (0, 2)])
    assert scales.mean() >= 0.999 and codes.mean() >= 0.99, (scales.mean(), codes.mean())
    ref = proj_reference(inp["x"], inp["w"], inp["cos"], inp["sin"], xs=inp.get("x_scale"), ws=inp.get("w_scale"))
    row = to_numpy(gpu[0]).astype(np.float64) * np.exp2(np.repeat(to_numpy(gpu[1]).astype(np.float64) - 127, 32, -1))
    assert np.mean(np.abs(row - ref) <= 0.1 + 0.1 * np.abs(ref)) >= 0.95
    # the class API on preallocated, poisoned outputs: the same bits
    outs = [torch.full_like(o.view(torch.uint8), 0xA5).view(o.dtype) for o in gpu]
    tin = {n: to_torch(v) for n, v in inp.items()}
    kw = {"sample_x_scale": tin["x_scale"], "sample_w_scale": tin["w_scale"]} if mxfp8 else {}
    op = mxfuse.ProjRope(tin["x"], tin["w"], tin["cos"], tin["sin"], *outs, w_out_in=True, **kw)
    op.execute(tin["x"], tin["w"], tin["cos"], tin["sin"], *outs, x_scale=tin.get("x_scale"),
               w_scale=tin.get("w_scale"))
    for o, g in zip(outs, gpu):
        assert same_bits(o, g)


# ------------------------------------------------------------------ torch.compile, CUDA graphs
@needs_cuda
def test_torch_compile_fullgraph(rng):
    (a, b, sa, sb), _, _ = gemm_inputs(rng, 200, 136, 256, "e4m3")
    inp = {n: to_torch(v) for n, v in proj_inputs(rng, 100, 256, 2).items()}
    x = torch.randn(64, 96, device="cuda")

    def f(a, b, sa, sb, inp, x):
        c, amax = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=torch.bfloat16)
        r = mxfuse.proj_rope(inp["x"], inp["w"], inp["cos"], inp["sin"])
        q = mxfuse.quantize(x)
        y = mxfuse.dequantize(q.q_row, q.s_row)
        return c.float() * 2, amax, r.out_fp8_row, r["out_scales_col"], q.s_col, y

    eager = f(a, b, sa, sb, inp, x)
    compiled = torch.compile(f, fullgraph=True)(a, b, sa, sb, inp, x)
    for e, c in zip(eager, compiled):
        assert same_bits(e, c)
    # the custom ops are there by name too
    assert hasattr(torch.ops.mxfuse, "gemm_amax") and hasattr(torch.ops.mxfuse, "proj_rope")


@needs_cuda
def test_torch_cuda_graph_capture_replay(rng):
    (a, b, sa, sb), _, _ = gemm_inputs(rng, 256, 512, 512, "e4m3")
    inp = {n: to_torch(v) for n, v in proj_inputs(rng, 128, 512, 2).items()}
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture, as torch asks
        mxfuse.gemm_amax(a, b, sa, sb, c_dtype=torch.bfloat16)
        mxfuse.proj_rope(**inp)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        c, amax = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=torch.bfloat16)
        pr = mxfuse.proj_rope(**inp)
    for _ in range(2):  # new data in the static inputs, replay, compare with eager
        (a2, b2, sa2, sb2), _, _ = gemm_inputs(rng, 256, 512, 512, "e4m3")
        for dst, src in ((a, a2), (b, b2), (sa, sa2), (sb, sb2)):
            dst.copy_(src)
        new = {n: to_torch(v) for n, v in proj_inputs(rng, 128, 512, 2).items()}
        for n in inp:
            inp[n].copy_(new[n])
        g.replay()
        torch.cuda.synchronize()
        want = mxfuse.gemm_amax(a2, b2, sa2, sb2, c_dtype=torch.bfloat16)
        assert same_bits(c, want.c_tensor) and same_bits(amax, want.amax_tensor)
        want_p = mxfuse.proj_rope(**new)
        for got_t, want_t in zip(pr, want_p):
            assert same_bits(got_t, want_t)


# ------------------------------------------------------------------ JAX on the GPU
def _jax_gpu():
    try:
        import jax

        import mxfuse.jax  # noqa: F401
        return jax if jax.default_backend() == "gpu" else None
    except Exception:
        return None


JAX = _jax_gpu()
needs_jax_gpu = pytest.mark.skipif(JAX is None or mxfuse.cuda_device_count() == 0,
                                   reason="needs JAX with its GPU backend and mxfuse.jax built with CUDA")


@needs_jax_gpu
@needs_cuda
def test_jax_gpu_jit_equals_torch(rng):
    import jax.numpy as jnp

    import mxfuse.jax as mj

    a, sa, av = mx_operand(rng, 300, 256, "e4m3")
    b, sb, bv = mx_operand(rng, 200, 256, "e4m3")
    f = JAX.jit(lambda *v: mj.gemm_amax(*v, c_dtype=jnp.bfloat16))
    got = f(*[jnp.asarray(v) for v in (a, b, sa, sb)])
    assert "cuda" in str(list(got.c_tensor.devices())[0]).lower() or "gpu" in str(got.c_tensor.devices()).lower()
    want = mxfuse.gemm_amax(*[to_torch(v) for v in (a, b, sa, sb)], c_dtype=torch.bfloat16)
    assert same_bits(np.asarray(got.c_tensor), want.c_tensor) and same_bits(np.asarray(got.amax_tensor),
                                                                             want.amax_tensor)
    inp = proj_inputs(rng, 100, 256, 2)
    pj = JAX.jit(lambda j: mj.proj_rope(**j))({n: jnp.asarray(v) for n, v in inp.items()})
    pt = mxfuse.proj_rope(**{n: to_torch(v) for n, v in inp.items()})
    for x, y in zip(pj, pt):
        assert same_bits(np.asarray(x), y)


@needs_jax_gpu
def test_jax_command_buffers():
    """A jitted program with the custom calls, XLA's command buffers (CUDA graphs) on for
    custom calls: the same results as without."""
    script = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp, mxfuse, mxfuse.jax as mj
        rng = np.random.default_rng(5)
        x = jnp.asarray(rng.standard_normal((256, 512)).astype(np.float32))
        def f(x):
            q = mj.quantize(x * 2.0)
            y = mj.dequantize(q.q_row, q.s_row)
            c, amax = mj.gemm_amax(q.q_row, q.q_row, q.s_row, q.s_row, c_dtype=jnp.float32)
            return y + 1.0, c, amax
        out = [jax.jit(f)(x) for _ in range(3)]
        for o in out[1:]:
            assert all(np.array_equal(np.asarray(p), np.asarray(q)) for p, q in zip(o, out[0]))
        np.save("/dev/stdout", np.asarray(out[0][2]))
    """)
    env = dict(os.environ)
    res = {}
    for flags in ("", "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"):
        env["XLA_FLAGS"] = flags
        p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=300)
        assert p.returncode == 0, p.stderr.decode()[-3000:]
        res[flags] = p.stdout
    assert len(set(res.values())) == 1


@needs_jax_gpu
def test_jax_shard_map_gemm_amax(rng):
    """gemm_amax column-parallel under jax.jit + shard_map over a mesh of the host's GPUs:
    B and its scales sharded along N, A replicated, amax reduced with lax.pmax; the same
    results as one device (SPEC §5: codes >= 99.9 % equal, amax within its bound; bit for
    bit on a mesh of one)."""
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import mxfuse.jax as mj

    try:
        smap, kw = JAX.shard_map, {"check_vma": False}
    except AttributeError:
        from jax.experimental.shard_map import shard_map as smap

        kw = {"check_rep": False}
    devs = JAX.devices("gpu")
    mesh = Mesh(np.array(devs), ("x",))
    m, n, k = 256, 512 * len(devs), 512
    a, sa, _ = mx_operand(rng, m, k, "e4m3")
    b, sb, _ = mx_operand(rng, n, k, "e4m3")

    def local(a, b, sa, sb):
        c, amax = mj.gemm_amax(a, b, sa, sb, c_dtype=jnp.bfloat16)
        return c, JAX.lax.pmax(amax, "x")

    f = JAX.jit(smap(local, mesh=mesh, in_specs=(P(), P("x"), P(), P("x")), out_specs=(P(None, "x"), P()), **kw))
    put = lambda v, spec: JAX.device_put(jnp.asarray(v), NamedSharding(mesh, spec))  # noqa: E731
    c, amax = f(put(a, P()), put(b, P("x")), put(sa, P()), put(sb, P("x")))
    one = JAX.jit(lambda *v: mj.gemm_amax(*v, c_dtype=jnp.bfloat16))(*[jnp.asarray(v) for v in (a, b, sa, sb)])
    same = np.mean(np.asarray(c).view(np.uint16) == np.asarray(one.c_tensor).view(np.uint16))
    ref = float(one.amax_tensor[0])
    assert same >= 0.999 and abs(float(np.asarray(amax)[0]) - ref) <= 1e-6 * np.sqrt(k) * abs(ref)
    if len(devs) == 1:
        assert same == 1.0 and float(np.asarray(amax)[0]) == ref
