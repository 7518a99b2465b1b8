"""Regenerate the docs' pictures: `python -m tests.gen_explain_img` (or `make docs-img`).

tests/test_explain.py::test_docs_pictures_are_current fails when a committed picture is stale.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Dict, List

from tests.explain_util import ROOT

PICTURES: Dict[str, List[str]] = {
    "dgx-h100": "plan --model llama3-70b --site dgx-h100 --task inference --nodes 2 --tp 8 --pp 2".split(),
    "gb200-nvl72": "plan --model llama3-70b --site gb200-nvl72 --nodes 18 --tp 8".split(),
}


def main() -> None:
    out = ROOT / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    for name, args in PICTURES.items():
        path = out / ("explain-%s.svg" % name)
        subprocess.run(
            [sys.executable, "-m", "slurmgpu.cli"] + args + ["--svg", str(path)],
            check=True,
            cwd=str(ROOT),
            stdout=subprocess.DEVNULL,
        )
        print("wrote %s" % path.relative_to(ROOT))


if __name__ == "__main__":
    main()
