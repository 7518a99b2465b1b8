"""admin replay, admin stats and the AdminComment token without a cluster: a directory of
scripts, sacct output in the format Slurm 22.05 prints it (captured from the accounting test
cluster), the filter's log lines, the Prometheus text parser."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.policy import PolicyRunner
from slurmgpu.policy.replay import SacctQuery, jobs_from_sacct, parse_listing, parse_sections
from slurmgpu.policy.stats import Stats, collect, parse_line, prometheus_text, write_atomic
from slurmgpu.site import load_site
from slurmgpu.slurm.runner import CommandResult

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "policy_cases"
LAB = str(CASES / "sites" / "lab.yaml")
SHADOW = str(CASES / "sites" / "lab-shadow.yaml")


@pytest.fixture
def script_dir(tmp_path):
    d = tmp_path / "scripts"
    d.mkdir()
    for name in ("90-shadow-would-reject.sh", "91-shadow-ok.sh", "92-shadow-would-warn.sh"):
        shutil.copy(CASES / name, d / name)
    (d / ".hidden").write_text("not a job\n")
    return d


def _replay(*args: str):
    return CliRunner().invoke(main, ["admin", "replay", *args], catch_exceptions=False)


def test_replay_from_dir_groups_would_be_verdicts(script_dir):
    r = _replay("--site", SHADOW, "--from-dir", str(script_dir), "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    rows = {x["job_id"]: x for x in rep["results"]}
    assert set(rows) == {"90-shadow-would-reject.sh", "91-shadow-ok.sh", "92-shadow-would-warn.sh"}
    assert rows["90-shadow-would-reject.sh"]["would"] == "reject"
    assert rows["90-shadow-would-reject.sh"]["verdict"] == "shadow-reject"
    assert rows["91-shadow-ok.sh"]["would"] == "accept" and rows["91-shadow-ok.sh"]["verdict"] == "ok"
    assert rows["92-shadow-would-warn.sh"]["would"] == "warn"
    assert rep["counts"] == {"accept": 1, "warn": 1, "reject": 1, "skipped": 0, "error": 0}
    g = rep["by_rule"]["tp-exceeds-domain"]
    assert g["reject"] == 1 and g["examples"] == ["90-shadow-would-reject.sh"]
    assert any("TP=16" in m for m in g["messages"])  # what the user would have read
    assert "megatron" in rep["by_launcher"]
    text = _replay("--site", SHADOW, "--from-dir", str(script_dir)).stdout
    assert "enforcing would reject 1, warn 1, accept 1" in text and "by rule:" in text


def test_replay_csv_and_enforce(script_dir):
    r = _replay("--site", LAB, "--from-dir", str(script_dir), "--csv")
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows[0][:3] == ["job_id", "user", "account"] and len(rows) == 4
    by_id = {row[0]: row for row in rows[1:]}
    assert by_id["90-shadow-would-reject.sh"][6:8] == ["reject", "reject"]  # lab enforces h100
    # a warn partition: --enforce asks what enforcing it would do
    (script_dir / "soft.sh").write_text(
        "#!/bin/bash\n#SBATCH -p soft -N2 --gpus-per-node=8\nexport NCCL_IB_HCA==mlx5_0\n"
        "srun python x.py --tensor-model-parallel-size 16\n"
    )
    plain = json.loads(_replay("--site", LAB, "--from-dir", str(script_dir), "--json").stdout)
    forced = json.loads(_replay("--site", LAB, "--from-dir", str(script_dir), "--json", "--enforce").stdout)
    assert {x["job_id"]: x["would"] for x in plain["results"]}["soft.sh"] == "warn"
    assert {x["job_id"]: x["would"] for x in forced["results"]}["soft.sh"] == "reject"


def test_replay_resumes_from_its_state_and_refuses_another(script_dir, tmp_path):
    state = tmp_path / "state.json"
    first = json.loads(
        _replay("--site", SHADOW, "--from-dir", str(script_dir), "--state", str(state), "--limit", "2", "--json").stdout
    )
    assert first["jobs"] == 2 and first["truncated"] is True
    second = json.loads(
        _replay("--site", SHADOW, "--from-dir", str(script_dir), "--state", str(state), "--json").stdout
    )
    assert second["jobs"] == 3 and second["judged_now"] == 1
    r = CliRunner().invoke(
        main, ["admin", "replay", "--site", LAB, "--from-dir", str(script_dir), "--state", str(state)]
    )
    assert r.exit_code == 2 and "belongs to another replay" in r.output


def test_replay_usage_errors(script_dir):
    r = CliRunner().invoke(main, ["admin", "replay", "--site", LAB])
    assert r.exit_code == 2 and "--since WHEN" in r.output
    r = CliRunner().invoke(main, ["admin", "replay", "--site", LAB, "--from-dir", str(script_dir), "--user", "x"])
    assert r.exit_code == 2 and "use them with --since" in r.output
    r = CliRunner().invoke(main, ["admin", "replay", "--site", LAB, "--from-dir", str(script_dir / "nope")])
    assert r.exit_code == 2 and "not a directory" in r.output


# sacct 22.05 output, as the accounting test cluster printed it
BATCH = (
    "Batch Script for 7\n" + "-" * 80 + "\n#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\n"
    "srun python x.py --tensor-model-parallel-size 16\n\n"
    "Batch Script for 8\n" + "-" * 80 + "\nNONE\n\n"
)
ENV = "Environment used for 7 (must be batch to display)\n" + "-" * 80 + "\nNCCL_IB_HCA==mlx5_0\nHOME=/root\n\n"
ENV8 = "Environment used for 8 (must be batch to display)\n" + "-" * 80 + "\nNONE\n\n"


class Recorded:
    """A Runner answering sacct calls with recorded text (and counting them)."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def run(self, argv, timeout=60.0):
        self.calls.append(list(argv))
        for key, text in self.answers:
            if key(list(argv)):
                return CommandResult(tuple(argv), 0, text, "")
        return CommandResult(tuple(argv), 1, "", "sacct: error: no answer recorded")


