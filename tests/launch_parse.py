"""Helpers for the launcher contract tests: the words a generated script hands to a runner.

The launch line is read back from the rendered script itself (continuation lines joined, bash
word splitting by shlex), so what the frameworks' parsers see is what bash would pass.
"""

from __future__ import annotations

import re
import shlex
from typing import List, Mapping, Optional, Tuple

# What the job's shell has set when the launch line runs (rendezvous.j2, launch parts).
JOB_ENV = {"MASTER_ADDR": "node001", "MASTER_PORT": "29500", "SLURMGPU_HOSTFILE": "/shared/hostfile"}


def runner_words(script: str, runner: str, env: Optional[Mapping[str, str]] = None) -> List[str]:
    """The arguments after `bash -c 'exec RUNNER ...' bash` in the launch step (one node), with
    the job's variables (JOB_ENV) expanded as bash would; others ($SLURM_JOB_ID) stay as written."""
    env = JOB_ENV if env is None else env
    lines = script.split("\n")
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("bash -c 'exec %s " % runner))
    text = []
    for line in lines[start:]:
        text.append(line.rstrip("\\").rstrip())
        if not line.endswith("\\"):
            break
    words = shlex.split(" ".join(text))
    var = re.compile(r"\$\{?(%s)\}?" % "|".join(env))
    return [var.sub(lambda m: env[m.group(1)], w) for w in words[words.index("bash", 1) + 1 :]]


def heredocs(script: str) -> List[Tuple[str, str]]:
    """(target, text) of every `cat > TARGET <<'SLURMGPU_EOF'` block in the script."""
    pat = re.compile(r"^cat > (.+) <<'SLURMGPU_EOF'\n(.*?)\nSLURMGPU_EOF$", re.M | re.S)
    return [(shlex.split(m.group(1))[0], m.group(2)) for m in pat.finditer(script)]
