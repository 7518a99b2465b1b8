"""policy.script_check batch-step (issue 33, cost): job_submit reads no batch script, arguments or
environment of a job it may run on several nodes, and the SPANK plugin judges the script at the
batch step instead. These tests hold the two halves to the guarantee over every policy case:
whatever job_submit refuses on a `submit` site is refused at the batch step of a `batch-step`
site (or still by job_submit, for the jobs it keeps), with the same rules, at the job's real
node count. The plugin's C side (reading the script from the batch task's argv[0]) is tested
with its harness here and on the real clusters in tests/test_spank.py."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytest

from slurmgpu.policy import render_filter
from slurmgpu.policy.run import PolicyRunner
from slurmgpu.site import load_site, resolve_site_ref
from slurmgpu.site.model import Site
from slurmgpu.slurm import het_count, job_desc
from tests.policy_cases.cases import load_cases
from tests.test_spank import build_plugin, harness

lupa = pytest.importorskip("lupa")

ROOT = Path(__file__).resolve().parent.parent
CASES = load_cases()
BATCH_STEP_ID = 4294967291  # SLURM_BATCH_SCRIPT


def batch_site(site: Site, logged: bool = True) -> Site:
    pol = replace(site.policy, script_check="batch-step")
    if logged:
        pol = replace(pol, single_node_log_s=0)
    return replace(site, policy=pol)


class SpankPolicy:
    """The rendered spank policy of a site in lupa's Lua 5.1 (what the plugin loads)."""

    def __init__(self, site: Site):
        self.rt = lupa.lua51.LuaRuntime(unpack_returned_tuples=True)
        self.rt.execute(render_filter(site, "spank"))
        self.check = self.rt.eval("slurmgpu_spank_check")
        self.batch = bool(self.rt.eval("slurmgpu_spank_batch"))

    def batch_step(
        self, script: str, argv: List[str], env: Mapping[str, str], uid: int = 1000, user: str = "bob"
    ) -> Tuple[str, str, str]:
        step = {
            "batch": True,
            "script": script,
            "argv": self.rt.table_from(argv),
            "env": self.rt.table_from(dict(env)),
            "nnodes": 1,
            "node_id": 0,
            "local_tasks": 1,
            "total_tasks": 1,
            "task_id": 0,
            "global_task_id": 0,
            "step_id": BATCH_STEP_ID,
            "uid": uid,
            "user": user,
        }
        action, message, line = self.check(self.rt.table_from(step), self.rt.table_from({"mode": "enforce"}))
        return str(action), str(message), str(line)


def _gpu_value(tres: Optional[str]) -> Optional[str]:
    """'gres:gpu:h100:8' / 'gres/gpu:8' -> 'h100:8' / '8' (what sbatch exports for the option)."""
    if not tres:
        return None
    for item in tres.split(","):
        m = re.match(r"^(?:gres[:/])?gpu[:=](.+)$", item)
        if m:
            return m.group(1)
    return None


def _gpus_on_node(tres: Optional[str]) -> Optional[str]:
    """The GPUs a per-node request gives each node, as Slurm reads 'gres:gpu:8,gres:gpu:4' (the last
    of each type wins, types add up): what slurmstepd puts in SLURM_GPUS_ON_NODE."""
    by_type: Dict[str, int] = {}
    for item in (tres or "").split(","):
        m = re.match(r"^(?:gres[:/])?gpu(?:[:=](?:([A-Za-z_][\w.-]*)[:=])?(\d+))?$", item)
        if m:
            by_type[m.group(1) or ""] = int(m.group(2) or 1)
    return str(sum(by_type.values())) if by_type else None


def batch_env(desc: Mapping[str, Any], nodes: int, partition: str) -> Dict[str, str]:
    """The batch step's environment for a job_desc: the submitted environment, the SLURM_* that
    sbatch exports for the options it was given, and what slurmstepd sets from the allocation."""
    env = {str(k): str(v) for k, v in (desc.get("environment") or {}).items()}
    env["SLURM_JOB_NUM_NODES"] = str(nodes)
    env["SLURM_NNODES"] = str(nodes)
    env["SLURM_JOB_PARTITION"] = partition
    exported = {
        "SLURM_GPUS_PER_NODE": _gpu_value(desc.get("tres_per_node")),
        "SLURM_GPUS": _gpu_value(desc.get("tres_per_job")),
        "SLURM_GPUS_PER_TASK": _gpu_value(desc.get("tres_per_task")),
        "SLURM_CPUS_PER_GPU": _gpu_value(desc.get("cpus_per_tres")),
        "SLURM_NTASKS": desc.get("num_tasks"),
        "SLURM_NTASKS_PER_NODE": desc.get("ntasks_per_node"),
        "SLURM_CPUS_PER_TASK": desc.get("cpus_per_task"),
        "SLURM_NTASKS_PER_GPU": desc.get("ntasks_per_tres"),
    }
    # slurmd sets these from the job record (tests/test_policy_accounting.py)
    for k, field_ in (("SLURM_JOB_ACCOUNT", "account"), ("SLURM_JOB_QOS", "qos")):
        if desc.get(field_):
            env[k] = str(desc[field_])
    if not desc.get("tres_per_job") and not desc.get("tres_per_task"):
        exported["SLURM_GPUS_ON_NODE"] = _gpus_on_node(desc.get("tres_per_node"))
    for k, v in exported.items():
        if v is not None:
            env[k] = str(v)
    return env


