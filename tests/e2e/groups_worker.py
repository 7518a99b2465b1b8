"""Runs under torchrun inside a generated sbatch script on the local Slurm cluster.

Forms the TP/PP/DP process groups of the layout in Megatron's order (TP innermost),
all-reduces inside each group, and records on which node (SLURMD_NODENAME) every rank
ran, so the test can assert that each TP group sat on one node.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def groups(tp: int, pp: int, dp: int):
    """Rank lists per dimension for order tp-dp-pp (TP fastest)."""
    world = tp * pp * dp
    rank_of = lambda t, d, p: t + tp * (d + dp * p)  # noqa: E731
    tp_groups = [[rank_of(t, d, p) for t in range(tp)] for p in range(pp) for d in range(dp)]
    dp_groups = [[rank_of(t, d, p) for d in range(dp)] for p in range(pp) for t in range(tp)]
    pp_groups = [[rank_of(t, d, p) for p in range(pp)] for d in range(dp) for t in range(tp)]
    assert sorted(r for g in tp_groups for r in g) == list(range(world))
    return {"tp": tp_groups, "dp": dp_groups, "pp": pp_groups}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    tp = int(os.environ["SLURMGPU_TP"])
    pp = int(os.environ["SLURMGPU_PP"])
    dp = int(os.environ["SLURMGPU_DP"])

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != tp * pp * dp:
        print("world size %d != tp*pp*dp = %d" % (world, tp * pp * dp), file=sys.stderr)
        return 3
    node = os.environ.get("SLURMD_NODENAME", "?")
    nodes = [None] * world
    dist.all_gather_object(nodes, node)

    sums = {}
    for dim, glist in groups(tp, pp, dp).items():
        for ranks in glist:
            g = dist.new_group(ranks)  # every rank must take part in creating every group
            if rank in ranks:
                t = torch.ones(1)
                dist.all_reduce(t, group=g)
                sums[dim] = (ranks, int(t.item()))

    gathered = [None] * world
    dist.all_gather_object(gathered, sums)
    if rank == 0:
        result = {"world": world, "nodes": nodes, "groups": groups(tp, pp, dp), "sums": gathered}
        tmp = args.out + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(result, fh)
        os.replace(tmp, args.out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
