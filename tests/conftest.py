"""Shared pytest wiring: the real-Slurm cluster fixtures and the golden-file option."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # so `tests.cluster_fixtures` imports from a plain checkout
    sys.path.insert(0, str(ROOT))

pytest_plugins = ["tests.cluster_fixtures", "tests.golden_plugin"]


def pytest_configure(config) -> None:
    """A private $XDG_DATA_HOME for the whole run: `resolve_site` attaches a site's calibration from
    there (slurmgpu.site.calibration), and a developer's own calibration must not change the plans
    the tests check. Tests that want one set XDG_DATA_HOME themselves."""
    import os
    import tempfile

    os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="slurmgpu-test-data-")
