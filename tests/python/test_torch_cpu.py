"""torch on CPU tensors, beyond test_package.py's eager/compile checks: the autograd rule
(every path refuses an input that requires grad, naming the op and the input), the custom
ops under torch.library.opcheck, torch.export, DLPack in and out. Skipped without torch
(CI installs it: .ci/run)."""
import numpy as np
import pytest

mxfuse = pytest.importorskip("mxfuse")
torch = pytest.importorskip("torch")
import mxfuse._torch  # noqa: E402,F401  (registers the custom ops)

from mx_reference import mx_operand, proj_inputs, to_numpy, to_torch  # noqa: E402


def _gemm_inputs(rng, a_fmt="e4m3"):
    a, sa, _ = mx_operand(rng, 64, 128, a_fmt)
    b, sb, _ = mx_operand(rng, 48, 128, "e4m3")
    return [to_torch(v, "cpu") if v is not None else None for v in (a, b, sa, sb)]


def _ops(rng):
    """(op name, input names, one-call function, custom-op call) for each op, on CPU tensors."""
    a, b, sa, sb = _gemm_inputs(rng)
    inp = {n: to_torch(v, "cpu") for n, v in proj_inputs(rng, 40, 64, 2).items()}
    x = torch.from_numpy(rng.standard_normal((64, 96)).astype(np.float32))
    q = mxfuse.quantize(x)
    return [
        ("gemm_amax", dict(a=a, b=b, sfa=sa, sfb=sb),
         lambda t: mxfuse.gemm_amax(t["a"], t["b"], t["sfa"], t["sfb"]),
         lambda t: torch.ops.mxfuse.gemm_amax(t["a"], t["b"], t["sfa"], t["sfb"], torch.empty(1), "n", torch.float32,
                                              32, None, False)),
        ("proj_rope", dict(x=inp["x"], w=inp["w"], cos=inp["cos"], sin=inp["sin"]),
         lambda t: mxfuse.proj_rope(t["x"], t["w"], t["cos"], t["sin"]),
         lambda t: torch.ops.mxfuse.proj_rope(t["x"], t["w"], t["cos"], t["sin"], None, None, True, False, 192)),
        ("quantize", dict(x=x), lambda t: mxfuse.quantize(t["x"]), lambda t: torch.ops.mxfuse.quantize(t["x"], True,
                                                                                                         True)),
        ("dequantize", dict(q=q.q_row, s=q.s_row), lambda t: mxfuse.dequantize(t["q"], t["s"]),
         lambda t: torch.ops.mxfuse.dequantize(t["q"], t["s"], "rows", torch.float32)),
    ]


# ------------------------------------------------------------------ autograd
def test_autograd_rule_every_path(rng):
    """An input that requires grad is refused with an error naming the op and the input:
    the one call, the custom op, torch.compile(fullgraph) and the class API alike. Under
    no_grad, or detached, the same call runs."""
    for name, tensors, one_call, op_call in _ops(rng):
        for arg, x in tensors.items():
            if not x.is_floating_point():
                continue  # uint8 scales cannot require grad
            t = dict(tensors, **{arg: x.detach().clone().requires_grad_(True)})
            want = f"mxfuse.{name}: input '{arg}' requires grad"
            for how, f in (("one call", one_call), ("custom op", op_call)):
                with pytest.raises(RuntimeError, match=want):
                    f(t)
            torch._dynamo.reset()
            with pytest.raises(RuntimeError, match=want):
                torch.compile(lambda t: one_call(t)[0], fullgraph=True)(t)
            with torch.no_grad():
                one_call(t)
                op_call(t)
        one_call(tensors)


