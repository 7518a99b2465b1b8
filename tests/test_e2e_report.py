"""`slurmgpu report JOBID` on real jobs of the local Slurm test cluster (issue 31).

A script from the real `slurmgpu gen` (srun launcher, planned for llama3.1-8b on two gpu4 nodes as a
program that implements every parallelism, as Megatron-style workers would)
runs tests/e2e/report_worker.py, whose rank 0 prints progress lines in Megatron-LM's and
torchtitan's formats with figures the test knows. `slurmgpu report JOBID` must find the plan in
the job's batch script as Slurm stored it (scontrol; sacct with AccountingStoreFlags=job_script
once the controller has forgotten the job), read the log Slurm names, leave out warm-up, and
record the run with the fingerprint the generated script printed (node list, environment hash).
No framework runs: the worker is plain Python, so every Slurm release runs it (22.05, 24.11 and
26.05; the sacct case needs the accounting cluster, which runs on the native release only).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import pytest

from tests.e2e import report_worker
from tests.test_e2e_jobs import ROOT, SITE_FILE, clean_env, filter_decisions, policy, run  # noqa: F401
from tests.test_e2e_launchers import submit_and_wait

pytestmark = pytest.mark.cluster

WORKER = str(ROOT / "tests" / "e2e" / "report_worker.py")


def slurmgpu(cluster, *args: str, env: str = "", cwd=None):
    """This checkout's CLI as a subprocess with the cluster's SLURM_CONF (PYTHONPATH names the
    checkout: the interpreter may have another slurmgpu installed)."""
    argv = ["env", "PYTHONPATH=%s" % ROOT] + ([env] if env else []) + [sys.executable, "-m", "slurmgpu.cli", *args]
    return run(cluster, argv, cwd=cwd)


def gen(cluster, *args: str) -> str:
    rc, out, err = slurmgpu(cluster, "gen", "--site", SITE_FILE, *args)
    assert rc == 0, err
    return out


def _plan_gbs(cluster) -> int:
    rc, out, err = slurmgpu(cluster, "plan", "--site", SITE_FILE, "--partition", "gpu4", "--model", "llama3.1-8b",
                            "--nodes", "2", "--json")  # fmt: skip
    assert rc == 0, err
    return json.loads(out)["global_batch"]


def _script(cluster, tmp_path: Path, *extra: str) -> str:
    gbs = _plan_gbs(cluster)
    return gen(
        cluster, "--partition", "gpu4", "--launcher", "srun", "--nodes", "2", "--model", "llama3.1-8b",
        "--implements", "tp,pp,cp,ep,recompute", "--no-preflight", *extra, "--", WORKER, str(gbs),
    )  # fmt: skip


def _report(cluster, tmp_path: Path, *args: str):
    return slurmgpu(cluster, "report", *args, "--site", SITE_FILE, "--json", cwd=tmp_path)


def test_report_finds_the_plan_of_a_real_job_and_reads_both_formats(slurm_cluster, policy, tmp_path):  # noqa: F811
    script = _script(slurm_cluster, tmp_path, "--stdout", str(tmp_path / "report-%j.out"))
    assert "# slurmgpu-plan: " in script and "# slurmgpu-env: " in script
    mark = slurm_cluster.log_mark()
    result, _ = submit_and_wait(slurm_cluster, script, tmp_path)
    assert result.ok, (result.state, result.stdout)
    assert filter_decisions(slurm_cluster, mark) == ["accept stamp"]
    job = str(result.job_id)

    rc, out, err = _report(slurm_cluster, tmp_path, job, "--format", "megatron")
    assert rc == 0, err
    rep = json.loads(out)[0]
    assert rep["job_id"] == job and rep["plan"]["found_in"] == "batch script of job %s" % job
    assert rep["plan"]["stamp"]["nodes"] == "2" and rep["plan"]["model"] == "llama3.1-8b"
    assert rep["plan"]["plan_line"]["launcher"] == "srun"
    terms = {t["term"]: t for t in rep["terms"]}
    steady = [ms for it, ms in report_worker.MEGATRON if it > 1]  # warm-up: the first logged interval
    assert rep["steady_intervals"] == len(steady)
    assert terms["step_time"]["measured"] == pytest.approx(statistics.median(steady) / 1000, rel=1e-4)
    assert terms["memory"]["measured"] == pytest.approx(3500.0 * 1024**2 / 1e9, rel=1e-4)
    assert terms["step_time"]["plan"] == pytest.approx(float(rep["plan"]["plan_line"]["step_s"]))
    assert rep["nodes"] == ["g4n01", "g4n02"]
    env = rep["versions"]["env"]
    assert env["nodes"] == "g4n[01-02]" and len(env["env_hash"]) == 16  # the script's own fingerprint line

    rc, out, err = _report(slurm_cluster, tmp_path, job, "--format", "torchtitan")
    assert rc == 0, err
    terms = {t["term"]: t for t in json.loads(out)[0]["terms"]}
    tps = [t for s, t in report_worker.TITAN_TPS if s > 1]
    assert terms["tokens_per_s_gpu"]["measured"] == pytest.approx(statistics.median(tps), rel=1e-4)

    # --record: one row in the runs file with the job's fingerprint
    data = tmp_path / "data"
    p = slurmgpu(slurm_cluster, "report", job, "--site", SITE_FILE, "--format", "megatron", "--record",
                 env="XDG_DATA_HOME=%s" % data, cwd=tmp_path)  # fmt: skip
    assert p[0] == 0, p[2]
    runs = list((data / "slurmgpu" / "runs").glob("*.tsv"))
    assert len(runs) == 1
    from slurmgpu.runs.record import read_runs

    (row,) = read_runs(str(runs[0]))
    assert row.get("job_id") == job and row.get("nodes") == "g4n[01-02]" and len(row.get("env_hash")) == 16
    assert row.get("gpus") == "8" and row.get("catalogue_model") == "llama3.1-8b"


def test_report_reads_the_script_from_sacct_once_the_controller_forgot_the_job(accounting_cluster, tmp_path):
    """A job the controller no longer holds (its MinJobAge passed): the batch script comes from
    slurmdbd (AccountingStoreFlags=job_script) and the log path from the script's #SBATCH
    --output, since sacct before 23.02 has no StdOut field. Only `scontrol` is refused here, to
    stand for a controller that purged the job; sacct and the files are real."""
    from slurmgpu.node.doctor import find_job_log
    from slurmgpu.runs.report import build, find_plan
    from slurmgpu.slurm import CommandResult, SubprocessRunner

    script = _script(accounting_cluster, tmp_path)
    job = accounting_cluster.submit(script, env=clean_env(accounting_cluster))
    res = accounting_cluster.wait_job(job, timeout=180)
    assert res.ok, (res.state, res.stdout)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "slurmgpu-plan" in accounting_cluster.sacct("--batch-script", "-j", str(job)):
            break
        time.sleep(0.5)

    class Purged(SubprocessRunner):
        def run(self, argv, timeout=60.0):
            if argv[0] == "scontrol":
                return CommandResult(tuple(argv), 1, "", "slurm_load_jobs error: Invalid job id specified")
            return super().run(argv, timeout)

    src = find_job_log(str(job), Purged({"SLURM_CONF": str(accounting_cluster.conf_path)}))
    assert src.script_from == "sacct" and "# slurmgpu-plan: " in (src.script or "")
    facts = find_plan(src.text, src.script, "batch script of job %d (sacct)" % job)
    assert facts is not None and facts.where.endswith("(sacct)") and facts.plan["launcher"] == "srun"
    rep = build(src, facts, fmt="megatron")
    steady = [ms for it, ms in report_worker.MEGATRON if it > 1]
    assert rep.term("step_time").measured == pytest.approx(statistics.median(steady) / 1000, rel=1e-4)
