"""Shadow mode, the AdminComment audit trail, `admin replay --since` and `admin stats` against
real Slurm accounting: the local test cluster with slurmdbd and a private MariaDB (native
release only, see contrib/testcluster/cluster.py "Accounting")."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from slurmgpu.policy import render_filter
from slurmgpu.site import load_site

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent
TESTCLUSTER = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"

BAD = (  # TP=16 over two 8-GPU nodes: enforce would reject it
    "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1\n"
    "srun true pretrain_gpt.py --tensor-model-parallel-size 16\n"
)
GOOD = (
    "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1\nexport NCCL_SOCKET_IFNAME=lo\n"
    "srun true pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2\n"
)


def _slurmgpu(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu.cli", *args],
        capture_output=True,
        text=True,
        env=dict(cluster.env, PYTHONPATH=str(ROOT)),
        timeout=300,
        cwd=str(ROOT),
    )


def _wait_recorded(cluster, ids: List[int], timeout: float = 60.0) -> Dict[str, str]:
    """AdminComment of each job once accounting has all of them finished (slurmdbd stores the
    AdminComment with the end record)."""
    deadline = time.monotonic() + timeout
    got: Dict[str, str] = {}
    ended: Dict[str, str] = {}
    while time.monotonic() < deadline:
        out = cluster.sacct(
            "-a", "-X", "-P", "--noheader", "-j", ",".join(map(str, ids)), "-o", "JobIDRaw,State,AdminComment"
        )
        rows = [line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2]
        got = {r[0]: r[2] for r in rows}
        ended = {r[0]: r[1] for r in rows if r[1] not in ("PENDING", "RUNNING")}
        if all(str(i) in ended for i in ids):
            return got
        time.sleep(0.5)
    raise AssertionError("jobs %s not finished in accounting after %.0f s: %s" % (ids, timeout, ended))


def _wait_scripts(cluster, ids: List[int], timeout: float = 30.0) -> None:
    """slurmctld sends batch scripts to slurmdbd after the job record: wait until all are there."""
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        out = cluster.sacct("--batch-script", "-j", ",".join(map(str, ids)))
        if out.count("Batch Script for ") == len(ids) and "\nNONE\n" not in out:
            return
        time.sleep(0.5)
    raise AssertionError("batch scripts of %s not in accounting after %.0f s:\n%s" % (ids, timeout, out[-2000:]))


@pytest.fixture(scope="module")
def shadow_site(tmp_path_factory):
    d = tmp_path_factory.mktemp("shadow-site")
    path = d / "shadow.yaml"
    path.write_text("extends: %s\nname: testcluster-shadow\npolicy:\n  mode: shadow\n" % TESTCLUSTER)
    return load_site(str(path)), str(path)


def test_accounting_stores_scripts_and_environments(accounting_cluster):
    """The harness: slurmdbd records the job, its batch script, its environment, its submit line."""
    job = accounting_cluster.submit("#!/bin/bash\n# marker-1234\ntrue\n", env={"SGTEST_MARK": "yes"})
    accounting_cluster.wait_job(job)
    _wait_recorded(accounting_cluster, [job])
    _wait_scripts(accounting_cluster, [job])
    assert "# marker-1234" in accounting_cluster.sacct("--batch-script", "-j", str(job))
    assert "SGTEST_MARK=yes" in accounting_cluster.sacct("--env-vars", "-j", str(job))
    line = accounting_cluster.sacct("-X", "-P", "--noheader", "-j", str(job), "-o", "SubmitLine,Account")
    assert line.startswith("sbatch --parsable"), line


def test_shadow_mode_audit_replay_and_stats(accounting_cluster, accounting_job_submit, shadow_site, tmp_path):
    site, site_path = shadow_site
    accounting_job_submit(render_filter(site, "job_submit"))
    mark = accounting_cluster.log_mark()
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    time.sleep(1)  # sacct -S has whole seconds
    rc, out, err = accounting_cluster.sbatch(BAD, "--parsable")
    assert rc == 0, err  # shadow: let through ...
    assert "slurmgpu:" not in err, err  # ... without a word to the user
    bad = int(out.strip())
    good = accounting_cluster.submit(GOOD)
    for job in (bad, good):
        accounting_cluster.wait_job(job)
    # the controller logged the would-be verdict
    log = accounting_cluster.ctld_log(mark)
    lines = [ln for ln in log.splitlines() if "slurmgpu-filter: decision=" in ln]
    assert any("verdict=shadow-reject" in ln and "rules=tp-exceeds-domain" in ln for ln in lines), lines
    assert any(ln.rstrip().endswith("verdict=ok") for ln in lines), lines
    # the audit trail: sacct -o AdminComment
    comments = _wait_recorded(accounting_cluster, [bad, good])
    _wait_scripts(accounting_cluster, [bad, good])
    assert comments[str(bad)].startswith("slurmgpu=shadow-reject:tp-exceeds-domain"), comments
    assert comments[str(good)] == "slurmgpu=ok", comments

    # replay over accounting: the would-be verdicts and the messages the user was spared
    p = _slurmgpu(accounting_cluster, "admin", "replay", "--site", site_path, "--since", since, "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    rows = {r["job_id"]: r for r in rep["results"]}
    assert rows[str(bad)]["would"] == "reject", rows
    assert rows[str(bad)]["verdict"] == "shadow-reject"
    assert "tp-exceeds-domain" in rows[str(bad)]["rules"]
    assert any("TP=16" in m for m in rows[str(bad)]["messages"]), rows[str(bad)]
    assert rows[str(good)]["would"] == "accept", rows[str(good)]
    assert rep["by_rule"]["tp-exceeds-domain"]["reject"] >= 1
    assert str(bad) in rep["by_rule"]["tp-exceeds-domain"]["examples"]
    # filtered by user and partition; resumable
    state = tmp_path / "replay-state.json"
    args = ["admin", "replay", "--site", site_path, "--since", since, "--user", "root", "--partition", "gpu"]
    p1 = _slurmgpu(accounting_cluster, *args, "--state", str(state), "--json")
    assert p1.returncode == 0, p1.stderr
    first = json.loads(p1.stdout)
    assert {r["job_id"] for r in first["results"]} >= {str(bad), str(good)}
    p2 = _slurmgpu(accounting_cluster, *args, "--state", str(state), "--json")
    second = json.loads(p2.stdout)
    assert second["judged_now"] == 0 and second["jobs"] == first["jobs"], (first["jobs"], second)
    p3 = _slurmgpu(accounting_cluster, "admin", "replay", "--site", site_path, "--since", since, "--user", "nobody")
    assert p3.returncode == 0 and "replayed 0 jobs" in p3.stdout, p3.stdout + p3.stderr

    # stats from the log, in Prometheus text format, and from accounting
    from prometheus_client.parser import text_string_to_metric_families

    prom = tmp_path / "slurmgpu.prom"
    p = _slurmgpu(
        accounting_cluster,
        "admin",
        "stats",
        "--log",
        str(accounting_cluster.ctld_log_path),
        "--since",
        "1h",
        "--prometheus",
        str(prom),
        "--json",
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verdicts"]["shadow-reject"] >= 1
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(prom.read_text())
        for s in fam.samples
    }
    key = ("slurmgpu_filter_decisions", (("partition", "gpu"), ("site", "-"), ("verdict", "shadow-reject")))
    assert samples.get(key, 0) >= 1, samples
    rule = (
        "slurmgpu_filter_rule_hits",
        (("partition", "gpu"), ("rule", "tp-exceeds-domain"), ("site", "-"), ("verdict", "shadow-reject")),
    )
    assert samples.get(rule, 0) >= 1, samples
    p = _slurmgpu(accounting_cluster, "admin", "stats", "--accounting", "--since", "1h", "--json")
    assert p.returncode == 0, p.stderr
    acct = json.loads(p.stdout)
    assert acct["verdicts"]["shadow-reject"] >= 1 and acct["verdicts"]["ok"] >= 1, acct


def test_replay_speed_over_accounting(accounting_cluster, accounting_job_submit, shadow_site, tmp_path):
    """Not a timing test: it prints the replay speed through sacct (jobs/s) for the report,
    and checks every job came back judged."""
    site, site_path = shadow_site
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    time.sleep(1)
    # one-node jobs (TP=16 on 8 GPUs: a world-mismatch warning), run to the end: sacct -S
    # lists only jobs that became eligible, so a job
    # cancelled while held would not be replayed
    one = {
        True: "#!/bin/bash\n#SBATCH -N1 --gpus-per-node=8\nsrun true --tensor-model-parallel-size 16\n",
        False: "#!/bin/bash\n#SBATCH -N1 --gpus-per-node=8\nsrun true --tensor-model-parallel-size 8\n",
    }
    ids = [accounting_cluster.submit(one[i % 2 == 1]) for i in range(40)]
    for job in ids:
        accounting_cluster.wait_job(job, timeout=120)
    _wait_recorded(accounting_cluster, ids)
    _wait_scripts(accounting_cluster, ids)
    p = _slurmgpu(accounting_cluster, "admin", "replay", "--site", site_path, "--since", since, "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    rows = {r["job_id"]: r for r in rep["results"]}
    wrong = [(i, rows[str(i)]) for n, i in enumerate(ids) if rows[str(i)]["would"] != ("warn" if n % 2 else "accept")]
    assert not wrong, wrong
    print(
        "replay via sacct: %d jobs in %.2f s = %.0f jobs/s"
        % (rep["judged_now"], rep["seconds"], rep["jobs_per_second"])
    )


def test_admin_comment_token_on_every_release(slurm_cluster, job_submit):
    """The token reaches the job record (scontrol show job) on each Slurm release the suite runs,
    without accounting: job_desc.admin_comment is writable from job_submit.lua on 22.05 and 24.11."""
    site = load_site(str(TESTCLUSTER))
    job_submit(render_filter(site, "job_submit"))
    mark = slurm_cluster.log_mark()
    job = slurm_cluster.submit(GOOD, "-H")
    # two nodes on the ethernet test fabric without NCCL_SOCKET_IFNAME: nccl-env-missing warning
    warned = slurm_cluster.submit(GOOD.replace("export NCCL_SOCKET_IFNAME=lo\n", ""), "-H")
    # one node: decided from its fields in slurmctld (no TP group can span nodes), its advice
    # (world-mismatch for TP=16 on 8 GPUs) is check's and cli_filter's
    one_node = slurm_cluster.submit(BAD.replace("-N2", "-N1"), "-H")
    info = slurm_cluster.job_info(job) or {}
    assert info.get("AdminComment", "").strip() == "slurmgpu=ok", info
    token = (slurm_cluster.job_info(warned) or {}).get("AdminComment", "")
    assert token.startswith("slurmgpu=warn:nccl-env-missing"), token
    assert (slurm_cluster.job_info(one_node) or {}).get("AdminComment", "").strip() == "slurmgpu=ok", one_node
    assert "admin-comment" not in slurm_cluster.ctld_log(mark)
    assert slurm_cluster.job_submit_errors(mark) == []
