"""Generated scripts as real jobs on the local Slurm test cluster (issue 6, end to end).

The rendered job_submit.lua and cli_filter.lua of tests/data/sites/testcluster.yaml are
installed; scripts come from the real CLI (`slurmgpu gen` / `slurmgpu submit`, run as
subprocesses with the cluster's SLURM_CONF). One job is a real distributed launch: torchrun
from the generated script, PyTorch's CPU build and the gloo backend, forming the TP/PP/DP
groups of the plan (tests/e2e/groups_worker.py) on two nodes.

Needs root and the Debian slurm packages, and torch for the launch; skipped otherwise
unless SLURMGPU_REQUIRE_CLUSTER=1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import pytest

from slurmgpu.policy import render_filter
from slurmgpu.site import load_site
from tests.cluster_fixtures import job_python_has

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
SITE_FILE = str(ROOT / "tests" / "data" / "sites" / "testcluster.yaml")
WORKER = str(ROOT / "tests" / "e2e" / "groups_worker.py")
REQUIRE = os.environ.get("SLURMGPU_REQUIRE_CLUSTER") == "1"


def clean_env(cluster, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """A small fixed environment for clients and jobs (sbatch exports it), with this
    interpreter's bin directory first so the job finds the same torchrun and slurmgpu."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TERM") if k in os.environ}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    if cluster.bin_dir is not None:  # a chroot release: its clients first
        env["PATH"] = str(cluster.bin_dir) + os.pathsep + env["PATH"]
    env["SLURM_CONF"] = str(cluster.conf_path)
    env.update(extra or {})
    return env


def run(cluster, argv: Sequence[str], cwd: Optional[Path] = None, stdin: Optional[str] = None) -> Tuple[int, str, str]:
    p = subprocess.run(
        list(argv),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(cluster),
        cwd=str(cwd or cluster.jobs_dir),
    )
    return p.returncode, p.stdout, p.stderr


def slurmgpu(cluster, *args: str, cwd: Optional[Path] = None) -> Tuple[int, str, str]:
    """The real CLI, as a user runs it."""
    return run(cluster, [sys.executable, "-m", "slurmgpu.cli", *args], cwd=cwd)


def gen(cluster, *args: str) -> str:
    rc, out, err = slurmgpu(cluster, "gen", "--site", SITE_FILE, *args)
    assert rc == 0, err
    return out


def filter_decisions(cluster, since: int) -> List[str]:
    """`decision=... source=...` of the job_submit lines slurmctld logged since `since`."""
    return [
        "%s %s" % m
        for m in re.findall(
            r"slurmgpu-filter: decision=(\w+) .*?origin=job_submit .*?"
            r"source=(\w+)",
            cluster.ctld_log(since),
        )
    ]


@pytest.fixture
def policy(slurm_cluster, job_submit, cli_filter):
    """The site's rendered filters installed; afterwards no job_submit/lua error was logged."""
    site = load_site(SITE_FILE)
    mark = slurm_cluster.log_mark()
    job_submit(render_filter(site, "job_submit"))
    cli_filter(render_filter(site, "cli_filter"))
    yield mark
    assert slurm_cluster.job_submit_errors(mark) == []


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def submit_held(cluster, script_path: Path, rendezvous: Optional[Tuple[int, int]]) -> int:
    """Submit held; if the job's rendezvous port (base + id % span) is taken on this host
    (the cluster's daemons also use ports 20000-32000), cancel and submit again."""
    for _ in range(5):
        rc, out, err = run(cluster, ["sbatch", "--parsable", "-H", str(script_path)])
        assert rc == 0, err
        job_id = int(out.strip().split(";")[0])
        if rendezvous is None or _port_free(rendezvous[0] + job_id % rendezvous[1]):
            return job_id
        run(cluster, ["scancel", str(job_id)])
    pytest.fail("no free rendezvous port after 5 submissions")


# ---------------------------------------------------------------------------