def _rules(line: str) -> List[str]:
    m = re.search(r" rules=(\S+)", line)
    return [] if not m or m.group(1) == "-" else m.group(1).split(",")


def _cases_by_site() -> Dict[str, list]:
    by_site: Dict[str, list] = {}
    for c in CASES:
        by_site.setdefault(c.site_ref, []).append(c)
    return by_site


def _partitions(desc: Mapping[str, Any], site: Site) -> List[str]:
    names = [p for p in str(desc.get("partition") or "").split(",") if p]
    return names or [site.default_partition]


def _who(c: Any) -> Dict[str, Any]:
    """The case's submitting user, environment, account and QOS, as keywords."""
    return {"env": c.env, "user": c.user or "bob", "account": c.account, "qos": c.qos, "script_path": c.path.name}


def _text(c: Any) -> str:
    return c.script.decode("utf-8", "surrogateescape") if isinstance(c.script, bytes) else c.script


def _spans_trays(site: Site, part: str) -> bool:
    """A partition whose NVLink domain spans nodes (NVL72): job_submit keeps such jobs."""
    return part in site.partitions and site.node_types[site.partitions[part].node_type].domain_nodes > 1


def test_every_refused_case_is_refused_at_the_batch_step() -> None:
    """Each policy case job_submit refuses on its site (submit) is, on the same site with
    script_check batch-step, either still refused by job_submit (a job it keeps: het, a multi-node
    NVLink domain, a rule its fields decide) or accepted by it without reading the script and
    refused at the batch step with the same rules, at every node count the job may get above one."""
    checked = deferred = kept = 0
    for ref, cases in _cases_by_site().items():
        site = load_site(resolve_site_ref(ref))
        full = PolicyRunner(replace(site, policy=replace(site.policy, single_node_log_s=0)))
        light = PolicyRunner(batch_site(site))
        spank = SpankPolicy(batch_site(site))
        assert spank.batch
        for c in cases:
            n = het_count(c.script, c.args)
            if n > 1:
                continue  # het jobs: job_submit keeps them (test_het_and_nvl72_jobs_are_kept)
            d = job_desc(c.script, c.args, **_who(c))
            rc, msgs = full.submit_desc(d, uid=1000)
            if rc == 0:
                continue
            checked += 1
            rc2, msgs2, log2 = light.submit_desc_logged(d, uid=1000)
            if rc2 != 0:
                kept += 1
                assert msgs2 == msgs, c.name
                continue
            assert any("source=batch-step" in ln for ln in log2), (c.name, log2)
            deferred += 1
            lo, hi = int(d.get("min_nodes") or 1), int(d.get("max_nodes") or d.get("min_nodes") or 1)
            script = _text(c)
            argv = [str(a) for a in (d.get("argv") or [c.path.name])]
            refused_on = 0
            for part in _partitions(d, site):
                if part not in site.partitions:
                    continue
                # the job runs on one of its partitions: judged there as job_submit judges that one
                there = full.evaluate_desc(dict(d, partition=part), uid=1000)
                if there.accepted:
                    continue
                refused_on += 1
                full_rules = set(there.rules)
                for nodes in sorted({lo, hi}):
                    if nodes < 2:
                        continue
                    action, message, line = spank.batch_step(script, argv, batch_env(d, nodes, part))
                    where = "%s on %s at %d nodes" % (c.name, part, nodes)
                    assert action == "reject", (where, line, msgs)
                    assert "origin=batch-step" in line, line
                    assert set(_rules(line)) & full_rules, (where, line, full_rules)
            assert refused_on or not set(_partitions(d, site)) & set(site.partitions), c.name
    # the suite's refused single-job cases: most are left to the batch step, a few kept
    print("refused cases:", checked, "left to the batch step:", deferred, "kept by job_submit:", kept)
    assert checked >= 60 and deferred >= 40, (checked, deferred, kept)


