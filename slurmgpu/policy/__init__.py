"""The submit filter seen from Python: the stamp line, rendering the Lua, running it, installing it.

The names below load their module on first use (PEP 562), so importing one layer never
imports the rest of it: start-up time is a feature on a login node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
    from .cluster_check import NODE_CMD, PARTITION_CMD, ClusterPartition, check_site_partitions, compare
    from .install import (
        backup_file,
        install_filter,
        install_site_problem,
        plan_install,
        plugstack_loads_spank,
        written_by_slurmgpu,
    )
    from .lua import lua_dir, lua_literal, policy_source, render_filter, topology_lua, topology_table
    from .run import PolicyRunner, Verdict, check_script, part_list

# exported name -> (module, name in it)
_EXPORTS = {
    "ClusterPartition": (".cluster_check", "ClusterPartition"),
    "NODE_CMD": (".cluster_check", "NODE_CMD"),
    "PARTITION_CMD": (".cluster_check", "PARTITION_CMD"),
    "PolicyRunner": (".run", "PolicyRunner"),
    "Verdict": (".run", "Verdict"),
    "backup_file": (".install", "backup_file"),
    "check_script": (".run", "check_script"),
    "check_site_partitions": (".cluster_check", "check_site_partitions"),
    "compare": (".cluster_check", "compare"),
    "install_filter": (".install", "install_filter"),
    "install_site_problem": (".install", "install_site_problem"),
    "lua_dir": (".lua", "lua_dir"),
    "lua_literal": (".lua", "lua_literal"),
    "part_list": (".run", "part_list"),
    "policy_source": (".lua", "policy_source"),
    "plan_install": (".install", "plan_install"),
    "plugstack_loads_spank": (".install", "plugstack_loads_spank"),
    "render_filter": (".lua", "render_filter"),
    "topology_lua": (".lua", "topology_lua"),
    "topology_table": (".lua", "topology_table"),
    "written_by_slurmgpu": (".install", "written_by_slurmgpu"),
}
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
    "policy_source",
    "plan_install",
    "plugstack_loads_spank",
    "render_filter",
    "topology_lua",
    "topology_table",
    "written_by_slurmgpu",
]


__getattr__ = face(__name__, _EXPORTS, globals())