def test_autograd_rule_bf16_activation_and_class_api(rng):
    """The case where a gradient would have been lost: a bf16 activation that requires
    grad (weight-only MX), through the one call and the class API."""
    _, b, _, sb = _gemm_inputs(rng)
    x = torch.randn(32, 128, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(RuntimeError, match="mxfuse.gemm_amax: input 'a' requires grad"):
        mxfuse.gemm_amax(x, b, None, sb)
    c, amax = mxfuse.gemm_amax(x.detach(), b, None, sb)
    op = mxfuse.GemmAmax(x.detach(), b, None, sb, c, amax).compile()
    with pytest.raises(RuntimeError, match="input 'a' requires grad"):
        op.execute(x, b, None, sb, c, amax)
    with torch.no_grad():
        op.execute(x, b, None, sb, c, amax)


# ------------------------------------------------------------------ opcheck, export
def _bytes(t):
    return to_numpy(t).view(np.uint8).copy() if t.dtype != torch.float32 else t.numpy().view(np.uint8).copy()


def test_opcheck(rng):
    """torch.library.opcheck on the four custom ops. Its schema test compares tensors with
    allclose, which has no fp8 CPU kernel: for ops with fp8 inputs that test is replaced
    by the same check on bytes (inputs unchanged but amax, results new tensors)."""
    for name, tensors, _, op_call in _ops(rng):
        args = {"gemm_amax": lambda t: (t["a"], t["b"], t["sfa"], t["sfb"], torch.empty(1), "n", torch.float32, 32,
                                        None, False),
                "proj_rope": lambda t: (t["x"], t["w"], t["cos"], t["sin"], None, None, True, False, 192),
                "quantize": lambda t: (t["x"], True, True),
                "dequantize": lambda t: (t["q"], t["s"], "rows", torch.float32)}[name](tensors)
        op = getattr(torch.ops.mxfuse, name)
        fp8_in = any(isinstance(x, torch.Tensor) and x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
                     for x in args)
        utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
        torch.library.opcheck(op, args, test_utils=utils if fp8_in else ("test_schema",) + utils)
        if fp8_in:
            before = [_bytes(x) if isinstance(x, torch.Tensor) else None for x in args]
            out = op(*args)
            outs = out if isinstance(out, (list, tuple)) else [out]
            for i, (x, b) in enumerate(zip(args, before)):
                if b is not None and not (name == "gemm_amax" and i == 4):
                    assert np.array_equal(_bytes(x), b), f"{name}: input {i} changed"
                for o in outs:
                    assert not isinstance(x, torch.Tensor) or o.data_ptr() != x.data_ptr()
            again = op(*args)
            again = again if isinstance(again, (list, tuple)) else [again]
            assert all(np.array_equal(_bytes(o), _bytes(g)) for o, g in zip(outs, again))


def test_compile_after_numpy_dtypes(rng):
    """torch.compile(fullgraph) traces a call after NumPy (ml_dtypes) and JAX-style dtypes
    went through the same call spec in eager mode: the tracer of torch 2.11 refused the
    spec's dtype table once it held those beside torch's. Result equal to eager, bit for bit."""
    import ml_dtypes

    from mxfuse import _spec

    for d in (np.dtype(ml_dtypes.float8_e5m2), ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16, np.float32, "bfloat16"):
        _spec.dtype_code(d)
    a, b, sa, sb = _gemm_inputs(rng)
    for kw in (dict(c_dtype=torch.bfloat16), dict(c_dtype="bfloat16"), {}):  # {}: the default, a name
        torch._dynamo.reset()
        f = torch.compile(lambda a, b, sa, sb: mxfuse.gemm_amax(a, b, sa, sb, **kw)[0], fullgraph=True)
        got, want = f(a, b, sa, sb), mxfuse.gemm_amax(a, b, sa, sb, **kw)["c_tensor"]
        assert np.array_equal(_bytes(got), _bytes(want)), kw


def test_export(rng):
    """torch.export of a module calling the ops: the exported program gives the eager bits."""
    a, b, sa, sb = _gemm_inputs(rng)

    class M(torch.nn.Module):
        def forward(self, a, b, sa, sb, x):
            c, amax = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=torch.bfloat16)
            q = mxfuse.quantize(x, cols=False)
            return c, amax, q.q_row, q.s_row

    x = torch.randn(32, 64)
    eager = M()(a, b, sa, sb, x)
    ep = torch.export.export(M(), (a, b, sa, sb, x))
    assert "mxfuse.gemm_amax" in str(ep.graph) and "mxfuse.quantize" in str(ep.graph)
    got = ep.module()(a, b, sa, sb, x)
    for e, g in zip(eager, got):
        assert e.dtype == g.dtype and np.array_equal(_bytes(e), _bytes(g))


def test_dlpack(rng):
    """Outputs go out through DLPack (to NumPy) and DLPack producers come in (class API)."""
    a, b, sa, sb = _gemm_inputs(rng)
    c, amax = mxfuse.gemm_amax(a, b, sa, sb)
    assert np.array_equal(np.from_dlpack(c), c.numpy())

    class Producer:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    c2, amax2 = torch.empty_like(c), torch.empty_like(amax)
    op = mxfuse.GemmAmax(Producer(a), Producer(b), Producer(sa), Producer(sb), Producer(c2), Producer(amax2))
    op.compile().execute(Producer(a), Producer(b), Producer(sa), Producer(sb), Producer(c2), Producer(amax2))
    assert torch.equal(c2, c) and torch.equal(amax2, amax)
