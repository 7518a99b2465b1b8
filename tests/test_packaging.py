"""The wheel ships templates and presets; the code needs no more than Python 3.9; the CLI starts lazily."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_with_presets_and_templates(tmp_path):
    wheel_dir = tmp_path / "wheel"
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
              str(wheel_dir), str(ROOT)])
    assert r.returncode == 0, r.stderr
    wheels = list(wheel_dir.glob("slurmgpu-*.whl"))
    assert len(wheels) == 1

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    r = _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheels[0])])
    assert r.returncode == 0, r.stderr

    # Run from an empty directory so nothing can come from the source tree.
    work = tmp_path / "elsewhere"
    work.mkdir()
    exe = env_dir / "bin" / "slurmgpu"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMGPU_", "PYTHON"))}
    env["HOME"] = str(work)
    r = _run([str(exe), "site", "list", "--json"], cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    listed = {row["name"] for row in json.loads(r.stdout)}
    shipped = {p.stem for p in (ROOT / "site-configs").glob("*.yaml")}
    assert listed == shipped

    probe = (
        "import slurmgpu, pathlib; from slurmgpu.site import data_dir, preset_dir;"
        "print(slurmgpu.__file__);"
        "t = data_dir('templates'); print(sorted(str(p.relative_to(t)) for p in t.rglob('*.j2')))"
    )
    r = _run([str(py), "-c", probe], cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    first, templates = r.stdout.splitlines()
    assert str(env_dir) in first, "slurmgpu was imported from outside the venv: %s" % first
    expected = sorted(str(p.relative_to(ROOT / "templates")) for p in (ROOT / "templates").rglob("*.j2"))
    assert eval(templates) == expected  # noqa: S307 - our own repr of a list of str

    r = _run([str(exe), "site", "validate"] + [str(p) for p in sorted((ROOT / "site-configs").glob("*.yaml"))],
             cwd=work, env=env)
    assert r.returncode == 0, r.stderr + r.stdout


def test_code_needs_no_more_than_python_39():
    import shutil

    exe = shutil.which("vermin")
    assert exe, "vermin is a test dependency: pip install -e '.[test]'"
    r = _run([exe, "--no-tips", "--violations", "--eval-annotations",
              "-t=3.9-", str(ROOT / "slurmgpu"), str(ROOT / "bench"), str(ROOT / "tests")])
    assert r.returncode == 0, r.stdout + r.stderr


def test_cli_help_does_not_import_heavy_modules():
    code = (
        "import sys; from slurmgpu.cli import main\n"
        "try:\n    main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('yaml', 'jinja2', 'psutil', 'lupa') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))"
    )
    r = _run([sys.executable, "-c", code])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "HEAVY=", "imported at start-up: %s" % r.stdout


def test_version_matches_package():
    import slurmgpu

    r = _run([sys.executable, "-m", "slurmgpu.cli", "--version"])
    assert r.returncode == 0
    assert slurmgpu.__version__ in r.stdout
