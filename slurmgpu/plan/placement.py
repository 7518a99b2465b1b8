"""Where each communication group (TP, CP, EP, PP stage) lands, from the launcher's rank order.

One home for the placement the planner, the generator and the policy share: the planner prefers
layouts whose model-parallel groups fit one NVLink domain, `gen` derives `--segment` from the
group spans here, and contrib/lua/policy/rule_groups.lua applies the same span formula (`group_unit`), pinned
by tests/test_agreement.py.

Rank orders (innermost first; ranks fill nodes in order, `ranks_per_node` per node):

* ``megatron``: Megatron-LM's default ``tp-cp-ep-dp-pp`` for dense groups, and its separate expert
  mesh ``etp-ep-edp-pp`` (expert TP defaults to TP) that carves EP out of CP x DP. An EP group is
  then `ep` ranks with stride `etp`, inside a block of ``etp * ep`` consecutive ranks.
* ``torchtitan``: the device mesh ``[pp, dp_replicate, dp_shard, cp, tp]`` (outermost first); EP
  borrows ``dp_shard x cp`` (and TP when expert TP is 1), so its block is again ``tp * ep`` ranks.

Both orders put TP innermost and CP next, so a TP group is a block of `tp` ranks and a CP group a
block of ``tp * cp`` ranks; a PP stage's peers are `world / pp` ranks apart (the slowest axis).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .layout import Layout

ORDERS = ("megatron", "torchtitan")

# Node-rank order: which node of a job holds rank r. The proof below ("node i lies in segment
# i // segment") needs the launcher's rank order to walk the job's nodes block by block. What
# Slurm does (seen on the test cluster's 24.11.5 and 26.05.5 with topology/block whose host names
# interleave the blocks; docs/admin-filter.md, "Node-rank order"):
#   name         SLURM_PROCID and SLURM_NODEID follow the host names (up to 25.11; 26.05 with
#                SelectTypeParameters=CR_NO_DIST_TOPO_BLOCK)
#   tasks-block  srun's task ranks (SLURM_PROCID) follow the topology, SLURM_NODEID the names
#                (26.05's default with a topology plugin)
#   block        both follow the topology (TopologyParam=BlockAsNodeRank, 25.11+; the job's node
#                list is then printed in block order too)
# and what each launcher numbers its ranks by (templates/parts/launch_*.j2):
#   procid       one srun task per GPU, RANK=$SLURM_PROCID
#   nodeid       one task per node with --node-rank/--machine_rank=$SLURM_NODEID
#   hostname     torchrun's c10d rendezvous: node ranks in sorted order of the nodes' FQDNs
#                (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py), whatever Slurm does
# (the orders and which rank sources follow the blocks under each: site.model NODE_RANK_ORDERS and
# Site.ranks_follow_blocks, since the filter's site table needs them and policy imports no plan)
RANK_SOURCES = {
    "srun": "procid",
    "accelerate": "nodeid",
    "deepspeed": "nodeid",
    "vllm": "nodeid",
    "sglang": "nodeid",
    "torchrun": "hostname",
    "megatron": "hostname",
    "nemo": "hostname",
    "torchtitan": "hostname",
}
# Groups whose collectives need NVLink on a multi-node domain; PP and DP may cross racks (NVL72).
DOMAIN_KINDS = ("tp", "cp", "ep")
KINDS = ("tp", "cp", "ep", "pp", "dp")


def _mesh(layout: Layout, kind: str, order: str, etp: Optional[int]) -> List[Tuple[str, int]]:
    """The rank mesh that defines `kind`'s groups, innermost axis first."""
    if order not in ORDERS:
        raise ValueError("unknown rank order %r; expected one of %s" % (order, ", ".join(ORDERS)))
    if kind == "ep":
        e_tp = etp or layout.tp
        rest = layout.tp * layout.cp * layout.dp
        if layout.ep < 1 or rest % (e_tp * layout.ep):
            raise ValueError(
                "EP=%d x expert TP=%d does not divide TP x CP x DP = %d ranks per stage" % (layout.ep, e_tp, rest)
            )
        return [("etp", e_tp), ("ep", layout.ep), ("edp", rest // (e_tp * layout.ep)), ("pp", layout.pp)]
    # dense groups: tp-cp-dp-pp (Megatron) and tp-cp-dp_shard-dp_replicate-pp (torchtitan, DP flattened)
    return [("tp", layout.tp), ("cp", layout.cp), ("dp", layout.dp), ("pp", layout.pp)]


def groups(layout: Layout, kind: str, order: str = "megatron", etp: Optional[int] = None) -> List[List[int]]:
    """Global ranks of every `kind` group: the ranks that differ only along that mesh axis."""
    mesh = _mesh(layout, kind, order, etp)
    axis = kind if kind != "ep" else "ep"
    sizes = [s for _, s in mesh]
    names = [n for n, _ in mesh]
    i = names.index(axis)
    stride = int(math.prod(sizes[:i]))
    size = sizes[i]
    block = stride * size
    world = int(math.prod(sizes))
    out: List[List[int]] = []
    for base in range(0, world, block):
        for off in range(stride):
            out.append([base + off + k * stride for k in range(size)])
    return out


def strict_kinds(groups: Mapping[str, str]) -> Tuple[str, ...]:
    """Group kinds that must stay inside one NVLink domain: TP always, CP/EP unless the site's
    policy.groups sets that kind to warn or off (then the planner prefers a layout that keeps them
    in a rack through the cost model, and the filter warns)."""
    return tuple(k for k in DOMAIN_KINDS if k == "tp" or groups.get(k, "enforce") == "enforce")


def group_index(
    layout: Layout, order: str = "megatron", etp: Optional[int] = None, kinds: Sequence[str] = KINDS
) -> Dict[str, List[Tuple[int, int]]]:
    """For each kind, every global rank's (group number, position inside the group), from `groups`.

    One pass per kind, so a 16,384-rank picture needs no per-rank search. Raises ValueError as
    `groups` does when EP x expert TP does not divide a stage's ranks.
    """
    out: Dict[str, List[Tuple[int, int]]] = {}
    for kind in kinds:
        where = [(0, 0)] * layout.world
        for g, ranks in enumerate(groups(layout, kind, order, etp)):
            for pos, r in enumerate(ranks):
                where[r] = (g, pos)
        out[kind] = where
    return out


def group_nodes(
    layout: Layout, kind: str, ranks_per_node: Optional[int] = None, order: str = "megatron", etp: Optional[int] = None
) -> List[List[int]]:
    """For each `kind` group, the distinct node indices (0-based, job order) its ranks land on."""
    rpn = ranks_per_node or layout.gpus_per_node
    return [sorted({r // rpn for r in g}) for g in groups(layout, kind, order, etp)]


def group_block(layout: Layout, kind: str, etp: Optional[int] = None) -> int:
    """Consecutive ranks that hold whole `kind` groups (TP: tp, CP: tp*cp, EP: etp*ep)."""
    if kind == "tp":
        return layout.tp
    if kind == "cp":
        return layout.tp * layout.cp
    if kind == "ep":
        return (etp or layout.tp) * layout.ep
    if kind == "pp":
        return layout.world
    if kind == "dp":
        return layout.tp * layout.cp * layout.dp
    raise ValueError("unknown group kind %r" % kind)


def group_unit(block: int, ranks_per_node: int) -> int:
    """Fewest nodes that hold whole blocks of `block` ranks: block / gcd(block, ranks per node).

    The same formula as rule_groups.lua's segment: a segment that is a multiple of it holds whole groups.
    """
    return block // math.gcd(block, ranks_per_node)


def _size(layout: Layout, kind: str) -> int:
    return int(getattr(layout, kind))


@dataclass(frozen=True)
class Span:
    """How far one kind of group reaches: its block of ranks and the nodes that holds."""

    kind: str
    size: int  # ranks per group
    block: int  # consecutive ranks holding whole groups
    unit: int  # fewest nodes holding whole groups


def spans(
    layout: Layout, ranks_per_node: Optional[int] = None, kinds: Sequence[str] = DOMAIN_KINDS, etp: Optional[int] = None
) -> List[Span]:
    """The span of each kind in `kinds` that has more than one rank per group."""
    rpn = ranks_per_node or layout.gpus_per_node
    out = []
    for k in kinds:
        if _size(layout, k) > 1:
            b = group_block(layout, k, etp)
            out.append(Span(k, _size(layout, k), b, group_unit(b, rpn)))
    return out


def segment_unit_of(spans_: Sequence[Span]) -> int:
    """Nodes a segment must be a multiple of so every listed group stays inside one segment."""
    u = 1
    for s in spans_:
        u = u * s.unit // math.gcd(u, s.unit)
    return u


def _words(sp: Sequence[Span]) -> str:
    return ", ".join("%s=%d (%d-node blocks)" % (s.kind.upper(), s.size, s.unit) for s in sp)


def choose_segment(
    domain_nodes: int, domain_gpus: int, nodes: int, unit_spans: Sequence[Span]
) -> Tuple[Optional[int], Optional[str]]:
    """The --segment (nodes) that keeps every group of `unit_spans` inside one NVLink domain.

    The largest multiple of the combined unit that fits one domain and divides the node count;
    None without error when no segment is needed (one node, no multi-node groups). The error says
    which node counts would work.
    """
    if nodes <= 1 or domain_nodes <= 1:
        return None, None
    unit = segment_unit_of(unit_spans)
    if unit > domain_nodes:
        big = max(unit_spans, key=lambda s: s.unit)
        return None, (
            "%s group%s of %d ranks need%s %d nodes, more than one %d-GPU NVLink domain (%d nodes): "
            "no --segment keeps them on NVLink; make the group smaller"
            % (big.kind.upper(), "", big.block, "", big.unit, domain_gpus, domain_nodes)
        )
    if nodes <= domain_nodes and nodes % unit == 0:
        return nodes, None
    for seg in range(domain_nodes - domain_nodes % unit, 0, -unit):
        if nodes % seg == 0:
            return (seg if seg > 1 else None), None
    lo = nodes - nodes % unit
    hi = lo + unit
    would = " or ".join(str(n) for n in (lo, hi) if n > 0)
    return None, (
        "%s: segments must be multiples of %d nodes inside one %d-node NVLink domain, and no such "
        "segment divides %d nodes; %s nodes would work" % (_words(unit_spans), unit, domain_nodes, nodes, would)
    )


def crossings(
    layout: Layout,
    domain_nodes: int,
    segment: Optional[int],
    ranks_per_node: Optional[int] = None,
    order: str = "megatron",
    kinds: Sequence[str] = DOMAIN_KINDS,
    etp: Optional[int] = None,
) -> Dict[str, int]:
    """Groups of each kind that would cross an NVLink domain, counted from the actual placement.

    With a segment, node i lies in segment i // segment (each segment inside one domain); without
    one, Slurm may place any node anywhere, so a group on two nodes may cross. The explicit count
    is what tests compare the span formula against.
    """
    out: Dict[str, int] = {}
    per = segment if segment else 1
    if domain_nodes <= 1:
        per = 1
    for k in kinds:
        if _size(layout, k) <= 1:
            continue
        n = sum(1 for g in group_nodes(layout, k, ranks_per_node, order, etp) if len({x // per for x in g}) > 1)
        if n:
            out[k] = n
    return out
