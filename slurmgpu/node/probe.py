"""What one compute node has: GPUs and their links, RDMA ports, network interfaces.

Meant to run on a compute node (``srun -N1 slurmgpu probe --json``).  It reads
`nvidia-smi -q` and `nvidia-smi topo -m` (or `rocm-smi` on AMD), the RDMA
ports under ``<sysfs>/class/infiniband``, Slingshot's ``class/cxi`` and the
network interfaces, and says which fabric and NCCL settings they imply.  Where
something is absent it says so instead of failing: a node without GPUs or
RDMA still gets a report.  The sysfs root and the command runner are
parameters, so recorded trees and outputs drive the same code in tests.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..site import AffinityMap, GpuAffinity, Nic, format_cpulist, parse_cpulist
from ..slurm import Runner, SubprocessRunner
from .affinity import GpuPlace, gpu_places, read_numa_nodes

# ---------------------------------------------------------------------------
# data


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    vendor: str
    memory_mib: Optional[int] = None
    bus_id: Optional[str] = None
    # `nvidia-smi -q` "Fabric" section (driver 550+ on multi-node NVLink systems such as GB200 NVL72):
    # GPUs of one NVLink domain report the same ClusterUUID and CliqueId once State is Completed
    fabric_state: Optional[str] = None  # Completed | In Progress | Not Started | Not Supported | N/A
    fabric_status: Optional[str] = None  # Success, or the error
    clique_id: Optional[str] = None
    cluster_uuid: Optional[str] = None


@dataclass(frozen=True)
class Topology:
    """`nvidia-smi topo -m`: link type for each ordered pair of devices."""

    devices: Tuple[str, ...]  # "GPU0".., NIC names resolved ("mlx5_0")
    links: Mapping[str, Mapping[str, str]]  # links[a][b] = "NV18" | "PIX" | ...
    # the columns after the devices, per GPU row: "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"
    affinity: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def link(self, a: str, b: str) -> str:
        return self.links.get(a, {}).get(b, "")

    @property
    def gpus(self) -> Tuple[str, ...]:
        return tuple(d for d in self.devices if re.fullmatch(r"GPU\d+", d))

    @property
    def nics(self) -> Tuple[str, ...]:
        return tuple(d for d in self.devices if not re.fullmatch(r"GPU\d+", d))

    def numa_of(self, gpu: str, column: str = "NUMA Affinity") -> Optional[int]:
        """A GPU's NUMA column as a number (None: absent, N/A, or a range such as 0-1)."""
        v = self.affinity.get(gpu, {}).get(column, "")
        return int(v) if v.isdigit() else None

    def nearest_nics(self, gpu: str, among: Sequence[str] = ()) -> Tuple[str, ...]:
        """NICs on the GPU's own PCIe switch, nearest first: PIX, then PXB (`among`: limit to these)."""
        out: List[str] = []
        for word in ("PIX", "PXB"):
            out.extend(n for n in self.nics if self.link(gpu, n) == word and (not among or n in among))
        return tuple(out)


@dataclass(frozen=True)
class RdmaPort:
    device: str  # mlx5_0, rdmap16s27, efa_0
    port: int
    link_layer: str  # InfiniBand | Ethernet | Unknown | Unspecified
    state: str  # ACTIVE | DOWN | INIT ...
    gbps: float  # from "400 Gb/sec (4X NDR)"
    kind: str  # infiniband | roce | efa
    netdevs: Tuple[str, ...] = ()
    vendor_id: Optional[str] = None

    @property
    def active(self) -> bool:
        return self.state.upper() == "ACTIVE"


@dataclass(frozen=True)
class NetIf:
    name: str
    up: bool
    speed_mbps: Optional[int]
    kind: str  # ethernet | ipoib | slingshot | bond | loopback | virtual


