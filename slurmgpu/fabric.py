"""The collective-library environment for one node type, launcher and layout.

Returned as ordered data (name, value, why) so the templates only print it and
tests can read it. Device and interface names come from the site config; what
this module adds is the per-fabric glue (which variable carries them, exact-match
syntax, the plugin a fabric needs) and the one value that depends on the job,
CUDA_DEVICE_MAX_CONNECTIONS.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .layout import Layout
from .site import NodeType

# Launchers that run Megatron-Core underneath (its argument checks apply).
MEGATRON_BASED = ("megatron", "nemo")
_BLACKWELL = re.compile(r"(?i)(\bG?B[0-9]{3}\b|blackwell)")


@dataclass(frozen=True)
class EnvVar:
    """One variable the job exports for the fabric, with the reason it is set."""

    name: str
    value: str
    why: str


@dataclass(frozen=True)
class FabricEnv:
    """The NCCL/RCCL environment a node type's fabric needs, each variable with its reason."""

    kind: str  # infiniband | roce | efa | slingshot | ethernet
    vendor: str  # nvidia | amd
    library: str  # NCCL | RCCL (RCCL reads the NCCL_* names)
    env: Tuple[EnvVar, ...]

    def get(self, name: str) -> Optional[str]:
        for e in self.env:
            if e.name == name:
                return e.value
        return None

    def to_dict(self) -> Dict[str, object]:
        return {"kind": self.kind, "vendor": self.vendor, "library": self.library,
                "env": [{"name": e.name, "value": e.value, "why": e.why} for e in self.env]}


def exact_list(items: Sequence[str]) -> str:
    """NCCL matches name prefixes unless the list starts with '=' (mlx5_1 would also pick mlx5_10)."""
    return "=" + ",".join(items)


def socket_ifname(value: str) -> Tuple[str, str]:
    """The NCCL_SOCKET_IFNAME value for a site's interface setting, and why it has that form.

    Full interface names (ending in a digit: bond0, hsn0,hsn1) become an exact list, since
    'eth1' would also match 'eth10'. A value the site already wrote with '^' or '=' is kept,
    and so is a bare prefix such as 'hsn' (no interface has that exact name).
    """
    if value.startswith(("^", "=")):
        return value, "site's own NCCL list syntax"
    names = [v for v in value.split(",") if v]
    if names and all(n[-1].isdigit() for n in names):
        return exact_list(names), "exact interface names (a bare name would also match longer ones)"
    return value, "interface name prefix, as the site wrote it"


def is_blackwell(node: NodeType) -> bool:
    return node.vendor == "nvidia" and bool(_BLACKWELL.search(node.gpu_model))


def cuda_device_max_connections(node: NodeType, launcher: str, layout: Layout,
                                fsdp: bool = False) -> Tuple[Optional[str], str]:
    """Megatron's rule: 1 when TP or CP > 1 on pre-Blackwell GPUs without FSDP; never 1 with FSDP.

    With a single hardware queue, the TP/SP collective issued just before a GEMM really
    starts first and overlaps with it; FSDP's own overlap needs several queues.
    """
    if launcher not in MEGATRON_BASED:
        return None, "not a Megatron-based launcher"
    if fsdp:
        return None, "FSDP needs more than one CUDA connection (Megatron asserts it is not 1)"
    if layout.tp == 1 and layout.cp == 1:
        return None, "TP=1 and CP=1: no tensor/context-parallel overlap to order"
    if is_blackwell(node):
        return None, "Blackwell GPUs do not need a single connection for TP/CP overlap"
    return "1", "Megatron needs one CUDA connection for TP/CP>1 on pre-Blackwell GPUs without FSDP"


def fabric_env(node: NodeType, launcher: str, layout: Layout, fsdp: bool = False) -> FabricEnv:
    """Ordered environment for the job: fabric glue, the site's own values, then job-derived values."""
    amd = node.vendor == "amd"
    lib = "RCCL" if amd else "NCCL"
    multi_node = layout.nodes > 1
    out: List[EnvVar] = [EnvVar("NCCL_DEBUG", "WARN", "%s prints warnings such as a missing network plugin" % lib)]
    compute = node.compute_nics
    kind = node.fabric
    if kind in ("infiniband", "roce") and compute:
        out.append(EnvVar("NCCL_IB_HCA", exact_list(["%s:%d" % (n.name, n.port) for n in compute]),
                          "the site's compute HCAs only, exact names (no storage ports, no prefix matches)"))
    if kind == "roce":
        if node.roce_gid_index is not None:
            out.append(EnvVar("NCCL_IB_GID_INDEX", str(node.roce_gid_index), "RoCE v2 GID index from the site"))
        if node.roce_traffic_class is not None:
            out.append(EnvVar("NCCL_IB_TC", str(node.roce_traffic_class),
                              "lossless traffic class the site's switches expect"))
    if kind == "efa":
        out.append(EnvVar("FI_PROVIDER", "efa", "libfabric EFA provider"))
        if multi_node:
            out.append(EnvVar("NCCL_NET", "AWS Libfabric",
                              "use the aws-ofi-nccl plugin or fail, instead of falling back to TCP sockets"))
    if kind == "slingshot":
        out.append(EnvVar("FI_PROVIDER", "cxi", "libfabric CXI provider (Slingshot 11)"))
        if multi_node:
            out.append(EnvVar("NCCL_NET", "OFI" if amd else "AWS Libfabric",
                              "use the %s OFI plugin or fail, instead of falling back to TCP sockets"
                              % ("aws-ofi-rccl" if amd else "aws-ofi-nccl")))
        if amd:
            out.append(EnvVar("HSA_FORCE_FINE_GRAIN_PCIE", "1", "RCCL over Slingshot needs fine-grained PCIe memory"))
    if kind == "ethernet":
        out.append(EnvVar("NCCL_IB_DISABLE", "1", "no RDMA fabric: use TCP sockets"))
    if node.socket_ifname:
        value, why = socket_ifname(node.socket_ifname)
        out.append(EnvVar("NCCL_SOCKET_IFNAME", value, "bootstrap/socket interface: " + why))

    for name, value in node.env.items():
        _put(out, EnvVar(name, value, "site config"))

    cdmc, why = cuda_device_max_connections(node, launcher, layout, fsdp)
    if cdmc is not None:
        _put(out, EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", cdmc, why))
    elif fsdp:
        out = [e for e in out if not (e.name == "CUDA_DEVICE_MAX_CONNECTIONS" and e.value == "1")]
    return FabricEnv(kind=kind, vendor=node.vendor, library=lib, env=tuple(out))


def _put(env: List[EnvVar], var: EnvVar) -> None:
    """Set `var`, replacing an earlier value of the same name in place (later sources win)."""
    for i, e in enumerate(env):
        if e.name == var.name:
            env[i] = var
            return
    env.append(var)
