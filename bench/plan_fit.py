"""Fit the cost model's few global constants on bench/data/calibration_runs.tsv, with a split check.

Coordinate search (each constant over a grid around its current value, a few rounds) minimising
the mean of min(|log(predicted / measured)|, 0.5) over the pinned rows; then the same fit on the
even rows scored on the odd rows and the other way round, so an over-fitted constant shows. Prints
the fitted values to copy into slurmgpu/plan/hardware.py and slurmgpu/site/gpus.py; changes nothing.

    python bench/plan_fit.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import plan_accuracy as pa  # noqa: E402

from slurmgpu.errors import PlanError  # noqa: E402
from slurmgpu.plan import cost, make_plan, planner  # noqa: E402
from slurmgpu.site import gpus  # noqa: E402

GLOBALS = ("GEMM_W0", "GEMM_T0", "ATTN_S0", "MEM_PASSES", "LAYER_OVERHEAD_S", "TP_EXPOSED", "EP_A2A_EFF")
# (architecture constant in gpus.py, index): Ampere BF16, Hopper FP8, Blackwell FP8, attention
ARCH = (("AMPERE_EFF", 0), ("HOPPER_EFF", 1), ("BLACKWELL_EFF", 1), ("ATTN", 2))
ARCH_OF = {"a100": "AMPERE_EFF", "h100": "HOPPER_EFF", "b200": "BLACKWELL_EFF", "gb200": "BLACKWELL_EFF"}

_orig_hw = planner.hardware


def current() -> Dict[str, float]:
    out = {k: float(getattr(cost, k)) for k in GLOBALS}
    for name, i in ARCH[:3]:
        out["%s[%d]" % (name, i)] = getattr(gpus, name)[i]
    out["ATTN"] = gpus.HOPPER_EFF[2]
    return out


def apply(p: Dict[str, float]) -> None:
    for k in GLOBALS:
        setattr(cost, k, p[k])

    def hw(site, partition, precision="bf16"):
        h = _orig_hw(site, partition, precision)
        from slurmgpu.site import lookup

        facts = lookup(h.nt.gpu_model)
        arch = next((ARCH_OF[k] for k in ARCH_OF if facts is not None and facts.key == k), None)
        if arch is None:
            return h
        idx = 1 if precision == "fp8" and h.peak > h.peak_bf16 else 0
        key = "%s[%d]" % (arch, idx)
        return replace(h, gemm_eff=p.get(key, h.gemm_eff), attn_eff=p["ATTN"])

    planner.hardware = hw


def errors(rows: List[pa.Row]) -> List[float]:
    out = []
    for r in rows:
        try:
            plan = make_plan(pa.site_for(r.gpu, r.gpus), pa.request(r, True))
        except PlanError:
            out.append(1.0)
            continue
        assert r.measured
        out.append(math.log(plan.tokens_per_s / r.gpus / r.measured))
    return out


def loss(rows: List[pa.Row]) -> float:
    return statistics.mean(min(abs(e), 0.5) for e in errors(rows))


def fit(rows: List[pa.Row], start: Dict[str, float], rounds: int) -> Dict[str, float]:
    p = dict(start)
    apply(p)
    best = loss(rows)
    for _ in range(rounds):
        for k in p:
            for f in (0.5, 0.7, 0.85, 0.93, 1.07, 1.18, 1.4, 2.0):
                q = dict(p)
                q[k] = p[k] * f
                if k.endswith("EFF") or "_EFF[" in k or k in ("TP_EXPOSED", "ATTN"):
                    q[k] = min(q[k], 0.98 if k != "TP_EXPOSED" else 1.0)
                apply(q)
                v = loss(rows)
                if v < best - 1e-5:
                    best, p = v, q
    apply(p)
    return p


def report(rows: List[pa.Row], tag: str) -> str:
    e = [abs(math.exp(x) - 1) for x in errors(rows)]
    return "%s: median |error| %.1f%%, within +-10%% %d of %d" % (
        tag,
        100 * statistics.median(e),
        sum(1 for x in e if x <= 0.1),
        len(e),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rows = [r for r in pa.load_rows() if r.measured]
    start = current()
    apply(start)
    print(report(rows, "current constants, all rows"))
    even, odd = rows[0::2], rows[1::2]
    for a, b, name in ((even, odd, "fit on even rows, scored on odd"), (odd, even, "fit on odd rows, scored on even")):
        fit(a, start, args.rounds)
        print(report(a, name + " (train)"))
        print(report(b, name + " (held out)"))
    p = fit(rows, start, args.rounds)
    print(report(rows, "fit on all rows"))
    for k, v in p.items():
        print("  %s = %.4g (was %.4g)" % (k, v, start[k]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
