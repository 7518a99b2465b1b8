"""Code that runs on compute nodes, or reads what they left: probe, preflight, doctor.

The names below load their module on first use (PEP 562), so importing one layer never
imports the rest of it: start-up time is a feature on a login node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
    from .doctor import (
        diagnose,
        expand_output_pattern,
        fill,
        find_job_log,
        match_lines,
        read_log,
        read_stamp,
        render_text,
    )
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

# A name that is also a submodule's name is bound now: once any sibling imported the
# submodule, the package attribute would otherwise be the module, not the function.
from .probe import probe  # noqa: E402

# exported name -> (module, name in it)
_EXPORTS = {
    "CATALOGUE": (".signatures", "CATALOGUE"),
    "FixtureRunner": (".preflight", "FixtureRunner"),
    "Gpu": (".probe", "Gpu"),
    "Nic": (".probe", "Nic"),
    "ProbeResult": (".probe", "ProbeResult"),
    "by_id": (".signatures", "by_id"),
    "classify": (".probe", "classify"),
    "describe": (".probe", "describe"),
    "diagnose": (".doctor", "diagnose"),
    "expand_output_pattern": (".doctor", "expand_output_pattern"),
    "fill": (".doctor", "fill"),
    "find_job_log": (".doctor", "find_job_log"),
    "implied_nccl_env": (".probe", "implied_nccl_env"),
    "match_lines": (".doctor", "match_lines"),
    "nvlink_summary": (".probe", "nvlink_summary"),
    "parse_nvidia_smi_q": (".probe", "parse_nvidia_smi_q"),
    "parse_rocm_smi_json": (".probe", "parse_rocm_smi_json"),
    "parse_topo_matrix": (".probe", "parse_topo_matrix"),
    "read_log": (".doctor", "read_log"),
    "read_net_psutil": (".probe", "read_net_psutil"),
    "read_net_sysfs": (".probe", "read_net_sysfs"),
    "read_rdma": (".probe", "read_rdma"),
    "read_stamp": (".doctor", "read_stamp"),
    "render_text": (".doctor", "render_text"),
}
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


__getattr__ = face(__name__, _EXPORTS, globals())
