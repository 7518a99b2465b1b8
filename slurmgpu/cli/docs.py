"""The guides shipped with the package (docs/*.md in the wheel's _data): `slurmgpu docs TOPIC`
prints one, so what --help and the init YAML point to works after a plain `pip install`."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Dict, Optional


def docs_dir() -> Path:
    from ..site import data_dir

    return data_dir("docs")


@functools.lru_cache(maxsize=1)
def topics() -> Dict[str, str]:
    """Topic name (the file's stem) -> its first heading."""
    out: Dict[str, str] = {}
    for p in sorted(docs_dir().glob("*.md")):
        head = ""
        try:
            with open(p, encoding="utf-8") as f:
                for line in f:
                    if line.startswith("#"):
                        head = line.lstrip("#").strip()
                        break
        except OSError:
            continue
        out[p.stem] = head
    return out


def topic_path(name: str) -> Optional[Path]:
    """The guide for `name` (a stem, with or without .md or a docs/ prefix); None if there is none."""
    stem = re.sub(r"\.md$", "", name.strip().split("#", 1)[0])
    stem = stem[len("docs/") :] if stem.startswith("docs/") else stem
    p = docs_dir() / (stem + ".md")
    return p if stem in topics() and p.is_file() else None
