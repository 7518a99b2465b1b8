"""Slurm's topology for a site, from the same site file the planner and the policy read.

Block form (topology/block, Slurm 23.11+): one block per NVLink domain (`domain_nodes`
consecutive nodes of the partition, e.g. 18 trays per GB200 NVL72 rack) and `BlockSizes=` of one
domain, so `--segment` (24.05+) keeps segments inside a rack. Tree form (topology/tree): one
leaf `SwitchName=` per IB leaf switch the caller lists, plus a spine over them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import SlurmgpuError
from ..site import Site
from ..slurm import Runner
from ..slurm.parse import compress_hostlist, parse_hostlist


def blocks(site: Site, partition: str, nodes: Sequence[str]) -> Dict[str, Tuple[str, ...]]:
    """Block name -> its nodes: consecutive runs of one NVLink domain each."""
    nt = site.node_type_of(partition)
    per = nt.domain_nodes
    if per <= 1:
        raise SlurmgpuError(
            "partition %s has a %d-GPU NVLink domain on %d-GPU nodes: no multi-node domain, so no block topology "
            "(use the tree form for IB leaf switches)" % (partition, nt.nvlink_domain, nt.gpus)
        )
    if len(nodes) % per:
        raise SlurmgpuError(
            "%d nodes are not whole NVLink domains of %d nodes (partition %s); list whole racks"
            % (len(nodes), per, partition)
        )
    return {"rack%d" % (i // per + 1): tuple(nodes[i : i + per]) for i in range(0, len(nodes), per)}


def block_conf(site: Site, partition: str, nodes: Sequence[str]) -> str:
    """topology.conf text for topology/block."""
    bl = blocks(site, partition, nodes)
    lines = ["# topology/block for site %s, partition %s: one block per NVLink domain" % (site.name, partition)]
    lines += ["BlockName=%s Nodes=%s" % (name, compress_hostlist(list(m))) for name, m in bl.items()]
    lines.append("BlockSizes=%d" % site.node_type_of(partition).domain_nodes)
    return "\n".join(lines) + "\n"


def block_yaml(site: Site, partition: str, nodes: Sequence[str]) -> str:
    """topology.yaml (Slurm 25.05+) with the same blocks."""
    bl = blocks(site, partition, nodes)
    out = ["- topology: %s" % site.name, "  cluster_default: true", "  block:", "    block_sizes:"]
    out.append("      - %d" % site.node_type_of(partition).domain_nodes)
    out.append("    blocks:")
    for name, m in bl.items():
        out += ["      - block: %s" % name, "        nodes: %s" % compress_hostlist(list(m))]
    return "\n".join(out) + "\n"


def site_switches(site: Site, partition: str) -> Dict[str, str]:
    """The partition's leaf_switches as NAME -> host list (what tree_conf takes)."""
    return {k: compress_hostlist(list(v)) for k, v in site.partition(partition).leaf_switches.items()}


def gres_conf(site: Site, partition: str, nodes: Sequence[str]) -> str:
    """gres.conf lines for the partition's nodes: the GPU type the site's gres_type names."""
    nt = site.node_type_of(partition)
    hosts = compress_hostlist(list(nodes))
    gtype = nt.gres_type or "gpu"
    dev = "/dev/nvidia[0-%d]" % (nt.gpus - 1) if nt.vendor == "nvidia" else "/dev/dri/renderD[128-%d]" % (127 + nt.gpus)
    lines = [
        "# gres.conf for site %s, partition %s (%d x %s per node)" % (site.name, partition, nt.gpus, nt.gpu_model),
        "# AutoDetect=%s finds the same GPUs; the Type must stay %s (the site's gres_type)"
        % ("nvml" if nt.vendor == "nvidia" else "rsmi", gtype),
        "NodeName=%s Name=gpu Type=%s File=%s" % (hosts, gtype, dev),
    ]
    return "\n".join(lines) + "\n"


def node_lines(site: Site, partition: str, nodes: Sequence[str]) -> str:
    """slurm.conf lines that match the site file: NodeName (CPUs, memory, Gres), PartitionName,
    TopologyPlugin, and the IMEX switch plugin where multi-node NVLink is on."""
    nt = site.node_type_of(partition)
    p = site.partition(partition)
    hosts = compress_hostlist(list(nodes))
    gtype = nt.gres_type or "gpu"
    lines = ["# slurm.conf lines for site %s, partition %s" % (site.name, partition)]
    plugin = {"block": "topology/block", "tree": "topology/tree"}.get(site.topology)
    if plugin:
        lines.append("TopologyPlugin=%s" % plugin)
    if nt.multi_node_nvlink and nt.mnnvl == "on":
        lines.append("# one IMEX channel per job, for multi-node NVLink (mnnvl: on)")
        lines.append("SwitchType=switch/nvidia_imex")
    lines.append("GresTypes=gpu")
    lines.append(
        "NodeName=%s CPUs=%d RealMemory=%d Gres=gpu:%s:%d State=UNKNOWN"
        % (hosts, nt.cpus, int(nt.memory_gb * 1024), gtype, nt.gpus)
    )
    lines.append(
        "PartitionName=%s Nodes=%s%s State=UP" % (p.name, hosts, " " + exclusive_spelling(site) if p.exclusive else "")
    )
    return "\n".join(lines) + "\n"


