"""A site draft from a live cluster."""

from __future__ import annotations

from .cluster import build_draft, discover, group_nodes, pyslurm_mismatch, pyslurm_status, read_cluster
from .draft import check, render, scalar

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
