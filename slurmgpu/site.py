"""The site model: what a cluster looks like to a multi-node GPU job.

A site is partitions -> node types (GPUs, NVLink domain, NICs, fabric). It is
read-only once loaded; the planner, renderer and policy all take it as data.
Loading collects every problem with file:line:col and the field path.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import ConfigError, Issue
from .schema import Checker, Field, join
from .vocab import FABRICS, LAUNCHERS, RUNTIMES

LINKS = ("nvlink", "xgmi", "pcie")
VENDORS = ("nvidia", "amd")
GPU_REQUESTS = ("gpus-per-node", "gres")
TOPOLOGIES = ("flat", "tree", "block")
POLICY_MODES = ("enforce", "warn", "off")
DEFAULT_SITE = "dgx-h100"


@dataclass(frozen=True)
class Nic:
    """One network port of a node type (name, port, link layer, speed, role)."""

    name: str
    port: int = 1
    link_layer: str = "infiniband"  # infiniband | ethernet
    gbps: float = 0.0
    role: str = "compute"  # compute | storage

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "port": self.port, "link_layer": self.link_layer,
                "gbps": self.gbps, "role": self.role}


@dataclass(frozen=True)
class NodeType:
    """A kind of node: its GPUs, the NVLink domain, CPUs, memory and fabric."""

    name: str
    gpus: int
    gpu_model: str
    vendor: str
    gpu_memory_gb: float
    bf16_tflops: float
    link: str  # nvlink | xgmi | pcie
    link_gbs: float  # per-GPU intra-domain bandwidth, GB/s, both directions
    nvlink_domain: int  # GPUs that share the fast link (may span nodes)
    cpus: int
    memory_gb: float
    fabric: str
    nics: Tuple[Nic, ...] = ()
    socket_ifname: Optional[str] = None
    gres_type: Optional[str] = None
    env: Mapping[str, str] = field(default_factory=dict)
    roce_gid_index: Optional[int] = None
    roce_traffic_class: Optional[int] = None

    @property
    def compute_nics(self) -> Tuple[Nic, ...]:
        return tuple(n for n in self.nics if n.role == "compute")

    @property
    def fabric_gbps(self) -> float:
        """Inter-node injection bandwidth of one node, Gb/s (compute NICs only)."""
        return sum(n.gbps for n in self.compute_nics)

    @property
    def domain_nodes(self) -> int:
        """Nodes per NVLink domain: 1 unless the domain spans trays (NVL72: 18)."""
        return max(1, self.nvlink_domain // self.gpus)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "gpus": self.gpus, "gpu_model": self.gpu_model, "vendor": self.vendor,
            "gpu_memory_gb": self.gpu_memory_gb, "bf16_tflops": self.bf16_tflops,
            "link": self.link, "link_gbs": self.link_gbs, "nvlink_domain": self.nvlink_domain,
            "cpus": self.cpus, "memory_gb": self.memory_gb, "fabric": self.fabric,
            "nics": [n.to_dict() for n in self.nics], "socket_ifname": self.socket_ifname,
            "gres_type": self.gres_type, "env": dict(self.env),
            "roce_gid_index": self.roce_gid_index, "roce_traffic_class": self.roce_traffic_class,
        }


@dataclass(frozen=True)
class Partition:
    """A Slurm partition of one node type, with its size and job limits."""

    name: str
    node_type: str
    nodes: int
    max_nodes_per_job: int
    constraint: Optional[str] = None
    exclusive: bool = True
    policy: Optional[str] = None  # overrides SitePolicy.mode for this partition

    def to_dict(self) -> Dict[str, Any]:
        return {"node_type": self.node_type, "nodes": self.nodes,
                "max_nodes_per_job": self.max_nodes_per_job, "constraint": self.constraint,
                "exclusive": self.exclusive, "policy": self.policy}


@dataclass(frozen=True)
class Container:
    """The site's default container runtime, image and mounts."""

    runtime: str = "none"
    image: Optional[str] = None
    mounts: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        return {"runtime": self.runtime, "image": self.image, "mounts": list(self.mounts)}


