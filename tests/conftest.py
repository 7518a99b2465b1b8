"""Shared pytest wiring: the real-Slurm cluster fixtures and the golden-file option."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # so `tests.cluster_fixtures` imports from a plain checkout
    sys.path.insert(0, str(ROOT))

pytest_plugins = ["tests.cluster_fixtures", "tests.golden_plugin"]