def test_parse_sections_and_listing():
    assert parse_sections(BATCH) == [
        ("7", "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\nsrun python x.py --tensor-model-parallel-size 16\n"),
        ("8", "NONE\n"),
    ]
    rows = parse_listing("7|alice|1000|research|gpu|normal|2026-12-01T10:00:00|sbatch --wrap 'a|b\nc'\n")
    assert rows[0]["SubmitLine"] == "sbatch --wrap 'a|b\nc'" and rows[0]["User"] == "alice"


def test_jobs_from_sacct_rebuilds_the_submission(tmp_path):
    listing = (
        "7|carol|1000|research|gpu|normal|2026-12-01T10:00:00|sbatch -p h100 train.sh\n"
        "8|bob|1001|research|gpu|normal|2026-12-01T10:00:01|sbatch --wrap true\n"
    )
    runner = Recorded(
        [
            (lambda a: "-o" in a, listing),
            (lambda a: a[1] == "--batch-script", BATCH),
            (lambda a: a[1] == "--env-vars", ENV + ENV8),
        ]
    )
    jobs = list(jobs_from_sacct(runner, SacctQuery("2026-12-01", user="carol", partition="gpu")))
    assert runner.calls[0][:5] == ["sacct", "-a", "-X", "-P", "--noheader"]
    assert ["-u", "carol"] == runner.calls[0][-4:-2] and ["-r", "gpu"] == runner.calls[0][-2:]
    assert [j.job_id for j in jobs] == ["7", "8"] and jobs[1].script is None
    assert jobs[0].env == {"NCCL_IB_HCA": "=mlx5_0", "HOME": "/root"} and jobs[0].uid == 1000
    from slurmgpu.policy.replay import ReplayState, replay

    rep = replay(load_site(LAB), jobs, ReplayState(None, "x"))
    rows = {r.job_id: r for r in rep.rows}
    assert rows["7"].would == "reject" and "tp-exceeds-domain" in rows["7"].rules
    assert rows["8"].would == "skipped"


