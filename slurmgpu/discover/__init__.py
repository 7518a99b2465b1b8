"""A site draft from a live cluster.

The names below load their module on first use (PEP 562), so importing one layer never
imports the rest of it: start-up time is a feature on a login node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
    from .cluster import build_draft, discover, group_nodes, pyslurm_mismatch, pyslurm_status, read_cluster
    from .draft import check, render, scalar

# exported name -> (module, name in it)
_EXPORTS = {
    "build_draft": (".cluster", "build_draft"),
    "check": (".draft", "check"),
    "discover": (".cluster", "discover"),
    "group_nodes": (".cluster", "group_nodes"),
    "pyslurm_mismatch": (".cluster", "pyslurm_mismatch"),
    "pyslurm_status": (".cluster", "pyslurm_status"),
    "read_cluster": (".cluster", "read_cluster"),
    "render": (".draft", "render"),
    "scalar": (".draft", "scalar"),
}
__all__ = [
    "build_draft",
    "check",
    "discover",
    "group_nodes",
    "pyslurm_mismatch",
    "pyslurm_status",
    "read_cluster",
    "render",
    "scalar",
]


__getattr__ = face(__name__, _EXPORTS, globals())