def test_generated_script_is_accepted_and_runs_on_two_nodes(slurm_cluster, policy, tmp_path):
    script = gen(
        slurm_cluster,
        "--launcher",
        "srun",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--no-preflight",
        "--stdout",
        str(tmp_path / "job-%j.out"),
        "--",
        "bash",
        "-c",
        'echo "rank=$RANK world=$WORLD_SIZE node=$SLURMD_NODENAME tp=$SLURMGPU_TP"',
    )
    path = tmp_path / "job.sh"
    path.write_text(script)
    mark = slurm_cluster.log_mark()
    rc, out, err = run(slurm_cluster, ["sbatch", "--parsable", str(path)])
    assert rc == 0, err
    result = slurm_cluster.wait_job(int(out.strip().split(";")[0]), timeout=60)

    assert result.ok, (result.state, result.stdout)
    assert filter_decisions(slurm_cluster, mark) == ["accept stamp"]
    rows = re.findall(r"^rank=(\d+) world=(\d+) node=(\S+) tp=(\d+)$", result.stdout or "", re.M)
    ranks = {int(r): node for r, _, node, _ in rows}
    assert sorted(ranks) == list(range(16)), result.stdout
    assert {(w, t) for _, w, _, t in rows} == {("16", "8")}
    assert len(set(ranks.values())) == 2 and set(ranks.values()) <= {"gpu01", "gpu02", "gpu03", "gpu04"}
    for first in (0, 8):  # TP=8: ranks 0-7 and 8-15 are the TP groups, each on one node
        assert len({ranks[r] for r in range(first, first + 8)}) == 1, ranks


def test_torchrun_gloo_job_forms_the_planned_groups_with_tp_inside_nodes(slurm_cluster, policy, tmp_path):
    if slurm_cluster.in_chroot and not job_python_has(slurm_cluster, "torch"):
        pytest.skip(
            "PyTorch is not installed in the Slurm %s chroot (its jobs run its own Python %s): "
            "the gloo launch runs on the native release" % (slurm_cluster.release.major, slurm_cluster.python)
        )
    if importlib.util.find_spec("torch") is None or not shutil.which("torchrun", path=clean_env(slurm_cluster)["PATH"]):
        msg = "PyTorch (torch, torchrun) is not installed: pip install torch==2.13.0 (the CPU build will do)"
        if REQUIRE:
            pytest.fail(msg + " (SLURMGPU_REQUIRE_CLUSTER=1)", pytrace=False)
        pytest.skip(msg)
    out_json = tmp_path / "groups.json"
    # gpu4: 2 nodes x 4 "GPUs" -> 8 workers; TP=2 x PP=2 x DP=2
    script = gen(
        slurm_cluster,
        "--partition",
        "gpu4",
        "--launcher",
        "torchrun",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--pp",
        "2",
        "--no-preflight",
        "--stdout",
        str(tmp_path / "gloo-%j.out"),
        "--",
        "python",
        WORKER,
        "--out",
        str(out_json),
    )
    layout = re.search(
        r"^export SLURMGPU_SITE=\S+ SLURMGPU_TP=(\d+) SLURMGPU_PP=(\d+) SLURMGPU_DP=(\d+) ", script, re.M
    )
    assert layout, "the generated script does not export SLURMGPU_TP/PP/DP"
    tp, pp, dp = (int(x) for x in layout.groups())
    assert (tp, pp, dp) == (2, 2, 2)
    assert re.search(r"--nnodes=2 --nproc-per-node=4\b", script)
    port = re.search(r"^MASTER_PORT=\$\(\((\d+) \+ SLURM_JOB_ID % (\d+)\)\)$", script, re.M)
    path = tmp_path / "job.sh"
    path.write_text(script)

    mark = slurm_cluster.log_mark()
    job_id = submit_held(slurm_cluster, path, (int(port.group(1)), int(port.group(2))) if port else None)
    t0 = time.monotonic()
    rc, _, err = run(slurm_cluster, ["scontrol", "release", str(job_id)])
    assert rc == 0, err
    result = slurm_cluster.wait_job(job_id, timeout=120)
    wall = time.monotonic() - t0
    print("gloo job %d: %s in %.1f s wall" % (job_id, result.state, wall))

    assert result.ok, (result.state, result.stdout)
    assert filter_decisions(slurm_cluster, mark) == ["accept stamp"]
    data = json.loads(out_json.read_text())
    world, nodes, groups, sums = data["world"], data["nodes"], data["groups"], data["sums"]
    assert world == tp * pp * dp == len(nodes) == len(sums)
    assert sorted(set(nodes)) == ["g4n01", "g4n02"] and all(nodes.count(n) == 4 for n in set(nodes))
    # the plan's groups (Megatron order, TP fastest): consecutive ranks form a TP group
    assert groups["tp"] == [list(range(i, i + tp)) for i in range(0, world, tp)]
    for dim, size in (("tp", tp), ("pp", pp), ("dp", dp)):
        assert sorted(r for g in groups[dim] for r in g) == list(range(world))
        assert all(len(g) == size for g in groups[dim])
    for g in groups["tp"]:
        assert len({nodes[r] for r in g}) == 1, ("TP group across nodes", g, nodes)
    # every rank all-reduced a 1 in each of its three groups: the sum is the group's size
    for rank, per_dim in enumerate(sums):
        assert sorted(per_dim) == ["dp", "pp", "tp"], per_dim
        for dim, (ranks, total) in per_dim.items():
            assert rank in ranks and ranks in groups[dim]
            assert total == len(ranks), (rank, dim, ranks, total)


