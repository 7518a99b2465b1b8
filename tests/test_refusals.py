"""`check` mirrors what sbatch and slurmctld refuse before any filter (slurmgpu/slurm/refusals.py).

CASES are submissions to the test cluster's partitions (tests/data/sites/testcluster.yaml: gpu
4 x 8 GPUs, gpu4 2 x 4 GPUs, pcie 2 x 8; 16 CPUs and 64000 MB per node) with what the real
sbatch and slurmctld answered (22.05.8 and 24.11.5): the unit test holds `check` to those
answers, the cluster test submits each case for real and holds the answers to the cluster.
Before, `check` said "accepted" (exit 0) for every one of them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.slurm.refusals import RULES, Rule

ROOT = Path(__file__).resolve().parent.parent
TESTCLUSTER = ROOT / "tests" / "data" / "sites" / "testcluster.yaml"


RELEASES = ("22.05", "24.11", "26.05")


class Case(NamedTuple):
    name: str
    directives: str  # the #SBATCH lines
    args: Tuple[str, ...]  # sbatch options on the command line
    outcome: str  # ok | refused | warn (accepted, but it can never start)
    said: str  # sbatch's words (refused) or the warning's
    on_2411: Optional[Tuple[str, str]] = None  # (outcome, said) where 24.11 (but not 26.05) answers otherwise

    def on(self, release: str) -> Tuple[str, str]:
        if self.on_2411 is not None and (24, 11) <= tuple(int(x) for x in release.split(".")[:2]) < (26, 5):
            return self.on_2411
        return self.outcome, self.said


CASES: List[Case] = [
    Case("plain", "#SBATCH -N 1", (), "ok", ""),
    Case("comment after options", "#SBATCH -N 1 # one node", (), "ok", ""),
    Case("a word, not an option", "#SBATCH nodes=2", (), "refused", "Invalid directive found in batch script: nodes=2"),
    Case(
        "a word after an option",
        "#SBATCH --nodes=1 extra",
        (),
        "refused",
        "Invalid directive found in batch script: extra",
    ),
    Case("unknown long option", "#SBATCH --foo=1", (), "refused", "unrecognized option '--foo=1'"),
    Case("unknown option on the command line", "#SBATCH -N 1", ("--foo",), "refused", "unrecognized option '--foo'"),
    Case("bad time", "#SBATCH --time=90m", (), "refused", "Invalid --time specification"),
    Case("time unlimited", "#SBATCH --time=UNLIMITED", (), "ok", ""),
    Case(
        "8 GPUs on 4-GPU nodes",
        "#SBATCH --nodes=1\n#SBATCH --gpus-per-node=8",
        ("-p", "gpu4"),
        "refused",
        "Requested node configuration is not available",
    ),
    Case(
        "gres 8 on 4-GPU nodes",
        "#SBATCH -p gpu4\n#SBATCH --gres=gpu:8",
        (),
        "refused",
        "Requested node configuration is not available",
    ),
    Case(
        "16 GPUs over 2 4-GPU nodes",
        "#SBATCH -N2",
        ("-p", "gpu4", "--gpus=16"),
        "refused",
        "Requested node configuration is not available",
    ),
    Case(
        "more CPUs than a node",
        "#SBATCH --ntasks-per-node=8 --cpus-per-task=4",
        ("-p", "gpu"),
        "refused",
        "Requested node configuration is not available",
    ),
    Case(
        "more memory than a node",
        "#SBATCH --mem=100000",
        ("-p", "gpu"),
        "refused",
        "Requested node configuration is not available",
    ),
    Case("one of two partitions fits", "#SBATCH --gpus-per-node=8", ("-p", "gpu,gpu4"), "ok", ""),
    Case(
        "held: accepted, never starts",
        "#SBATCH -H --gpus-per-node=8",
        ("-p", "gpu4"),
        "warn",
        "held (-H), so slurmctld accepts it, but it can never start",
    ),
    Case(
        "more nodes than the partition",
        "#SBATCH -N 3",
        ("-p", "gpu4"),
        "warn",
        "pends for ever",
        on_2411=("refused", "Requested node configuration is not available"),
    ),
    Case("4 GPUs on 4-GPU nodes", "#SBATCH --gpus-per-node=4", ("-p", "gpu4"), "ok", ""),
]


def _script(case: Case) -> str:
    return "#!/bin/bash\n%s\nsrun true\n" % case.directives


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check_gives_the_clusters_answer(tmp_path, case, release):
    site = tmp_path / "site.yaml"  # the test cluster's site on the release the check emulates
    site.write_text("extends: %s\nname: testcluster\nslurm_version: %s\n" % (TESTCLUSTER, json.dumps(release)))
    path = tmp_path / "job.sh"
    path.write_text(_script(case))
    outcome, said = case.on(release)
    r = CliRunner().invoke(main, ["check", "--site", str(site), str(path), *case.args])
    if outcome == "refused":
        assert r.exit_code == 2, r.output
        assert said in r.stderr and r.stderr.strip().splitlines()[-1].startswith("error: "), r.stderr
        assert re.search(r"%s:\d+: sbatch: " % re.escape(str(path)), r.stderr) or "command line" in r.stderr
    else:
        assert r.exit_code == 0, r.output
        assert "accepted" in r.stdout
        if outcome == "warn":
            assert "warning: " in r.stderr and said in r.stderr, r.stderr


def test_gen_never_writes_a_script_the_cluster_refuses(tmp_path, monkeypatch):
    """gen runs the same mirror (it calls check's code): a pinned GPU count the partition's nodes
    lack is refused before anything is written."""
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(
        main,
        ["gen", "--site", str(TESTCLUSTER), "--partition", "gpu4", "--mem", "100000", "-o", "j.sh", "--", "t.py"],
    )
    assert r.exit_code == 2 and "Requested node configuration is not available" in r.stderr, r.output
    assert not (tmp_path / "j.sh").exists()


def test_rules_are_a_table_with_release_bounds():
    """A release-specific refusal is a row with `since`/`until`; rows apply by the site's slurm_version."""
    assert {r.rule for r in RULES} >= {"invalid-directive", "invalid-time", "node-configuration", "partition-nodes"}
    row = Rule("x", "sbatch", lambda req: (), since=(26, 5, 0))
    assert not row.applies((25, 11, 2)) and row.applies((26, 5, 0)) and not row.applies(None)


@pytest.mark.cluster
def test_the_cases_are_what_the_cluster_answers(slurm_cluster, tmp_path):
    """Each case submitted for real (sbatch, not --test-only: a held job is accepted only by a real
    submission); the jobs are cancelled after the test."""
    for case in CASES:
        path = tmp_path / "job.sh"
        path.write_text(_script(case))
        rc, out, err = slurm_cluster.sbatch(None, "-o", "/dev/null", *case.args, str(path))
        outcome, said = case.on(slurm_cluster.release.version)
        if outcome == "refused":
            assert rc != 0 and said.split(" -- ")[0] in err, (case.name, rc, err)
        else:
            assert rc == 0, (case.name, err)
