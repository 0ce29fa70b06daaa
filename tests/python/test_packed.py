"""Packed weights (SPEC §7) from Python: mxfuse.pack_weights on NumPy, torch and JAX, and
gemm_amax on them in every front end (eager one call and its fast path, the class form,
torch.compile(fullgraph), jax.jit, jax.vmap) giving the bits of gemm_amax on b and sfb
themselves, and checked against the f64 oracle; the refusals: sfb given beside packed
weights, packing inside jax.jit, weights packed for another shape, CUDA tensors."""
import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
mxfuse = pytest.importorskip("mxfuse")

from mx_reference import E2M1_VALUES, check_gemm, mx_operand, oracle, to_torch  # noqa: E402


def _weights(rng, fmt, n, k, swizzled):
    """b (n, K) of fmt with its scales (e8m0 per 32; 'nvfp4': e2m1 with ue4m3 per 16),
    compact or swizzled, and its values (n, K) in f64."""
    if fmt == "nvfp4":
        nib = rng.integers(0, 16, size=(n, k), dtype=np.uint8)
        b = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
        s = rng.uniform(0.5, 4.0, size=(n, k // 16)).astype(ml_dtypes.float8_e4m3fn)
        vals = E2M1_VALUES[nib] * np.repeat(s.astype(np.float64), 16, axis=1)
        sf_vec = 16
    else:
        b, s, vals = mx_operand(rng, n, k, fmt)
        sf_vec = 32
    if swizzled:
        s = mxfuse.swizzle_scales(s)
    return b, s, vals, sf_vec


def _bits(x):
    x = np.ascontiguousarray(np.asarray(x))
    return x.view(np.uint8)


@pytest.mark.parametrize("fmt,swizzled", [("e2m1", False), ("e2m1", True), ("e4m3", False), ("e5m2", True),
                                          ("nvfp4", False)])
def test_numpy_packed_same_bits_and_oracle(rng, fmt, swizzled):
    """NumPy: packed weights give gemm_amax's bits on b and sfb, at decode sizes (the
    streaming kernels) and beyond; C and amax by SPEC §5 against the oracle."""
    n, k = 150, 1024 + 96
    b, s, bv, sf_vec = _weights(rng, fmt, n, k, swizzled)
    w = mxfuse.pack_weights(b, s, sf_vec_size=sf_vec)
    assert isinstance(w, mxfuse.PackedWeights) and w.data.dtype == np.uint8 and w.shape == b.shape
    for m in (1, 5, 40):
        a = (rng.standard_normal((m, k)) * 2).astype(ml_dtypes.bfloat16)
        want = mxfuse.gemm_amax(a, b, None, s, sf_vec_size=sf_vec)
        for _ in range(2):  # the second call: the fast path of a geometry seen before
            got = mxfuse.gemm_amax(a, w, None, None, sf_vec_size=sf_vec)
            assert np.array_equal(_bits(got.c_tensor), _bits(want.c_tensor)), (fmt, swizzled, m)
            assert np.array_equal(_bits(got.amax_tensor), _bits(want.amax_tensor))
        ref, delta = oracle(a.astype(np.float64), bv)
        check_gemm(got.c_tensor, ref, delta, "float32")


def test_class_form_and_refusals(rng):
    b, s, _, _ = _weights(rng, "e4m3", 64, 256, False)
    w = mxfuse.pack_weights(b, s)
    a = (rng.standard_normal((3, 256))).astype(ml_dtypes.bfloat16)
    want = mxfuse.gemm_amax(a, b, None, s)
    c, amax = np.empty((3, 64), np.float32), np.empty(1, np.float32)
    op = mxfuse.GemmAmax(a, w, None, None, c, amax)
    assert op.check_support()
    op.execute(a, w, None, None, c, amax)
    assert np.array_equal(_bits(c), _bits(want.c_tensor))
    with pytest.raises(ValueError, match="which hold their scales; pass sfb=None"):
        mxfuse.gemm_amax(a, w, None, s)
    # weights packed for other rows: the run refuses them by their header, nothing written
    b2, s2, _, _ = _weights(rng, "e4m3", 80, 256, False)
    w2 = mxfuse.pack_weights(b2, s2)
    other = mxfuse.PackedWeights(w2.data, w.b_meta, w.sfb_meta, w.sf_vec)
    c[:] = 7.0
    with pytest.raises(mxfuse.InvalidValueError, match="its N is 80, the plan's 64"):
        mxfuse.gemm_amax(a, other, None, None, c=c, amax=amax)
    assert (c == 7.0).all()
    with pytest.raises(mxfuse.InvalidValueError, match="pack_weights: sf_vec=16 with b e4m3"):
        mxfuse.pack_weights(b, s, sf_vec_size=16)


def test_torch_eager_compile_match_numpy(rng):
    torch = pytest.importorskip("torch")
    import mxfuse._torch  # noqa: F401  (the custom ops)

    b, s, _, _ = _weights(rng, "e2m1", 96, 512, True)
    a = (rng.standard_normal((2, 512))).astype(ml_dtypes.bfloat16)
    want = mxfuse.gemm_amax(a, b, None, s, c_dtype="bfloat16")
    ta, tb, ts = (to_torch(x, "cpu") for x in (a, b, s))
    w = mxfuse.pack_weights(tb, ts)
    assert isinstance(w.data, torch.Tensor) and w.data.dtype == torch.uint8
    assert np.array_equal(w.data.numpy(), mxfuse.pack_weights(b, s).data)
    eager = mxfuse.gemm_amax(ta, w, None, None, c_dtype=torch.bfloat16)
    torch._dynamo.reset()
    f = torch.compile(lambda a, w: mxfuse.gemm_amax(a, w, None, None, c_dtype=torch.bfloat16), fullgraph=True)
    compiled = f(ta, w)
    for got in (eager, compiled):
        assert np.array_equal(got.c_tensor.view(torch.uint16).numpy(), _bits(want.c_tensor).view(np.uint16))
        assert got.amax_tensor.item() == float(want.amax_tensor[0])


def test_torch_cuda_weights_refused(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: packing CUDA tensors is refused by the library, checked in test_bad_input")
    b, s, _, _ = _weights(rng, "e4m3", 64, 256, False)
    with pytest.raises(mxfuse.NotSupportedError, match="packing reads and writes host memory"):
        mxfuse.pack_weights(to_torch(b, "cuda"), to_torch(s, "cuda"))


def test_jax_eager_jit_vmap_match_numpy(rng):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    pytest.importorskip("mxfuse.jax")

    b, s, _, _ = _weights(rng, "e4m3", 120, 384, False)
    a = (rng.standard_normal((4, 384))).astype(ml_dtypes.bfloat16)
    want = mxfuse.gemm_amax(a, b, None, s)
    if jax.default_backend() != "cpu":  # packed weights on a GPU: refused, they are the CPU's layout
        wg = mxfuse.pack_weights(jnp.asarray(b), jnp.asarray(s))
        with pytest.raises(mxfuse.NotSupportedError, match="MXF_AMAX_B_PACKED takes host tensors"):
            mxfuse.gemm_amax(jnp.asarray(a), wg, None, None)
    cpu = jax.devices("cpu")[0]  # the CPU platform, whatever JAX's default device
    w = mxfuse.pack_weights(jax.device_put(b, cpu), jax.device_put(s, cpu))
    assert np.array_equal(np.asarray(w.data), mxfuse.pack_weights(b, s).data)
    ja = jax.device_put(a, cpu)
    eager = mxfuse.gemm_amax(ja, w, None, None)
    jitted = jax.jit(lambda a, w: mxfuse.gemm_amax(a, w, None, None))(ja, w)
    for got in (eager, jitted):
        assert np.array_equal(_bits(got.c_tensor), _bits(want.c_tensor))
        assert np.array_equal(_bits(got.amax_tensor), _bits(want.amax_tensor))
    batch = jnp.stack([ja, ja[::-1]])
    cv, _ = jax.vmap(lambda x: mxfuse.gemm_amax(x, w, None, None))(batch)
    assert np.array_equal(_bits(cv[0]), _bits(want.c_tensor))
    with pytest.raises(TypeError, match="pack outside jax.jit"):
        jax.jit(lambda b, s: mxfuse.pack_weights(b, s).data)(jax.device_put(b, cpu), jax.device_put(s, cpu))


def test_torch_custom_op_opcheck_and_grad(rng):
    """The custom op of packed weights under torch.library.opcheck (schema, fake tensors,
    autograd registration); an activation that requires grad is refused on every path."""
    torch = pytest.importorskip("torch")
    from mxfuse import _torch as mt

    b, s, _, _ = _weights(rng, "e2m1", 48, 256, False)
    w = mxfuse.pack_weights(to_torch(b, "cpu"), to_torch(s, "cpu"))
    a = torch.randn(3, 256, dtype=torch.bfloat16)
    args = (a, w.data, None, torch.empty(1), mt._ints_of(w.b_meta), mt._ints_of(w.sfb_meta), "n", torch.float32, 32,
            None, False)
    torch.library.opcheck(torch.ops.mxfuse.gemm_amax_packed, args)
    want = mxfuse.gemm_amax(a, to_torch(b, "cpu"), None, to_torch(s, "cpu")).c_tensor
    assert torch.equal(torch.ops.mxfuse.gemm_amax_packed(*args), want)
    ag = a.clone().requires_grad_(True)
    with pytest.raises(RuntimeError, match="mxfuse.gemm_amax: input 'a' requires grad"):
        mxfuse.gemm_amax(ag, w, None, None)
    with pytest.raises(RuntimeError, match="mxfuse.gemm_amax_packed: input 'a' requires grad"):
        torch.ops.mxfuse.gemm_amax_packed(ag, *args[1:])
