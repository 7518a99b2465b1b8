"""Every `--help` example and the README tour, pasted into a shell in an empty directory by a new
user (not root, empty home, no cluster): each gives its documented outcome.

The examples are read from every command's help (walking the command tree, so a command added
later is covered), run with bash (pipes, `&&` and redirections as written; pipefail on) and
must exit 0, unless EXPECTED names what the example needs that an empty directory without a
cluster lacks: then the exit code must be the one given (and listed in the command's
"Exit status"), and standard error must say why in the given words, in one `error:` line.
No example may print a traceback.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

from slurmgpu.cli import main
from slurmgpu.cli.app import exit_codes, iter_commands
from tests.firstday import Sandbox, help_examples, markdown_block

pytestmark = pytest.mark.slow  # some 90 commands in fresh processes: about 1.5 min

ROOT = Path(__file__).resolve().parent.parent
NO_SLURM = r"no Slurm configuration is reachable"
# (the example's start, exit code, what standard error must say): examples that need a cluster,
# a compute node or a file of the user's; everything else must exit 0
EXPECTED: List[Tuple[str, int, str]] = [
    ("slurmgpu admin install --site /etc/slurmgpu/site.yaml", 2, r"site\.yaml: site config file not found"),
    ("slurmgpu admin install --site my-cluster.yaml", 2, r"my-cluster\.yaml: site config file not found"),
    ("slurmgpu admin replay --site /etc/slurmgpu/site.yaml", 2, r"site config file not found"),
    ("slurmgpu admin replay --since", 2, NO_SLURM),
    ("slurmgpu admin stats --since 7d", 2, r"cannot read /etc/slurm/slurm\.conf .*name the log with --log"),
    ("slurmgpu admin stats --log /var/log/slurm/slurmctld.log", 2, r"cannot read /var/log/slurm/slurmctld\.log"),
    ("slurmgpu admin stats --prometheus /var/lib/", 2, r"directory /var/lib/node_exporter/textfile does not exist"),
    ("slurmgpu admin stats --accounting", 2, NO_SLURM),
    ("slurmgpu admin topology --site gb200-nvl72 --nodes 'gb[001-036]' --diff", 3, NO_SLURM),
    ("slurmgpu discover", 2, NO_SLURM),
    ("slurmgpu doctor 123456", 2, NO_SLURM),
    ("slurmgpu doctor slurm-123456.out", 2, r"cannot read slurm-123456\.out"),
    ("slurmgpu doctor train.log", 2, r"cannot read train\.log"),
    ("ncclras | slurmgpu doctor", 1, r"nothing|ncclras: command not found"),  # NCCL's RAS client, on a job's node
    ("slurmgpu preflight ", 1, r"not inside a Slurm job"),
    ("slurmgpu report 123456", 2, NO_SLURM),
    ("slurmgpu report --diff 123456 123789", 2, NO_SLURM),
    ("slurmgpu report slurm-123456.out", 2, r"cannot read slurm-123456\.out"),
    ("slurmgpu calibrate --site dgx-h100 --dry-run", 2, r"no runs file at .*slurmgpu/runs/dgx-h100\.tsv"),
    ("slurmgpu calibrate --runs runs.tsv", 2, r"no runs file at runs\.tsv"),
    ("srun ", 1, r"srun: fatal: Could not establish a configuration source"),
    ("slurmgpu site validate /etc/slurmgpu/site.yaml", 1, r"cannot read file"),
    ("slurmgpu submit", 2, NO_SLURM),
    ("slurmgpu init --model llama3-8b --launcher megatron && slurmgpu submit", 2, NO_SLURM),
]


def _expected(example: str) -> Optional[Tuple[int, str]]:
    for start, code, said in EXPECTED:
        if example.startswith(start):
            return code, said
    return None


def _examples() -> Iterator[Tuple[str, str, Dict[int, str]]]:
    for path, cmd in iter_commands(main):
        for i, ex in enumerate(help_examples(inspect.cleandoc(cmd.help or ""))):
            yield "%s[%d]" % (" ".join(path) or "slurmgpu", i), ex, exit_codes(cmd)


EXAMPLES = list(_examples())


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox()
    yield sb
    sb.close()


def _last_line(text: str) -> str:
    lines = [x for x in text.splitlines() if x.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize("example,codes", [(e, c) for _, e, c in EXAMPLES], ids=[i for i, _, _ in EXAMPLES])
def test_help_example_in_an_empty_directory(sandbox, example, codes):
    work, home = sandbox.empty_dir()
    r = sandbox.run(example, work, home)
    shown = "%s\nas %s: exit %d\nstdout:\n%s\nstderr:\n%s" % (
        example,
        sandbox.user,
        r.returncode,
        r.stdout[-2000:],
        r.stderr[-3000:],
    )
    assert "Traceback" not in r.stderr, shown
    want = _expected(example)
    if want is None:
        assert r.returncode == 0, shown
        return
    code, said = want
    assert r.returncode == code, shown
    assert re.search(said, r.stderr), shown
    if example.startswith("slurmgpu "):
        assert code in codes, "exit %d is not in `%s --help`'s Exit status %s" % (code, example.split()[1], codes)
        if code == 2:
            assert _last_line(r.stderr).startswith("error: "), shown


def test_the_table_names_only_examples_that_exist():
    """An EXPECTED row no example starts with any more is a stale excuse: remove it."""
    for start, _, _ in EXPECTED:
        assert any(e.startswith(start) for _, e, _ in EXAMPLES), start


def test_every_command_states_its_exit_codes():
    """--help of every command (and group) ends with its exit codes: 0, 2 and 130 at least."""
    from click.testing import CliRunner

    for path, _cmd in iter_commands(main):
        r = CliRunner().invoke(main, list(path) + ["--help"], prog_name="slurmgpu")
        assert r.exit_code == 0, r.output
        section = r.output.split("Exit status:", 1)
        assert len(section) == 2, "`slurmgpu %s --help` states no exit codes" % " ".join(path)
        listed = {int(m) for m in re.findall(r"^\s+(\d+)\s", section[1], re.M)}
        assert {0, 2, 130} <= listed, (path, listed)


def _tour() -> List[Tuple[str, bool]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    here = markdown_block(text, "## A short tour")
    assert here, "README.md has no tour"
    rest = text[text.index("## A short tour") :]
    cluster = markdown_block(rest, "On a cluster")
    assert cluster
    lines = [(x, False) for x in here.splitlines() if x.strip()]
    return lines + [(x, True) for x in cluster.splitlines() if x.strip()]


def test_readme_tour_in_an_empty_directory(sandbox):
    """The tour's lines in order, in one empty directory: the first block exits 0 line by line
    (init's slurmgpu.yaml feeds gen, check and diff); the cluster block says in one line what is
    missing (preflight: that this is not a job's node)."""
    work, home = sandbox.empty_dir()
    for line, needs_cluster in _tour():
        r = sandbox.run(line, work, home)
        shown = "%s\nas %s: exit %d\nstdout:\n%s\nstderr:\n%s" % (
            line,
            sandbox.user,
            r.returncode,
            r.stdout[-1500:],
            r.stderr[-2000:],
        )
        assert "Traceback" not in r.stderr, shown
        if not needs_cluster:
            assert r.returncode == 0, shown
            continue
        if line.startswith("srun"):
            assert r.returncode != 0 and "Could not establish a configuration source" in r.stderr, shown
        elif line.startswith("slurmgpu preflight"):
            assert r.returncode == 1 and "not inside a Slurm job" in r.stderr, shown
        else:
            assert r.returncode == 2 and re.search(NO_SLURM, _last_line(r.stderr)), shown
    assert (work / "slurmgpu.yaml").stat().st_mode & 0o777 == 0o644