@dataclass(frozen=True)
class ProbeResult:
    hostname: str
    gpus: Tuple[Gpu, ...] = ()
    gpu_tool: Optional[str] = None  # nvidia-smi | rocm-smi
    link: Optional[str] = None  # nvlink | xgmi | pcie (None: no GPUs or no topology)
    nvlink_domain: Optional[int] = None
    nvlinks_per_gpu: Optional[int] = None  # NV# between peers (NV18 -> 18)
    topology: Optional[Topology] = None
    rdma: Tuple[RdmaPort, ...] = ()
    interfaces: Tuple[NetIf, ...] = ()
    cxi_devices: Tuple[str, ...] = ()
    fabric: str = "ethernet"
    nics: Tuple[Nic, ...] = ()
    socket_ifname: Optional[str] = None
    nccl_env: Mapping[str, str] = field(default_factory=dict)
    found: Tuple[str, ...] = ()
    missing: Tuple[str, ...] = ()
    imex_channels: Tuple[str, ...] = ()  # /dev/nvidia-caps-imex-channels/channel* present on the node
    nvlink_clique: Optional[str] = None  # "ClusterUUID/CliqueId" all GPUs agree on (multi-node NVLink)
    numa_nodes: Tuple[Tuple[int, str], ...] = ()  # (NUMA node, its CPUs as a cpulist; "" for memory-only nodes)
    gpu_places: Tuple[GpuPlace, ...] = ()  # each GPU's NUMA node, CPUs and nearest NICs (node/affinity.py)

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["topology"] = (
            None
            if self.topology is None
            else {
                "devices": list(self.topology.devices),
                "links": {a: dict(b) for a, b in self.topology.links.items()},
                "affinity": {a: dict(b) for a, b in self.topology.affinity.items()},
            }
        )
        d["nccl_env"] = dict(self.nccl_env)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProbeResult:
        topo = d.get("topology")
        return cls(
            hostname=str(d.get("hostname", "")),
            gpus=tuple(Gpu(**g) for g in d.get("gpus") or ()),
            gpu_tool=d.get("gpu_tool"),
            link=d.get("link"),
            nvlink_domain=d.get("nvlink_domain"),
            nvlinks_per_gpu=d.get("nvlinks_per_gpu"),
            topology=None if not topo else Topology(tuple(topo["devices"]), topo["links"], topo.get("affinity") or {}),
            rdma=tuple(RdmaPort(**{**r, "netdevs": tuple(r.get("netdevs") or ())}) for r in d.get("rdma") or ()),
            interfaces=tuple(NetIf(**i) for i in d.get("interfaces") or ()),
            cxi_devices=tuple(d.get("cxi_devices") or ()),
            fabric=d.get("fabric", "ethernet"),
            nics=tuple(Nic(**n) for n in d.get("nics") or ()),
            socket_ifname=d.get("socket_ifname"),
            nccl_env=dict(d.get("nccl_env") or {}),
            found=tuple(d.get("found") or ()),
            missing=tuple(d.get("missing") or ()),
            imex_channels=tuple(d.get("imex_channels") or ()),
            nvlink_clique=d.get("nvlink_clique"),
            numa_nodes=tuple((int(n), str(c)) for n, c in d.get("numa_nodes") or ()),
            gpu_places=tuple(GpuPlace(**{**g, "nics": tuple(g.get("nics") or ())}) for g in d.get("gpu_places") or ()),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


# ---------------------------------------------------------------------------
# nvidia-smi

_GPU_HEAD = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def parse_nvidia_smi_q(text: str) -> List[Gpu]:
    """`nvidia-smi -q` -> GPUs (product name, FB memory total, bus id), in output order."""
    gpus: List[Gpu] = []
    cur: Optional[Dict[str, Any]] = None
    section: List[Tuple[int, str]] = []
    for raw in (text or "").splitlines():
        m = _GPU_HEAD.match(raw.strip()) if not raw[:1].isspace() else None
        if m:
            if cur is not None:
                gpus.append(_gpu_from(cur, len(gpus)))
            cur, section = {"bus_id": m.group(1)}, []
            continue
        if cur is None or not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip())
        key, sep, value = raw.strip().partition(":")
        key, value = key.strip(), value.strip()
        while section and section[-1][0] >= indent:
            section.pop()
        if sep and value:
            path = "/".join([s for _, s in section] + [key])
            cur.setdefault(path, value)
        elif sep or not value:
            section.append((indent, key))
    if cur is not None:
        gpus.append(_gpu_from(cur, len(gpus)))
    return gpus


def _gpu_from(d: Dict[str, Any], i: int) -> Gpu:
    mem = d.get("FB Memory Usage/Total", "")
    m = re.match(r"(\d+)\s*MiB", mem)
    idx = d.get("Minor Number", "")
    return Gpu(
        index=int(idx) if idx.isdigit() else i,
        name=d.get("Product Name", "unknown"),
        vendor="nvidia",
        memory_mib=int(m.group(1)) if m else None,
        bus_id=d.get("bus_id"),
        fabric_state=_known(d.get("Fabric/State")),
        fabric_status=_known(d.get("Fabric/Status")),
        clique_id=_known(d.get("Fabric/CliqueId")),
        cluster_uuid=_known(d.get("Fabric/ClusterUUID")),
    )


