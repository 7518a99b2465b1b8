"""Checkpoint-and-requeue end to end (issue 15) on the local Slurm test cluster.

A real torchrun (gloo) job and a real srun job run tests/e2e/resume_worker.py from a script
`slurmgpu gen --requeue` wrote. Preemption: `scontrol requeue` while it trains; the job saves (or
keeps its last periodic checkpoint), is requeued by Slurm, resumes and finishes. Time limit:
`--time 2 --grace 30`: Slurm's --signal reaches the batch shell, the steps get SIGTERM via scancel,
the program saves and asks; the script requeues until --max-requeues, then stops.
torch is installed only for the native release's Python, so these run on the native release.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster_fixtures import job_python_has
from tests.test_e2e_jobs import ROOT, SITE_FILE, clean_env, run

pytestmark = pytest.mark.cluster
WORKER = str(ROOT / "tests" / "e2e" / "resume_worker.py")
EVERY = 5


def _need_torch(cluster) -> None:
    if cluster.in_chroot or not job_python_has(cluster, "torch"):
        pytest.skip("torch is installed for the native Slurm release's Python only; requeue e2e runs there")


def gen(cluster, *args: str) -> str:
    """This checkout's CLI (not whatever slurmgpu is installed), as a user runs it."""
    env = clean_env(cluster, {"PYTHONPATH": str(ROOT)})
    argv = [sys.executable, "-m", "slurmgpu.cli", "gen", "--site", SITE_FILE, *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=str(cluster.jobs_dir))
    assert p.returncode == 0, p.stderr
    return p.stdout


def _script(cluster, tmp_path: Path, launcher: str, extra, worker_args) -> Path:
    ck = tmp_path / "ck"
    script = gen(
        cluster,
        "--partition", "gpu4", "--launcher", launcher, "--nodes", "1", "--gpus", "2", "--no-preflight",
        "--requeue", "--checkpoint-dir", str(ck), "--sbatch=--open-mode=append",
        "--stdout", str(tmp_path / "job-%j.out"), *extra,
        "--", "python", WORKER, "--every", str(EVERY), *worker_args,
    )  # fmt: skip
    path = tmp_path / "job.sh"
    path.write_text(script)
    return path


def _field(cluster, job_id: int, name: str) -> str:
    _, out, _ = run(cluster, ["scontrol", "show", "job", "-o", str(job_id)])
    m = re.search(r"\b%s=(\S+)" % name, out)
    return m.group(1) if m else ""


def _wait_log(path: Path, pattern: str, timeout: float) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = path.read_text() if path.exists() else ""
        if re.search(pattern, text, re.M):
            return text
        time.sleep(0.5)
    pytest.fail("no %r in %s after %.0f s:\n%s" % (pattern, path, timeout, path.read_text() if path.exists() else ""))


def _segments(text: str):
    """(resumed-from, last step logged) per run of the job."""
    out = []
    for part in re.split(r"^resumed from ", text, flags=re.M)[1:]:
        start = int(part.split()[1])
        steps = [int(s) for s in re.findall(r"^step (\d+)$", part, re.M)]
        out.append((start, max(steps) if steps else start))
    return out


def _lost(segs):
    return [prev_last - nxt_start for (_, prev_last), (nxt_start, _) in zip(segs, segs[1:])]


@pytest.mark.parametrize("launcher,ask", [("torchrun", "file"), ("srun", "exit")])
def test_preempted_job_resumes_and_finishes(slurm_cluster, tmp_path, launcher, ask):
    _need_torch(slurm_cluster)
    path = _script(slurm_cluster, tmp_path, launcher, [], ["--steps", "30", "--step-time", "0.2", "--ask", ask])
    t0 = time.monotonic()
    rc, out, err = run(slurm_cluster, ["sbatch", "--parsable", str(path)])
    assert rc == 0, err
    job_id = int(out.strip().split(";")[0])
    log = tmp_path / ("job-%d.out" % job_id)
    _wait_log(log, r"^step 8$", 90)
    rc, _, err = run(slurm_cluster, ["scontrol", "requeue", str(job_id)])
    assert rc == 0, err
    text = _wait_log(log, r"^done$", 150)
    wall = time.monotonic() - t0
    segs = _segments(text)
    lost = _lost(segs)
    print(
        "%s preempted: runs %s, steps lost %s, restart count %s, %.0f s"
        % (launcher, segs, lost, _field(slurm_cluster, job_id, "Restarts"), wall)
    )
    assert len(segs) == 2 and segs[1][0] > 0, text
    assert all(0 <= n <= EVERY for n in lost), (lost, text)
    assert _field(slurm_cluster, job_id, "Restarts") == "1"


@pytest.mark.parametrize("launcher,ask", [("torchrun", "file"), ("srun", "exit")])
def test_time_limit_saves_requeues_and_stops_at_the_limit(slurm_cluster, tmp_path, launcher, ask):
    _need_torch(slurm_cluster)
    args = ["--time", "2", "--grace", "30", "--max-requeues", "1"]
    path = _script(slurm_cluster, tmp_path, launcher, args, ["--steps", "100000", "--step-time", "0.2", "--ask", ask])
    t0 = time.monotonic()
    rc, out, err = run(slurm_cluster, ["sbatch", "--parsable", str(path)])
    assert rc == 0, err
    job_id = int(out.strip().split(";")[0])
    log = tmp_path / ("job-%d.out" % job_id)
    text = _wait_log(log, r"requeue limit reached", 330)
    wall = time.monotonic() - t0
    segs = _segments(text)
    lost = _lost(segs)
    print("%s time limit: runs %s, steps lost %s, %.0f s" % (launcher, segs, lost, wall))
    assert len(segs) == 2, text
    assert text.count("saved on signal at step") == 2, text
    assert lost == [0], (lost, text)  # saved on the signal: nothing lost
    assert "requeue 1 of at most 1" in text
    assert "restart count 1, at most 1 requeues" in text