@dataclass(frozen=True)
class SitePolicy:
    """The submit filter's switches: mode, allowed launchers, exemptions."""

    mode: str = "enforce"
    launchers: Mapping[str, str] = field(default_factory=dict)
    exempt_users: Tuple[str, ...] = ()
    exempt_accounts: Tuple[str, ...] = ()
    exempt_qos: Tuple[str, ...] = ()
    on_internal_error: str = "accept"

    def to_dict(self) -> Dict[str, Any]:
        return {"mode": self.mode, "launchers": dict(self.launchers),
                "exempt_users": list(self.exempt_users), "exempt_accounts": list(self.exempt_accounts),
                "exempt_qos": list(self.exempt_qos), "on_internal_error": self.on_internal_error}


@dataclass(frozen=True)
class SitePreflight:
    """Thresholds `slurmgpu preflight` applies on this site's nodes."""

    min_bandwidth_fraction: float = 0.7  # --bandwidth fails below this share of the links' bus bandwidth
    min_free_gb: float = 10.0  # free space the checkpoint directory needs

    def to_dict(self) -> Dict[str, Any]:
        return {"min_bandwidth_fraction": self.min_bandwidth_fraction, "min_free_gb": self.min_free_gb}


@dataclass(frozen=True)
class Site:
    """A whole cluster: partitions, node types, defaults, policy and preflight settings."""

    name: str
    description: str
    source: str  # file it was loaded from
    default_partition: str
    partitions: Mapping[str, Partition]
    node_types: Mapping[str, NodeType]
    slurm_version: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    gpu_request: str = "gpus-per-node"
    topology: str = "flat"
    container: Container = Container()
    scratch: Optional[str] = None
    checkpoint_dir: Optional[str] = None
    template_dir: Optional[str] = None
    policy: SitePolicy = SitePolicy()
    preflight: SitePreflight = SitePreflight()

    def partition(self, name: Optional[str] = None) -> Partition:
        name = name or self.default_partition
        try:
            return self.partitions[name]
        except KeyError:
            raise ConfigError([Issue(self.source, None, None, "partitions",
                                     "site '%s' has no partition '%s' (it has: %s)" % (
                                         self.name, name, ", ".join(self.partitions)))]) from None

    def node_type_of(self, partition: Optional[str] = None) -> NodeType:
        return self.node_types[self.partition(partition).node_type]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "source": self.source,
            "slurm_version": self.slurm_version, "default_partition": self.default_partition,
            "account": self.account, "qos": self.qos, "gpu_request": self.gpu_request,
            "topology": self.topology,
            "partitions": {k: v.to_dict() for k, v in self.partitions.items()},
            "node_types": {k: v.to_dict() for k, v in self.node_types.items()},
            "container": self.container.to_dict(), "scratch": self.scratch,
            "checkpoint_dir": self.checkpoint_dir, "template_dir": self.template_dir,
            "policy": self.policy.to_dict(), "preflight": self.preflight.to_dict(),
        }


# ---------------------------------------------------------------------------
# Where presets live

def data_dir(name: str) -> Path:
    """Built-in data shipped in the wheel (slurmgpu/_data/...) or the source tree."""
    pkg = Path(__file__).resolve().parent
    installed = pkg / "_data" / name.replace("-", "_")
    if installed.is_dir():
        return installed
    return pkg.parent / name


def preset_dir() -> Path:
    return data_dir("site-configs")