def test_sacct_sections_that_do_not_match_fall_back_to_one_job_per_call():
    """A script that prints a 'Batch Script for N' header of its own must not shift the others."""
    fake = "Batch Script for 7\n" + "-" * 80 + "\necho\nBatch Script for 99\n" + "-" * 80 + "\nx\n\n"
    fake += "Batch Script for 8\n" + "-" * 80 + "\nNONE\n\n"
    runner = Recorded(
        [
            (lambda a: "-o" in a, "7|a|1|r|gpu|n|t|sbatch j.sh\n8|a|1|r|gpu|n|t|sbatch j.sh\n"),
            (lambda a: a[1:] == ["--batch-script", "-j", "7,8"], fake),
            (lambda a: a[1:] == ["--batch-script", "-j", "7"], fake.split("Batch Script for 8")[0]),
            (lambda a: a[1:] == ["--batch-script", "-j", "8"], "Batch Script for 8\n" + "-" * 80 + "\nNONE\n\n"),
            (lambda a: a[1] == "--env-vars", ENV.replace("7", "7") + ENV8),
        ]
    )
    jobs = list(jobs_from_sacct(runner, SacctQuery("2026-12-01")))
    assert jobs[0].script == b"echo\n" and jobs[1].script is None
    assert ["sacct", "--batch-script", "-j", "8"] in runner.calls


def test_replay_reports_a_failing_sacct():
    runner = Recorded([])
    with pytest.raises(Exception, match="cannot list past jobs"):
        list(jobs_from_sacct(runner, SacctQuery("2026-12-01")))


# ---------------------------------------------------------------- audit token


def _submit(desc):
    r = PolicyRunner(load_site(SHADOW), backend="lupa")
    rt = r._lua
    return r._submit(rt.table_from(desc, recursive=True), rt.table_from(r.parts, recursive=True), 1000)


BAD_DESC = {
    "script": "#!/bin/bash\nsrun python x.py --tensor-model-parallel-size 16\n",
    "partition": "h100",
    "min_nodes": 2,
    "tres_per_node": "gres:gpu:8",
    "environment": {"NCCL_IB_HCA": "=mlx5_0"},
    "user_name": "bob",
}


def test_admin_comment_token_appends_to_the_sites_text():
    rc, msgs, log, comment = _submit(BAD_DESC)
    assert rc == 0 and list(msgs.values()) == []  # shadow: through, silently
    assert comment == "slurmgpu=shadow-reject:tp-exceeds-domain"
    rc, _, _, comment = _submit(dict(BAD_DESC, admin_comment="site: keep me"))
    assert comment == "site: keep me slurmgpu=shadow-reject:tp-exceeds-domain"
    # an earlier token (a second pass) is replaced, the site's text kept
    rc, _, _, comment = _submit(dict(BAD_DESC, admin_comment="slurmgpu=ok site: keep me"))
    assert comment == "site: keep me slurmgpu=shadow-reject:tp-exceeds-domain"
    rc, _, log, comment = _submit(dict(BAD_DESC, admin_comment="x" * 2000))
    assert comment == "x" * 2000 and any("over 1024 bytes" in line for line in log.values())


def test_admin_comment_token_is_bounded():
    r = PolicyRunner(load_site(SHADOW), backend="lupa")
    word = r._lua.eval("slurmgpu_filter.policy.audit_token")
    v = r._lua.table_from(
        {"decision": "accept", "warnings": ["w"], "rules": ["rule-%02d-long-name" % i for i in range(20)]},
        recursive=True,
    )
    token = word(v)
    assert len(token) <= 96 and token.startswith("slurmgpu=warn:rule-00-long-name,") and token.endswith("+")


def test_rejected_job_gets_no_token():
    r = PolicyRunner(load_site(LAB), backend="lupa")
    rt = r._lua
    rc, msgs, log, comment = r._submit(
        rt.table_from(BAD_DESC, recursive=True), rt.table_from(r.parts, recursive=True), 1000
    )
    assert rc == 2072 and comment is None


# ----------------------------------------------------------------------- stats

F = "lua: slurmgpu-filter: decision="
L = " tp=1 pp=1 cp=1 ep=1 source=none launcher=- mode=enforce rules=- verdict=ok"
LOG = (
    "\n".join(
        [
            "[2026-12-01T10:00:00.001] " + F + "accept code=0 origin=job_submit user=root partition=(default gpu)"
            " tp=16 pp=1 cp=1 ep=1 source=flags launcher=megatron mode=shadow rules=tp-exceeds-domain"
            " verdict=shadow-reject",
            "[2026-12-01T10:00:01.002] " + F + "accept code=0 origin=job_submit user=root partition=gpu"
            " tp=8 pp=2 cp=1 ep=1 source=flags launcher=megatron mode=shadow rules=- verdict=ok",
            "[2026-12-01T10:00:02.003] " + F + "reject code=2072 origin=job_submit user=bob partition=pcie"
            " tp=2 pp=1 cp=1 ep=1 source=flags launcher=- mode=enforce rules=tp-exceeds-domain,pcie-multinode",
            "[2026-12-01T10:00:03.004] lua: slurmgpu-filter: warning unknown-partition=debug: partition 'debug' is not",
            "[2026-11-01T10:00:03.004] " + F + "accept code=0 origin=job_submit user=old partition=gpu" + L,
            "slurmgpu-filter: decision=accept code=0 origin=job_submit user=x partition=gpu" + L,
        ]
    )
    + "\n"
)