def _known(v: Optional[str]) -> Optional[str]:
    """nvidia-smi writes N/A (and some drivers "Not Supported") where a field does not apply."""
    return None if v is None or v in ("N/A", "Not Supported", "") else v


_NULL_UUID = re.compile(r"^[0-]+$")


def fabric_clique(gpus: Sequence[Gpu]) -> Tuple[Optional[str], List[str]]:
    """("ClusterUUID/CliqueId" the node's GPUs share, notes) from their Fabric sections.

    None when no GPU reports a multi-node NVLink fabric (single-node NVSwitch systems report N/A
    or an all-zero ClusterUUID). A fabric still being set up, failed, or GPUs that disagree are
    notes: then the node cannot vouch for its NVLink domain.
    """
    notes: List[str] = []
    fab = [g for g in gpus if g.cluster_uuid and not _NULL_UUID.match(g.cluster_uuid)]
    if not fab:
        return None, notes
    bad = [g for g in gpus if (g.fabric_state or "") != "Completed" or (g.fabric_status or "") != "Success"]
    if bad:
        notes.append(
            "NVLink fabric not ready on GPU %s: State %s, Status %s (nvidia-smi -q, Fabric; the IMEX/fabric "
            "manager service sets it up)"
            % (",".join(str(g.index) for g in bad), bad[0].fabric_state or "?", bad[0].fabric_status or "?")
        )
        return None, notes
    ids = sorted({"%s/%s" % (g.cluster_uuid, g.clique_id or "?") for g in gpus})
    if len(ids) > 1:
        notes.append(
            "the GPUs of this node report different NVLink domains (ClusterUUID/CliqueId): %s" % ", ".join(ids)
        )
        return None, notes
    return ids[0], notes


IMEX_CHANNEL_DIR = "nvidia-caps-imex-channels"


def read_imex_channels(devroot: str) -> List[str]:
    """IMEX channel devices (<dev>/nvidia-caps-imex-channels/channelN): multi-node NVLink memory
    sharing, and so NCCL's MNNVL, needs at least channel0 inside the job."""
    return [c for c in _listdir(os.path.join(devroot, IMEX_CHANNEL_DIR)) if re.fullmatch(r"channel\d+", c)]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINK_WORD = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|C2C|N/A)$")


