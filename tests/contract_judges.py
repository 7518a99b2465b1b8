"""The frameworks' own code as judges: one worker process per pytest session (contrib/contract/judge.py
in .contract-env, built by contrib/contract/make_env.py from `make deps`).

Megatron-Bridge's import takes about 7 s and torchtitan's 2 s, so the worker is started once and
answers every case of the session over a pipe; answers are cached by request. Without the venv
the tests that need it skip locally with the command that builds it, and fail under CI
(CI=true or SLURMGPU_REQUIRE_JUDGES=1): a skipped contract test is not a pass.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
JUDGE = ROOT / "contrib" / "contract" / "judge.py"
MAKE_ENV = ROOT / "contrib" / "contract" / "make_env.py"

# What the frameworks ask a GPU (torch.cuda.get_device_capability; ROCm reports gfx9.x as (9, x)).
# The one fact site/gpus.py does not hold; keyed by its GRES names.
CAPABILITY: Dict[str, Tuple[int, int]] = {
    "v100": (7, 0),
    "a100": (8, 0),
    "a100_pcie": (8, 0),
    "rtx4090": (8, 9),
    "l40s": (8, 9),
    "h100": (9, 0),
    "h100_pcie": (9, 0),
    "h200": (9, 0),
    "gh200": (9, 0),
    "b200": (10, 0),
    "gb200": (10, 0),
    "b300": (10, 3),
    "gb300": (10, 3),
    "rtx5090": (12, 0),
    "mi250x": (9, 0),  # gfx90a
    "mi300x": (9, 4),  # gfx942
}


def gpu_of(gpu_model: str) -> Dict[str, Any]:
    """The judge's picture of a site's GPU, from site/gpus.py plus its capability."""
    from slurmgpu.site import lookup

    facts = lookup(gpu_model)
    assert facts is not None, "GPU %r is not in slurmgpu/site/gpus.py" % gpu_model
    assert facts.key in CAPABILITY, "add %s's compute capability to tests/contract_judges.py" % facts.key
    return {
        "vendor": facts.vendor,
        "capability": list(CAPABILITY[facts.key]),
        "name": ("NVIDIA " if facts.vendor == "nvidia" else "AMD Instinct ") + facts.model,
        "memory_gb": facts.memory_gb,
    }


def _required() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("SLURMGPU_REQUIRE_JUDGES") == "1"


def env_python() -> Optional[str]:
    r = subprocess.run([sys.executable, str(MAKE_ENV), "--print"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


class Judge:
    def __init__(self, python: str) -> None:
        self.proc = subprocess.Popen(
            [python, "-W", "ignore", str(JUDGE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=str(ROOT),
        )
        self.cache: Dict[str, Dict[str, Any]] = {}
        atexit.register(self.close)

    def ask(self, kind: str, argv: Any, world: int, gpu: Dict[str, Any]) -> Dict[str, Any]:
        req = json.dumps({"kind": kind, "argv": [str(a) for a in argv], "world": world, "gpu": gpu}, sort_keys=True)
        if req not in self.cache:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(req + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            assert line, "the judge process died (run contrib/contract/judge.py by hand to see why)"
            self.cache[req] = json.loads(line)
        return self.cache[req]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_JUDGE: Optional[Judge] = None


def judge() -> Judge:
    """The session's judge; skips (locally) or fails (CI) when .contract-env is missing."""
    global _JUDGE
    if _JUDGE is None:
        python = env_python()
        if python is None:
            msg = (
                "the frameworks' venv is missing or stale: build it with `python3 contrib/contract/make_env.py` "
                "(make deps does), then rerun"
            )
            if _required():
                pytest.fail(msg)
            pytest.skip(msg)
        _JUDGE = Judge(python)
    return _JUDGE
