"""Slurm's own formats and commands: hostlists, sinfo/scontrol output, sbatch option emulation."""

from __future__ import annotations

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
from .sbatch import EXPORT_SLURM_PREFIX_FROM, job_desc, slurm_version_tuple, split_command, tres_prefix

__all__ = [
    "EXPORT_SLURM_PREFIX_FROM",
    "slurm_version_tuple",
    "tres_prefix",
    "CommandResult",
    "Gres",
    "NOT_FOUND",
    "Runner",
    "SlurmNode",
    "SlurmPartition",
    "SubprocessRunner",
    "Version",
    "compress_hostlist",
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
    "split_command",
    "tres_gpus",
    "version_label",
]
