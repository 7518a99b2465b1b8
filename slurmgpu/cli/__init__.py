"""The click command line: each command parses, calls one library function, prints.

`app` holds the root group; importing each `cmd_*` module registers its commands on it.
"""

from __future__ import annotations

from . import cmd_docs, cmd_job, cmd_node, cmd_plan, cmd_policy, cmd_report, cmd_site  # noqa: F401  (registers commands)
from .app import main

__all__ = ["main"]
