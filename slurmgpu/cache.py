"""Where slurmgpu keeps what it can always recompute: compiled templates, parsed YAML.

$SLURMGPU_CACHE_DIR (empty: no cache), else $XDG_CACHE_HOME/slurmgpu or ~/.cache/slurmgpu.
Every entry is checked against its source before it is used, so a stale or damaged entry
is only a miss. Imports nothing beyond os: commands on the start-up path use it.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional


def cache_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The cache root, or None when caching is turned off (SLURMGPU_CACHE_DIR set and empty)."""
    env = os.environ if environ is None else environ
    if "SLURMGPU_CACHE_DIR" in env:
        return env["SLURMGPU_CACHE_DIR"] or None
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slurmgpu")


def cache_subdir(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """<cache root>/<name>, created private (0700); None when caching is off or it is not writable."""
    root = cache_dir(environ)
    if not root:
        return None
    d = os.path.join(root, name)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return d if os.access(d, os.W_OK) else None
