#!/usr/bin/env python3
"""Build .contract-env: the venv in which Megatron-Bridge, megatron-core and torchtitan judge
the generated NeMo and torchtitan command lines (contrib/contract/judge.py).

It is a venv over the running interpreter with --system-site-packages, so it shares that
interpreter's torch (2.13 CPU, the `e2e` extra) and hydra-core (the `contract` extra), and adds
the frameworks pinned in contrib/contract/judges.txt, from PyPI only. `make deps` runs it; it
does nothing when the venv already holds those pins (a stamp file records them).

    python3 contrib/contract/make_env.py            # build or confirm .contract-env
    python3 contrib/contract/make_env.py --path DIR  # elsewhere
    python3 contrib/contract/make_env.py --print     # the venv's python, if it is complete
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PINS = HERE / "judges.txt"
DEFAULT = ROOT / ".contract-env"
STAMP = "slurmgpu-judges.stamp"


def _pins() -> list:
    """(no_deps, requirement) per line of judges.txt."""
    out = []
    for line in PINS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = shlex.split(line)
        out.append(("--no-deps" in words, [w for w in words if w != "--no-deps"][0]))
    return out


def _digest() -> str:
    return hashlib.sha256((PINS.read_bytes() + sys.version.encode()) + b"v1").hexdigest()


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def ready(env: Path) -> bool:
    stamp = env / STAMP
    return python_of(env).exists() and stamp.exists() and stamp.read_text().strip() == _digest()


def build(env: Path) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("make_env: %s has no torch; install the e2e extra first (pip install -e '.[e2e]')" % sys.executable)
    if not python_of(env).exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env)], check=True)
    pip = [str(python_of(env)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    pins = _pins()
    plain = [r for nd, r in pins if not nd]
    nodeps = [r for nd, r in pins if nd]
    subprocess.run(pip + plain, check=True)
    subprocess.run(pip + ["--no-deps", "--ignore-requires-python"] + nodeps, check=True)
    (env / STAMP).write_text(_digest() + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", type=Path, default=Path(os.environ.get("SLURMGPU_CONTRACT_ENV", DEFAULT)))
    ap.add_argument("--print", action="store_true", help="print the venv's python if it is complete, else exit 1")
    a = ap.parse_args()
    if a.print:
        if not ready(a.path):
            sys.exit(1)
        print(python_of(a.path))
        return
    if ready(a.path):
        print("make_env: %s is up to date" % a.path)
        return
    build(a.path)
    print("make_env: built %s" % a.path)


if __name__ == "__main__":
    main()
