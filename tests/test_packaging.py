"""The wheel ships templates and presets; the code needs no more than Python 3.9; the CLI starts lazily."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel, built from this tree and installed with its dependencies into a fresh venv."""
    tmp_path = tmp_path_factory.mktemp("packaging")
    wheel_dir = tmp_path / "wheel"
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheel_dir), str(ROOT)])
    assert r.returncode == 0, r.stderr
    wheels = list(wheel_dir.glob("slurmgpu-*.whl"))
    assert len(wheels) == 1

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # Without PYTHONPATH: pip would take the source tree's slurmgpu.egg-info (left by the wheel
    # build) for an installed slurmgpu and skip the wheel.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    r = _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheels[0])], env=env)
    assert r.returncode == 0, r.stderr
    return env_dir


def _clean_env(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMGPU_", "PYTHON", "XDG_"))}
    env["HOME"] = str(home)
    return env


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_with_presets_and_templates(installed, tmp_path):
    env_dir = installed
    py = env_dir / "bin" / "python"

    # Run from an empty directory so nothing can come from the source tree.
    work = tmp_path / "elsewhere"
    work.mkdir()
    exe = env_dir / "bin" / "slurmgpu"
    env = _clean_env(work)
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

    # every Lua file: the adapters, the stub and each policy module (the rendered filter
    # assembles them; a module missing from the wheel would fail every render)
    probe = (
        "from slurmgpu.policy.lua import lua_dir, policy_source; d = lua_dir();"
        "print(sorted(str(p.relative_to(d)) for p in d.rglob('*.lua'))); print(len(policy_source()))"
    )
    r = _run([str(py), "-c", probe], cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    shipped_lua, size = r.stdout.splitlines()
    source_lua = ROOT / "contrib" / "lua"
    assert eval(shipped_lua) == sorted(str(p.relative_to(source_lua)) for p in source_lua.rglob("*.lua"))  # noqa: S307
    from slurmgpu.policy import policy_source

    assert int(size) == len(policy_source())

    r = _run(
        [str(exe), "site", "validate"] + [str(p) for p in sorted((ROOT / "site-configs").glob("*.yaml"))],
        cwd=work,
        env=env,
    )
    assert r.returncode == 0, r.stderr + r.stdout


README_MAIN = ("gen", "--model", "llama3-70b", "--launcher", "megatron", "--nodes", "8", "--smoke")


def test_readme_main_is_the_readmes_first_command():
    first = (ROOT / "README.md").read_text(encoding="utf-8").split("```sh\n", 1)[1].split("\n", 1)[0]
    assert first == "pip install . && slurmgpu " + " ".join(README_MAIN)


@pytest.mark.slow
def test_readme_main_command_and_tour_in_a_fresh_venv_without_lua(installed, tmp_path):
    """`pip install .` then the README, word for word, with no Lua binary on PATH: lupa is a dependency."""
    import time

    bin_dir = installed / "bin"
    env = _clean_env(tmp_path / "home")
    env["PATH"] = str(bin_dir)  # the venv only: no lua5.1, lua or luajit from the system
    env["SLURMGPU_SYSTEM_SITE"] = str(tmp_path / "no-admin-site.yaml")  # this machine's /etc plays no part
    for lua in ("lua5.1", "lua", "luajit"):
        assert not shutil.which(lua, path=env["PATH"])
    exe = str(bin_dir / "slurmgpu")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    times = []
    for _ in range(2):  # cold (empty template cache), then warm
        t0 = time.perf_counter()
        r = _run([exe] + list(README_MAIN), cwd=str(elsewhere), env=env)
        times.append(time.perf_counter() - t0)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("#!/bin/bash\n# slurmgpu: site=dgx-h100 ") and " nodes=8 " in r.stdout
    print("fresh-venv `slurmgpu %s`: %.2f s cold, %.2f s warm" % (" ".join(README_MAIN), times[0], times[1]))
    r = _run(
        [str(bin_dir / "python"), "-c", "import lupa, slurmgpu; print(lupa.__file__, slurmgpu.__file__)"],
        env=env,
        cwd=str(tmp_path),
    )
    assert r.returncode == 0 and r.stdout.count(str(installed)) == 2, r.stdout + r.stderr

    tour = tmp_path / "tour"
    tour.mkdir()
    steps = [
        (tour, ["init", "--model", "llama3-8b", "--launcher", "torchrun"]),
        (tour, ["gen", "-o", "job.sbatch"]),
        (tour, ["check", "job.sbatch"]),
        (tour, ["templates", "eject", "parts/launch_torchrun.j2"]),
        (tour, ["gen"]),
        (elsewhere, list(README_MAIN)),
        # a program torchrun starts is planned as what it declares: as DDP, 8B fits nowhere
        (elsewhere, ["gen", "--model", "llama3-8b", "--launcher", "torchrun", "--fsdp", "--", "train.py"]),
    ]
    codes = []
    for cwd, args in steps:
        r = _run([exe] + args, cwd=str(cwd), env=env)
        codes.append(r.returncode)
        print("slurmgpu %s  (in %s) -> exit %d" % (" ".join(args), cwd.name, r.returncode))
        assert r.returncode == 0, "slurmgpu %s: %s" % (" ".join(args), r.stderr)
    assert "accepted" in _run([exe, "check", "job.sbatch"], cwd=str(tour), env=env).stdout
    assert (tour / ".slurmgpu" / "templates" / "parts" / "launch_torchrun.j2").is_file()
    # the guides --help and init's slurmgpu.yaml point to ship in the wheel (`slurmgpu docs TOPIC`)
    r = _run([exe, "docs", "gen"], cwd=str(tour), env=env)
    assert r.returncode == 0 and r.stdout == (ROOT / "docs" / "gen.md").read_text(encoding="utf-8"), r.stderr
    r = _run([exe, "docs", "launchers", "--path"], cwd=str(tour), env=env)
    assert r.returncode == 0 and r.stdout.startswith(str(installed)), r.stdout


def test_code_needs_no_more_than_python_39():
    import shutil

    exe = shutil.which("vermin")
    assert exe, "vermin is a test dependency: pip install -e '.[test]'"
    r = _run(
        [
            exe,
            "--no-tips",
            "--violations",
            "--eval-annotations",
            "-t=3.9-",
            str(ROOT / "slurmgpu"),
            str(ROOT / "bench"),
            str(ROOT / "tests"),
        ]
    )
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


def test_every_package_of_the_source_tree_is_in_the_wheel_list():
    """setup.cfg lists the packages by hand: a new subpackage missing there installs without its
    code (slurmgpu.job.launchers did, and the README's first command died on a fresh machine)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = {p.strip() for p in cfg["options"]["packages"].split() if p.strip()}
    found = {
        ".".join(d.relative_to(ROOT).parts)
        for d in (ROOT / "slurmgpu").rglob("*")
        if d.is_dir() and (d / "__init__.py").exists()
    }
    assert found - listed == set()
