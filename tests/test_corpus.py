"""The project's own corpus of framework batch scripts (tests/corpus/<framework>/*.sh) through the
submit filter: `slurmgpu check`'s path (check_script, the Lua under lupa) and the real slurmctld
job_submit filter. Issue 16's done-when: no false rejects on real-world scripts, and the ones that
visibly run TP across nodes are rejected.

The scripts use the policy-case header (tests/policy_cases/cases.py: site, expect, rule,
message) plus `# shape:` (the request, for the reader). They are not policy cases: the case
runners do not glob them, so the corpus costs one lupa pass and one controller pass per release.
"""

from __future__ import annotations

import subprocess
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from slurmgpu.policy import PolicyRunner, Verdict, check_script, render_filter
from slurmgpu.site import Site, load_site, resolve_site_ref
from slurmgpu.slurm import het_count
from tests.policy_cases.cases import PolicyCase, parse_case, problems

ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = ROOT / "tests" / "corpus"
TESTCLUSTER = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"
REJECTED = "Invalid generic resource (gres) specification"  # 2072 as sbatch prints it

# Scripts the filter still judges wrongly, with why the fix is not a small local one. Each must
# still be judged wrongly (strict): a fix makes the test fail until the entry is removed.
KNOWN_WRONG: Dict[str, str] = {
    "x08-usage-heredoc-multinode": (
        "false reject: 'TP=16 PP=1 sbatch -N2 train.sh' in a usage() text heredoc (cat <<'USAGE') "
        "reads as an environment prefix; heredoc bodies are scanned on purpose (ds_config, yaml, "
        "toml, python), so this needs the heredoc's consumer (cat to the terminal vs a shell)"
    ),
}


def _corpus() -> List[Tuple[str, PolicyCase]]:
    return [(p.parent.name, parse_case(p)) for p in sorted(CORPUS_DIR.glob("*/*.sh"))]


CORPUS = _corpus()


def _outcome(v: Verdict) -> str:
    if v.decision == "reject":
        return "rejected"
    return "warned" if v.warnings else "accepted"


def _table(title: str, counts: Dict[str, Counter]) -> str:
    cols = ("accepted", "warned", "rejected", "false-reject", "missed")
    lines = [title, "%-20s %5s " % ("framework", "files") + " ".join("%12s" % c for c in cols)]
    total: Counter = Counter()
    for fw in sorted(counts):
        c = counts[fw]
        total.update(c)
        lines.append("%-20s %5d " % (fw, c["files"]) + " ".join("%12d" % c[k] for k in cols))
    lines.append("%-20s %5d " % ("total", total["files"]) + " ".join("%12d" % total[k] for k in cols))
    return "\n".join(lines)


def test_corpus_is_broad():
    """~60-80 scripts over the frameworks the brief names, each with a header the tests can read,
    real true positives among them, and bash accepting every one of them."""
    assert 60 <= len(CORPUS) <= 100
    frameworks = Counter(fw for fw, _ in CORPUS)
    for fw in ("megatron", "megatron-deepspeed", "nemo", "torchtitan", "deepspeed", "accelerate", "torchrun"):
        assert frameworks[fw] >= 4, fw
    for fw in ("srun", "vllm", "sglang", "hf-trainer", "cpu-single", "misc"):
        assert frameworks[fw] >= 4, fw
    rejects = [c for _, c in CORPUS if c.expect == "reject"]
    assert len(rejects) >= 8 and all(c.rules for c in rejects)
    for _, c in CORPUS:
        assert c.description and b"\n# shape: " in c.script, c.name
        p = subprocess.run(["bash", "-n", str(c.path)], capture_output=True, text=True)
        assert p.returncode == 0, (c.name, p.stderr)
    assert set(KNOWN_WRONG) <= {c.name for _, c in CORPUS}


def test_corpus_through_check(capsys):
    """Every script through check_script (what `slurmgpu check` runs) on its header's site: no
    false rejects beyond KNOWN_WRONG, every true positive rejected with its rule and message."""
    sites: Dict[str, Site] = {}
    counts: Dict[str, Counter] = defaultdict(Counter)
    wrong: Dict[str, str] = {}
    for fw, case in CORPUS:
        if case.site_ref not in sites:
            sites[case.site_ref] = load_site(resolve_site_ref(case.site_ref))
        site = sites[case.site_ref]
        v = check_script(site, case.script, case.args, env=case.env, user="bob", script_path=case.path.name)
        counts[fw]["files"] += 1
        counts[fw][_outcome(v)] += 1
        if v.decision != case.expect:
            counts[fw]["false-reject" if case.expect == "accept" else "missed"] += 1
            wrong[case.name] = "%s, expected %s: %s" % (v.decision, case.expect, list(v.messages)[:1])
            continue
        found = problems(case, v.decision, v.messages, v.warnings, v.rules, slurm_version=site.slurm_version)
        assert not found, (case.name, found, list(v.messages))
    with capsys.disabled():
        print("\n" + _table("corpus through slurmgpu check (lupa):", counts))
        for name, why in sorted(wrong.items()):
            print("  wrong: %s: %s" % (name, why))
    unexpected = {k: w for k, w in wrong.items() if k not in KNOWN_WRONG}
    assert not unexpected, unexpected
    fixed = sorted(set(KNOWN_WRONG) - set(wrong))
    assert not fixed, "now judged right, remove from KNOWN_WRONG: %s" % fixed


@pytest.mark.cluster
def test_corpus_through_the_controller(slurm_cluster, job_submit, capsys):
    """The dgx-h100 scripts against slurmctld running the rendered job_submit.lua (the test
    cluster's 'gpu' partition has the dgx-h100 node shape: 8 GPUs, NVLink domain 8). sbatch
    --test-only, except het jobs: --test-only asks about each component alone, so those are real
    held submissions, cancelled after. The controller must give `check`'s verdict on the same
    site, and the expected one (KNOWN_WRONG: the same wrong one)."""
    site = load_site(str(TESTCLUSTER))
    job_submit(render_filter(site, "job_submit"))
    runner = PolicyRunner(replace(site, slurm_version=slurm_cluster.release.version))
    counts: Dict[str, Counter] = defaultdict(Counter)
    mark = slurm_cluster.log_mark()
    env = dict(slurm_cluster.env)
    judged = 0
    for fw, case in CORPUS:
        if case.site != "dgx-h100":
            continue
        het = het_count(case.script, case.args) > 1
        mode = ("-H", "-o", "/dev/null") if het else ("--test-only",)
        rc, out, err = slurm_cluster.sbatch(case.script.decode("utf-8"), *mode, *case.args, env=env)
        if het and rc == 0:
            job = out.strip().split()[-1]
            slurm_cluster.run(["scancel", job])
        controller = "reject" if (rc != 0 and REJECTED in err) else "accept"
        predicted = runner.check(case.script, case.args, env=env, user="root", uid=0, script_path=case.path.name)
        assert controller == predicted.decision, (case.name, err)
        counts[fw]["files"] += 1
        counts[fw]["rejected" if controller == "reject" else "accepted"] += 1
        if controller != case.expect:
            counts[fw]["false-reject" if case.expect == "accept" else "missed"] += 1
            assert case.name in KNOWN_WRONG, (case.name, err)
        judged += 1
    with capsys.disabled():
        title = "corpus through slurmctld %s job_submit.lua (sbatch prints warnings only on real submissions):"
        print("\n" + _table(title % slurm_cluster.release.version, counts))
    assert judged >= 60
    log = slurm_cluster.ctld_log(mark)
    assert log.count("slurmgpu-filter: decision=") >= judged
    assert slurm_cluster.job_submit_errors(mark) == []
