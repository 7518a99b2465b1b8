"""The submit filter seen from Python: the stamp line, rendering the Lua, running it, installing it."""

from __future__ import annotations

from .cluster_check import NODE_CMD, PARTITION_CMD, ClusterPartition, check_site_partitions, compare
from .install import (
    backup_file,
    install_filter,
    install_site_problem,
    plan_install,
    plugstack_loads_spank,
    written_by_slurmgpu,
)
from .lua import lua_dir, lua_literal, render_filter, topology_lua, topology_table
from .run import PolicyRunner, Verdict, check_script, part_list

__all__ = [
    "ClusterPartition",
    "NODE_CMD",
    "PARTITION_CMD",
    "PolicyRunner",
    "Verdict",
    "backup_file",
    "check_script",
    "check_site_partitions",
    "compare",
    "install_filter",
    "install_site_problem",
    "lua_dir",
    "lua_literal",
    "part_list",
    "plan_install",
    "plugstack_loads_spank",
    "render_filter",
    "topology_lua",
    "topology_table",
    "written_by_slurmgpu",
]