def preset_names() -> List[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


# ---------------------------------------------------------------------------
# Loading

_SITE_FIELDS = {
    "name": Field("str"),
    "description": Field("str", default=""),
    "extends": Field("str"),
    "slurm_version": Field("str"),
    "default_partition": Field("str"),
    "account": Field("str"),
    "qos": Field("str"),
    "gpu_request": Field("str", default="gpus-per-node", choices=GPU_REQUESTS),
    "topology": Field("str", default="flat", choices=TOPOLOGIES),
    "partitions": Field("map", required=True),
    "node_types": Field("map", required=True),
    "container": Field("map"),
    "paths": Field("map"),
    "policy": Field("map"),
    "preflight": Field("map"),
}
_PARTITION_FIELDS = {
    "node_type": Field("str", required=True),
    "nodes": Field("int", required=True, positive=True),
    "max_nodes_per_job": Field("int", positive=True),
    "constraint": Field("str"),
    "exclusive": Field("bool", default=True),
    "policy": Field("str", choices=POLICY_MODES),
}
_NODE_FIELDS = {
    "gpus": Field("int", required=True, positive=True),
    "gpu_model": Field("str", required=True),
    "gres_type": Field("str"),
    "vendor": Field("str", default="nvidia", choices=VENDORS),
    "gpu_memory_gb": Field("num", required=True, positive=True),
    "bf16_tflops": Field("num", required=True, positive=True),
    "link": Field("str", required=True, choices=LINKS),
    "link_gbs": Field("num", required=True, positive=True),
    "nvlink_domain": Field("int", positive=True),
    "cpus": Field("int", required=True, positive=True),
    "memory_gb": Field("num", required=True, positive=True),
    "fabric": Field("str", required=True, choices=FABRICS),
    "nics": Field("list", default=list),
    "socket_ifname": Field("str"),
    "env": Field("strmap", default=dict),
    "roce_gid_index": Field("int", minimum=0),
    "roce_traffic_class": Field("int", minimum=0),
}
_NIC_FIELDS = {
    "name": Field("str", required=True),
    "port": Field("int", default=1, positive=True),
    "link_layer": Field("str", default="infiniband", choices=("infiniband", "ethernet")),
    "gbps": Field("num", required=True, positive=True),
    "role": Field("str", default="compute", choices=("compute", "storage")),
}
_CONTAINER_FIELDS = {
    "runtime": Field("str", default="none", choices=RUNTIMES),
    "image": Field("str"),
    "mounts": Field("strlist", default=tuple),
}
_PATH_FIELDS = {
    "scratch": Field("str"),
    "checkpoint": Field("str"),
    "templates": Field("str"),
}
_PREFLIGHT_FIELDS = {
    "min_bandwidth_fraction": Field("num", default=SitePreflight.min_bandwidth_fraction, positive=True),
    "min_free_gb": Field("num", default=SitePreflight.min_free_gb, minimum=0),
}
_POLICY_FIELDS = {
    "mode": Field("str", default="enforce", choices=POLICY_MODES),
    "launchers": Field("strmap", default=dict),
    "exempt_users": Field("strlist", default=tuple),
    "exempt_accounts": Field("strlist", default=tuple),
    "exempt_qos": Field("strlist", default=tuple),
    "on_internal_error": Field("str", default="accept", choices=("accept", "reject")),
}


def _resolve_extends(ref: str, child_file: str) -> str:
    """`extends:` names a preset or a path relative to the file that says it."""
    if "/" in ref or ref.endswith((".yaml", ".yml")):
        p = Path(ref)
        if not p.is_absolute():
            p = Path(child_file).resolve().parent / p
        return str(p)
    return str(preset_dir() / (ref + ".yaml"))


def _load_raw(path: str, seen: Tuple[str, ...] = ()) -> Any:
    from .yamlsrc import deep_merge, load_yaml_file

    data = load_yaml_file(path)
    if data is None:
        raise ConfigError([Issue(path, None, None, "", "file is empty; expected a site config mapping")])
    if not isinstance(data, dict):
        raise ConfigError([Issue(path, 1, 1, "", "expected a mapping at the top level of a site config")])
    ref = data.get("extends")
    if ref is None:
        return data
    loc = data.locs.get("extends") if hasattr(data, "locs") else None
    if not isinstance(ref, str):
        raise ConfigError([Issue(*(loc or (path, None, None)), "extends", "expected a preset name or a path")])
    parent = _resolve_extends(ref, path)
    real = os.path.realpath(parent)
    if real in seen or real == os.path.realpath(path):
        raise ConfigError([Issue(*(loc or (path, None, None)), "extends", "circular 'extends' through %s" % parent)])
    if not os.path.exists(parent):
        hint = "; presets: %s" % ", ".join(preset_names()) if "/" not in ref else ""
        raise ConfigError([Issue(*(loc or (path, None, None)), "extends",
                                 "no such site '%s' (looked for %s)%s" % (ref, parent, hint))])
    base = _load_raw(parent, seen + (os.path.realpath(path),))
    merged = deep_merge(base, data)
    if "name" not in data:  # a derived site is not the preset it starts from
        merged["name"] = Path(path).stem
    del merged["extends"]
    return merged


def load_site(path: str) -> Site:
    """Load and validate a site config (following `extends:`)."""
    data = _load_raw(path)
    return site_from_data(data, path)


def site_from_data(data: Any, path: str) -> Site:
    ck = Checker(path)
    top = ck.take(data, _SITE_FIELDS, "")
    node_types: Dict[str, NodeType] = {}
    # None when missing, null or not a mapping: already reported, so no follow-on errors.
    nt_data = top["node_types"] if isinstance(top["node_types"], dict) else None
    for name, raw in (nt_data or {}).items():
        nt = _node_type(ck, str(name), raw, nt_data)
        if nt is not None:
            node_types[str(name)] = nt
    if nt_data is not None and not nt_data:
        ck.error(data, "node_types", "node_types", "at least one node type is needed")

    partitions: Dict[str, Partition] = {}
    p_data = top["partitions"] if isinstance(top["partitions"], dict) else None
    for name, raw in (p_data or {}).items():
        p = _partition(ck, str(name), raw, p_data, node_types, nt_data)
        if p is not None:
            partitions[str(name)] = p
    if p_data is not None and not p_data:
        ck.error(data, "partitions", "partitions", "at least one partition is needed")

    if isinstance(data.get("slurm_version"), float):  # 23.10 would silently become "23.1"
        ck.error(data, "slurm_version", "slurm_version", 'write the version in quotes, e.g. "23.11"; '
                 "unquoted, YAML reads it as the number %r" % data["slurm_version"])
    default = top["default_partition"]
    if default is None and partitions:
        default = next(iter(partitions))
    elif default is not None and partitions and default not in partitions:
        ck.error(data, "default_partition", "default_partition",
                 "no partition named '%s' (defined: %s)" % (default, ", ".join(partitions)))

    for pname, p in partitions.items():
        nt = node_types.get(p.node_type)
        if nt and nt.nvlink_domain > nt.gpus and top["topology"] != "block":
            ck.error(data, "topology", "topology",
                     "node type '%s' has an NVLink domain of %d GPUs across %d nodes; set topology: block "
                     "so jobs can ask to stay inside one domain (--segment)" % (nt.name, nt.nvlink_domain, nt.domain_nodes))
            break

    container = ck.take(top["container"], _CONTAINER_FIELDS, "container", data, "container")
    paths = ck.take(top["paths"], _PATH_FIELDS, "paths", data, "paths")
    pol = ck.take(top["policy"], _POLICY_FIELDS, "policy", data, "policy")
    pre = ck.take(top["preflight"], _PREFLIGHT_FIELDS, "preflight", data, "preflight")
    if isinstance(pre["min_bandwidth_fraction"], (int, float)) and pre["min_bandwidth_fraction"] > 1:
        ck.error(data.get("preflight"), "min_bandwidth_fraction", "preflight.min_bandwidth_fraction",
                 "a share of the expected bandwidth: between 0 and 1, got %r" % pre["min_bandwidth_fraction"])
    pol_raw = data.get("policy") if isinstance(data, dict) else None
    for launcher, mode in (pol["launchers"] or {}).items():
        lp = join("policy.launchers", launcher)
        src = pol_raw.get("launchers") if isinstance(pol_raw, dict) else None
        if launcher not in LAUNCHERS:
            ck.error(src, launcher, lp, "unknown launcher; expected one of: %s" % ", ".join(LAUNCHERS))
        if mode not in POLICY_MODES:
            ck.error(src, launcher, lp, "must be one of %s, got %r" % (", ".join(POLICY_MODES), mode))
    ck.raise_if_any()

    name = top["name"] or Path(path).stem
    tdir = paths["templates"]
    if tdir and not os.path.isabs(tdir):
        tdir = str(Path(path).resolve().parent / tdir)
    return Site(
        name=name, description=top["description"] or "", source=path,
        default_partition=default, partitions=partitions, node_types=node_types,
        slurm_version=top["slurm_version"], account=top["account"], qos=top["qos"],
        gpu_request=top["gpu_request"], topology=top["topology"],
        container=Container(runtime=container["runtime"], image=container["image"],
                            mounts=tuple(container["mounts"] or ())),
        scratch=paths["scratch"], checkpoint_dir=paths["checkpoint"], template_dir=tdir,
        policy=SitePolicy(mode=pol["mode"], launchers=dict(pol["launchers"] or {}),
                          exempt_users=tuple(pol["exempt_users"] or ()),
                          exempt_accounts=tuple(pol["exempt_accounts"] or ()),
                          exempt_qos=tuple(pol["exempt_qos"] or ()),
                          on_internal_error=pol["on_internal_error"]),
        preflight=SitePreflight(min_bandwidth_fraction=float(pre["min_bandwidth_fraction"]),
                                min_free_gb=float(pre["min_free_gb"])),
    )


def _node_type(ck: Checker, name: str, raw: Any, parent: Any) -> Optional[NodeType]:
    path = join("node_types", name)
    n_before = len(ck.issues)
    v = ck.take(raw, _NODE_FIELDS, path, parent, name)
    nics: List[Nic] = []
    raw_nics = v["nics"] if isinstance(v["nics"], list) else []
    for i, item in enumerate(raw_nics):
        nv = ck.take(item, _NIC_FIELDS, join(path + ".nics", i), raw_nics, i)
        if nv["name"]:
            nics.append(Nic(name=nv["name"], port=nv["port"], link_layer=nv["link_layer"],
                            gbps=float(nv["gbps"] or 0), role=nv["role"]))
    names = [n.name for n in nics]
    for i, n in enumerate(names):
        if names.index(n) != i:
            ck.error(raw_nics, i, join(path + ".nics", i), "NIC '%s' is listed twice" % n)
    gpus = v["gpus"]
    if len(ck.issues) > n_before or not isinstance(gpus, int) or gpus <= 0:
        return None
    domain = v["nvlink_domain"]
    if domain is None:
        domain = 1 if v["link"] == "pcie" else gpus
    if domain > gpus and domain % gpus:
        ck.error(raw, "nvlink_domain", path + ".nvlink_domain",
                 "an NVLink domain larger than a node must be a whole number of nodes: %d is not a multiple of "
                 "%d GPUs per node (e.g. GB200 NVL72: 72 = 18 trays x 4)" % (domain, gpus))
    elif domain < gpus and gpus % domain:
        ck.error(raw, "nvlink_domain", path + ".nvlink_domain",
                 "an NVLink domain smaller than a node must divide its %d GPUs, got %d" % (gpus, domain))
    if v["link"] == "pcie" and domain > gpus:
        ck.error(raw, "nvlink_domain", path + ".nvlink_domain",
                 "link: pcie cannot form a multi-node NVLink domain (got %d GPUs)" % domain)
    fabric = v["fabric"]
    compute = [n for n in nics if n.role == "compute"]
    if fabric == "infiniband" and any(n.link_layer != "infiniband" for n in compute):
        ck.error(raw, "nics", path + ".nics", "fabric infiniband needs compute NICs with link_layer: infiniband")
    if fabric == "roce" and any(n.link_layer != "ethernet" for n in compute):
        ck.error(raw, "nics", path + ".nics", "fabric roce (RDMA over Ethernet) needs compute NICs with link_layer: ethernet")
    if fabric in ("infiniband", "roce", "efa") and not compute:
        ck.error(raw, "nics", path + ".nics",
                 "fabric %s needs at least one compute NIC (name, gbps) so NCCL can be pointed at it" % fabric)
    if fabric in ("slingshot", "ethernet") and not v["socket_ifname"]:
        ck.error(raw, None, path + ".socket_ifname",
                 "fabric %s needs socket_ifname (the interface NCCL should use, e.g. hsn0 or eth0)" % fabric)
    if len(ck.issues) > n_before:
        return None
    return NodeType(
        name=name, gpus=gpus, gpu_model=v["gpu_model"], vendor=v["vendor"],
        gpu_memory_gb=float(v["gpu_memory_gb"]), bf16_tflops=float(v["bf16_tflops"]),
        link=v["link"], link_gbs=float(v["link_gbs"]), nvlink_domain=domain,
        cpus=v["cpus"], memory_gb=float(v["memory_gb"]), fabric=fabric, nics=tuple(nics),
        socket_ifname=v["socket_ifname"], gres_type=v["gres_type"], env=dict(v["env"] or {}),
        roce_gid_index=v["roce_gid_index"], roce_traffic_class=v["roce_traffic_class"],
    )


def _partition(ck: Checker, name: str, raw: Any, parent: Any, node_types: Dict[str, NodeType],
               nt_data: Any) -> Optional[Partition]:
    path = join("partitions", name)
    n_before = len(ck.issues)
    v = ck.take(raw, _PARTITION_FIELDS, path, parent, name)
    nt = v["node_type"]
    known = [str(k) for k in nt_data] if isinstance(nt_data, dict) else None
    if nt is not None and known is not None and nt not in known:
        import difflib

        hint = difflib.get_close_matches(nt, known, n=1)
        ck.error(raw, "node_type", path + ".node_type", "unknown node type '%s'%s (defined: %s)" % (
            nt, " (did you mean '%s'?)" % hint[0] if hint else "", ", ".join(known) or "none"))
    maxn = v["max_nodes_per_job"]
    if maxn is None:
        maxn = v["nodes"]
    elif isinstance(v["nodes"], int) and maxn > v["nodes"]:
        ck.error(raw, "max_nodes_per_job", path + ".max_nodes_per_job",
                 "max_nodes_per_job (%d) exceeds the partition's %d nodes" % (maxn, v["nodes"]))
    if len(ck.issues) > n_before:
        return None
    return Partition(name=name, node_type=nt, nodes=v["nodes"], max_nodes_per_job=maxn,
                     constraint=v["constraint"], exclusive=v["exclusive"], policy=v["policy"])


# ---------------------------------------------------------------------------
# Which site is meant

def site_search(explicit: Optional[str], environ: Mapping[str, str]) -> Tuple[str, str]:
    """Return (path, how-it-was-chosen) following --site > $SLURMGPU_SITE > /etc > ~/.config > default."""
    home = environ.get("HOME") or os.path.expanduser("~")
    candidates = []
    if explicit:
        candidates.append((explicit, "--site"))
    elif environ.get("SLURMGPU_SITE"):
        candidates.append((environ["SLURMGPU_SITE"], "$SLURMGPU_SITE"))
    else:
        etc = environ.get("SLURMGPU_SYSTEM_SITE", "/etc/slurmgpu/site.yaml")
        user = os.path.join(environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "slurmgpu", "site.yaml")
        for path, why in ((etc, "admin config"), (user, "user config")):
            if os.path.exists(path):
                return path, why
        return str(preset_dir() / (DEFAULT_SITE + ".yaml")), "built-in default"
    ref, why = candidates[0]
    return resolve_site_ref(ref), why


def resolve_site_ref(ref: str) -> str:
    """A preset name or a path -> a path (a clear error if it is neither)."""
    if os.path.exists(ref):
        return ref
    if "/" not in ref and not ref.endswith((".yaml", ".yml")):
        p = preset_dir() / (ref + ".yaml")
        if p.exists():
            return str(p)
        import difflib

        hint = difflib.get_close_matches(ref, preset_names(), n=1)
        raise ConfigError([Issue(ref, None, None, "", "no such site preset%s; presets: %s" % (
            " (did you mean '%s'?)" % hint[0] if hint else "", ", ".join(preset_names())))])
    raise ConfigError([Issue(ref, None, None, "", "site config file not found")])


def resolve_site(explicit: Optional[str], environ: Mapping[str, str]) -> Tuple[Site, str]:
    """Load the site meant by the user; the string says which one was used and why."""
    path, why = site_search(explicit, environ)
    site = load_site(path)
    return site, "slurmgpu: site %s (%s: %s)" % (site.name, why, path)
