"""Several devices on the CPU, each run in its own processes, bound to the loopback and
bounded in time (CPU tensors and JAX's CPU platform also where GPUs are present): dist_tp.py
under torchrun (gloo, CPU tensors) at 2 ranks with the plain
core (bit for bit against one process) and 4 ranks with the default core (SPEC §5);
dist_jax.py over 4 host devices (jit with sharded operands, shard_map column- and
row-parallel, proj_rope heads split) and over two processes (jax.distributed). Also
jax.vmap over every op, in this process."""
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

mxfuse = pytest.importorskip("mxfuse")
HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 240


def _env(**extra):
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1", **extra)
    if os.environ.get("MXFUSE_LIB"):  # the source tree's package, as conftest.py imports it
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, "..", "..", "python"), env.get("PYTHONPATH", "")])
    env.pop("XLA_FLAGS", None)
    env.update(extra)
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _passed(out, name, err=""):
    last = [line for line in out.splitlines() if line.startswith(f"{name}: ") and "passed" in line]
    assert last, out[-3000:] + err[-3000:]
    return last[-1]


@pytest.mark.parametrize("ranks, config", [(2, "cpu=c"), (4, "")])
def test_torchrun_gloo(ranks, config, seed):
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}", os.path.join(HERE, "dist_tp.py"), "--small", "--cpu"]
    env = _env(MXF_CONFIG=config, MXF_SEED=str(seed & 0x7FFFFFFF), OMP_NUM_THREADS="1")
    if not config:
        env.pop("MXF_CONFIG")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    line = _passed(r.stdout, "dist_tp", r.stderr)
    print(line)
    assert r.returncode == 0 and line.endswith(" 0 failed"), r.stdout[-3000:] + r.stderr[-3000:]


def test_jax_host_devices(seed):
    pytest.importorskip("jax")
    env = _env(MXF_CONFIG="cpu=c", MXF_SEED=str(seed & 0x7FFFFFFF), JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=4")
    r = subprocess.run([sys.executable, os.path.join(HERE, "dist_jax.py"), "devices"], env=env, capture_output=True,
                       text=True, timeout=TIMEOUT)
    print("\n".join(line for line in r.stdout.splitlines() if "time:" in line))
    line = _passed(r.stdout, "dist_jax", r.stderr)
    assert r.returncode == 0 and line.endswith(" 0 failed"), r.stdout[-3000:] + r.stderr[-3000:]


def test_jax_two_processes(seed):
    pytest.importorskip("jax")
    port = _free_port()
    env = _env(MXF_CONFIG="cpu=c", MXF_SEED=str(seed & 0x7FFFFFFF), JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "dist_jax.py"), "process", str(i), str(port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in (0, 1)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=TIMEOUT)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outs):
        line = _passed(out, "dist_jax")
        assert p.returncode == 0 and line.endswith(" 0 failed"), out[-3000:]


# ------------------------------------------------------------------ vmap, in this process
def test_jax_vmap_every_op(rng):
    """jax.vmap over a leading axis (under jit): each element equals the op on it alone;
    inputs without the axis are shared; gemm_amax with f32 C over a batch of A is one call."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import mxfuse.jax as mj
    from mx_reference import mx_operand, proj_inputs

    with jax.default_device(jax.devices("cpu")[0]):
        ops = [mx_operand(rng, 64, 128, "e4m3") for _ in range(3)]
        b, sb, _ = mx_operand(rng, 48, 128, "e4m3")
        a3, sa3 = np.stack([o[0] for o in ops]), np.stack([o[1] for o in ops])
        c, amax = jax.jit(jax.vmap(lambda a, sa: tuple(mj.gemm_amax(a, b, sa, sb, c_dtype=jnp.bfloat16))))(a3, sa3)
        assert c.shape == (3, 64, 48) and amax.shape == (3, 1)
        for i in range(3):
            want = mxfuse.gemm_amax(ops[i][0], b, ops[i][1], sb, c_dtype="bfloat16")
            assert np.array_equal(np.asarray(c[i]).view(np.uint16), want.c_tensor.view(np.uint16))
            assert float(amax[i, 0]) == float(want.amax_tensor[0])
        f32 = jax.jit(jax.vmap(lambda a, sa: tuple(mj.gemm_amax(a, b, sa, sb))))  # f32 C: one call, M stacked
        assert "while" not in f32.lower(a3, sa3).as_text()
        c, amax = f32(a3, sa3)
        for i in range(3):
            want = mxfuse.gemm_amax(ops[i][0], b, ops[i][1], sb)
            assert np.array_equal(np.asarray(c[i]), want.c_tensor) and float(amax[i, 0]) == float(want.amax_tensor[0])
        x = rng.standard_normal((2, 64, 96)).astype(np.float32)
        q = jax.jit(jax.vmap(lambda x: tuple(mj.quantize(x))))(x)
        y = jax.vmap(lambda q, s: mj.dequantize(q, s, direction="cols"))(q[2], q[3])
        for i in range(2):
            want = mxfuse.quantize(x[i])
            assert all(np.array_equal(np.asarray(g[i]).view(np.uint8), w.view(np.uint8)) for g, w in zip(q, want))
            assert np.array_equal(np.asarray(y[i]), mxfuse.dequantize(want.q_col, want.s_col, direction="cols"))
        inp = [proj_inputs(rng, 40, 64, 2) for _ in range(2)]
        xs = np.stack([p["x"] for p in inp])
        p0 = inp[0]
        r = jax.vmap(lambda x: tuple(mj.proj_rope(x, p0["w"], p0["cos"], p0["sin"])))(xs)
        for i in range(2):
            want = mxfuse.proj_rope(inp[i]["x"], p0["w"], p0["cos"], p0["sin"])
            assert all(np.array_equal(np.asarray(g[i]).view(np.uint8), w.view(np.uint8)) for g, w in zip(r, want))
        with pytest.raises(ValueError, match="L = 2"):
            mj.gemm_amax(np.zeros((64, 128, 2), a3.dtype), b[:, :, None], sa3[:2], sb)
