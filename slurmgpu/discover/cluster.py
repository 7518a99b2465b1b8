"""Read a running Slurm cluster and draft a site config from it.

Back ends: pyslurm when it is installed *and* built for this Slurm release,
otherwise the Slurm commands (`sinfo --json`, falling back to
`scontrol show node -o`; partitions from `scontrol show partition -o`).
Identical GPU nodes become one node type.  What Slurm cannot tell (GPU
memory, NVLink, NICs, fabric) comes from the GPU table (gpus.py), from
`slurmgpu probe` run on one node of each type (``--probe``), or is marked
TODO in the draft with the command that finds it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import __version__
from ..errors import SlurmError
from ..nccl import derived_names
from ..node import ProbeResult
from ..node.probe import parse_domain_lines
from ..site import GpuFacts, lookup
from ..slurm import (
    CommandResult,
    Runner,
    SlurmNode,
    SlurmPartition,
    Version,
    compress_hostlist,
    node_from_mapping,
    parse_scontrol_config,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_sinfo_json,
    parse_version,
    partitions_from_nodes,
    version_label,
)
from .draft import SiteDraft, Value

# ---------------------------------------------------------------------------
# pyslurm


@dataclass(frozen=True)
class PyslurmStatus:
    usable: bool
    version: Optional[str]  # installed pyslurm, None if absent
    message: str


# The Slurm releases PyPI has a pyslurm for (pip index versions pyslurm, 2026-12: 25.11.0 and
# 25.11.2, plus 17.11.x and 18.8.x of 2018). Any other release: build pyslurm from source.
PYPI_PYSLURM = {(25, 11), (18, 8), (17, 11)}


def pyslurm_wanted(slurm: Version) -> str:
    """pyslurm numbers its releases after Slurm's: Slurm 23.11 -> pyslurm 23.11.*, 22.05 -> 22.5.*."""
    return "%d.%d.*" % (slurm[0], slurm[1])


def pyslurm_advice(slurm: Version) -> str:
    """How to get a pyslurm for Slurm `slurm`: the pip line where PyPI has one, else the source build
    (never a pip line that cannot resolve)."""
    want = pyslurm_wanted(slurm)
    if (slurm[0], slurm[1]) in PYPI_PYSLURM:
        return "pip install 'slurmgpu[pyslurm]' 'pyslurm==%s'" % want
    return (
        "PyPI has no pyslurm for Slurm %d.%02d (it has 25.11.x); build pyslurm %s from its source for this "
        "release's headers, or keep the Slurm commands" % (slurm[0], slurm[1], want)
    )


def pyslurm_mismatch(installed: str, slurm: Version) -> Optional[str]:
    """None if pyslurm `installed` was built for Slurm `slurm`, else what to do about it."""
    m = re.match(r"(\d+)\.(\d+)", installed or "")
    if m and (int(m.group(1)), int(m.group(2))) == (slurm[0], slurm[1]):
        return None
    return (
        "pyslurm %s is installed but this cluster runs Slurm %s; pyslurm only works with the Slurm "
        "release it was built for (%s). Using the Slurm commands instead."
        % (installed, "%d.%02d.%d" % slurm, pyslurm_advice(slurm))
    )


def pyslurm_status(slurm: Version) -> PyslurmStatus:
    if importlib.util.find_spec("pyslurm") is None:
        return PyslurmStatus(
            False,
            None,
            "pyslurm is not installed (optional: %s); using the Slurm commands" % pyslurm_advice(slurm),
        )
    try:
        from importlib.metadata import version as dist_version

        installed = dist_version("pyslurm")
    except Exception:  # noqa: BLE001 - any failure means "unknown version"
        installed = "unknown"
    why = pyslurm_mismatch(installed, slurm)
    if why:
        return PyslurmStatus(False, installed, why)
    return PyslurmStatus(True, installed, "pyslurm %s matches Slurm %s" % (installed, version_label(slurm)))


def _read_pyslurm() -> Tuple[List[SlurmNode], List[SlurmPartition]]:
    """Nodes and partitions through pyslurm's object API (pyslurm >= 23.2)."""
    import pyslurm  # noqa: F401 - optional

    nodes = []
    for name, node in pyslurm.Nodes.load().items():
        d = node.to_dict() if hasattr(node, "to_dict") else dict(node)
        d.setdefault("name", name)
        nodes.append(node_from_mapping(d))
    parts = []
    for name, part in pyslurm.Partitions.load().items():
        d = part.to_dict() if hasattr(part, "to_dict") else dict(part)
        from ..slurm import parse_hostlist

        nodelist = d.get("nodes") or ""
        parts.append(
            SlurmPartition(
                name=str(d.get("name") or name),
                nodes=tuple(parse_hostlist(nodelist) if isinstance(nodelist, str) else nodelist),
                default=bool(d.get("is_default") or "DEFAULT" in str(d.get("flags", "")).upper()),
                max_nodes=d.get("max_nodes") if isinstance(d.get("max_nodes"), int) else None,
                oversubscribe=str(d.get("oversubscribe") or "NO").upper(),
                state=str(d.get("state") or "UP").upper(),
            )
        )
    return nodes, parts


# ---------------------------------------------------------------------------
# reading the cluster