EXCLUSIVE_NODE_FROM = (26, 5, 0)  # Exclusive=NODE replaces OverSubscribe=EXCLUSIVE


def exclusive_spelling(site: Site) -> str:
    """A whole-node partition in the site's release's slurm.conf: Exclusive=NODE from 26.05
    (OverSubscribe=EXCLUSIVE is deprecated there), OverSubscribe=EXCLUSIVE before (24.11's
    slurmctld refuses to start on an Exclusive= key); unknown release: the older spelling, which
    every release reads."""
    from ..slurm import slurm_version_tuple

    ver = slurm_version_tuple(site.slurm_version)
    return "Exclusive=NODE" if ver and ver >= EXCLUSIVE_NODE_FROM else "OverSubscribe=EXCLUSIVE"


# ---------------------------------------------------------------------------
# the live cluster


@dataclass(frozen=True)
class TopologyDiff:
    """What differs between the site's topology and `scontrol show topology`."""

    kind: str  # BlockName | SwitchName
    only_site: Tuple[str, ...]  # groups the live cluster lacks
    only_live: Tuple[str, ...]  # groups the site file lacks
    changed: Tuple[Tuple[str, str, str], ...]  # (name, site's nodes, live nodes)

    @property
    def same(self) -> bool:
        return not (self.only_site or self.only_live or self.changed)

    def text(self) -> str:
        if self.same:
            return "scontrol show topology matches the site (%s)\n" % self.kind
        out = ["scontrol show topology differs from the site (%s):" % self.kind]
        out += ["  only in the site file: %s" % n for n in self.only_site]
        out += ["  only in the live cluster: %s" % n for n in self.only_live]
        out += ["  %s: site %s, live %s" % c for c in self.changed]
        return "\n".join(out) + "\n"


_WORD = re.compile(r"(\w+)=(\S*)")


def parse_show_topology(text: str, kind: str) -> Dict[str, Tuple[str, ...]]:
    """`scontrol show topology` -> name -> nodes, for BlockName= (block) or SwitchName= (tree) lines.

    Tree output lists a spine's Nodes= too; only switches without Switches= (leaves) count, as in
    the file tree_conf writes.
    """
    out: Dict[str, Tuple[str, ...]] = {}
    for line in (text or "").splitlines():
        words = dict(_WORD.findall(line))
        if kind not in words:
            continue
        if kind == "SwitchName" and words.get("Switches") not in (None, "", "(null)"):
            continue
        out[words[kind]] = tuple(sorted(parse_hostlist(words.get("Nodes", ""))))
    return out


def diff_live(runner: Runner, wanted: Mapping[str, Sequence[str]], kind: str) -> Tuple[Optional[TopologyDiff], str]:
    """(diff, "") against `scontrol show topology`, or (None, why) when the cluster is not reachable."""
    res = runner.run(["scontrol", "show", "topology"], timeout=30)
    if not res.ok:
        return None, res.why()
    live = parse_show_topology(res.stdout, kind)
    if not live:
        return None, "scontrol show topology printed no %s= lines (TopologyPlugin not %s?)" % (
            kind,
            "topology/block" if kind == "BlockName" else "topology/tree",
        )
    want = {k: tuple(sorted(v)) for k, v in wanted.items()}
    changed = tuple(
        (n, compress_hostlist(list(want[n])), compress_hostlist(list(live[n])))
        for n in want
        if n in live and want[n] != live[n]
    )
    return TopologyDiff(
        kind,
        tuple(n for n in want if n not in live),
        tuple(n for n in live if n not in want),
        changed,
    ), ""


def tree_conf(switches: Mapping[str, str]) -> str:
    """topology.conf text for topology/tree: one leaf per IB switch (name -> hostlist), one spine."""
    if not switches:
        raise SlurmgpuError("the tree form needs the IB leaf switches: --switch NAME=HOSTLIST, one per leaf")
    seen: Dict[str, str] = {}
    lines: List[str] = ["# topology/tree: IB leaf switches"]
    for name, hosts in switches.items():
        for h in parse_hostlist(hosts):
            if h in seen:
                raise SlurmgpuError("node %s is under two leaf switches (%s and %s)" % (h, seen[h], name))
            seen[h] = name
        lines.append("SwitchName=%s Nodes=%s" % (name, hosts))
    lines.append("SwitchName=spine Switches=%s" % ",".join(switches))
    return "\n".join(lines) + "\n"
