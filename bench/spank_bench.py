#!/usr/bin/env python3
"""What the SPANK launch guard costs per task start (target: under 5 ms).

1. The policy call through the plugin's own C entry (contrib/spank/harness.c linked with
   slurmgpu_spank.c and the real Lua 5.1): load the rendered policy file, build the step
   table, evaluate, in a fresh Lua state -- exactly what every task does in slurmstepd.
   Three steps: a refused TP=16 launch, an allowed TP=8 one and `hostname` (no layout), with
   this process's environment plus the Slurm variables a task has. Then the batch step of the
   13 kB generated Megatron-LM script on 2 nodes: on a site that judges it there
   (policy.script_check batch-step: the plugin reads the script and judges it) and on one that
   leaves it to job_submit (the policy is loaded to ask, and the step runs).
2. On the local Slurm test cluster (needs root and Debian's slurm packages): short steps
   `srun -N2 --ntasks-per-node=8 true` inside one allocation, alternating rounds with an
   empty plugstack.conf and one that loads the plugin; per-step times, the per-step and
   per-task difference, and the ratio.

    python bench/spank_bench.py [--calls 300] [--steps 30] [--rounds 3] [--no-cluster]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
SPANK_SRC = ROOT / "contrib" / "spank"
TEST_SITE = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"
TARGET_MS = 5.0
TASKS_PER_NODE = 8


def build(out: Path) -> None:
    proc = subprocess.run(
        ["make", "-s", "-C", str(SPANK_SRC), "O=%s" % out, "all", "harness"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.exit("building the plugin failed:\n" + proc.stdout + proc.stderr)


def render_policy(conf_dir: Path, script_check: str = "submit") -> Path:
    from dataclasses import replace

    from slurmgpu.policy import install_filter
    from slurmgpu.site import load_site

    site = load_site(str(TEST_SITE))
    site = replace(site, policy=replace(site.policy, script_check=script_check))
    conf_dir.mkdir(exist_ok=True)
    return Path(install_filter(site, conf_dir, "spank").path)


BATCH_STEP = "4294967291"  # SLURM_BATCH_SCRIPT


def bench_batch_step(harness: Path, work: Path, calls: int) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from submit_bench import generate_script

    script = work / "slurm_script"
    script.write_text(generate_script())
    print(
        "the batch step of the %.1f kB generated Megatron-LM script on 2 nodes (%d calls):"
        % (script.stat().st_size / 1024, calls)
    )
    for label, check in (("judged there (batch-step)", "batch-step"), ("left to job_submit (submit)", "submit")):
        policy = render_policy(work / check, check)
        ms, rc = batch_call_ms(harness, policy, script, calls)
        print("  %-30s %7.3f ms per job start  (%s)" % (label, ms, "job failed" if rc else "job runs"))


def harness_ms(
    harness: Path, policy: Path, argv: List[str], calls: int, env: List[str], shape: List[str]
) -> Tuple[float, int]:
    """Mean ms of one slurm_spank_task_init() call, and its return code: `env` NAME=VALUE items on
    top of this process's environment, `shape` the harness's step options (-N, -n, -t, -s)."""
    cmd = [str(harness), "-E", *shape, "-R", str(calls), "-p", "policy=%s" % policy]
    for e in env:
        cmd += ["-e", e]
    proc = subprocess.run(cmd + ["--"] + argv, capture_output=True, text=True)
    m = re.search(r"per_call_ms=([\d.]+) rc=(-?\d+)", proc.stdout)
    if not m:
        sys.exit("harness failed: %s %s" % (proc.stdout, proc.stderr))
    return float(m.group(1)), int(m.group(2))


def policy_call_ms(harness: Path, policy: Path, argv: List[str], calls: int) -> Tuple[float, int]:
    """A task of a 2-node step with TASKS_PER_NODE tasks per node."""
    env = ["SLURM_GPUS_ON_NODE=8", "SLURM_JOB_PARTITION=gpu", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"]
    shape = ["-N", "2", "-n", str(TASKS_PER_NODE), "-t", str(2 * TASKS_PER_NODE)]
    return harness_ms(harness, policy, argv, calls, env, shape)


def batch_call_ms(harness: Path, policy: Path, script: Path, calls: int) -> Tuple[float, int]:
    """The batch step of a 2-node job (its one task, argv[0] the script)."""
    env = ["SLURM_JOB_NUM_NODES=2", "SLURM_GPUS_ON_NODE=8", "SLURM_NTASKS_PER_NODE=1", "SLURM_JOB_PARTITION=gpu"]
    shape = ["-N", "1", "-n", "1", "-t", "1", "-s", BATCH_STEP]
    return harness_ms(harness, policy, [str(script)], calls, env, shape)


def bench_policy_call(harness: Path, policy: Path, calls: int) -> float:
    cases = [
        ("refused: TP=16 over 2 nodes", ["python", "pretrain_gpt.py", "--tensor-model-parallel-size", "16"]),
        ("allowed: TP=8 in a node", ["python", "pretrain_gpt.py", "--tensor-model-parallel-size", "8"]),
        ("no layout: hostname", ["hostname"]),
    ]
    worst = 0.0
    print("policy call through the plugin's C entry (fresh Lua 5.1 state each call, %d calls):" % calls)
    for label, argv in cases:
        ms, rc = policy_call_ms(harness, policy, argv, calls)
        worst = max(worst, ms)
        print("  %-30s %7.3f ms per task  (%s)" % (label, ms, "task failed" if rc else "task runs"))
    print("  worst case: %.3f ms = %.2fx under the %.0f ms target" % (worst, TARGET_MS / worst, TARGET_MS))
    return worst


def _cluster_module():
    path = ROOT / "contrib" / "testcluster" / "cluster.py"
    spec = importlib.util.spec_from_file_location("slurmgpu_testcluster_bench", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = mod  # type: ignore[union-attr]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


LOOP = (
    "for i in $(seq %d); do s=$(date +%%s%%N); srun -N2 --ntasks-per-node=%d true || exit 3; "
    "e=$(date +%%s%%N); echo step_ns=$((e - s)); done"
)


def bench_cluster(plugin: Path, policy: Path, steps: int, rounds: int, work: Path) -> None:
    mod = _cluster_module()
    reasons = mod.missing_prerequisites()
    if reasons:
        print("cluster part skipped: " + "; ".join(reasons))
        return
    plugstack = work / "plugstack.conf"
    plugstack.write_text("# empty: no SPANK plugins\n")
    parts = (mod.Partition("gpu", mod.Partition.node_names("gpu", 2), "h100", 8, default=True),)
    with mod.TestCluster(parts, extra_config="PlugStackConfig=%s" % plugstack) as c:
        times: Dict[str, List[float]] = {"without": [], "with": []}
        for _ in range(rounds):
            for label in ("without", "with"):
                plugstack.write_text(
                    "# empty: no SPANK plugins\n"
                    if label == "without"
                    else "required %s policy=%s mode=enforce\n" % (plugin, policy)
                )
                proc = c.run(
                    ["salloc", "-N2", "--exclusive", "bash", "-c", LOOP % (steps, TASKS_PER_NODE)],
                    timeout=60 + steps * 10,
                )
                got = [int(x) / 1e6 for x in re.findall(r"step_ns=(\d+)", proc.stdout)]
                if proc.returncode != 0 or len(got) != steps:
                    sys.exit("steps failed (%s):\n%s\n%s" % (label, proc.stderr, c.logs()))
                times[label].extend(got[1:])  # the first step of an allocation warms caches
    off = statistics.median(times["without"])
    on = statistics.median(times["with"])
    tasks = 2 * TASKS_PER_NODE
    delta = on - off
    print(
        "local cluster, srun -N2 --ntasks-per-node=%d true, %d steps x %d rounds each (median):"
        % (TASKS_PER_NODE, steps, rounds)
    )
    print("  without plugin: %8.2f ms per step" % off)
    print("  with plugin:    %8.2f ms per step  (ratio %.3f)" % (on, on / off))
    print(
        "  difference:     %8.2f ms per step = %.2f ms per task start (%d tasks, %d per node, "
        "%d CPUs here)" % (delta, delta / tasks, tasks, TASKS_PER_NODE, os.cpu_count() or 0)
    )
    print("  per node (its %d tasks start in parallel): %.2f ms" % (TASKS_PER_NODE, delta))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300, help="policy calls per case (default 300)")
    ap.add_argument("--steps", type=int, default=30, help="srun steps per round on the cluster (default 30)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds with/without (default 3)")
    ap.add_argument("--no-cluster", action="store_true", help="only the policy-call part")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="spank-bench-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        build(work)
        policy = render_policy(work)
        bench_policy_call(work / "slurmgpu_spank_harness", policy, args.calls)
        bench_batch_step(work / "slurmgpu_spank_harness", work, args.calls)
        if not args.no_cluster:
            bench_cluster(work / "slurmgpu_spank.so", policy, args.steps, args.rounds, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