@dataclass(frozen=True)
class ClusterFacts:
    version: Version
    release: str
    nodes: Tuple[SlurmNode, ...]
    partitions: Tuple[SlurmPartition, ...]
    backend: str
    cluster_name: Optional[str] = None
    topology_plugin: Optional[str] = None
    notes: Tuple[str, ...] = ()
    config: Mapping[str, str] = field(default_factory=dict)  # scontrol show config
    blocks: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)  # topology/block: block -> nodes


def _must(res: CommandResult, what: str) -> str:
    if not res.ok:
        hint = (
            (
                " (run discover on a login node with the Slurm client commands, and SLURM_CONF set if "
                "slurm.conf is not in its default place)"
            )
            if res.not_found or "config" in res.stderr
            else ""
        )
        raise SlurmError("cannot %s: %s%s" % (what, res.why(), hint))
    return res.stdout


def read_cluster(runner: Runner, backend: str = "auto") -> ClusterFacts:
    """Ask Slurm for nodes and partitions; `backend` is auto | pyslurm | commands."""
    version, release = parse_version(_must(runner.run(["sinfo", "--version"]), "run sinfo"))
    notes: List[str] = []
    cfg = runner.run(["scontrol", "show", "config"])
    config = parse_scontrol_config(cfg.stdout) if cfg.ok else {}
    if not cfg.ok:
        notes.append("scontrol show config failed (%s): cluster name and topology plugin unknown" % cfg.why())
    nodes: Optional[List[SlurmNode]] = None
    parts: Optional[List[SlurmPartition]] = None
    used = "commands"
    if backend in ("auto", "pyslurm"):
        st = pyslurm_status(version)
        if st.usable:
            try:
                nodes, parts = _read_pyslurm()
                used = "pyslurm %s" % st.version
            except Exception as exc:  # noqa: BLE001 - pyslurm fails in many ways (ABI, libslurm)
                if backend == "pyslurm":
                    raise SlurmError("pyslurm %s failed: %s" % (st.version, exc)) from None
                notes.append("pyslurm %s failed (%s); using the Slurm commands" % (st.version, exc))
        elif backend == "pyslurm":
            raise SlurmError(
                st.message.replace("; using the Slurm commands", "").replace(" Using the Slurm commands instead.", "")
            )
        else:
            notes.append(st.message)
    if nodes is None:
        nodes, how, more = _nodes_from_commands(runner, version)
        used = how
        notes.extend(more)
    if parts is None:
        res = runner.run(["scontrol", "show", "partition", "-o"])
        if res.ok:
            parts = parse_scontrol_partitions(res.stdout)
            used += " + scontrol show partition"
        else:
            notes.append(
                "%s: partitions taken from node membership; the default partition and limits are unknown" % res.why()
            )
            parts = partitions_from_nodes(nodes)
    blocks: Dict[str, Tuple[str, ...]] = {}
    if "block" in (config.get("TopologyPlugin") or "").lower():
        from .topology import parse_show_topology

        res = runner.run(["scontrol", "show", "topology"])
        if res.ok:
            blocks = parse_show_topology(res.stdout, "BlockName")
        else:
            notes.append(
                "scontrol show topology failed (%s): whether host names follow the blocks is unknown" % res.why()
            )
    return ClusterFacts(
        version=version,
        release=release,
        nodes=tuple(nodes),
        partitions=tuple(parts),
        backend=used,
        cluster_name=config.get("ClusterName"),
        topology_plugin=config.get("TopologyPlugin"),
        notes=tuple(notes),
        config=config,
        blocks=blocks,
    )


def _nodes_from_commands(runner: Runner, version: Version) -> Tuple[List[SlurmNode], str, List[str]]:
    notes: List[str] = []
    if version >= (21, 8, 0):  # sinfo --json appeared in 21.08
        res = runner.run(["sinfo", "--json"])
        if res.ok:
            try:
                sj = parse_sinfo_json(res.stdout)
                if not sj.ambiguous:
                    return list(sj.nodes), "sinfo --json", notes
                notes.append(
                    "sinfo --json grouped unlike nodes (%s); reading scontrol show node instead"
                    % ", ".join(sj.ambiguous[:5])
                )
            except SlurmError as exc:
                notes.append("%s; reading scontrol show node instead" % exc)
        else:
            notes.append("%s; reading scontrol show node instead" % res.why())
    text = _must(runner.run(["scontrol", "show", "node", "-o"]), "list nodes with scontrol show node -o")
    return parse_scontrol_nodes(text), "scontrol show node", notes


# ---------------------------------------------------------------------------
# node types


@dataclass(frozen=True)
class NodeGroup:
    name: str
    nodes: Tuple[SlurmNode, ...]

    @property
    def first(self) -> SlurmNode:
        return self.nodes[0]

    @property
    def gpus(self) -> int:
        return self.first.gpus

    @property
    def gres_type(self) -> Optional[str]:
        counts: Counter = Counter()
        for g in self.first.gres:
            if g.name == "gpu" and g.type:
                counts[g.type] += g.count
        return counts.most_common(1)[0][0] if counts else None

    @property
    def memory_mb(self) -> int:
        return min(n.memory_mb for n in self.nodes)

    @property
    def features(self) -> Tuple[str, ...]:
        common = set(self.first.features)
        for n in self.nodes[1:]:
            common &= set(n.features)
        return tuple(f for f in self.first.features if f in common)


