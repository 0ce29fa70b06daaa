"""mxfuse.jax over several devices, on the CPU:

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/python/dist_jax.py devices
    python tests/python/dist_jax.py process I PORT     (I = 0, 1: two processes, jax.distributed
                                                        on 127.0.0.1:PORT)

`devices` (one process, 4 host devices):
- plain jax.jit with NamedSharding operands (B split along N): C comes back split along N,
  the compiled program gathers nothing (gemm_amax's sharding rule), and C and the amax equal
  one device's; the time of the sharded call against one device's is printed;
- shard_map, column-parallel: B split along N, amax reduced with lax.pmax;
- shard_map, proj_rope with the heads of w split;
- shard_map, row-parallel: A and B split along K on 32-value blocks, the f32 partials summed
  with lax.psum before the amax is taken (SPEC §5 against the whole product).
`process`: the column-parallel gemm_amax over one device of each of two processes
(jax.distributed, gloo collectives on the CPU, bound to the loopback), the amax reduced
across them.
Splits of heads and columns equal the whole run bit for bit where the backend's sums do
not depend on the split (mx_reference.BITWISE_CONFIGS), else meet SPEC §5. Prints
"dist_jax: N passed, N failed"; exits non-zero on a failure.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mx_reference import BITWISE_CONFIGS, mx_operand, oracle, proj_inputs  # noqa: E402

results = [0, 0]


def check(ok, what):
    results[0 if ok else 1] += 1
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)


def same(x, y, share=0.999):
    """Bit for bit where the split does not change the sums, else SPEC §5's share of codes."""
    x, y = np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8)
    if BITWISE:
        return np.array_equal(x, y)
    return x.shape == y.shape and np.mean(x == y) >= share


def same_amax(x, ref, k):
    """Bit for bit where the split does not change the sums, else within SPEC §5's bound."""
    x, ref = float(np.asarray(x).reshape(-1)[0]), float(np.asarray(ref).reshape(-1)[0])
    return x == ref if BITWISE else abs(x - ref) <= 1e-6 * np.sqrt(k) * abs(ref)


BITWISE = os.environ.get("MXF_CONFIG", "") in BITWISE_CONFIGS


def devices():
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import mxfuse
    import mxfuse.jax as mj

    devs = jax.devices()
    assert len(devs) == 4, f"{len(devs)} devices; set XLA_FLAGS=--xla_force_host_platform_device_count=4"
    mesh = Mesh(np.array(devs), ("x",))
    rng = np.random.default_rng(int(os.environ.get("MXF_SEED", "0"), 0) or None)
    m, n, k = 256, 1024, 512
    a, sa, av = mx_operand(rng, m, k, "e4m3")
    b, sb, bv = mx_operand(rng, n, k, "e4m3")
    whole = mxfuse.gemm_amax(a, b, sa, sb, c_dtype="bfloat16")

    # plain jit, sharded operands (compact and swizzled scales)
    f = jax.jit(lambda a, b, sa, sb: tuple(mj.gemm_amax(a, b, sa, sb, c_dtype=jnp.bfloat16)))
    for swz in (False, True):
        SA, SB = (mxfuse.swizzle_scales(sa), mxfuse.swizzle_scales(sb)) if swz else (sa, sb)
        spec_sb = P(None, "x", None, None, None, None) if swz else P("x", None)
        args = (a, jax.device_put(b, NamedSharding(mesh, P("x", None))), SA,
                jax.device_put(SB, NamedSharding(mesh, spec_sb)))
        c, amax = f(*args)
        hlo = f.lower(*args).compile().as_text()
        what = "swizzled" if swz else "compact"
        check(c.sharding.spec == P(None, "x") and "all-gather" not in hlo,
              f"jit, {what} scales: C split along N ({c.sharding.spec}), nothing gathered")
        check(same(c, whole.c_tensor) and same_amax(amax, whole.amax_tensor, k),
              f"jit, {what} scales: C and the amax equal the whole product's")
        one = [jax.device_put(x, devs[0]) for x in (a, b, SA, SB)]
        t_sh, t_one = bench(lambda: f(*args)), bench(lambda: f(*one))
        print(f"  time: M={m} N={n} K={k} bf16 C, sharded over 4 host devices {t_sh * 1e3:.2f} ms, one device "
              f"{t_one * 1e3:.2f} ms ({os.cpu_count()} cores)")
    # A split along M, B whole: C split along M
    args = (jax.device_put(a, NamedSharding(mesh, P("x", None))), b, jax.device_put(sa, NamedSharding(mesh, P("x"))),
            sb)
    c, amax = f(*args)
    check(c.sharding.spec[0] == "x" and same(c, whole.c_tensor) and same_amax(amax, whole.amax_tensor, k),
          "jit: A split along M gives C split along M, equal to the whole product")

    # shard_map, column-parallel
    def col(a, b, sa, sb):
        c, amax = mj.gemm_amax(a, b, sa, sb, c_dtype=jnp.bfloat16)
        return c, jax.lax.pmax(amax, "x")

    g = jax.jit(jax.shard_map(col, mesh=mesh, in_specs=(P(), P("x"), P(), P("x")), out_specs=(P(None, "x"), P()),
                              check_vma=False))
    c, amax = g(a, b, sa, sb)
    check(same(c, whole.c_tensor) and same_amax(amax, whole.amax_tensor, k),
          "shard_map column-parallel (pmax amax) equals the whole product")

    # shard_map, proj_rope heads split
    inp = proj_inputs(rng, 160, 256, 8)
    want = mxfuse.proj_rope(**inp)
    h = jax.jit(jax.shard_map(lambda x, w, cos, sin: tuple(mj.proj_rope(x, w, cos, sin)), mesh=mesh,
                              in_specs=(P(), P("x"), P(), P()), out_specs=(P(None, "x"),) * 4, check_vma=False))
    got = h(inp["x"], inp["w"], inp["cos"], inp["sin"])
    check(all(same(g, w, 0.99) for g, w in zip(got, want)), "shard_map proj_rope, heads split, equals the whole run")

    # shard_map, row-parallel: K split on 32-value blocks, f32 partials psum'd, amax after the sum
    def row(a, b, sa, sb):
        c, _ = mj.gemm_amax(a, b, sa, sb, c_dtype=jnp.float32)
        c = jax.lax.psum(c, "x")
        return c, jnp.max(jnp.abs(c))

    r = jax.jit(jax.shard_map(row, mesh=mesh, in_specs=(P(None, "x"), P(None, "x"), P(None, "x"), P(None, "x")),
                              out_specs=(P(), P()), check_vma=False))
    c, amax = r(a, b, sa, sb)
    ref, delta = oracle(av, bv)
    delta = delta * 4 + 2.0 ** -24 * 4 * np.abs(ref)  # and the reduction's own roundings
    err = np.abs(np.asarray(c, np.float64) - ref)
    check(bool(np.all(err <= delta + np.spacing(np.abs(ref).astype(np.float32)))) and
          abs(float(amax) - np.abs(ref).max()) <= delta.max(),
          "shard_map row-parallel (K split, psum of f32 partials, amax after) meets SPEC §5")