def test_accepted_cases_are_accepted_at_the_batch_step() -> None:
    """No false refusals: a case job_submit accepts on a submit site is accepted at the batch step of
    a batch-step site too, at the node counts it may get (warnings may be printed); exempt users,
    accounts and QOS included (the batch step has the job's account and QOS from slurmd)."""
    checked = exempt = 0
    for ref, cases in _cases_by_site().items():
        site = load_site(resolve_site_ref(ref))
        full = PolicyRunner(site)
        spank = SpankPolicy(batch_site(site))
        for c in cases:
            if het_count(c.script, c.args) > 1:
                continue
            d = job_desc(c.script, c.args, **_who(c))
            v = full.evaluate_desc(d, uid=1000)
            if not v.accepted:
                continue
            exempt += v.exempt
            script = _text(c)
            argv = [str(a) for a in (d.get("argv") or [c.path.name])]
            lo, hi = int(d.get("min_nodes") or 1), int(d.get("max_nodes") or d.get("min_nodes") or 1)
            for part in _partitions(d, site):
                if part not in site.partitions or _spans_trays(site, part):
                    continue
                for nodes in sorted({lo, hi}):
                    env = batch_env(d, nodes, part)
                    action, _, line = spank.batch_step(script, argv, env, user=c.user or "bob")
                    assert action in ("allow", "warn"), (c.name, part, nodes, line)
                    checked += 1
    assert checked >= 40 and exempt >= 3, (checked, exempt)


def test_het_and_nvl72_jobs_are_kept_by_job_submit() -> None:
    """Het jobs (a step over several components is judged from all of them) and jobs on a partition
    whose NVLink domain spans nodes (--segment is a job field) keep the whole analysis in job_submit:
    the same verdict and messages as on a submit site."""
    kept = 0
    for ref, cases in _cases_by_site().items():
        site = load_site(resolve_site_ref(ref))
        full = PolicyRunner(replace(site, policy=replace(site.policy, single_node_log_s=0)))
        light = PolicyRunner(batch_site(site))
        for c in cases:
            n = het_count(c.script, c.args)
            multi_domain = any(_spans_trays(site, name) for name in site.partitions)
            if n == 1 and not multi_domain:
                continue
            if n > 1:
                a = full.check(c.script, c.args, uid=1000, **_who(c))
                b = light.check(c.script, c.args, uid=1000, **_who(c))
                assert (a.accepted, a.messages) == (b.accepted, b.messages), c.name
                kept += 1
                continue
            d = job_desc(c.script, c.args, **_who(c))
            if any(_spans_trays(site, p) for p in _partitions(d, site)):
                assert full.submit_desc(d, uid=1000) == light.submit_desc(d, uid=1000), c.name
                kept += 1
    assert kept >= 10, kept


def test_batch_step_controller_reads_no_script_arguments_or_environment() -> None:
    """On a batch-step site job_submit never reads job_desc.script, argv or environment of a
    multi-node job it leaves to the batch step (each read costs slurmctld a copy or a search), logs
    it as source=batch-step and counts it in the summary line like one-node accepts."""
    site = load_site(resolve_site_ref("dgx-h100"))
    rt = lupa.lua51.LuaRuntime(unpack_returned_tuples=True)
    rt.execute((ROOT / "contrib" / "lua" / "slurm_stub.lua").read_text())
    rt.execute(render_filter(batch_site(site, logged=False), "job_submit"))
    case = next(c for c in CASES if c.name.startswith("01-"))
    d = job_desc(case.script, case.args, env={"SLURMGPU_TP": "16"}, script_path="job.sh")
    reads = rt.execute(
        """
        local d, parts = ...
        local seen = {}
        local proxy = slurmgpu_stub.job_desc(d)
        local traced = setmetatable({}, {__index = function(_, k) seen[k] = true; return proxy[k] end,
                                         __newindex = function(_, k, v) proxy[k] = v end})
        local rc = slurm_job_submit(traced, parts, 1000)
        return rc, seen.script == true, seen.argv == true, seen.environment == true
        """,
        rt.table_from(d, recursive=True),
        rt.table_from(__import__("slurmgpu.policy.run", fromlist=["part_list"]).part_list(site), recursive=True),
    )
    assert tuple(reads) == (0, False, False, False)


@pytest.fixture(scope="module")
def spank_build(tmp_path_factory) -> Path:
    return build_plugin(tmp_path_factory)


