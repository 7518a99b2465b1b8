"""The collective library: which NCCL/RCCL variables a fabric needs, and what is wrong with a set."""

from __future__ import annotations

from .fabric import (
    FABRIC_TABLE,
    MNNVL_TABLE,
    OFI_NET,
    FabricEnv,
    cuda_device_max_connections,
    derived_names,
    fabric_env,
    fabric_facts,
    mnnvl_env,
    nccl_required,
    socket_ifname,
)
from .lint import PATH_LEVELS, VARS, errors, lint_env, parse_devlist, prefix_traps

__all__ = [
    "FABRIC_TABLE",
    "FabricEnv",
    "MNNVL_TABLE",
    "OFI_NET",
    "PATH_LEVELS",
    "VARS",
    "cuda_device_max_connections",
    "derived_names",
    "errors",
    "fabric_env",
    "fabric_facts",
    "lint_env",
    "mnnvl_env",
    "nccl_required",
    "parse_devlist",
    "prefix_traps",
    "socket_ifname",
]