def bench(fn, reps=10):
    import jax

    for _ in range(2):
        jax.block_until_ready(fn())
    t = time.perf_counter()
    for _ in range(reps):
        jax.block_until_ready(fn())
    return (time.perf_counter() - t) / reps


def process(i, port):
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=i,
                               local_device_ids=[0], initialization_timeout=60)
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import mxfuse
    import mxfuse.jax as mj

    mesh = Mesh(np.array(jax.devices()), ("x",))
    assert mesh.size == 2, jax.devices()
    rng = np.random.default_rng(int(os.environ.get("MXF_SEED", "0"), 0) or 7)  # one draw in both processes
    m, n, k = 128, 512, 256
    a, sa, _ = mx_operand(rng, m, k, "e4m3")
    b, sb, _ = mx_operand(rng, n, k, "e4m3")
    whole = mxfuse.gemm_amax(a, b, sa, sb, c_dtype="bfloat16")
    half = slice(i * n // 2, (i + 1) * n // 2)

    def shard(x, spec):
        sh = NamedSharding(mesh, spec)
        return jax.make_array_from_callback(x.shape, sh, lambda idx: x[idx])

    def col(a, b, sa, sb):
        c, amax = mj.gemm_amax(a, b, sa, sb, c_dtype=jnp.bfloat16)
        return c, jax.lax.pmax(amax, "x")

    g = jax.jit(jax.shard_map(col, mesh=mesh, in_specs=(P(), P("x"), P(), P("x")), out_specs=(P(None, "x"), P()),
                              check_vma=False))
    c, amax = g(shard(a, P()), shard(b, P("x")), shard(sa, P()), shard(sb, P("x")))
    mine = np.asarray(c.addressable_shards[0].data)
    check(same(mine, np.ascontiguousarray(whole.c_tensor[:, half])),
          f"process {i}: its columns of the two-process product equal the whole product's")
    check(same_amax(amax.addressable_shards[0].data, whole.amax_tensor, k),
          f"process {i}: the amax reduced across the processes equals the whole product's")
    jax.distributed.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "devices":
        devices()
    else:
        process(int(sys.argv[2]), int(sys.argv[3]))
    print(f"dist_jax: {results[0]} passed, {results[1]} failed", flush=True)
    sys.exit(1 if results[1] else 0)