def _harness(plugin_dir: Path, policy: Path, script: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess:
    """The plugin's C entry in the batch step of a job (its one task: the script and an argument)."""
    return harness(plugin_dir, ["policy=%s" % policy], [str(script), "arg1"], env=dict(env), step=BATCH_STEP_ID)


BATCH_ENV = {
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_GPUS_PER_NODE": "8",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_JOB_PARTITION": "gpu",
    "SLURM_GPUS_ON_NODE": "8",
}


def test_plugin_reads_the_batch_script_only_on_batch_step_sites(spank_build: Path, tmp_path: Path) -> None:
    """The plugin reads the batch task's argv[0] (slurmd's copy of the script) and judges it where the
    policy says script_check batch-step; on a submit site it lets the batch step run untouched."""
    site = load_site(resolve_site_ref("dgx-h100"))
    tp16 = next(c for c in CASES if c.name.startswith("01-")).script
    script = tmp_path / "slurm_script"
    script.write_bytes(tp16 if isinstance(tp16, bytes) else tp16.encode())
    pols = {}
    for name, s in (("submit", site), ("batch", batch_site(site))):
        pols[name] = tmp_path / ("%s.lua" % name)
        pols[name].write_text(render_filter(s, "spank"))
    r = _harness(spank_build, pols["submit"], script, BATCH_ENV)
    assert r.returncode == 0 and "slurmgpu" not in r.stderr, r.stderr
    r = _harness(spank_build, pols["batch"], script, BATCH_ENV)
    expected = PolicyRunner(site).check(tp16).messages
    assert r.returncode != 0 and expected, r.stderr
    assert any(ln.startswith("error: " + expected[0][:60]) for ln in r.stderr.splitlines()), r.stderr
    assert "origin=batch-step" in r.stderr
    # the same script with TP=8 x PP=2 runs
    script.write_text(
        script.read_text()
        .replace("size 16", "size 8")
        .replace("pipeline-model-parallel-size 1", "pipeline-model-parallel-size 2")
    )
    r = _harness(spank_build, pols["batch"], script, BATCH_ENV)
    assert r.returncode == 0 and "error" not in r.stderr, r.stderr
    # past 4 MB the rest is unread: a multi-node script is refused (scan-truncated), a 1-node one runs
    script.write_text(script.read_text() + "#" * (4 * 1024 * 1024))
    r = _harness(spank_build, pols["batch"], script, BATCH_ENV)
    assert r.returncode != 0 and "rules=scan-truncated" in r.stderr, r.stderr
    r = _harness(spank_build, pols["batch"], script, dict(BATCH_ENV, SLURM_JOB_NUM_NODES="1"))
    assert r.returncode == 0, r.stderr
    # an unreadable script is the plugin's internal error: on_error= decides, and it is logged
    r = _harness(spank_build, pols["batch"], tmp_path / "missing", BATCH_ENV)
    assert r.returncode == 0 and "cannot read the batch script" in r.stderr, r.stderr


def test_check_says_where_a_batch_step_site_refuses(tmp_path: Path) -> None:
    """`slurmgpu check` on a batch-step site gives the whole verdict and says that sbatch will accept
    the job and its batch step refuse it; --json says judged_at. A het job stays with job_submit."""
    import json

    import yaml
    from click.testing import CliRunner

    from slurmgpu.cli import main

    data = yaml.safe_load((ROOT / "site-configs" / "dgx-h100.yaml").read_text())
    data.setdefault("policy", {})["script_check"] = "batch-step"
    site_file = tmp_path / "batch.yaml"
    site_file.write_text(yaml.safe_dump(data))
    case = next(c for c in CASES if c.name.startswith("01-"))
    job = tmp_path / "job.sh"
    job.write_bytes(case.script if isinstance(case.script, bytes) else case.script.encode())
    env = {"SLURMGPU_SITE": None, "SLURM_CONF": None, "XDG_CONFIG_HOME": str(tmp_path)}
    r = CliRunner().invoke(main, ["check", "--site", str(site_file), str(job)], env=env)
    assert r.exit_code == 1, r.output
    assert "judges this script when the job starts" in r.output and "REJECTED" in r.output, r.output
    r = CliRunner().invoke(main, ["check", "--site", str(site_file), "--json", str(job)], env=env)
    assert json.loads(r.stdout)["judged_at"] == "batch-step"
    r = CliRunner().invoke(main, ["check", "--site", "dgx-h100", "--json", str(job)], env=env)
    assert json.loads(r.stdout)["judged_at"] == "submit"
    het = next(
        c for c in CASES if het_count(c.script, c.args) > 1 and c.expect == "reject" and c.site_ref == "dgx-h100"
    )
    job.write_bytes(het.script if isinstance(het.script, bytes) else het.script.encode())
    r = CliRunner().invoke(main, ["check", "--site", str(site_file), str(job)], env=env)
    assert r.exit_code == 1 and "judges this script when the job starts" not in r.output, r.output