def _key(n: SlurmNode) -> Tuple:
    return (tuple(sorted(n.gpu_types)), n.gpus, n.cpus)


def group_nodes(nodes: Sequence[SlurmNode]) -> List[NodeGroup]:
    """GPU nodes with the same GPU type and count and CPU count form one node type."""
    groups: Dict[Tuple, List[SlurmNode]] = {}
    for n in nodes:
        if n.gpus > 0:
            groups.setdefault(_key(n), []).append(n)
    named: List[NodeGroup] = []
    taken = set()
    for key, members in groups.items():
        gtype = members[0].gpu_types[0] if members[0].gpu_types else ""
        facts = lookup(gtype)
        base = facts.key.replace("_", "-") if facts else re.sub(r"[^a-z0-9]+", "-", gtype.lower()).strip("-")
        base = "%sx%d" % (base or "gpu", key[1])
        name = base
        if name in taken:
            name = "%s-%dc" % (base, key[2])
        i = 2
        while name in taken:
            name, i = "%s-%d" % (base, i), i + 1
        taken.add(name)
        named.append(NodeGroup(name, tuple(members)))
    return named


# ---------------------------------------------------------------------------
# the draft


def _idle(n: SlurmNode) -> bool:
    s = n.state.upper()
    return not any(w in s for w in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWER"))


def _todo_cmd(partition: str, cmd: str) -> str:
    return "srun -N1 -p %s %s" % (shlex.quote(partition), cmd)


def _gpu_values(
    g: NodeGroup,
    facts: Optional[GpuFacts],
    probe: Optional[ProbeResult],
    part: str,
    domains: Optional[Mapping[str, Optional[str]]] = None,
) -> Dict[str, Value]:
    v: Dict[str, Value] = {}
    gres = ",".join(str(x) for x in g.first.gres if x.name == "gpu")
    pgpus = [x for x in (probe.gpus if probe else ()) if x.name]
    seen = "probe of %s" % probe.hostname if probe else ""
    if probe and len(pgpus) not in (0, g.gpus):
        v["gpus"] = Value(
            g.gpus,
            "Slurm GRES %s, but %s saw %d GPUs: fix gres.conf or this value" % (gres, seen, len(pgpus)),
            todo=True,
        )
    elif probe and not pgpus:
        v["gpus"] = Value(
            g.gpus,
            "Slurm GRES %s (%s saw no GPUs: %s)"
            % (gres, seen, next((m for m in probe.missing if "smi" in m), "no GPU tool")),
        )
    else:
        v["gpus"] = Value(g.gpus, "Slurm GRES %s" % gres)
    if pgpus and lookup(pgpus[0].name) is not None:
        facts = lookup(pgpus[0].name)  # what the node has beats what GRES calls it
    find_mem = _todo_cmd(part, "nvidia-smi --query-gpu=name,memory.total --format=csv")
    if pgpus:
        v["gpu_model"] = Value(facts.model_name if facts else pgpus[0].name, "%s: %s" % (seen, pgpus[0].name))
    elif facts:
        v["gpu_model"] = Value(facts.model_name, "gpus.py '%s' for GRES type '%s'" % (facts.key, g.gres_type))
    else:
        v["gpu_model"] = Value(
            g.gres_type or "unknown-gpu",
            "GPU type %s is not in slurmgpu's GPU table (find it "
            "with: %s)" % ("'%s'" % g.gres_type if g.gres_type else "not named in GRES", find_mem),
            todo=True,
        )
    if g.gres_type:
        v["gres_type"] = Value(g.gres_type)
    vendor = facts.vendor if facts else (pgpus[0].vendor if pgpus else None)
    v["vendor"] = Value(vendor or "nvidia", "" if vendor else "assumed (find it with: %s)" % find_mem, todo=not vendor)
    mems = [x.memory_mib for x in pgpus if x.memory_mib]
    if mems:
        measured = min(mems) / 1024.0
        nominal = facts.memory_gb if facts and abs(facts.memory_gb - measured) <= 0.06 * facts.memory_gb else None
        v["gpu_memory_gb"] = Value(nominal or round(measured, 1), "%s: %d MiB" % (seen, min(mems)))
    elif facts and not facts.memory_ambiguous:
        v["gpu_memory_gb"] = Value(facts.memory_gb, _check(facts, "gpu_memory_gb", find_mem))
    elif facts:
        v["gpu_memory_gb"] = Value(
            facts.memory_gb,
            "%s is sold with %s GB; the smallest is assumed (find it with: "
            "%s)" % (facts.model, "/".join("%g" % m for m in facts.memory_choices), find_mem),
            todo=True,
        )
    else:
        v["gpu_memory_gb"] = Value(16, "unknown GPU: a small guess (find it with: %s)" % find_mem, todo=True)
    if facts:
        v["bf16_tflops"] = Value(facts.bf16_tflops, _check(facts, "bf16_tflops", "the vendor datasheet, dense BF16"))
    else:
        v["bf16_tflops"] = Value(
            100, "unknown GPU: a guess; take dense (not sparse) BF16 TFLOP/s from the vendor datasheet", todo=True
        )
    _link_values(v, g, facts, probe, part, domains)
    return v


def _check(facts: GpuFacts, field: str, how: str) -> str:
    if field in facts.unverified:
        return "gpus.py '%s', not confirmed by a fact sheet (check with: %s)" % (facts.key, how)
    return "gpus.py '%s'" % facts.key


def _link_values(
    v: Dict[str, Value],
    g: NodeGroup,
    facts: Optional[GpuFacts],
    probe: Optional[ProbeResult],
    part: str,
    domains: Optional[Mapping[str, Optional[str]]] = None,
) -> None:
    topo_cmd = _todo_cmd(part, "--gres=gpu:%d nvidia-smi topo -m" % g.gpus)
    if probe and probe.link and probe.gpus:
        link, src, todo = probe.link, "probe of %s (nvidia-smi topo -m)" % probe.hostname, False
    elif facts:
        link, src, todo = facts.link, "gpus.py '%s'" % facts.key, False
    else:
        link, src, todo = "pcie", "unknown GPU: assumed (find it with: %s)" % topo_cmd, True
    v["link"] = Value(link, src, todo)
    if facts and facts.link == link:
        v["link_gbs"] = Value(facts.link_gbs, _check(facts, "link_gbs", "nvidia-smi nvlink -s, or the datasheet"))
    else:
        guess = {"nvlink": 300, "xgmi": 200, "pcie": 64}[link]
        v["link_gbs"] = Value(
            guess,
            "a guess for %s (per GPU, GB/s, both directions; find it with: nvidia-smi nvlink -s"
            " or the datasheet)" % link,
            todo=True,
        )
    if probe and probe.nvlink_clique:
        v["nvlink_domain"] = _probed_domain(g, facts, probe, part, domains or {})
    elif probe and probe.nvlink_domain and probe.gpus:
        dom = min(probe.nvlink_domain, g.gpus)  # Slurm may hand out fewer GPUs than the node has
        while g.gpus % dom:
            dom -= 1
        if facts and facts.nvlink_domain and facts.nvlink_domain > g.gpus:
            dom = facts.nvlink_domain  # a multi-node domain is invisible from inside one node
        if dom > g.gpus:
            assert facts is not None  # only the GPU table makes a domain larger than one node
            why = "gpus.py '%s': spans %d nodes" % (facts.key, dom // g.gpus)
        elif dom == probe.nvlink_domain:
            why = "probe of %s" % probe.hostname
        else:
            why = "probe of %s saw a domain of %d GPUs; Slurm gives %d" % (probe.hostname, probe.nvlink_domain, g.gpus)
        v["nvlink_domain"] = Value(dom, why)
    elif link == "pcie":
        v["nvlink_domain"] = Value(1, "no fast link between GPUs" + ("" if not todo else " (assumed)"), todo)
    elif facts and facts.nvlink_domain:
        v["nvlink_domain"] = Value(
            facts.nvlink_domain,
            "gpus.py '%s': %d GPUs over %d nodes (find the racks with: "
            "scontrol show topology)" % (facts.key, facts.nvlink_domain, facts.nvlink_domain // g.gpus),
        )
    elif facts:
        v["nvlink_domain"] = Value(
            g.gpus, "gpus.py '%s': all GPUs of a node linked (check with: %s)" % (facts.key, topo_cmd)
        )
    else:
        v["nvlink_domain"] = Value(g.gpus, "all GPUs of a node assumed linked (find it with: %s)" % topo_cmd, todo=True)


def domain_groups(domains: Mapping[str, Optional[str]]) -> Dict[str, List[str]]:
    """ClusterUUID/CliqueId -> the nodes that reported it (nodes that reported none left out)."""
    out: Dict[str, List[str]] = {}
    for node, clique in domains.items():
        if clique:
            out.setdefault(clique, []).append(node)
    return out


def _probed_domain(
    g: NodeGroup, facts: Optional[GpuFacts], probe: ProbeResult, part: str, domains: Mapping[str, Optional[str]]
) -> Value:
    """The NVLink domain size from the trays' ClusterUUID/CliqueId: nodes per domain x GPUs per node."""
    cmd = _todo_cmd(part, "slurmgpu probe --domain").replace("srun ", "srun -N<all trays> --ntasks-per-node=1 ", 1)
    by = domain_groups(domains)
    if not by:
        if facts and facts.nvlink_domain and facts.nvlink_domain > g.gpus:
            return Value(
                facts.nvlink_domain,
                "probe of %s: multi-node NVLink (ClusterUUID %s), size from gpus.py '%s'; count the trays per "
                "domain with: %s" % (probe.hostname, (probe.nvlink_clique or "").split("/")[0], facts.key, cmd),
                todo=True,
            )
        return Value(
            g.gpus,
            "probe of %s reports a multi-node NVLink domain but its size is unknown (find it with: %s)"
            % (probe.hostname, cmd),
            todo=True,
        )
    sizes = sorted({len(m) for m in by.values()})
    dom = sizes[-1] * g.gpus
    why = "probe of %d nodes: %d NVLink domain%s (ClusterUUID/CliqueId) of %s node%s x %d GPUs" % (
        len(domains),
        len(by),
        "" if len(by) == 1 else "s",
        "/".join(str(x) for x in sizes),
        "" if sizes == [1] else "s",
        g.gpus,
    )
    silent = sorted(n for n, c in domains.items() if not c)
    if silent:
        why += "; no domain reported by %s" % compress_hostlist(silent)
    return Value(dom, why, todo=len(sizes) > 1 or bool(silent))


_FEATURE_FABRIC = (
    ("infiniband", "infiniband"),
    ("ib", "infiniband"),
    ("hdr", "infiniband"),
    ("ndr", "infiniband"),
    ("roce", "roce"),
    ("efa", "efa"),
    ("slingshot", "slingshot"),
    ("ss11", "slingshot"),
)


def _fabric_values(v: Dict[str, Value], g: NodeGroup, probe: Optional[ProbeResult], part: str) -> None:
    probe_cmd = _todo_cmd(part, "slurmgpu probe") + ", or: slurmgpu discover --probe"
    if probe is not None:
        src = "probe of %s" % probe.hostname
        v["fabric"] = Value(probe.fabric, src)
        if probe.nics:
            v["nics"] = Value(
                [
                    {"name": n.name, "port": n.port, "link_layer": n.link_layer, "gbps": n.gbps, "role": n.role}
                    for n in probe.nics
                ],
                src,
            )
        if probe.socket_ifname:
            v["socket_ifname"] = Value(
                probe.socket_ifname, "%s; the interface that carries the node's IP (check with: ip -br addr)" % src
            )
        elif probe.fabric in ("ethernet", "slingshot"):
            v["socket_ifname"] = Value(
                "eth0",
                "%s found no usable interface (find it with: %s)" % (src, _todo_cmd(part, "ip -br link")),
                todo=True,
            )
        derived = derived_names(probe.fabric)  # gen writes these itself (NCCL_NET only for multi-node jobs)
        env = {k: x for k, x in probe.nccl_env.items() if k not in derived}
        if env:
            v["env"] = Value(env, "%s: what this fabric needs (fabric_facts)" % src)
        if probe.fabric == "roce":
            v["roce_traffic_class"] = Value(
                0, "RoCE needs the switch's lossless class (NCCL_IB_TC): ask the network admins", todo=True
            )
        return
    hint = next((fab for feat in g.features for word, fab in _FEATURE_FABRIC if feat.lower() == word), None)
    say = (" node feature suggests %s;" % hint) if hint else ""
    v["fabric"] = Value(
        "ethernet",
        "Slurm cannot tell the fabric;%s plain sockets assumed until checked (find it with:"
        " %s; or ibv_devinfo)" % (say, probe_cmd),
        todo=True,
    )
    v["socket_ifname"] = Value("eth0", "a guess (find it with: %s)" % _todo_cmd(part, "ip -br link"), todo=True)


def _node_type_values(
    g: NodeGroup, probe: Optional[ProbeResult], part: str, domains: Optional[Mapping[str, Optional[str]]] = None
) -> Dict[str, Value]:
    facts = lookup(g.gres_type)
    v = _gpu_values(g, facts, probe, part, domains)
    v["cpus"] = Value(g.first.cpus, "Slurm CPUTot")
    mems = sorted({n.memory_mb for n in g.nodes})
    v["memory_gb"] = Value(
        round(g.memory_mb / 1024.0, 1),
        "Slurm RealMemory=%d MB%s"
        % (g.memory_mb, " (smallest; nodes have %s)" % ", ".join(str(m) for m in mems) if len(mems) > 1 else ""),
    )
    _fabric_values(v, g, probe, part)
    v["affinity"] = _affinity_value(g, probe, part)
    order = (
        "gpus",
        "gpu_model",
        "gres_type",
        "vendor",
        "gpu_memory_gb",
        "bf16_tflops",
        "link",
        "link_gbs",
        "nvlink_domain",
        "cpus",
        "memory_gb",
        "fabric",
        "nics",
        "socket_ifname",
        "env",
        "roce_gid_index",
        "roce_traffic_class",
        "affinity",
    )
    return {k: v[k] for k in order if k in v}


def _affinity_value(g: NodeGroup, probe: Optional[ProbeResult], part: str) -> Value:
    """node_types.X.affinity from the probe (GPU -> NUMA node -> CPUs -> NICs), or unknown with the way to find it."""
    from ..node.probe import affinity_map

    how = _todo_cmd(part, "--gres=gpu:%d --exclusive slurmgpu probe" % g.gpus) + ", or: slurmgpu discover --probe"
    amap = affinity_map(probe, g.gpus) if probe is not None else None
    if amap is not None:
        return Value(amap.to_dict(), "probe of %s: sysfs NUMA nodes and the GPUs' PCI placement" % probe.hostname)  # type: ignore[union-attr]
    why = "not probed" if probe is None else "probe of %s could not place every GPU on a NUMA node" % probe.hostname
    return Value({"unknown": why}, "no CPU binding until the map is known (find it with: %s)" % how, todo=True)


@dataclass(frozen=True)
class Plan:
    """Which node type each partition gets, before values are filled in."""

    groups: Tuple[NodeGroup, ...]
    partitions: Tuple[Tuple[SlurmPartition, str, Tuple[str, ...]], ...]  # (partition, node type, node names)
    skipped: Tuple[str, ...]
    notes: Tuple[str, ...]


def plan(facts: ClusterFacts, only: Sequence[str] = ()) -> Plan:
    by_name = {n.name: n for n in facts.nodes}
    parts = list(facts.partitions)
    if only:
        known = {p.name for p in parts}
        bad = [p for p in only if p not in known]
        if bad:
            raise SlurmError(
                "no partition %s on this cluster (it has: %s)"
                % (", ".join("'%s'" % b for b in bad), ", ".join(sorted(known)) or "none")
            )
        parts = [p for p in parts if p.name in only]
    members: Dict[str, List[SlurmNode]] = {}
    for p in parts:
        names = p.nodes or tuple(n.name for n in facts.nodes if p.name in n.partitions)
        members[p.name] = [by_name[n] for n in names if n in by_name]
    used = {n.name: n for p in parts for n in members[p.name]}
    groups = group_nodes(list(used.values()))
    group_of = {n.name: g.name for g in groups for n in g.nodes}
    chosen, skipped, notes = [], [], []
    for p in parts:
        gpu_nodes = [n for n in members[p.name] if n.name in group_of]
        if not gpu_nodes:
            skipped.append(
                "partition '%s': its %d node%s have no GPUs in Slurm's GRES"
                % (p.name, len(members[p.name]), "" if len(members[p.name]) == 1 else "s")
            )
            continue
        counts = Counter(group_of[n.name] for n in gpu_nodes)
        best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        names = tuple(n.name for n in gpu_nodes if group_of[n.name] == best)
        chosen.append((p, best, names))
        if len(counts) > 1:
            notes.append(
                "partition '%s' mixes node types (%s); the draft describes its %d %s nodes"
                % (p.name, ", ".join("%s: %d" % kv for kv in sorted(counts.items())), len(names), best)
            )
    if not chosen:
        raise SlurmError(
            "no GPU nodes found%s: Slurm lists no gpu GRES (Gres=gpu:...) on any node; "
            "is GresTypes=gpu set and gres.conf in place?" % (" in partition %s" % ", ".join(only) if only else "")
        )
    kept = {c[1] for c in chosen}
    return Plan(tuple(g for g in groups if g.name in kept), tuple(chosen), tuple(skipped), tuple(notes))


def _partition_values(
    p: SlurmPartition,
    nt: str,
    names: Tuple[str, ...],
    groups: Mapping[str, NodeGroup],
    all_members: Sequence[SlurmNode],
) -> Dict[str, Value]:
    v: Dict[str, Value] = {"node_type": Value(nt)}
    v["nodes"] = Value(len(names), "%s" % compress_hostlist(names))
    if p.max_nodes is not None and p.max_nodes < len(names):
        v["max_nodes_per_job"] = Value(p.max_nodes, "Slurm MaxNodes")
    others = [n for n in all_members if n.name not in names]
    if others:
        feats = [f for f in groups[nt].features if not any(f in o.features for o in others)]
        if feats:
            v["constraint"] = Value(feats[0], "other node types share this partition; this feature picks %s" % nt)
        else:
            v["constraint"] = Value(
                nt,
                "other node types share this partition and no node feature sets %s apart: "
                "add one (Feature= in slurm.conf) and name it here" % nt,
                todo=True,
            )
    if p.exclusive:
        why = "Slurm gives whole nodes here (%s)" % (
            "Exclusive=%s" % p.exclusive_mode if p.exclusive_mode != "NO" else "OverSubscribe=EXCLUSIVE"
        )
    elif p.exclusive_mode == "USER":
        why = (
            "Slurm gives nodes to one user at a time here (Exclusive=USER / ExclusiveUser=YES), which still "
            "lets that user's jobs share a node; true makes generated jobs ask for whole nodes (--exclusive)"
        )
    else:
        why = (
            "Slurm lets jobs share nodes here (OverSubscribe=%s); true makes generated jobs ask for "
            "whole nodes (--exclusive)" % p.oversubscribe
        )
    v["exclusive"] = Value(True, why)
    return v


def build_draft(
    facts: ClusterFacts,
    only: Sequence[str] = (),
    probes: Optional[Mapping[str, ProbeResult]] = None,
    name: Optional[str] = None,
    command: str = "slurmgpu discover",
    domains: Optional[Mapping[str, Mapping[str, Optional[str]]]] = None,
) -> SiteDraft:
    probes = probes or {}
    domains = domains or {}
    pl = plan(facts, only)
    groups = {g.name: g for g in pl.groups}
    first_part: Dict[str, str] = {}
    for p, nt, _ in pl.partitions:
        first_part.setdefault(nt, p.name)
    node_types = {
        g.name: _node_type_values(g, probes.get(g.name), first_part[g.name], domains.get(g.name)) for g in pl.groups
    }
    by_name = {n.name: n for n in facts.nodes}
    partitions = {}
    for p, nt, names in pl.partitions:
        members = [by_name[n] for n in (p.nodes or ()) if n in by_name and by_name[n].gpus > 0]
        partitions[p.name] = _partition_values(p, nt, names, groups, members)
    top: Dict[str, Value] = {}
    top["name"] = Value(
        name or facts.cluster_name or "discovered",
        "" if name else ("Slurm ClusterName" if facts.cluster_name else "no ClusterName: rename it"),
    )
    top["description"] = Value(
        "%s (Slurm %s), drafted by slurmgpu discover" % (facts.cluster_name or "cluster", facts.release)
    )
    top["slurm_version"] = Value(version_label(facts.version), "sinfo --version: %s" % facts.release)
    defaults = [p.name for p, _, _ in pl.partitions if p.default]
    if defaults:
        top["default_partition"] = Value(defaults[0], "Slurm's default partition")
    else:
        top["default_partition"] = Value(
            pl.partitions[0][0].name,
            "Slurm's default partition has no GPUs or was not selected: the first GPU partition",
        )
    top["gpu_request"] = Value("gpus-per-node", "or gres, if the site's policy wants --gres=gpu:N")
    top.update(_topology_value(facts, node_types))
    if top["topology"].value == "block":
        top.update(_rank_order_values(facts))
    if facts.version >= (25, 11, 0) and "enable_expedited_requeue" in (facts.config.get("SlurmctldParameters") or ""):
        top["requeue"] = Value({"expedite": True}, "SlurmctldParameters=enable_expedited_requeue")
    notes = list(facts.notes) + list(pl.notes) + list(pl.skipped)
    for gname, dm in domains.items():
        for clique, trays in sorted(domain_groups(dm).items(), key=lambda kv: sorted(kv[1])):
            notes.append(
                "%s NVLink domain %s: %s (one block each: slurmgpu admin topology)"
                % (gname, clique, compress_hostlist(sorted(trays)))
            )
    header = (
        "Site config draft written by slurmgpu %s from Slurm %s (read with: %s)."
        % (__version__, facts.release, facts.backend),
        "Regenerate: %s" % command,
        "Values marked TODO are guesses: check each one with the command in its comment,",
        "then: slurmgpu site validate <this file>.  Docs: slurmgpu docs discover",
    ) + tuple("Left out: " + s for s in pl.skipped)
    footer = (
        "",
        "Optional sections (defaults shown; see site-configs/dgx-h100.yaml):",
        "container: {runtime: none}        # pyxis | apptainer | none",
        "paths: {scratch: /scratch, checkpoint: /scratch/checkpoints}",
        "policy: {mode: enforce}           # enforce | warn | shadow | off",
    )
    return SiteDraft(
        header=header, top=top, partitions=partitions, node_types=node_types, footer=footer, notes=tuple(notes)
    )


def node_rank_order_of(version: Version, config: Mapping[str, str]) -> Tuple[str, str]:
    """(order, why) of a topology/block cluster: which node holds which rank (site.model
    NODE_RANK_ORDERS), from the release and slurm.conf as `scontrol show config` prints it."""
    tparam = (config.get("TopologyParam") or "").lower()
    select = (config.get("SelectTypeParameters") or "").lower()
    if version >= (25, 11, 0) and "blockasnoderank" in tparam:
        return "block", "Slurm TopologyParam=BlockAsNodeRank: task and node ranks in topology order"
    if version >= (26, 5, 0):
        if "cr_no_dist_topo_block" in select:
            return "name", "Slurm 26.05 with SelectTypeParameters CR_NO_DIST_TOPO_BLOCK: ranks by host name"
        return "tasks-block", "Slurm 26.05: srun's task ranks in topology order, SLURM_NODEID by host name"
    return "name", "Slurm %s numbers ranks by host name" % version_label(version)


def _natural(name: str) -> Tuple[Tuple[int, Any], ...]:
    """Host names in Slurm's hostlist order: digits by value (nvl2 < nvl10)."""
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in re.split(r"(\d+)", name) if p)


def blocks_follow_names(blocks: Mapping[str, Sequence[str]]) -> bool:
    """Whether every block is a run of consecutive host names among the blocks' nodes."""
    owner = {n: b for b, members in blocks.items() for n in members}
    seq = [owner[n] for n in sorted(owner, key=_natural)]
    runs = [b for i, b in enumerate(seq) if i == 0 or seq[i - 1] != b]
    return len(runs) == len(set(runs))


def _rank_order_values(facts: ClusterFacts) -> Dict[str, Value]:
    order, why = node_rank_order_of(facts.version, facts.config)
    out = {"node_rank_order": Value(order, why)}
    if not facts.blocks:
        out["blocks_follow_names"] = Value(
            True, "scontrol show topology listed no blocks: check that each block is a run of host names", todo=True
        )
    else:
        follow = blocks_follow_names(facts.blocks)
        out["blocks_follow_names"] = Value(
            follow,
            "scontrol show topology: each block is a run of consecutive host names"
            if follow
            else "scontrol show topology: host names interleave the blocks (%s)"
            % "; ".join("%s=%s" % (b, compress_hostlist(list(m))) for b, m in sorted(facts.blocks.items())[:3]),
        )
    return out


def _topology_value(facts: ClusterFacts, node_types: Mapping[str, Mapping[str, Value]]) -> Dict[str, Value]:
    plugin = (facts.topology_plugin or "").lower()
    topo = "block" if "block" in plugin else "tree" if "tree" in plugin else "flat"
    src = "Slurm TopologyPlugin=%s" % (facts.topology_plugin or "unknown")
    wide = [n for n, v in node_types.items() if v["nvlink_domain"].value > v["gpus"].value]
    if wide and topo != "block":
        return {
            "topology": Value(
                "block",
                "%s spans nodes with one NVLink domain; Slurm has %s: configure "
                "topology/block (one block per NVLink domain)" % (", ".join(wide), src),
                todo=True,
            )
        }
    return {"topology": Value(topo, src)}


# ---------------------------------------------------------------------------
# probing one node per type


def probe_nodes(
    runner: Runner,
    facts: ClusterFacts,
    only: Sequence[str] = (),
    probe_command: Sequence[str] = (),
    timeout: float = 300.0,
    wait_s: int = 60,
) -> Tuple[Dict[str, ProbeResult], List[str]]:
    """Run `slurmgpu probe --json` through srun on one node of each node type.

    srun gives up after `wait_s` seconds without the node (--immediate): a busy
    node costs a note and leaves that node type's fabric marked TODO.
    """
    pl = plan(facts, only)
    cmd = list(probe_command) or ["slurmgpu", "probe", "--json"]
    results: Dict[str, ProbeResult] = {}
    notes: List[str] = []
    part_of: Dict[str, str] = {}
    for p, nt, _ in pl.partitions:
        part_of.setdefault(nt, p.name)
    for g in pl.groups:
        node = next(
            (n for n in g.nodes if n.state.upper().startswith("IDLE") and _idle(n)),
            next((n for n in g.nodes if _idle(n)), g.first),
        )
        # --immediate: a busy cluster gives a note, not a discover that waits in the queue
        argv = [
            "srun",
            "-N1",
            "-n1",
            "-p",
            part_of[g.name],
            "-w",
            node.name,
            "--exclusive",
            "--gres=gpu:%d" % g.gpus,
            "-t",
            "5",
            "--immediate=%d" % max(1, wait_s),
            "-J",
            "slurmgpu-probe",
        ] + cmd
        res = runner.run(argv, timeout=timeout)
        if not res.ok:
            notes.append("probe of %s (%s) failed: %s" % (node.name, g.name, res.why()))
            continue
        try:
            results[g.name] = ProbeResult.from_dict(json.loads(res.stdout))
        except (ValueError, TypeError, KeyError) as exc:
            notes.append(
                "probe of %s (%s) printed no probe JSON (%s): %s" % (node.name, g.name, exc, res.stdout.strip()[:200])
            )
    return results, notes


def probe_domains(
    runner: Runner,
    facts: ClusterFacts,
    probes: Mapping[str, ProbeResult],
    only: Sequence[str] = (),
    probe_command: Sequence[str] = (),
    timeout: float = 300.0,
    wait_s: int = 60,
) -> Tuple[Dict[str, Dict[str, Optional[str]]], List[str]]:
    """For node types whose probe saw a multi-node NVLink domain: every idle tray's ClusterUUID/CliqueId.

    One srun over the idle nodes of the type (`slurmgpu probe --domain`, one line per node); the
    domain size is then counted, not taken from the GPU table.
    """
    pl = plan(facts, only)
    base = [a for a in (probe_command or ("slurmgpu", "probe")) if a != "--json"]
    out: Dict[str, Dict[str, Optional[str]]] = {}
    notes: List[str] = []
    part_of: Dict[str, str] = {}
    for p, nt, _ in pl.partitions:
        part_of.setdefault(nt, p.name)
    for g in pl.groups:
        pr = probes.get(g.name)
        if pr is None or not pr.nvlink_clique:
            continue
        names = [n.name for n in g.nodes if _idle(n)]
        if len(names) <= 1:
            notes.append("%s: too few idle nodes to count the NVLink domain's trays" % g.name)
            continue
        argv = ["srun", "-N%d" % len(names), "--ntasks-per-node=1", "-p", part_of[g.name], "-w"]
        argv += [compress_hostlist(names), "-t", "5", "--immediate=%d" % max(1, wait_s), "-J", "slurmgpu-probe"]
        res = runner.run(argv + base + ["--domain"], timeout=timeout)
        got = parse_domain_lines(res.stdout)
        if not res.ok and not got:
            notes.append("NVLink domain probe of %s (%s) failed: %s" % (compress_hostlist(names), g.name, res.why()))
            continue
        out[g.name] = {n: got.get(n) for n in names}
    return out, notes


def discover(
    runner: Runner,
    only: Sequence[str] = (),
    with_probe: bool = False,
    backend: str = "auto",
    name: Optional[str] = None,
    probe_command: Sequence[str] = (),
    command: str = "slurmgpu discover",
    wait_s: int = 60,
) -> SiteDraft:
    """Read the cluster (and probe one node per type if asked) and return the draft."""
    facts = read_cluster(runner, backend)
    probes: Dict[str, ProbeResult] = {}
    domains: Dict[str, Dict[str, Optional[str]]] = {}
    extra: List[str] = []
    if with_probe:
        probes, extra = probe_nodes(runner, facts, only, probe_command, wait_s=wait_s)
        domains, more = probe_domains(runner, facts, probes, only, probe_command, wait_s=wait_s)
        extra += more
    draft = build_draft(facts, only, probes, name, command, domains)
    if extra:
        draft = SiteDraft(
            draft.header, draft.top, draft.partitions, draft.node_types, draft.footer, draft.notes + tuple(extra)
        )
    return draft
