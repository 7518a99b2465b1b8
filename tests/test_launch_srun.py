"""srun launcher: each task execs the program argv; a `train.py` must get an interpreter."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurmgpu.job import launchers as L


@pytest.mark.parametrize(
    "command",
    [("train.py", "--lr", "1"), ("python", "train.py", "--lr", "1"), ("python3", "-m", "train", "--lr", "1")],
)
def test_srun_task_line_runs_the_script(tmp_path: Path, command: tuple) -> None:
    """The task command of launch_srun.j2, run by real bash: was exit 127 for a bare train.py."""
    (tmp_path / "train.py").write_text("import sys, os\nprint('rank', os.environ['RANK'], sys.argv[1:])\n")
    argv = L.program(L.get_launcher("srun"), command, ())
    task = 'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS"; exec "$@"'
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "SLURM_PROCID": "3", "SLURM_LOCALID": "3", "SLURM_NTASKS": "8"}
    import os

    env["PATH"] = os.environ["PATH"]
    r = subprocess.run(["bash", "-c", task, "bash", *argv], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, (argv, r.returncode, r.stderr)
    assert "rank 3 ['--lr', '1']" in r.stdout


def test_template_keeps_the_task_line() -> None:
    text = (Path(__file__).parent.parent / "templates/parts/launch_srun.j2").read_text()
    assert 'exec "$@"\' bash' in text  # the line the test above runs
