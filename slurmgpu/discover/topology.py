"""Slurm's topology for a site, from the same site file the planner and the policy read.

Block form (topology/block, Slurm 23.11+): one block per NVLink domain (`domain_nodes`
consecutive nodes of the partition, e.g. 18 trays per GB200 NVL72 rack) and `BlockSizes=` of one
domain, so `--segment` (24.05+) keeps segments inside a rack. Tree form (topology/tree): one
leaf `SwitchName=` per IB leaf switch the caller lists, plus a spine over them.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

from ..errors import SlurmgpuError
from ..site import Site
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
