"""Checkpoint-and-requeue end to end (issue 15) on the local Slurm test cluster.

A real torchrun (gloo) job and a real srun job run tests/e2e/resume_worker.py from a script
`slurmgpu gen --requeue` wrote. Preemption: `scontrol requeue` while it trains; the job saves (or
keeps its last periodic checkpoint), is requeued by Slurm, resumes and finishes. Time limit:
`--time 2 --grace 30`: Slurm's --signal reaches the batch shell, the steps get SIGTERM via scancel,
the program saves and asks; the script requeues until --max-requeues, then stops.
torch is installed only for the native release's Python, so these run on the native release.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster_fixtures import REQUIRE_ENV, job_python_has
from tests.test_e2e_jobs import ROOT, SITE_FILE, clean_env, run

pytestmark = pytest.mark.cluster
WORKER = str(ROOT / "tests" / "e2e" / "resume_worker.py")
EVERY = 5


def _need_torch(cluster) -> None:
    """torch (the `e2e` extra) is installed for the machine's own Python, which the native release's
    jobs run; a chroot release's Python has none, so these tests run on the native release only."""
    if cluster.in_chroot:
        pytest.skip("requeue e2e runs on the native Slurm release only (torch is not installed in the chroot)")
    if not job_python_has(cluster, "torch"):
        msg = "torch is not importable by the native release's job Python (pip install -e .[e2e])"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


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


def test_preempted_job_resumes_and_finishes(slurm_cluster, tmp_path):
    """Both launchers at once: `scontrol requeue` at step 8; Slurm's SIGTERM reaches the program,
    which saves; Slurm requeues the job, which resumes from that step and finishes."""
    _need_torch(slurm_cluster)
    jobs = {}
    t0 = time.monotonic()
    for launcher, ask in (("torchrun", "file"), ("srun", "exit")):
        d = tmp_path / launcher
        d.mkdir()
        path = _script(slurm_cluster, d, launcher, [], ["--steps", "30", "--step-time", "0.2", "--ask", ask])
        rc, out, err = run(slurm_cluster, ["sbatch", "--parsable", str(path)])
        assert rc == 0, err
        job_id = int(out.strip().split(";")[0])
        jobs[launcher] = (job_id, d / ("job-%d.out" % job_id))
    for job_id, log in jobs.values():
        _wait_log(log, r"^step 8$", 90)
        rc, _, err = run(slurm_cluster, ["scontrol", "requeue", str(job_id)])
        assert rc == 0, err
    for launcher, (job_id, log) in jobs.items():
        text = _wait_log(log, r"^done$", 150 - (time.monotonic() - t0))
        segs = _segments(text)
        lost = _lost(segs)
        restarts = _field(slurm_cluster, job_id, "Restarts")
        print(
            "%s preempted: runs %s, steps lost %s, restart count %s, %.0f s"
            % (launcher, segs, lost, restarts, time.monotonic() - t0)
        )
        assert len(segs) == 2 and segs[1][0] > 0, text
        assert all(0 <= n <= EVERY for n in lost), (lost, text)  # at most one save interval lost
        assert restarts == "1"


def test_time_limit_saves_requeues_and_stops_at_the_limit(slurm_cluster, tmp_path):
    """Both launchers at once (the time limit sets the pace: a minute or more per run).

    --time 2 --grace 30: Slurm sends --signal up to 60 s early (sbatch(1): its event resolution),
    so the signal comes 30 to 90 s into each run, after the program is up."""
    _need_torch(slurm_cluster)
    args = ["--time", "2", "--grace", "30", "--max-requeues", "1"]
    jobs = {}
    t0 = time.monotonic()
    # both ask with the file here; exit 75 from one of several srun tasks is the test below
    for launcher, ask in (("torchrun", "file"), ("srun", "file")):
        d = tmp_path / launcher
        d.mkdir()
        path = _script(slurm_cluster, d, launcher, args, ["--steps", "100000", "--step-time", "0.2", "--ask", ask])
        rc, out, err = run(slurm_cluster, ["sbatch", "--parsable", str(path)])
        assert rc == 0, err
        job_id = int(out.strip().split(";")[0])
        jobs[launcher] = (job_id, d / ("job-%d.out" % job_id))
    for launcher, (job_id, log) in jobs.items():
        text = _wait_log(log, r"requeue limit reached", 300 - (time.monotonic() - t0))
        segs = _segments(text)
        lost = _lost(segs)
        print("%s time limit: runs %s, steps lost %s, %.0f s" % (launcher, segs, lost, time.monotonic() - t0))
        assert len(segs) == 2, text
        assert text.count("saved on signal at step") == 2, text
        assert lost == [0], (lost, text)  # saved on the signal: nothing lost
        assert "requeue 1 of at most 1" in text
        assert "restart count 1, at most 1 requeues" in text
        assert _field(slurm_cluster, job_id, "Restarts") == "1"
    for launcher, (job_id, _) in jobs.items():  # the limit holds: neither job is queued again
        end = time.monotonic() + 30
        while _field(slurm_cluster, job_id, "JobState") not in ("FAILED", "COMPLETED") and time.monotonic() < end:
            time.sleep(1)
        assert _field(slurm_cluster, job_id, "JobState") == "FAILED", launcher  # exit 75: saved, not requeued
        assert _field(slurm_cluster, job_id, "Restarts") == "1", launcher


def test_exit_75_from_one_of_several_srun_tasks_asks_for_a_requeue(slurm_cluster, tmp_path):
    """Two srun tasks: rank 0 exits 75 at once, rank 1 is still running. srun's --kill-on-bad-exit
    kills rank 1 and reports the highest status (143), so the step's status alone loses the request;
    the task shell creates the request file before rank 0's task ends. --max-requeues 0: the script
    must see the request and stop at the limit (exit 75), not say the program did not ask."""
    ck = tmp_path / "ck"
    program = 'if [ "$RANK" = 0 ]; then sleep 2; exit 75; fi; sleep 60'
    script = gen(
        slurm_cluster,
        "--partition", "gpu4", "--launcher", "srun", "--nodes", "1", "--gpus", "2", "--no-preflight",
        "--requeue", "--checkpoint-dir", str(ck), "--max-requeues", "0", "--time", "5", "--grace", "30",
        "--stdout", str(tmp_path / "job-%j.out"), "--", "bash", "-c", program,
    )  # fmt: skip
    path = tmp_path / "job.sh"
    path.write_text(script)
    rc, out, err = run(slurm_cluster, ["sbatch", "--parsable", str(path)])
    assert rc == 0, err
    job_id = int(out.strip().split(";")[0])
    log = tmp_path / ("job-%d.out" % job_id)
    text = _wait_log(log, r"requeue limit reached|did not ask for a requeue", 90)
    assert "requeue limit reached" in text, text
    assert "did not ask" not in text, text
    end = time.monotonic() + 30
    while _field(slurm_cluster, job_id, "JobState") not in ("FAILED", "COMPLETED") and time.monotonic() < end:
        time.sleep(1)
    assert _field(slurm_cluster, job_id, "JobState") == "FAILED", text  # exit 75: asked, limit 0
    assert _field(slurm_cluster, job_id, "Restarts") == "0"