def test_parse_line():
    v = parse_line(LOG.splitlines()[0])
    assert v is not None and (v.verdict, v.partition, v.rules) == ("shadow-reject", "gpu", ("tp-exceeds-domain",))
    old = parse_line(LOG.splitlines()[2])  # a filter from before verdict=: classified by decision
    assert old is not None and old.verdict == "reject" and old.rules == ("tp-exceeds-domain", "pcie-multinode")
    assert parse_line(LOG.splitlines()[3]) is None


def test_stats_window_and_prometheus(tmp_path):
    from datetime import datetime

    from prometheus_client.parser import text_string_to_metric_families

    log = tmp_path / "slurmctld.log"
    log.write_text(LOG)
    since = datetime(2026, 12, 1, 9, 0).timestamp()
    until = datetime(2026, 12, 1, 11, 0).timestamp()
    st = collect([str(log)], since, until)
    assert st.lines == 3 and st.undated == 1
    assert st.verdict_totals()["shadow-reject"] == 1 and st.verdict_totals()["ok"] == 1
    assert "1 decision lines had no timestamp" in st.text()
    prom = tmp_path / "out.prom"
    write_atomic(str(prom), prometheus_text(st, 'la"b'))
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    decisions = {
        (s.labels["verdict"], s.labels["partition"]): s.value for s in fams["slurmgpu_filter_decisions"].samples
    }
    assert decisions == {("shadow-reject", "gpu"): 1, ("ok", "gpu"): 1, ("reject", "pcie"): 1}
    assert {s.labels["site"] for s in fams["slurmgpu_filter_decisions"].samples} == {'la"b'}
    hits = {(s.labels["rule"], s.labels["verdict"]): s.value for s in fams["slurmgpu_filter_rule_hits"].samples}
    assert hits[("tp-exceeds-domain", "reject")] == 1 and hits[("pcie-multinode", "reject")] == 1
    assert fams["slurmgpu_filter_window_seconds"].samples[0].value == 7200
    assert not list(tmp_path.glob(".*tmp"))  # nothing half-written left behind
    whole = collect([str(log)], None, until)
    assert whole.lines == 5  # no window: the undated line counts too


def test_stats_cli(tmp_path):
    log = tmp_path / "slurmctld.log"
    log.write_text(LOG)
    prom = tmp_path / "m.prom"
    r = CliRunner().invoke(
        main, ["admin", "stats", "--log", str(log), "--since", "2026-12-01", "--prometheus", str(prom), "--json"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["verdicts"]["shadow-reject"] == 1 and prom.exists()
    r = CliRunner().invoke(main, ["admin", "stats", "--log", str(log), "--since", "yesterday-ish"])
    assert r.exit_code == 2 and "expected a duration" in r.output
    r = CliRunner().invoke(main, ["admin", "stats", "--log", str(tmp_path / "missing.log")])
    assert r.exit_code == 2 and "cannot read" in r.output


def test_stats_counts_nothing_outside_the_window():
    st = Stats(since=10.0, until=20.0)
    from slurmgpu.policy.stats import LogVerdict

    st.add(LogVerdict(5.0, "ok", "gpu", "job_submit", ()))
    st.add(LogVerdict(25.0, "ok", "gpu", "job_submit", ()))
    st.add(LogVerdict(15.0, "warn", "gpu", "job_submit", ("x",)))
    assert st.lines == 1 and st.verdict_totals()["warn"] == 1


def test_check_shows_the_would_be_verdict_in_shadow_mode():
    r = CliRunner().invoke(main, ["check", "--site", SHADOW, str(CASES / "90-shadow-would-reject.sh")])
    assert r.exit_code == 0, r.output
    assert "shadow: slurmgpu: TP=16" in r.stderr and "error:" not in r.output  # diagnostics on stderr
    assert "accepted (shadow mode: enforcing would reject it)" in r.stdout
