"""Planner speed: full layout searches at the scale of the largest public training runs.

Target: under 0.5 s per full search on a 2-core machine. Prints the chosen layout, the best
and median wall time of several runs, and the ratio to the target (below 1.0 is good).

    python bench/plan_bench.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurmgpu.plan import PlanRequest, get_model, make_plan
from slurmgpu.site import load_site, preset_dir

TARGET_S = 0.5


def big_site(preset: str, nodes: int):
    """A preset with its default partition grown to `nodes` nodes (no files written)."""
    site = load_site(str(preset_dir() / (preset + ".yaml")))
    part = site.partition()
    grown = replace(part, nodes=nodes, max_nodes_per_job=nodes)
    return replace(site, partitions={**site.partitions, part.name: grown})


CASES = [
    ("Llama 3.1 405B pretrain, 16,384 H100", "dgx-h100", 2048, "llama3.1-405b", dict(gpus=16384), True),
    ("DeepSeek-V3 pretrain, 2,048 H100", "dgx-h100", 256, "deepseek-v3", dict(gpus=2048), True),
    ("Llama 3.1 405B, smallest allocation", "dgx-h100", 2048, "llama3.1-405b", dict(), False),
    ("Llama 3.1 70B LoRA, 2 nodes", "dgx-h100", 32, "llama3-70b", dict(task="lora", nodes=2), False),
    ("Mixtral 8x22B pretrain, 72-GPU NVL72 rack", "gb200-nvl72", 36, "mixtral-8x22b", dict(nodes=18), False),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    worst = 0.0
    print("%-42s %-36s %6s %8s %8s %6s" % ("case", "layout", "MFU", "best s", "median s", "ratio"))
    for title, preset, nodes, model, kw, gated in CASES:
        site = big_site(preset, nodes)
        req = PlanRequest(model=get_model(model), **kw)
        times = []
        plan = None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            plan = make_plan(site, req)
            times.append(time.perf_counter() - t0)
        assert plan is not None
        lay = plan.layout
        desc = "%dx%d TP%d PP%d DP%d CP%d EP%d mb%d" % (
            lay.nodes,
            lay.gpus_per_node,
            lay.tp,
            lay.pp,
            lay.dp,
            lay.cp,
            lay.ep,
            lay.micro_batch,
        )
        best, med = min(times), statistics.median(times)
        ratio = med / TARGET_S
        if gated:
            worst = max(worst, ratio)
        print(
            "%-42s %-36s %5.1f%% %8.3f %8.3f %6.2f%s"
            % (title, desc, 100 * plan.mfu, best, med, ratio, "" if gated else " (not gated)")
        )
    print(
        "target %.1f s per full search; worst gated ratio %.2f (%s)"
        % (TARGET_S, worst, "ok" if worst <= 1.0 else "TOO SLOW")
    )
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
