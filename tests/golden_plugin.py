"""`pytest --update-golden`: rewrite tests/golden/*.sh from the current templates.

Register it in tests/conftest.py with `pytest_plugins = ["golden_plugin"]` (tests/ is on
sys.path there) or run `python -m pytest -p tests.golden_plugin ...` from the repo root.
"""

from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="Rewrite tests/golden/*.sh from the current templates, printing each diff.",
    )
