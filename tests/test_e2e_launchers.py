"""The CPU-runnable launchers as real jobs on the local Slurm test cluster (issue 14).

Like tests/test_e2e_jobs.py's torchrun/gloo job, each test renders a job with the real CLI, submits
it with sbatch to two nodes of partition gpu4 (2 x 4 fake GPUs, 8 ranks) and reads back what every
rank's framework reports: srun's one task per GPU forms the plan's TP/PP/DP groups
(tests/e2e/groups_worker.py); DeepSpeed's runner (`--no_ssh`) starts tests/e2e/launcher_worker.py,
whose ranks write the world size, precision and ZeRO settings DeepSpeed itself took from the
generated config file. An accelerate job ran here too (every rank reported the planned bf16 and
FSDP2 settings) but is left out: in one of two CI runs torch elastic's exit barrier hung after
all ranks had finished, under the suite's load.

The generated script runs unchanged. A CPU test cluster needs only two things in the job's
environment, passed by sbatch, never written into the script:
* DeepSpeed: DS_ACCELERATOR=cpu (its CPU accelerator, gloo without Intel's oneCCL) and a
  TORCH_EXTENSIONS_DIR holding its shared-memory comm op (deepspeed_shm_comm), which
  deepspeed.initialize() JIT-compiles on CPU; the fixture builds it once (about 40-100 s),
  later sessions reuse it.
Megatron-LM, torchtitan, NeMo (Megatron-Bridge), vLLM and SGLang need CUDA (or ROCm): no CPU job.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional

import pytest

from tests.cluster_fixtures import job_python_has
from tests.test_e2e_jobs import (  # noqa: F401 (policy is a fixture)
    REQUIRE,
    ROOT,
    WORKER,
    _port_free,
    clean_env,
    filter_decisions,
    gen,
    policy,
    run,
)

pytestmark = pytest.mark.cluster

LAUNCHER_WORKER = str(ROOT / "tests" / "e2e" / "launcher_worker.py")
JOB_TIMEOUT = 180


def need(cluster, modules: List[str], commands: List[str]) -> None:
    """Skip (fail under SLURMGPU_REQUIRE_CLUSTER=1) without the framework; torch is not in the
    24.11 chroot, so these jobs run on the native release (as the torchrun/gloo job)."""
    if cluster.in_chroot and not job_python_has(cluster, "torch"):
        pytest.skip(
            "PyTorch is not installed in the Slurm %s chroot (its jobs run its own Python %s): "
            "the launcher jobs run on the native release" % (cluster.release.major, cluster.python)
        )
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    missing += [c for c in commands if not shutil.which(c, path=path)]
    if missing:
        msg = "%s not installed: pip install -e '.[contract]' (torch 2.13.0 CPU will do)" % ", ".join(missing)
        if REQUIRE:
            pytest.fail(msg + " (SLURMGPU_REQUIRE_CLUSTER=1)", pytrace=False)
        pytest.skip(msg)


def submit_and_wait(cluster, script: str, tmp_path: Path, env: Optional[Mapping[str, str]] = None):
    """sbatch the script unchanged, held until its rendezvous port is free (as test_e2e_jobs),
    from an environment with `env` added (sbatch exports it to the job); returns (result, wall
    seconds from release to end)."""
    path = tmp_path / "job.sh"
    path.write_text(script)
    port = re.search(r"^MASTER_PORT=\$\(\((\d+) \+ SLURM_JOB_ID % (\d+)\)\)$", script, re.M)
    assert port, "no per-job rendezvous port in the script"
    base, span = int(port.group(1)), int(port.group(2))
    for _ in range(5):
        p = subprocess.run(
            ["sbatch", "--parsable", "-H", str(path)],
            capture_output=True, text=True, timeout=120, env=clean_env(cluster, env), cwd=str(tmp_path),
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        job_id = int(p.stdout.strip().split(";")[0])
        if _port_free(base + job_id % span):
            break
        run(cluster, ["scancel", str(job_id)])
    else:
        pytest.fail("no free rendezvous port after 5 submissions")
    t0 = time.monotonic()
    rc, _, err = run(cluster, ["scontrol", "release", str(job_id)])
    assert rc == 0, err
    result = cluster.wait_job(job_id, timeout=JOB_TIMEOUT)
    wall = time.monotonic() - t0
    print("job %d: %s in %.1f s wall" % (job_id, result.state, wall))
    return result, wall


def reports(out: Path, world: int) -> List[Dict]:
    got = sorted(out.glob("rank-*.json"))
    assert len(got) == world, [p.name for p in got]
    rows = [json.loads(p.read_text()) for p in got]
    assert sorted(r["rank"] for r in rows) == list(range(world))
    return rows


def announced(script: str) -> Dict[str, int]:
    m = re.search(
        r"^# slurmgpu: site=\S+ tp=(\d+) pp=(\d+) dp=(\d+) cp=(\d+) ep=(\d+) nodes=(\d+) gpus_per_node=(\d+)$",
        script,
        re.M,
    )
    assert m, "no slurmgpu stamp in the script"
    return dict(zip(("tp", "pp", "dp", "cp", "ep", "nodes", "gpus_per_node"), (int(x) for x in m.groups())))


# ---------------------------------------------------------------------------


def test_srun_one_task_per_gpu_forms_the_planned_groups(slurm_cluster, policy, tmp_path):  # noqa: F811
    need(slurm_cluster, ["torch"], [])
    out_json = tmp_path / "groups.json"
    script = gen(
        slurm_cluster, "--partition", "gpu4", "--launcher", "srun", "--nodes", "2", "--tp", "2", "--pp", "2",
        "--no-preflight", "--stdout", str(tmp_path / "srun-%j.out"), "--", WORKER, "--out", str(out_json),
    )  # fmt: skip
    plan = announced(script)
    assert (plan["tp"], plan["pp"], plan["dp"]) == (2, 2, 2)
    assert re.search(r"^srun --nodes=2 --ntasks-per-node=4 ", script, re.M)
    assert re.search(r"^    python3 \S+groups_worker\.py ", script, re.M), "a .py program runs under python3"
    mark = slurm_cluster.log_mark()
    result, wall = submit_and_wait(slurm_cluster, script, tmp_path)
    assert result.ok, (result.state, result.stdout)
    assert filter_decisions(slurm_cluster, mark) == ["accept stamp"]
    data = json.loads(out_json.read_text())
    world, nodes, groups, sums = data["world"], data["nodes"], data["groups"], data["sums"]
    assert world == 8 == len(nodes) and sorted(set(nodes)) == ["g4n01", "g4n02"]
    for g in groups["tp"]:
        assert len({nodes[r] for r in g}) == 1, ("TP group across nodes", g, nodes)
    for rank, per_dim in enumerate(sums):
        for dim, (ranks, total) in per_dim.items():
            assert rank in ranks and total == len(ranks) == plan[dim], (rank, dim, ranks, total)


@pytest.fixture(scope="session")
def deepspeed_ops() -> str:
    """A TORCH_EXTENSIONS_DIR with DeepSpeed's CPU shared-memory comm op built (deepspeed.initialize
    on CPU JIT-compiles it; eight ranks on two cores would each wait on that build in the job)."""
    import deepspeed
    import torch

    cache = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")))
    where = cache / "slurmgpu-tests" / ("torch_extensions-%s-ds%s" % (torch.__version__, deepspeed.__version__))
    lock = where / "deepspeed_shm_comm" / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > 900:
        print("warning: removing a stale torch extension build lock %s (a build was killed)" % lock)
        lock.unlink()
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()"],
        env=dict(os.environ, DS_ACCELERATOR="cpu", TORCH_EXTENSIONS_DIR=str(where)),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    print("deepspeed_shm_comm ready in %.1f s (%s)" % (time.monotonic() - t0, where))
    return str(where)


def test_deepspeed_job_runs_the_planned_zero_stage_and_batch(slurm_cluster, policy, tmp_path, deepspeed_ops):  # noqa: F811
    need(slurm_cluster, ["torch", "deepspeed"], ["deepspeed"])
    out = tmp_path / "ranks"
    out.mkdir()
    script = gen(
        slurm_cluster, "--partition", "gpu4", "--launcher", "deepspeed", "--nodes", "2", "--model", "mistral-7b",
        "--implements", "recompute", "--no-preflight", "--stdout", str(tmp_path / "ds-%j.out"),
        "--", LAUNCHER_WORKER, "deepspeed", "--out", str(out),
    )  # fmt: skip
    # mistral-7b's 7.24B params with activation checkpointing fit 8 x 40 GB only fully sharded (ZeRO-3),
    # the stage whose config DeepSpeed must then run
    plan = announced(script)
    body = re.search(r"<<'SLURMGPU_EOF'\n(.*?)\nSLURMGPU_EOF\n", script, re.S)
    assert body, script
    cfg = json.loads(body.group(1))
    assert cfg["zero_optimization"]["stage"] == 3 and cfg["bf16"] == {"enabled": True}, cfg
    mark = slurm_cluster.log_mark()
    env = {"DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": deepspeed_ops}
    result, wall = submit_and_wait(slurm_cluster, script, tmp_path, env)
    assert result.ok, (result.state, result.stdout)
    assert filter_decisions(slurm_cluster, mark) == ["accept stamp"]
    world = plan["nodes"] * plan["gpus_per_node"]
    assert world == plan["dp"]
    rows = reports(out, world)
    assert {r["node"] for r in rows} == {"g4n01", "g4n02"}
    for r in rows:
        assert (r["world"], r["allreduce"], r["backend"], r["accelerator"]) == (world, float(world), "gloo", "cpu"), r
        assert r["config"] == ".slurmgpu-deepspeed-%d.json" % result.job_id, r
        assert r["zero_stage"] == cfg["zero_optimization"]["stage"], r
        assert (r["bf16"], r["fp16"], r["param_dtype"]) == (True, False, "torch.bfloat16"), r
        assert (r["train_batch_size"], r["micro_batch"], r["accumulation"]) == (
            cfg["train_batch_size"],
            cfg["train_micro_batch_size_per_gpu"],
            cfg["gradient_accumulation_steps"],
        ), r
        assert r["train_batch_size"] == r["micro_batch"] * r["accumulation"] * world
        assert r["gradient_clipping"] == cfg["gradient_clipping"] and r["loss_finite"], r
