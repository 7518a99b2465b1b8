"""The collective-library environment for one node type, launcher and layout.

Returned as ordered data (name, value, why) so the templates only print it and
tests can read it. Device and interface names come from the site config; what
this module adds is the per-fabric glue (which variable carries them, exact-match
syntax, the plugin a fabric needs) and the one value that depends on the job,
CUDA_DEVICE_MAX_CONNECTIONS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..plan import Layout
from ..site import NodeType

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
        return {
            "kind": self.kind,
            "vendor": self.vendor,
            "library": self.library,
            "env": [{"name": e.name, "value": e.value, "why": e.why} for e in self.env],
        }


# ---------------------------------------------------------------------------
# The one table: what NCCL (and RCCL, which reads the NCCL_* names) needs per fabric kind.
# fabric_env (what gen writes), probe.implied_nccl_env (what a probed node calls for) and the
# submit policy's list of variables a multi-node job should set (nccl_required) all read it.

# NCCL_NET for the OFI plugin, NVIDIA and AMD alike: "AWS Libfabric". The ROCm fork
# aws-ofi-rccl registers only that name (ROCm/aws-ofi-rccl src/nccl_ofi_net.c,
# `.name = "AWS Libfabric"`), so HPE's RCCL guide value "OFI" would make RCCL fail to find a
# network there; upstream aws-ofi-nccl registers "Libfabric" since 1.12 and renames itself to
# "AWS Libfabric" or "OFI" when NCCL_NET asks for either (fabric_facts.md 2.4-2.6, from
# aws-ofi-nccl src/nccl_ofi_interface_nvidia.cpp). NCCL compares the name case-insensitively.
OFI_NET = "AWS Libfabric"


@dataclass(frozen=True)
class FabricFacts:
    """The collective-library settings a fabric kind calls for (fabric_facts.md sections 1-2)."""

    kind: str
    provider: Optional[str] = None  # FI_PROVIDER: the libfabric provider the OFI plugin uses
    net: Optional[str] = None  # NCCL_NET on multi-node jobs: use this plugin or fail (not TCP)
    plugin: Dict[str, str] = field(default_factory=dict)  # vendor -> the plugin's name, for the why
    ib_hca: bool = False  # NCCL_IB_HCA lists the site's compute HCAs
    ib_disable: bool = False  # no RDMA fabric: NCCL_IB_DISABLE=1, TCP sockets
    amd_env: Tuple[Tuple[str, str, str], ...] = ()  # (name, value, why) for RCCL on AMD GPUs
    tuning: Tuple[Tuple[str, str], ...] = ()  # site-wide values a probe proposes for the site's env:
    ask_socket_ifname: bool = True  # the policy asks multi-node jobs for the site's NCCL_SOCKET_IFNAME


FABRIC_TABLE: Dict[str, FabricFacts] = {
    f.kind: f
    for f in (
        FabricFacts("infiniband", ib_hca=True),
        FabricFacts("roce", ib_hca=True),
        FabricFacts("efa", provider="efa", net=OFI_NET, plugin={"nvidia": "aws-ofi-nccl"}, ask_socket_ifname=False),
        FabricFacts(
            "slingshot",
            provider="cxi",
            net=OFI_NET,
            plugin={"nvidia": "aws-ofi-nccl OFI", "amd": "aws-ofi-rccl OFI"},
            amd_env=(("HSA_FORCE_FINE_GRAIN_PCIE", "1", "RCCL over Slingshot needs fine-grained PCIe memory"),),
            # HPE / CSCS / ALCF Slingshot settings (fabric_facts 2.5)
            tuning=(
                ("NCCL_CROSS_NIC", "1"),
                ("NCCL_NET_GDR_LEVEL", "PHB"),
                ("FI_CXI_DISABLE_HOST_REGISTER", "1"),
                ("FI_MR_CACHE_MONITOR", "userfaultfd"),
                ("FI_CXI_DEFAULT_CQ_SIZE", "131072"),
            ),
        ),
        FabricFacts("ethernet", ib_disable=True),
    )
}


# Multi-node NVLink (GB200/GB300 NVL72: one NVLink domain over 18 trays), per the site's
# node_types.X.mnnvl. NCCL's default (2, auto) uses MNNVL when IMEX channels work and silently stays
# on the network otherwise; NVLS (NVLink SHARP multicast) across trays needs the same IMEX setup
# (fabric_facts.md 1, NCCL_MNNVL_ENABLE / NCCL_NVLS_ENABLE rows: src/mnnvl.cc, src/transport/nvls.cc).
MNNVL_TABLE: Dict[str, Tuple[Tuple[str, str, str], ...]] = {
    "on": (
        (
            "NCCL_MNNVL_ENABLE",
            "1",
            "the site runs IMEX channels: use NVLink across the trays of a rack or fail at init, "
            "instead of silently falling back to the network (auto)",
        ),
    ),
    "off": (
        ("NCCL_MNNVL_ENABLE", "0", "the site has no IMEX channels: NCCL's multi-node NVLink setup would fail"),
        ("NCCL_NVLS_ENABLE", "0", "NVLink SHARP across trays needs the IMEX setup the site does not run"),
    ),
    "auto": (),
}


def mnnvl_env(node: NodeType, nodes: int) -> Tuple[Tuple[str, str, str], ...]:
    """(name, value, why) a job of `nodes` nodes sets for multi-node NVLink on this node type."""
    if not node.multi_node_nvlink or nodes <= 1:
        return ()
    return MNNVL_TABLE.get(node.mnnvl, ())


def fabric_facts(kind: str) -> FabricFacts:
    return FABRIC_TABLE.get(kind) or FabricFacts(kind, ask_socket_ifname=False)


def nccl_required(kind: str, has_socket_ifname: bool) -> Tuple[str, ...]:
    """What a multi-node job on this fabric should set (the submit policy warns when one is missing)."""
    f = fabric_facts(kind)
    out: List[str] = []
    if f.ib_hca:
        out.append("NCCL_IB_HCA")
    if f.net:
        out.append("NCCL_NET")
    if has_socket_ifname and f.ask_socket_ifname:
        out.append("NCCL_SOCKET_IFNAME")
    return tuple(out)


def derived_names(kind: str) -> Tuple[str, ...]:
    """Variables fabric_env writes from the site's fabric, NICs and interface by itself: a site's
    env: need not (and for NCCL_NET, which is only for multi-node jobs, should not) repeat them."""
    f = fabric_facts(kind)
    names = ["NCCL_SOCKET_IFNAME"]
    if f.ib_hca:
        names.append("NCCL_IB_HCA")
    if f.provider:
        names.append("FI_PROVIDER")
    if f.net:
        names.append("NCCL_NET")
    names.extend(n for n, _, _ in f.amd_env)
    if f.ib_disable:
        names.append("NCCL_IB_DISABLE")
    # from node_types.X.mnnvl on multi-node NVLink sites (the site sets mnnvl, not these)
    names.extend(sorted({n for rows in MNNVL_TABLE.values() for n, _, _ in rows}))
    return tuple(names)


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


def cuda_device_max_connections(
    node: NodeType, launcher: str, layout: Layout, fsdp: bool = False
) -> Tuple[Optional[str], str]:
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
    facts = fabric_facts(kind)
    if facts.ib_hca and compute:
        out.append(
            EnvVar(
                "NCCL_IB_HCA",
                exact_list(["%s:%d" % (n.name, n.port) for n in compute]),
                "the site's compute HCAs only, exact names (no storage ports, no prefix matches)",
            )
        )
    if kind == "roce":
        if node.roce_gid_index is not None:
            out.append(EnvVar("NCCL_IB_GID_INDEX", str(node.roce_gid_index), "RoCE v2 GID index from the site"))
        if node.roce_traffic_class is not None:
            out.append(
                EnvVar("NCCL_IB_TC", str(node.roce_traffic_class), "lossless traffic class the site's switches expect")
            )
    if facts.provider:
        out.append(EnvVar("FI_PROVIDER", facts.provider, _PROVIDER_WHY.get(facts.provider, "libfabric provider")))
    if facts.net and multi_node:
        plugin = facts.plugin.get(node.vendor) or facts.plugin.get("nvidia") or "OFI"
        out.append(
            EnvVar("NCCL_NET", facts.net, "use the %s plugin or fail, instead of falling back to TCP sockets" % plugin)
        )
    if amd:
        for name, value, why in facts.amd_env:
            out.append(EnvVar(name, value, why))
    if facts.ib_disable:
        out.append(EnvVar("NCCL_IB_DISABLE", "1", "no RDMA fabric: use TCP sockets"))
    if node.socket_ifname:
        value, why = socket_ifname(node.socket_ifname)
        out.append(EnvVar("NCCL_SOCKET_IFNAME", value, "bootstrap/socket interface: " + why))

    for name, value, why in mnnvl_env(node, layout.nodes):
        out.append(EnvVar(name, value, "mnnvl: %s: %s" % (node.mnnvl, why)))

    for name, value in node.env.items():
        _put(out, EnvVar(name, value, "site config"))

    cdmc, why = cuda_device_max_connections(node, launcher, layout, fsdp)
    if cdmc is not None:
        _put(out, EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", cdmc, why))
    elif fsdp:
        out = [e for e in out if not (e.name == "CUDA_DEVICE_MAX_CONNECTIONS" and e.value == "1")]
    return FabricEnv(kind=kind, vendor=node.vendor, library=lib, env=tuple(out))


_PROVIDER_WHY = {"efa": "libfabric EFA provider", "cxi": "libfabric CXI provider (Slingshot 11)"}


def _put(env: List[EnvVar], var: EnvVar) -> None:
    """Set `var`, replacing an earlier value of the same name in place (later sources win)."""
    for i, e in enumerate(env):
        if e.name == var.name:
            env[i] = var
            return
    env.append(var)