def parse_topo_matrix(text: str) -> Topology:
    """`nvidia-smi topo -m` -> Topology. Handles NIC columns named directly
    (``mlx5_0``, older drivers) or as ``NIC0`` with a "NIC Legend"."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in (text or "").splitlines()]
    legend: Dict[str, str] = {}
    for line in lines:
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if m:
            legend[m.group(1)] = m.group(2)
    header: List[str] = []
    extra: List[str] = []  # the column names after the devices
    rows: Dict[str, List[str]] = {}
    tails: Dict[str, List[str]] = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].startswith("Legend"):
            break
        if not header:
            if tokens[0] == "GPU0" and line[:1].isspace():
                for i, tok in enumerate(tokens):
                    if tok == "CPU":  # "CPU Affinity", "NUMA Affinity", "GPU NUMA ID" follow the devices
                        rest = " ".join(tokens[i:])
                        extra = [c for c in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID") if c in rest]
                        break
                    header.append(tok)
            continue
        if tokens[0] in header:
            rows[tokens[0]] = [t if _LINK_WORD.match(t) else "" for t in tokens[1 : 1 + len(header)]]
            tails[tokens[0]] = tokens[1 + len(header) :]
    if not header:
        raise ValueError("no device header (GPU0 ...) in nvidia-smi topo -m output")
    names = [legend.get(h, h) for h in header]
    links: Dict[str, Dict[str, str]] = {}
    for h, name in zip(header, names):
        vals = rows.get(h, [])
        links[name] = {names[j]: v for j, v in enumerate(vals) if v and v != "X"}
    # GPU rows carry one value per extra column (N/A included); NIC rows have none
    affinity = {h: dict(zip(extra, tails[h])) for h in header if tails.get(h) and re.fullmatch(r"GPU\d+", h)}
    return Topology(tuple(names), links, affinity)


_TOPONUMA = re.compile(r"^GPU\[(\d+)\]\s*:\s*\(Topology\)\s*Numa (Node|Affinity):\s*(-?\d+)", re.M)


def parse_rocm_toponuma(text: str) -> Dict[int, int]:
    """`rocm-smi --showtoponuma` -> GPU -> NUMA node ("Numa Affinity", else "Numa Node"; -1 dropped)."""
    node: Dict[int, int] = {}
    aff: Dict[int, int] = {}
    for m in _TOPONUMA.finditer(text or ""):
        (aff if m.group(2) == "Affinity" else node)[int(m.group(1))] = int(m.group(3))
    merged = {**node, **aff}
    return {g: n for g, n in merged.items() if n >= 0}


def nvlink_summary(topo: Topology) -> Tuple[str, int, Optional[int]]:
    """(link, domain size, NVLinks per peer) from the GPU-GPU part of the matrix."""
    gpus = topo.gpus
    if not gpus:
        return "pcie", 1, None
    peers = []
    counts: List[int] = []
    for g in gpus:
        nv = [o for o in gpus if o != g and topo.link(g, o).startswith("NV")]
        peers.append(len(nv))
        counts.extend(int(topo.link(g, o)[2:]) for o in nv if topo.link(g, o)[2:].isdigit())
    if not any(peers):
        return "pcie", 1, None
    return "nvlink", 1 + min(peers), (min(counts) if counts else None)


# ---------------------------------------------------------------------------
# rocm-smi (AMD)


def parse_rocm_smi_json(text: str) -> List[Gpu]:
    """`rocm-smi --showproductname --showmeminfo vram --json` -> GPUs."""
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    gpus = []
    for key in sorted((k for k in doc if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:])):
        card = doc[key]
        name = card.get("Card Series") or card.get("Card series") or card.get("Card model") or "unknown"
        total = next((v for k, v in card.items() if k.startswith("VRAM Total Memory")), None)
        mib = int(int(total) / 2**20) if isinstance(total, str) and total.isdigit() else None
        gpus.append(Gpu(index=int(key[4:]), name=name, vendor="amd", memory_mib=mib))
    return gpus


# ---------------------------------------------------------------------------
# sysfs


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _listdir(path: str) -> List[str]:
    try:
        return sorted(os.listdir(path), key=_natural)
    except OSError:
        return []


def _natural(s: str) -> Tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))


def _gbps(rate: Optional[str]) -> float:
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(m.group(1)) if m else 0.0


def read_rdma(sysfs: str) -> List[RdmaPort]:
    """Ports under <sysfs>/class/infiniband/<dev>/ports/<n>/{link_layer,state,rate}."""
    base = os.path.join(sysfs, "class", "infiniband")
    out = []
    for dev in _listdir(base):
        ddir = os.path.join(base, dev)
        vendor = _read(os.path.join(ddir, "device", "vendor"))
        netdevs = tuple(_listdir(os.path.join(ddir, "device", "net")))
        for port in _listdir(os.path.join(ddir, "ports")):
            pdir = os.path.join(ddir, "ports", port)
            ll = _read(os.path.join(pdir, "link_layer")) or "Unknown"
            state = (_read(os.path.join(pdir, "state")) or "").split(":")[-1].strip()
            kind = _rdma_kind(dev, ll, vendor)
            out.append(
                RdmaPort(
                    device=dev,
                    port=int(port) if port.isdigit() else 1,
                    link_layer=ll,
                    state=state or "UNKNOWN",
                    gbps=_gbps(_read(os.path.join(pdir, "rate"))),
                    kind=kind,
                    netdevs=netdevs,
                    vendor_id=vendor,
                )
            )
    return out


def _rdma_kind(dev: str, link_layer: str, vendor: Optional[str]) -> str:
    # EFA: Amazon's PCI vendor 0x1d0f; sysfs link_layer reads "Unknown" (rdma-core PR 884)
    if (vendor or "").lower() == "0x1d0f" or dev.startswith("efa"):
        return "efa"
    if link_layer.lower() == "ethernet":
        return "roce"
    if link_layer.lower() == "infiniband":
        return "infiniband"
    return "unknown"


def _if_kind(name: str, arphrd: Optional[str], driver: Optional[str] = None) -> str:
    if name == "lo":
        return "loopback"
    if name.startswith("hsn"):
        return "slingshot"
    if arphrd == "32" or re.match(r"^ib", name):
        return "ipoib"
    if name.startswith(("bond", "team")):
        return "bond"
    if re.match(r"^(docker|virbr|veth|br-|cni|flannel|cali|tun|tap|ifb|dummy|lxc)", name):
        return "virtual"
    return "ethernet"


def read_net_sysfs(sysfs: str) -> List[NetIf]:
    """Interfaces under <sysfs>/class/net/<if>/{operstate,speed,type}."""
    base = os.path.join(sysfs, "class", "net")
    out = []
    for name in _listdir(base):
        d = os.path.join(base, name)
        oper = (_read(os.path.join(d, "operstate")) or "").lower()
        speed = _read(os.path.join(d, "speed"))
        sp = int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None
        kind = _if_kind(name, _read(os.path.join(d, "type")))
        out.append(NetIf(name, oper == "up" or (oper == "unknown" and kind != "loopback"), sp, kind))
    return out


def read_net_psutil(sysfs: str = "/sys") -> List[NetIf]:
    """Interfaces as psutil sees them on this machine (speed in Mb/s, 0 = unknown)."""
    import psutil

    out = []
    for name, st in sorted(psutil.net_if_stats().items(), key=lambda kv: _natural(kv[0])):
        arphrd = _read(os.path.join(sysfs, "class", "net", name, "type"))
        out.append(NetIf(name, bool(st.isup), st.speed or None, _if_kind(name, arphrd)))
    return out


# ---------------------------------------------------------------------------
# what it implies


def classify(
    rdma: Sequence[RdmaPort], interfaces: Sequence[NetIf], cxi: Sequence[str], topo: Optional[Topology]
) -> Tuple[str, List[Nic], Optional[str], List[str]]:
    """(fabric, NICs with roles, socket interface, notes)."""
    notes: List[str] = []
    active = [p for p in rdma if p.active]
    for p in rdma:
        if not p.active:
            notes.append("RDMA port %s:%d is %s: left out" % (p.device, p.port, p.state or "not active"))
    efa = [p for p in active if p.kind == "efa"]
    ib = [p for p in active if p.kind == "infiniband"]
    roce = [p for p in active if p.kind == "roce"]
    hsn = [i for i in interfaces if i.kind == "slingshot" and i.up]
    if efa:
        fabric, compute = "efa", efa
    elif cxi or hsn:
        fabric, compute = "slingshot", []
    elif ib:
        fabric, compute = "infiniband", _near_gpus(ib, topo, notes)
    elif roce:
        fabric, compute = "roce", _near_gpus([p for p in roce if "bond" not in p.device], topo, notes) or roce
    else:
        fabric, compute = "ethernet", []
    nics = []
    compute_ids = {(p.device, p.port) for p in compute}
    for p in active:
        if fabric in ("ethernet", "slingshot") or p.kind == "efa" and fabric != "efa":
            continue
        role = "compute" if (p.device, p.port) in compute_ids else "storage"
        nics.append(Nic(p.device, p.port, "infiniband" if p.kind == "infiniband" else "ethernet", p.gbps or 0.0, role))
    return fabric, nics, _socket_ifname(fabric, interfaces, active), notes


def _near_gpus(ports: List[RdmaPort], topo: Optional[Topology], notes: List[str]) -> List[RdmaPort]:
    """Ports on the same PCIe switch as some GPU (PIX/PXB) are compute NICs; others carry storage."""
    if topo is None or not topo.gpus:
        return ports
    near = [p for p in ports if any(topo.link(g, p.device) in ("PIX", "PXB") for g in topo.gpus)]
    if not near:
        return ports
    far = [p.device for p in ports if p not in near]
    if far:
        notes.append("not next to any GPU (storage/in-band): %s" % ", ".join(far))
    return near


def _socket_ifname(fabric: str, interfaces: Sequence[NetIf], rdma: Sequence[RdmaPort]) -> Optional[str]:
    up = [i for i in interfaces if i.up]
    if fabric == "slingshot":
        return "hsn" if any(i.kind == "slingshot" for i in up) else None
    rdma_netdevs = {n for p in rdma for n in p.netdevs}
    for kinds in (("bond",), ("ethernet",), ("ipoib",)):
        cands = [i for i in up if i.kind in kinds and i.name not in rdma_netdevs]
        if cands:
            return cands[0].name
    return None


def implied_nccl_env(
    fabric: str, nics: Sequence[Nic], socket_ifname: Optional[str], gpus: Sequence[Gpu]
) -> Dict[str, str]:
    """The NCCL settings this node calls for: the per-fabric table in slurmgpu.fabric applied to
    what was found (plus GeForce's P2P workaround)."""
    from ..nccl import fabric_facts

    facts = fabric_facts(fabric)
    env: Dict[str, str] = {}
    if socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = socket_ifname
    compute = [n for n in nics if n.role == "compute"]
    if facts.ib_hca and compute:
        # "=" makes the names exact: mlx5_1 would otherwise also select mlx5_10, mlx5_11
        env["NCCL_IB_HCA"] = "=" + ",".join(n.name if n.port == 1 else "%s:%d" % (n.name, n.port) for n in compute)
    if facts.net:
        env["NCCL_NET"] = facts.net
    env.update(facts.tuning)
    if any("4090" in g.name or "5090" in g.name for g in gpus):
        env["NCCL_P2P_DISABLE"] = "1"
    return env


# ---------------------------------------------------------------------------
# the probe


def probe(
    sysfs: str = "/sys",
    runner: Optional[Runner] = None,
    hostname: Optional[str] = None,
    net_reader: Optional[Callable[[str], List[NetIf]]] = None,
    devroot: str = "/dev",
) -> ProbeResult:
    """Look at this node (or at a recorded sysfs tree + recorded command output)."""
    runner = runner or SubprocessRunner()
    found: List[str] = []
    missing: List[str] = []
    gpus: List[Gpu] = []
    tool = None
    topo = None
    res = runner.run(["nvidia-smi", "-q"], timeout=60)
    if res.ok:
        gpus, tool = parse_nvidia_smi_q(res.stdout), "nvidia-smi"
        found.append("nvidia-smi -q: %d GPU%s" % (len(gpus), "" if len(gpus) == 1 else "s"))
        t = runner.run(["nvidia-smi", "topo", "-m"], timeout=60)
        if t.ok:
            try:
                topo = parse_topo_matrix(t.stdout)
                found.append("nvidia-smi topo -m: %d devices" % len(topo.devices))
            except ValueError as exc:
                missing.append("nvidia-smi topo -m: %s" % exc)
        else:
            missing.append(t.why())
    else:
        missing.append(res.why() + (" (no NVIDIA driver here)" if res.not_found else ""))
        r = runner.run(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"], timeout=60)
        if r.ok:
            gpus, tool = parse_rocm_smi_json(r.stdout), "rocm-smi"
            found.append("rocm-smi: %d GPU%s" % (len(gpus), "" if len(gpus) == 1 else "s"))
        else:
            missing.append(r.why() + (" (no ROCm here)" if r.not_found else ""))
    clique, fab_notes = fabric_clique(gpus)
    missing.extend(fab_notes)
    if clique:
        found.append("nvidia-smi -q Fabric: NVLink domain %s" % clique)
    imex = read_imex_channels(devroot)
    if imex:
        found.append("%s/%s: %s" % (devroot, IMEX_CHANNEL_DIR, ", ".join(imex)))
    elif clique:
        missing.append("%s/%s: no IMEX channel (multi-node NVLink needs one)" % (devroot, IMEX_CHANNEL_DIR))
    link = domain = nvlinks = None
    if topo is not None:
        link, domain, nvlinks = nvlink_summary(topo)
    elif tool == "rocm-smi" and gpus:
        link, domain = "xgmi", len(gpus)  # AMD Instinct OAM nodes: fully connected xGMI
        missing.append("GPU links not measured on AMD: assumed xGMI across the node (check: rocm-smi --showtopotype)")
    rdma = read_rdma(sysfs)
    if rdma:
        found.append("%s/class/infiniband: %d port%s" % (sysfs, len(rdma), "" if len(rdma) == 1 else "s"))
    else:
        missing.append("%s/class/infiniband: no RDMA devices" % sysfs)
    cxi = tuple(_listdir(os.path.join(sysfs, "class", "cxi")))
    if cxi:
        found.append("%s/class/cxi: %s" % (sysfs, ", ".join(cxi)))
    reader = net_reader or (read_net_psutil if os.path.realpath(sysfs) == "/sys" else read_net_sysfs)
    interfaces = reader(sysfs)
    found.append(
        "network interfaces: %s"
        % (
            ", ".join(
                "%s(%s%s)" % (i.name, "up" if i.up else "down", ", %d Mb/s" % i.speed_mbps if i.speed_mbps else "")
                for i in interfaces
                if i.kind != "loopback"
            )
            or "none"
        )
    )
    fabric, nics, ifname, notes = classify(rdma, interfaces, cxi, topo)
    missing.extend(notes)
    env = implied_nccl_env(fabric, nics, ifname, gpus)
    numa = read_numa_nodes(sysfs)
    places = _locate_gpus(sysfs, runner, tool, gpus, topo, numa, nics, cxi, found, missing)
    return ProbeResult(
        hostname=hostname or os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        gpus=tuple(gpus),
        gpu_tool=tool,
        link=link,
        nvlink_domain=domain,
        nvlinks_per_gpu=nvlinks,
        topology=topo,
        rdma=tuple(rdma),
        interfaces=tuple(interfaces),
        cxi_devices=cxi,
        fabric=fabric,
        nics=tuple(nics),
        socket_ifname=ifname,
        nccl_env=env,
        found=tuple(found),
        missing=tuple(missing),
        imex_channels=tuple(imex),
        nvlink_clique=clique,
        numa_nodes=tuple((n, format_cpulist(c)) for n, c in sorted(numa.items())),
        gpu_places=tuple(places),
    )


def _locate_gpus(
    sysfs: str,
    runner: Runner,
    tool: Optional[str],
    gpus: Sequence[Gpu],
    topo: Optional[Topology],
    numa: Dict[int, Tuple[int, ...]],
    nics: Sequence[Nic],
    cxi: Sequence[str],
    found: List[str],
    missing: List[str],
) -> List[GpuPlace]:
    """Each GPU's NUMA node, CPUs and nearest NICs (sysfs first, the GPU tool's topology second)."""
    if not numa and topo is not None:  # no sysfs NUMA tree (a recorded node, a container): the matrix's columns
        for g in topo.gpus:
            n, cpus = topo.numa_of(g), topo.affinity.get(g, {}).get("CPU Affinity", "")
            try:
                if n is not None and cpus:
                    numa[n] = parse_cpulist(cpus)
            except ValueError:
                pass
        if numa:
            found.append(
                "nvidia-smi topo -m: NUMA nodes %s (CPU and NUMA Affinity columns)" % ", ".join(map(str, numa))
            )
    with_cpus = [n for n, c in numa.items() if c]
    if numa:
        found.append(
            "%s/devices/system/node: %d NUMA node%s (%d with CPUs)"
            % (sysfs, len(numa), "" if len(numa) == 1 else "s", len(with_cpus))
        )
    else:
        missing.append("%s/devices/system/node: no NUMA nodes listed" % sysfs)
    topo_numa: Dict[int, Optional[int]] = {}
    topo_mem: Dict[int, Optional[int]] = {}
    nic_order: Dict[int, Tuple[str, ...]] = {}
    compute = [n.name for n in nics if n.role == "compute"] or list(cxi)
    if topo is not None:
        for g in topo.gpus:
            i = int(g[3:])
            topo_numa[i] = topo.numa_of(g)
            topo_mem[i] = topo.numa_of(g, "GPU NUMA ID")
            near = topo.nearest_nics(g, compute)
            if near:
                nic_order[i] = near
    elif tool == "rocm-smi":
        r = runner.run(["rocm-smi", "--showtoponuma"], timeout=60)
        if r.ok:
            topo_numa.update(parse_rocm_toponuma(r.stdout))
            found.append("rocm-smi --showtoponuma: %d GPU%s" % (len(topo_numa), "" if len(topo_numa) == 1 else "s"))
        else:
            missing.append(r.why())
    bus = [g.bus_id for g in gpus] if gpus and all(g.bus_id for g in gpus) else []
    places = gpu_places(sysfs, bus, numa, topo_numa, topo_mem, nic_order, compute, len(gpus))
    if gpus and len(places) != len(gpus):
        missing.append("GPU PCI devices in %s/bus/pci: %d, the GPU tool lists %d" % (sysfs, len(places), len(gpus)))
    lost = [p.index for p in places if p.numa is None]
    if lost:
        missing.append(
            "NUMA node of GPU %s not known (sysfs numa_node -1 and no topology column)" % ",".join(map(str, lost))
        )
    return places


def affinity_map(r: ProbeResult, gpus: Optional[int] = None) -> Optional[AffinityMap]:
    """The site map (node_types.X.affinity) this node implies: every GPU's NUMA node and nearest NICs,
    the NUMA nodes' CPUs; None when a GPU's NUMA node is not known (a guess would bind wrongly)."""
    places = list(r.gpu_places)
    if not places or any(p.numa is None for p in places) or (gpus is not None and len(places) != gpus):
        return None
    numa = {n: parse_cpulist(c) for n, c in r.numa_nodes if c}
    nic_names = {n.name for n in r.nics} | set(r.cxi_devices)
    entries = tuple(
        GpuAffinity(
            gpu=p.index,
            numa=p.numa,
            cpus=numa.get(p.numa, ()) if p.numa is not None else (),
            nics=tuple(n for n in p.nics if n in nic_names),
            memory_numa=p.memory_numa,
        )
        for p in places
    )
    return AffinityMap(gpus=entries, numa_cpus=numa, source="slurmgpu probe on %s" % r.hostname, verified=True)


DOMAIN_PREFIX = "SLURMGPU-NVL "


def domain_line(hostname: str, clique: Optional[str]) -> str:
    """One line per node for `discover --probe` (srun over all trays): `SLURMGPU-NVL node clique|-`."""
    return "%s%s %s" % (DOMAIN_PREFIX, hostname, clique or "-")


def parse_domain_lines(text: str) -> Dict[str, Optional[str]]:
    """Node -> its "ClusterUUID/CliqueId" (None: the node reported none) from srun output."""
    out: Dict[str, Optional[str]] = {}
    for line in (text or "").splitlines():
        i = line.find(DOMAIN_PREFIX)
        if i < 0:
            continue
        words = line[i + len(DOMAIN_PREFIX) :].split()
        if len(words) == 2:
            out[words[0]] = None if words[1] == "-" else words[1]
    return out


def probe_domain(runner: Optional[Runner] = None, hostname: Optional[str] = None) -> str:
    """This node's domain line from `nvidia-smi -q` alone (seconds, so srun can ask every tray)."""
    runner = runner or SubprocessRunner()
    res = runner.run(["nvidia-smi", "-q"], timeout=60)
    clique = fabric_clique(parse_nvidia_smi_q(res.stdout))[0] if res.ok else None
    return domain_line(hostname or os.environ.get("SLURMD_NODENAME") or socket.gethostname(), clique)


def describe(r: ProbeResult) -> str:
    """Human-readable report (what `slurmgpu probe` prints without --json)."""
    out = ["node %s" % r.hostname]
    if r.gpus:
        names = sorted({g.name for g in r.gpus})
        mem = sorted({g.memory_mib for g in r.gpus if g.memory_mib})
        out.append(
            "  GPUs: %d x %s%s (%s)"
            % (len(r.gpus), " / ".join(names), ", %s MiB" % "/".join(str(m) for m in mem) if mem else "", r.gpu_tool)
        )
        if r.link:
            out.append(
                "  GPU link: %s%s, domain of %s GPU%s"
                % (
                    r.link,
                    " (NV%d per peer)" % r.nvlinks_per_gpu if r.nvlinks_per_gpu else "",
                    r.nvlink_domain,
                    "" if r.nvlink_domain == 1 else "s",
                )
            )
    else:
        out.append("  GPUs: none found")
    if r.nvlink_clique:
        out.append(
            "  multi-node NVLink domain (ClusterUUID/CliqueId): %s; IMEX channels: %s"
            % (r.nvlink_clique, ", ".join(r.imex_channels) or "none")
        )
    if r.gpu_places:
        out.append("  GPU -> NUMA node -> CPUs -> nearest NIC:")
        for p in r.gpu_places:
            out.append(
                "    GPU%d %s  NUMA %s  CPUs %s  NIC %s%s"
                % (
                    p.index,
                    p.address or "?",
                    "?" if p.numa is None else p.numa,
                    p.cpus or "?",
                    ",".join(p.nics) or "-",
                    "  (memory on CPU-less NUMA %d)" % p.memory_numa if p.memory_numa is not None else "",
                )
            )
    elif r.numa_nodes:
        out.append("  NUMA nodes: %s" % ", ".join("%d: %s" % (n, c or "no CPUs") for n, c in r.numa_nodes))
    out.append("  fabric: %s" % r.fabric)
    for n in r.nics:
        out.append("    %-10s port %d  %-10s %6g Gb/s  %s" % (n.name, n.port, n.link_layer, n.gbps, n.role))
    out.append("  socket interface: %s" % (r.socket_ifname or "-"))
    if r.nccl_env:
        out.append("  NCCL environment this node implies:")
        out.extend("    %s=%s" % kv for kv in r.nccl_env.items())
    out.append("  found:")
    out.extend("    " + f for f in r.found)
    if r.missing:
        out.append("  not found / left out:")
        out.extend("    " + m for m in r.missing)
    return "\n".join(out)
