"""Slurm's own formats and commands: hostlists, sinfo/scontrol output, sbatch option emulation.

The names below load their module on first use (PEP 562), so importing one layer never
imports the rest of it: start-up time is a feature on a login node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
    from .hints import advice
    from .parse import (
        Gres,
        SlurmNode,
        SlurmPartition,
        Version,
        compress_hostlist,
        node_from_mapping,
        parse_gres,
        parse_hostlist,
        parse_scontrol_config,
        parse_scontrol_nodes,
        parse_scontrol_partitions,
        parse_scontrol_records,
        parse_sinfo_json,
        parse_version,
        partitions_from_nodes,
        tres_gpus,
        version_label,
    )
    from .runner import NOT_FOUND, CommandResult, Runner, SubprocessRunner
    from .sbatch import EXPORT_SLURM_PREFIX_FROM, het_count, job_desc, slurm_version_tuple, split_command, tres_prefix

# exported name -> (module, name in it)
_EXPORTS = {
    "CommandResult": (".runner", "CommandResult"),
    "EXPORT_SLURM_PREFIX_FROM": (".sbatch", "EXPORT_SLURM_PREFIX_FROM"),
    "Gres": (".parse", "Gres"),
    "NOT_FOUND": (".runner", "NOT_FOUND"),
    "Runner": (".runner", "Runner"),
    "SlurmNode": (".parse", "SlurmNode"),
    "SlurmPartition": (".parse", "SlurmPartition"),
    "SubprocessRunner": (".runner", "SubprocessRunner"),
    "Version": (".parse", "Version"),
    "advice": (".hints", "advice"),
    "compress_hostlist": (".parse", "compress_hostlist"),
    "het_count": (".sbatch", "het_count"),
    "job_desc": (".sbatch", "job_desc"),
    "node_from_mapping": (".parse", "node_from_mapping"),
    "parse_gres": (".parse", "parse_gres"),
    "parse_hostlist": (".parse", "parse_hostlist"),
    "parse_scontrol_config": (".parse", "parse_scontrol_config"),
    "parse_scontrol_nodes": (".parse", "parse_scontrol_nodes"),
    "parse_scontrol_partitions": (".parse", "parse_scontrol_partitions"),
    "parse_scontrol_records": (".parse", "parse_scontrol_records"),
    "parse_sinfo_json": (".parse", "parse_sinfo_json"),
    "parse_version": (".parse", "parse_version"),
    "partitions_from_nodes": (".parse", "partitions_from_nodes"),
    "slurm_version_tuple": (".sbatch", "slurm_version_tuple"),
    "split_command": (".sbatch", "split_command"),
    "tres_gpus": (".parse", "tres_gpus"),
    "tres_prefix": (".sbatch", "tres_prefix"),
    "version_label": (".parse", "version_label"),
}
__all__ = [
    "CommandResult",
    "EXPORT_SLURM_PREFIX_FROM",
    "Gres",
    "NOT_FOUND",
    "Runner",
    "SlurmNode",
    "SlurmPartition",
    "SubprocessRunner",
    "Version",
    "advice",
    "compress_hostlist",
    "het_count",
    "job_desc",
    "node_from_mapping",
    "parse_gres",
    "parse_hostlist",
    "parse_scontrol_config",
    "parse_scontrol_nodes",
    "parse_scontrol_partitions",
    "parse_scontrol_records",
    "parse_sinfo_json",
    "parse_version",
    "partitions_from_nodes",
    "slurm_version_tuple",
    "split_command",
    "tres_gpus",
    "tres_prefix",
    "version_label",
]


__getattr__ = face(__name__, _EXPORTS, globals())
