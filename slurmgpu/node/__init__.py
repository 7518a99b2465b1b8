"""Code that runs on compute nodes, or reads what they left: probe, preflight, doctor."""

from __future__ import annotations

from .doctor import diagnose, expand_output_pattern, fill, find_job_log, match_lines, read_log, read_stamp, render_text
from .preflight import FixtureRunner
from .probe import (
    Gpu,
    Nic,
    ProbeResult,
    classify,
    describe,
    implied_nccl_env,
    nvlink_summary,
    parse_nvidia_smi_q,
    parse_rocm_smi_json,
    parse_topo_matrix,
    probe,
    read_net_psutil,
    read_net_sysfs,
    read_rdma,
)
from .signatures import CATALOGUE, by_id

__all__ = [
    "CATALOGUE",
    "FixtureRunner",
    "Gpu",
    "Nic",
    "ProbeResult",
    "by_id",
    "classify",
    "describe",
    "diagnose",
    "expand_output_pattern",
    "fill",
    "find_job_log",
    "implied_nccl_env",
    "match_lines",
    "nvlink_summary",
    "parse_nvidia_smi_q",
    "parse_rocm_smi_json",
    "parse_topo_matrix",
    "probe",
    "read_log",
    "read_net_psutil",
    "read_net_sysfs",
    "read_rdma",
    "read_stamp",
    "render_text",
]
