"""Tensor parallelism under torch.distributed, one process per device: NCCL and one GPU a
rank where there is a GPU for every rank, else (or with --cpu) gloo and CPU tensors (the
CPU backend):

    torchrun --nproc_per_node=N tests/python/dist_tp.py [--small] [--cpu]

- proj_rope with the heads of w split across ranks: each rank's four outputs equal the
  matching heads of the whole projection run on its device, and the all-gathered rowwise
  output (fp8 sent as uint8 views: gloo has no fp8) equals the whole run's;
- gemm_amax column-parallel (B split along N): each rank's C equals the matching columns
  of the whole product, and the global amax, an all-reduce (MAX) of the ranks' amax,
  equals the whole product's;
- gemm_amax row-parallel (K split on 32-value blocks): the f32 partials are summed by an
  all-reduce (SUM), the amax taken after the reduction; both meet SPEC §5 against the
  whole product (the summation order differs from one call's, so not bit for bit).
Where the backend's summation order does not depend on the split (mx_reference.BITWISE_CONFIGS) the
head- and column-split results are equal bit for bit; elsewhere they meet SPEC §5 (the
share of equal codes, the amax within its bound). Every rank draws the same inputs from one seed
(MXF_SEED, printed). Prints one line per check and "N passed, N failed" on rank 0; exits
non-zero on any failure. No distributed layer of mxfuse's own: the communication is
torch.distributed's.
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxfuse  # noqa: E402
from mx_reference import BITWISE_CONFIGS, mx_operand, oracle, proj_inputs, to_numpy, to_torch  # noqa: E402

def main():
    small = "--small" in sys.argv
    world = int(os.environ.get("WORLD_SIZE", "1"))
    gpu = "--cpu" not in sys.argv and torch.cuda.is_available() and torch.cuda.device_count() >= world
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if gpu:
        torch.cuda.set_device(rank)
        dev = f"cuda:{torch.cuda.current_device()}"
    else:
        dev = "cpu"
    bitwise = not gpu and os.environ.get("MXF_CONFIG", "") in BITWISE_CONFIGS
    seed = int(os.environ.get("MXF_SEED", "0"), 0) or int(time.time())
    seed_t = torch.tensor([seed], dtype=torch.int64, device=dev)
    dist.broadcast(seed_t, 0)  # one seed for every rank
    seed = int(seed_t.item())
    rng = np.random.default_rng(seed)
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        ok_all = torch.tensor([1 if ok else 0], device=dev)
        dist.all_reduce(ok_all, op=dist.ReduceOp.MIN)
        ok = bool(ok_all.item())
        passed += ok
        failed += not ok
        if rank == 0:
            print(f"  {'ok  ' if ok else 'FAIL'} {what}")

    if rank == 0:
        print(f"dist_tp: world {world} on {'GPUs (nccl)' if gpu else 'the CPU (gloo)'}, seed {seed} (replay with "
              f"MXF_SEED={seed}), MXF_CONFIG={os.environ.get('MXF_CONFIG', '')!r}: "
              f"{'bit for bit' if bitwise else 'SPEC §5'} for the column split")

    # proj_rope, heads split across ranks
    heads = (2 if small else 4) * world
    inp = proj_inputs(rng, 160 if small else 300, 256 if small else 1536, heads)
    t_in = {k: to_torch(v, dev) for k, v in inp.items()}
    whole = mxfuse.proj_rope(**t_in)
    hr = heads // world
    lo, hi = rank * hr, (rank + 1) * hr
    part_in = dict(t_in, w=t_in["w"][lo * 192:hi * 192].contiguous())
    part = mxfuse.proj_rope(**part_in)
    pairs = [(p.view(torch.uint8), w[:, lo:hi].contiguous().view(torch.uint8)) for p, w in zip(part, whole)]
    if bitwise:
        check(all(torch.equal(p, w) for p, w in pairs),
              f"proj_rope: heads {lo}..{hi - 1} of {heads} on rank {rank} equal the whole run's, bit for bit")
    else:  # SPEC §5: two runs of one backend agree on >= 99.9 % of scale bytes and >= 99 % of codes
        share = [float((p == w).float().mean()) for p, w in pairs]
        check(min(share[1], share[3]) >= 0.999 and min(share[0], share[2]) >= 0.99,
              f"proj_rope: heads {lo}..{hi - 1} of {heads} on rank {rank} equal the whole run's (SPEC §5: "
              f"{min(share):.5f} of bytes)")
    row = part.out_fp8_row.view(torch.uint8)  # fp8 goes through the collectives as uint8 views
    got = [torch.empty_like(row) for _ in range(world)]
    dist.all_gather(got, row)
    gathered, want = torch.cat(got, dim=1), whole.out_fp8_row.view(torch.uint8)
    check(torch.equal(gathered, want) if bitwise else float((gathered == want).float().mean()) >= 0.99,
          "proj_rope: the all-gathered rowwise output (uint8 views of fp8) equals the whole run's")

    # gemm_amax, column-parallel
    m, n, k = (96, 128 * world, 256) if small else (512, 2048 * world, 2048)
    a, sa, av = mx_operand(rng, m, k, "e4m3")
    b, sb, bv = mx_operand(rng, n, k, "e4m3")
    ta, tsa, tb, tsb = (to_torch(v, dev) for v in (a, sa, b, sb))
    full = mxfuse.gemm_amax(ta, tb, tsa, tsb, c_dtype=torch.bfloat16)
    nr = n // world
    cols = slice(rank * nr, (rank + 1) * nr)
    mine = mxfuse.gemm_amax(ta, tb[cols].contiguous(), tsa, tsb[cols].contiguous(), c_dtype=torch.bfloat16)
    amax = mine.amax_tensor.clone()
    dist.all_reduce(amax, op=dist.ReduceOp.MAX)
    ref = float(full.amax_tensor[0])
    if bitwise:
        check(float(amax[0]) == ref, f"gemm_amax: all-reduced amax {float(amax[0])!r} equals the whole product's")
        check(torch.equal(mine.c_tensor.view(torch.uint16), full.c_tensor[:, cols].contiguous().view(torch.uint16)),
              f"gemm_amax: rank {rank}'s columns equal the whole product's, bit for bit")
    else:
        check(abs(float(amax[0]) - ref) <= 1e-6 * np.sqrt(k) * abs(ref),
              f"gemm_amax: all-reduced amax {float(amax[0])!r} equals the whole product's {ref!r} (SPEC §5)")
        same = np.mean(to_numpy(mine.c_tensor).view(np.uint16) == to_numpy(full.c_tensor[:, cols]).view(np.uint16))
        check(same >= 0.999, f"gemm_amax: rank {rank}'s columns equal the whole product's ({same:.5f} of codes)")

    # gemm_amax, row-parallel: K split on 32-value blocks, f32 partials summed, amax after the sum
    kr = k // world
    assert kr % 32 == 0
    ks, kbs = slice(rank * kr, (rank + 1) * kr), slice(rank * kr // 32, (rank + 1) * kr // 32)
    c32 = mxfuse.gemm_amax(ta[:, ks].contiguous(), tb[:, ks].contiguous(), tsa[:, kbs].contiguous(),
                           tsb[:, kbs].contiguous(), c_dtype=torch.float32).c_tensor.contiguous()
    dist.all_reduce(c32, op=dist.ReduceOp.SUM)
    ref_c, delta = oracle(av, bv)
    delta = delta * world + 2.0 ** -24 * world * np.abs(ref_c)  # the reduction's own roundings
    err = np.abs(to_numpy(c32).astype(np.float64) - ref_c)
    check(bool(np.all(err <= delta + np.spacing(np.abs(ref_c).astype(np.float32)))),
          "gemm_amax: K split, the all-reduced f32 partials meet SPEC §5")
    amax_k = float(c32.abs().max())
    check(abs(amax_k - np.abs(ref_c).max()) <= delta.max(), "gemm_amax: K split, the amax taken after the reduction "
          "meets SPEC §5")
    if rank == 0:
        print(f"dist_tp: {passed} passed, {failed} failed")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
