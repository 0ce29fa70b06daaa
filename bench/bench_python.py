"""bench_python.py — what the Python layer costs, in one process.

On the CPU (always): host time per call of gemm_amax at small sizes (64^3, 128x256x256
MXFP8 -> bf16), the C plan run alone (ctypes, prebuilt arguments) against the one-call
function on torch CPU tensors and on NumPy arrays (what Python adds), and the C run with
one thread against the default (what the library's thread team costs at that size).

On a CUDA GPU:
1. host time per eager call (µs): the one-call mxfuse.gemm_amax (allocates C and amax),
   the class API's execute (preallocated outputs), and torch's `a @ b.t()` in bf16, on a
   small problem whose GPU time is below the host time (so the loop is host-bound);
2. GPU time (CUDA events, median of runs) of gemm_amax and proj_rope through the class
   API against the C library's plan run called directly (ctypes, prebuilt arguments):
   the same kernels, so the ratio should be 1 within noise;
3. JAX: a jitted gemm_amax's time per call (wall clock over a loop, inputs resident)
   against the torch path's GPU time on the same shape.

    python3 bench/bench_python.py [--json out.json]

Run with the package importable (pip install ., or PYTHONPATH=python and MXFUSE_LIB /
MXFUSE_XLA_LIB naming a build's libraries). Prints a table; --json writes its rows.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import torch  # noqa: E402

import mxfuse  # noqa: E402


def mx_inputs(m, n, k, gen):
    a = (torch.randn(m, k, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn)
    sa = torch.randint(122, 130, (m, k // 32), dtype=torch.uint8, device="cuda", generator=gen)
    sb = torch.randint(122, 130, (n, k // 32), dtype=torch.uint8, device="cuda", generator=gen)
    return a, b, sa, sb


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def host_us(fn, n=2000):
    for _ in range(50):
        fn()
    _sync()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
        _sync()
    return min(best)


def gpu_ms(fn, runs=15, per=20):
    """GPU time per call: events around `per` back-to-back calls (so that the host's time
    per call hides behind the GPU's), median over `runs`."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(per):
            fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / per)
    return statistics.median(times)


def direct_c(op):
    """The C plan run of a class-API object, called straight through ctypes."""
    plan, ptrs = op._plan, None

    def bind(*tensors, extra=()):
        nonlocal ptrs
        ptrs = op._op.args(*[t.data_ptr() if t is not None else None for t in tensors], *extra)
        stream = torch.cuda.current_stream().cuda_stream if tensors[0].is_cuda else None
        run, h, ws, size = plan._run, plan.handle, op._ws_ptr, plan.workspace_size
        return lambda: run(h, ctypes.byref(ptrs), ws, size, stream)

    return bind


def paired_us(fns, rounds=30, n=200):
    """Host time per call of each of fns, measured in alternation (rounds of n calls each),
    the best round of each: on a machine shared with other work, both see the same load."""
    for f in fns:
        for _ in range(50):
            f()
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            best[i] = min(best[i], (time.perf_counter() - t0) / n * 1e6)
    return best


