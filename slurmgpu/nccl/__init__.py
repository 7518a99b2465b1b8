"""The collective library: which NCCL/RCCL variables a fabric needs, and what is wrong with a set.

The names below load their module on first use (PEP 562), so importing one layer never
imports the rest of it: start-up time is a feature on a login node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import face

if TYPE_CHECKING:
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

# exported name -> (module, name in it)
_EXPORTS = {
    "FABRIC_TABLE": (".fabric", "FABRIC_TABLE"),
    "FabricEnv": (".fabric", "FabricEnv"),
    "MNNVL_TABLE": (".fabric", "MNNVL_TABLE"),
    "mnnvl_env": (".fabric", "mnnvl_env"),
    "OFI_NET": (".fabric", "OFI_NET"),
    "PATH_LEVELS": (".lint", "PATH_LEVELS"),
    "VARS": (".lint", "VARS"),
    "cuda_device_max_connections": (".fabric", "cuda_device_max_connections"),
    "derived_names": (".fabric", "derived_names"),
    "errors": (".lint", "errors"),
    "fabric_env": (".fabric", "fabric_env"),
    "fabric_facts": (".fabric", "fabric_facts"),
    "lint_env": (".lint", "lint_env"),
    "nccl_required": (".fabric", "nccl_required"),
    "parse_devlist": (".lint", "parse_devlist"),
    "prefix_traps": (".lint", "prefix_traps"),
    "socket_ifname": (".fabric", "socket_ifname"),
}
__all__ = [
    "MNNVL_TABLE",
    "mnnvl_env",
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


__getattr__ = face(__name__, _EXPORTS, globals())
