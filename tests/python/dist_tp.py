"""Tensor parallelism under torch.distributed (NCCL), one process per GPU:

    torchrun --nproc_per_node=NGPU tests/python/dist_tp.py

- proj_rope with the heads of w split across ranks: each rank's four outputs equal the
  matching heads of the whole projection run on that rank's GPU, bit for bit (a head's
  tile does not depend on the other heads);
- gemm_amax column-parallel (B split along N): each rank's C equals the matching columns
  of the whole product wherever SPEC §5 determines the code, and the global amax, an
  all-reduce (MAX) of the ranks' amax, equals the whole product's amax within SPEC §5's
  bound (bit for bit where the ranks run the whole product's kernel configuration).
Every rank draws the same inputs from one seed (MXF_SEED, printed). Prints one line per
check and "N passed, N failed" on rank 0; exits non-zero on any failure. No distributed
layer of mxfuse's own: the communication is torch.distributed's.
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mxfuse  # noqa: E402
from mx_reference import mx_operand, proj_inputs, to_numpy, to_torch  # noqa: E402


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = f"cuda:{torch.cuda.current_device()}"
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
        print(f"dist_tp: world {world}, seed {seed} (replay with MXF_SEED={seed})")

    # proj_rope, heads split across ranks
    heads = 4 * world
    inp = proj_inputs(rng, 300, 1536, heads)
    t_in = {k: to_torch(v, dev) for k, v in inp.items()}
    whole = mxfuse.proj_rope(**t_in)
    hr = heads // world
    lo, hi = rank * hr, (rank + 1) * hr
    part_in = dict(t_in, w=t_in["w"][lo * 192:hi * 192].contiguous())
    part = mxfuse.proj_rope(**part_in)
    ok = all(torch.equal(p.view(torch.uint8), w[:, lo:hi].contiguous().view(torch.uint8))
             for p, w in zip(part, whole))
    check(ok, f"proj_rope: heads {lo}..{hi - 1} of {heads} on rank {rank} equal the whole run's, bit for bit")

    # gemm_amax, column-parallel
    m, n, k = 512, 2048 * world, 2048
    a, sa, _ = mx_operand(rng, m, k, "e4m3")
    b, sb, _ = mx_operand(rng, n, k, "e4m3")
    ta, tsa, tb, tsb = (to_torch(v, dev) for v in (a, sa, b, sb))
    full = mxfuse.gemm_amax(ta, tb, tsa, tsb, c_dtype=torch.bfloat16)
    nr = n // world
    cols = slice(rank * nr, (rank + 1) * nr)
    mine = mxfuse.gemm_amax(ta, tb[cols].contiguous(), tsa, tsb[cols].contiguous(), c_dtype=torch.bfloat16)
    amax = mine.amax_tensor.clone()
    dist.all_reduce(amax, op=dist.ReduceOp.MAX)
    ref = float(full.amax_tensor[0])
    check(abs(float(amax[0]) - ref) <= 1e-6 * np.sqrt(k) * abs(ref),
          f"gemm_amax: all-reduced amax {float(amax[0])!r} equals the whole product's {ref!r} (SPEC §5)")
    same = np.mean(to_numpy(mine.c_tensor).view(np.uint16) == to_numpy(full.c_tensor[:, cols]).view(np.uint16))
    check(same >= 0.999, f"gemm_amax: rank {rank}'s columns equal the whole product's ({same:.5f} of codes)")
    if rank == 0:
        print(f"dist_tp: {passed} passed, {failed} failed")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
