"""A new user's first day: slurmgpu run from a shell in an empty directory, with an empty home,
no cluster (no SLURM_CONF, no site in /etc), as a user who is not root.

When the tests run as root, commands run as user `nobody` (setpriv): root can write anywhere, so
only a plain user finds the output paths and the files that a first day trips over. nobody
cannot read this checkout or the interpreter's packages where they live under /root, so the
sandbox copies what slurmgpu needs (its package and data, and click, Jinja2, PyYAML, psutil,
lupa from this interpreter) into a world-readable directory and runs them with a Python of the
same version that nobody can execute. Without one the commands run as this user, with the same
empty home: `Sandbox.user` says which.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("click", "jinja2", "markupsafe", "yaml", "_yaml", "psutil", "lupa")
SOURCE_PARTS = ("slurmgpu", "site-configs", "templates", "contrib/lua", "docs")
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all"]


def _copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(str(src), str(dst), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)


class Sandbox:
    """One world-readable temporary root: a copy of slurmgpu, its packages, a home and work dirs."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="slurmgpu-firstday-"))
        os.chmod(str(self.root), 0o755)
        self.user = "this user (%s)" % os.getuid()
        self.prefix: List[str] = []
        self.python = sys.executable
        self.pythonpath = str(ROOT)
        if os.geteuid() == 0:
            self._as_nobody()
        self.bin = self.root / "bin"
        self.bin.mkdir()
        (self.bin / "slurmgpu").write_text(
            '#!/bin/sh\nexec %s -m slurmgpu "$@"\n' % self.python.replace(" ", "\\ "), encoding="utf-8"
        )
        os.chmod(str(self.bin / "slurmgpu"), 0o755)
        self.cache = self._dir("cache")
        self.count = 0

    def _dir(self, name: str) -> Path:
        d = self.root / name
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(str(d), 0o777)
        return d

    def _as_nobody(self) -> None:
        if shutil.which("setpriv") is None:
            return
        version = "%d.%d" % sys.version_info[:2]
        pythons = [sys.executable, "/usr/bin/python" + version, "/usr/local/bin/python" + version]
        pkgs = self.root / "site-packages"
        pkgs.mkdir()
        for name in PACKAGES:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                continue
            if spec.submodule_search_locations:
                _copy_tree(Path(list(spec.submodule_search_locations)[0]), pkgs / name)
            else:
                shutil.copy2(spec.origin, str(pkgs / Path(spec.origin).name))
        src = self.root / "src"
        for part in SOURCE_PARTS:
            _copy_tree(ROOT / part, src / part)
        subprocess.run(["chmod", "-R", "a+rX", str(self.root)], check=True)
        for py in pythons:
            if not os.path.exists(py):
                continue
            # through a shell, as the commands run: setpriv's own exec still has root's capabilities
            probe = subprocess.run(
                AS_NOBODY
                + [
                    "bash",
                    "-c",
                    '"$0" -c "import sys, click, yaml, jinja2; print(\'%d.%d\' % sys.version_info[:2])"',
                    py,
                ],
                capture_output=True,
                text=True,
                env={"PYTHONPATH": str(pkgs), "PATH": "/usr/bin:/bin", "HOME": str(self.root)},
            )
            if probe.returncode == 0 and probe.stdout.strip() == version:
                self.python, self.prefix = py, list(AS_NOBODY)
                self.pythonpath = "%s:%s" % (src, pkgs)
                self.user = "nobody (setpriv)"
                return

    def env(self, home: Path) -> Dict[str, str]:
        keep = ("PATH", "LANG", "LC_ALL", "TERM")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env.update(
            PATH="%s:%s" % (self.bin, os.environ.get("PATH", "/usr/bin:/bin")),
            HOME=str(home),
            PYTHONPATH=self.pythonpath,
            SLURMGPU_CACHE_DIR=str(self.cache),
            SLURMGPU_SYSTEM_SITE=str(self.root / "no-admin-site.yaml"),  # this machine's /etc stays out
            EDITOR="true",
            COLUMNS="100",
        )
        return env

    def empty_dir(self) -> Tuple[Path, Path]:
        """A fresh empty working directory and an empty home, both the user's to write."""
        self.count += 1
        work = self._dir("work%d" % self.count)
        home = self._dir("home%d" % self.count)
        return work, home

    def run(self, command: str, cwd: Path, home: Path, timeout: float = 300.0) -> subprocess.CompletedProcess:
        """`command` as a user types it into bash (pipes and && included), pipefail on."""
        return subprocess.run(
            self.prefix + ["bash", "-o", "pipefail", "-c", command],
            cwd=str(cwd),
            env=self.env(home),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def close(self) -> None:
        shutil.rmtree(str(self.root), ignore_errors=True)


def help_examples(text: str) -> List[str]:
    """The commands of a help text's "Example(s):" blocks (continuation lines joined)."""
    out: List[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if re.match(r"^\s*Examples?:\s*$", lines[i]):
            cur = ""
            i += 1
            while i < len(lines) and lines[i].strip():
                cur = (cur + " " + lines[i].strip()) if cur else lines[i].strip()
                if cur.endswith("\\"):
                    cur = cur[:-1].rstrip()
                else:
                    out.append(cur)
                    cur = ""
                i += 1
        i += 1
    return out


def markdown_block(text: str, heading: str) -> Optional[str]:
    """The first ```sh block after `heading` in a Markdown text."""
    at = text.find(heading)
    if at < 0:
        return None
    m = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    return m.group(1) if m else None