def cpu_part(row):
    """Python's cost over the C call on the CPU, and the thread team's at small sizes."""
    gen = torch.Generator().manual_seed(1)
    for m, n, k in ((64, 64, 64), (128, 256, 256)):
        a = (torch.randn(m, k, generator=gen) * 2).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, generator=gen) * 2).to(torch.float8_e4m3fn)
        sa = torch.randint(122, 130, (m, k // 32), dtype=torch.uint8, generator=gen)
        sb = torch.randint(122, 130, (n, k // 32), dtype=torch.uint8, generator=gen)
        c, amax = mxfuse.gemm_amax(a, b, sa, sb, c_dtype=torch.bfloat16)
        op = mxfuse.GemmAmax(a, b, sa, sb, c, amax).compile()
        npa = [t.view(torch.uint8).numpy() if t.dtype == torch.float8_e4m3fn else t.numpy() for t in (a, b, sa, sb)]
        import ml_dtypes

        npa[0], npa[1] = npa[0].view(ml_dtypes.float8_e4m3fn), npa[1].view(ml_dtypes.float8_e4m3fn)
        shape = f"{m}x{n}x{k} MXFP8->bf16, CPU"
        t_c, t_t, t_n = paired_us([direct_c(op)(a, b, sa, sb, c, amax, extra=(None,)),
                                   lambda: mxfuse.gemm_amax(a, b, sa, sb, c_dtype=torch.bfloat16),
                                   lambda: mxfuse.gemm_amax(*npa, c_dtype="bfloat16")], n=max(20, 2**24 // (m * n * k)))
        row("CPU host time / call: the C plan run alone (ctypes)", t_c, "us", shape)
        row("CPU: mxfuse.gemm_amax on torch tensors, over the C run", t_t - t_c, "us", f"{t_t:.1f} us in all")
        row("CPU: mxfuse.gemm_amax on NumPy arrays, over the C run", t_n - t_c, "us", f"{t_n:.1f} us in all")
        old = os.environ.get("MXF_NUM_THREADS")
        os.environ["MXF_NUM_THREADS"] = "1"  # read by the library at each call
        t_1 = paired_us([direct_c(op)(a, b, sa, sb, c, amax, extra=(None,))], rounds=10,
                        n=max(20, 2**24 // (m * n * k)))[0]
        if old is None:
            del os.environ["MXF_NUM_THREADS"]
        else:
            os.environ["MXF_NUM_THREADS"] = old
        row("CPU: the C plan run on one thread (MXF_NUM_THREADS=1)", t_1, "us", f"default threads: {t_c:.1f} us")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []

    def row(what, value, unit, note=""):
        rows.append({"what": what, "value": value, "unit": unit, "note": note})
        print(f"{what:58s} {value:10.3f} {unit:4s} {note}")

    print(f"torch {torch.__version__}  mxfuse {mxfuse.__version__}  {os.cpu_count()} cores")
    cpu_part(row)
    if not torch.cuda.is_available() or mxfuse.cuda_device_count() == 0:
        print("bench_python: no CUDA GPU (or mxfuse without CUDA): the GPU part is not measured")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"device": "cpu", "rows": rows}, fh, indent=1)
        return 0
    gen = torch.Generator(device="cuda").manual_seed(1)
    print(f"device: {torch.cuda.get_device_name()}")
    # 1. host time per call
    a, b, sa, sb = mx_inputs(128, 256, 256, gen)
    c = torch.empty(128, 256, dtype=torch.bfloat16, device="cuda")
    amax = torch.empty(1, device="cuda")
    op = mxfuse.GemmAmax(a, b, sa, sb, c, amax).compile()
    ab, bb = a.to(torch.bfloat16), b.to(torch.bfloat16)
    row("host time / call: mxfuse.gemm_amax (one call, new C)",
        host_us(lambda: mxfuse.gemm_amax(a, b, sa, sb, c_dtype=torch.bfloat16)), "us", "128x256x256 MXFP8")
    row("host time / call: mxfuse.gemm_amax (one call, c= amax= given)",
        host_us(lambda: mxfuse.gemm_amax(a, b, sa, sb, c=c, amax=amax)), "us")
    row("host time / call: GemmAmax.execute (preallocated)", host_us(lambda: op.execute(a, b, sa, sb, c, amax)), "us")
    row("host time / call: the C plan run alone (ctypes, prebuilt args)",
        host_us(direct_c(op)(a, b, sa, sb, c, amax, extra=(None,))), "us")
    row("host time / call: torch a @ b.t() (bf16)", host_us(lambda: ab @ bb.t()), "us")
    row("host time / call: torch.ops.mxfuse.gemm_amax (dispatcher)",
        host_us(lambda: torch.ops.mxfuse.gemm_amax(a, b, sa, sb, amax, "n", torch.bfloat16, 32, None, False)),
        "us")

    # 2. GPU time: class API vs the C plan run
    for m, n, k in ((4096, 24576, 1536), (2048, 7168, 2048)):
        a, b, sa, sb = mx_inputs(m, n, k, gen)
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        amax = torch.empty(1, device="cuda")
        op = mxfuse.GemmAmax(a, b, sa, sb, c, amax).compile()
        t_py = gpu_ms(lambda: op.execute(a, b, sa, sb, c, amax))
        t_c = gpu_ms(direct_c(op)(a, b, sa, sb, c, amax, extra=(None,)))
        row(f"gemm_amax {m}x{n}x{k} MXFP8->bf16: Python / C GPU time", t_py / t_c, "x",
            f"{t_py:.4f} ms vs {t_c:.4f} ms ({op.backend})")
        ab, bb = a.to(torch.bfloat16), b.to(torch.bfloat16)
        t_bf16 = gpu_ms(lambda: ab @ bb.t())
        row(f"gemm_amax {m}x{n}x{k}: x cuBLAS BF16 (torch matmul)", t_bf16 / t_py, "x", f"{t_bf16:.4f} ms")
    t_tok, kq, h = 4096, 1536, 128
    x = torch.randn(t_tok, kq, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.randn(h * 192, kq, device="cuda", generator=gen) * 0.05).to(torch.bfloat16)
    ang = torch.rand(t_tok, 64, device="cuda", generator=gen) * 6.3
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    outs = mxfuse.proj_rope(x, w, cos, sin)
    pop = mxfuse.ProjRope(x, w, cos, sin, *outs, w_out_in=True).compile()
    t_py = gpu_ms(lambda: pop.execute(x, w, cos, sin, *outs))
    t_c = gpu_ms(direct_c(pop)(x, w, None, None, cos, sin, *outs))
    row(f"proj_rope T={t_tok} bf16 in: Python / C GPU time", t_py / t_c, "x",
        f"{t_py:.4f} ms vs {t_c:.4f} ms ({pop.backend})")
    t_gemm = gpu_ms(lambda: x @ w.t())
    row(f"proj_rope T={t_tok}: / cuBLAS BF16 GEMM alone", t_py / t_gemm, "x", f"GEMM {t_gemm:.4f} ms")

    # 3. JAX jit
    try:
        import jax
        import jax.numpy as jnp

        import mxfuse.jax as mj
    except Exception as e:  # noqa: BLE001
        print(f"JAX part skipped: {e}")
        jax = None
    if jax is not None and jax.default_backend() == "gpu":
        m, n, k = 4096, 24576, 1536
        a, b, sa, sb = mx_inputs(m, n, k, gen)
        host = [t.cpu() for t in (a, b, sa, sb)]
        ja = [jnp.asarray(host[0].view(torch.uint8).numpy()).view(jnp.float8_e4m3fn)] + \
             [jnp.asarray(host[1].view(torch.uint8).numpy()).view(jnp.float8_e4m3fn)] + \
             [jnp.asarray(t.numpy()) for t in host[2:]]
        f = jax.jit(lambda *v: mj.gemm_amax(*v, c_dtype=jnp.bfloat16)[0])
        f(*ja).block_until_ready()
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(30):
                r = f(*ja)
            r.block_until_ready()
            best.append((time.perf_counter() - t0) / 30 * 1e3)
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        amax = torch.empty(1, device="cuda")
        op = mxfuse.GemmAmax(a, b, sa, sb, c, amax).compile()
        t_t = gpu_ms(lambda: op.execute(a, b, sa, sb, c, amax))
        row(f"JAX jit gemm_amax {m}x{n}x{k}: time / call vs torch GPU time", min(best) / t_t, "x",
            f"{min(best):.4f} ms vs {t_t:.4f} ms")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