def test_submit_prints_the_job_id_of_the_generated_script(slurm_cluster, policy, tmp_path):
    flags = [
        "--site",
        SITE_FILE,
        "--launcher",
        "srun",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--no-preflight",
        "--sbatch=--hold",
        "--",
        "hostname",
    ]
    mark = slurm_cluster.log_mark()
    rc, out, err = slurmgpu(slurm_cluster, "submit", *flags, cwd=tmp_path)
    assert rc == 0, err
    assert re.fullmatch(r"\d+\n", out), out
    job_id = int(out)

    info = slurm_cluster.job_info(job_id)
    assert info is not None
    assert (info["JobState"], info["Reason"], info["Partition"], info["NumNodes"]) == (
        "PENDING",
        "JobHeldUser",
        "gpu",
        "2-2",
    )
    assert filter_decisions(slurm_cluster, mark) == ["accept stamp"]
    # what slurmctld stored is exactly what `gen` writes for the same flags
    rc, stored, err = run(slurm_cluster, ["scontrol", "write", "batch_script", str(job_id), "-"])
    assert rc == 0, err
    rc, generated, err = slurmgpu(slurm_cluster, "gen", *flags, cwd=tmp_path)
    assert rc == 0, err
    assert stored == generated


def test_submit_json_lists_the_job_ids(slurm_cluster, policy, tmp_path):
    rc, out, err = slurmgpu(
        slurm_cluster,
        "submit",
        "--site",
        SITE_FILE,
        "--launcher",
        "srun",
        "--nodes",
        "1",
        "--no-preflight",
        "--sbatch=--hold",
        "--chain",
        "2",
        "--json",
        "--",
        "hostname",
        cwd=tmp_path,
    )
    assert rc == 0, err
    data = json.loads(out)
    ids = data["job_ids"]
    assert len(ids) == 2 and data["test_only"] is False
    second = slurm_cluster.job_info(int(ids[1]))
    assert second is not None and second["Dependency"] == "afterany:%s(unfulfilled)" % ids[0]


def test_submit_test_only_submits_nothing(slurm_cluster, policy, tmp_path):
    mark = slurm_cluster.log_mark()
    rc, out, err = slurmgpu(
        slurm_cluster,
        "submit",
        "--site",
        SITE_FILE,
        "--launcher",
        "torchrun",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--no-preflight",
        "--test-only",
        "--",
        "train.py",
        cwd=tmp_path,
    )
    assert rc == 0, err
    assert out == ""
    assert re.search(r"to start at .* on nodes gpu\[0\d-0\d\] in partition gpu", err), err
    assert filter_decisions(slurm_cluster, mark) == ["accept stamp"]
    assert slurm_cluster.run(["squeue", "-h"]).stdout.strip() == ""
