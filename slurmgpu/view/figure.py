"""The topology/groups picture as SVG text: nodes with their GPUs (global ranks), the NVLink domains
around them, the fabric between them, and each GPU's TP/PP/DP/CP/EP membership as classes.

The default fill is the TP colouring, so a standalone SVG (docs, slides) reads without CSS; the HTML
page recolours cells through the classes `t<i> p<i> d<i> c<i> e<i>` (group index modulo the
palette). Above DETAIL_NODES nodes, nodes are drawn aggregated: one box per `per_box` consecutive
nodes, showing the first node's GPUs and the count, so 16,384 GPUs stay a small file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from html import escape
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from ..plan.layout import GROUP_KINDS, Layout, expert_tp, tp_groups
from ..plan.placement import group_index
from ..site import NodeType, RankPlan

# Colour-blind-friendly palette without red (red is kept for what is wrong).
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#9c755f",
    "#bab0ac",
    "#17becf",
    "#8cd17d",
    "#a0cbe8",
    "#ffbe7d",
)
RED = "#d62728"
SVG_NS = ' xmlns="http://www.w3.org/2000/svg"'  # standalone files only
KIND_LETTER = {"tp": "t", "pp": "p", "dp": "d", "cp": "c", "ep": "e"}
DETAIL_NODES = 64  # above this, nodes are aggregated
MAX_BOXES = 32  # aggregated boxes drawn at most
MAX_LINKS = 16  # crossing groups drawn with their link line at most
CELL = 30
PAD = 6
GAP = 10
MAX_WIDTH = 1200

LINK_WORDS = {"nvlink": "NVLink", "xgmi": "Infinity Fabric", "pcie": "PCIe"}
FABRIC_WORDS = {
    "infiniband": "InfiniBand",
    "roce": "RoCE",
    "efa": "EFA",
    "slingshot": "Slingshot",
    "ethernet": "Ethernet",
}


@dataclass(frozen=True)
class Marks:
    """What to highlight: failing ranks and node indices (doctor)."""

    ranks: FrozenSet[int] = frozenset()
    nodes: FrozenSet[int] = frozenset()


@dataclass(frozen=True)
class Topology:
    """What the picture needs to know of the hardware (plain values from a site's NodeType)."""

    gpus_per_node: int
    domain_nodes: int  # nodes per NVLink domain (1 on HGX, 18 on NVL72; a --segment cuts it)
    link: str  # e.g. "900 GB/s NVLink"
    fabric: str  # e.g. "8 x 400 Gb/s InfiniBand per node"
    node_type: str = ""
    node_names: Tuple[str, ...] = ()
    # per local rank: (GPU, NUMA node, CPUs, NICs) from the site's affinity map, and what binds them
    # (gen: the launcher's binding note; plan: the map alone)
    binding: Tuple[Tuple[int, str, str, str], ...] = ()
    binding_note: str = ""

    @classmethod
    def of(
        cls, nt: NodeType, gpus_per_node: int, segment: Optional[int] = None, node_names: Sequence[str] = ()
    ) -> Topology:
        nics = nt.compute_nics
        fab = FABRIC_WORDS.get(nt.fabric, nt.fabric)
        if nics:
            speeds = sorted({n.gbps for n in nics})
            each = "/".join("%g" % s for s in speeds)
            fabric = "%d x %s Gb/s %s per node" % (len(nics), each, fab)
        else:
            fabric = "%s (no compute NIC speed listed)" % fab
        dn = nt.domain_nodes
        if segment and dn > 1:
            dn = min(dn, segment)
        amap = nt.affinity
        ranks = amap.ranks(gpus_per_node) if amap is not None and amap.known and gpus_per_node == nt.gpus else ()
        if amap is None or not amap.known:
            note = "no GPU/NUMA/CPU map for node type %s%s" % (nt.name, ": %s" % amap.unknown if amap else "")
        elif not ranks:
            note = "the job uses part of a node: which GPUs it gets (and so their CPUs) is known only at run time"
        else:
            note = "the site map (%s: %s); how each launcher applies it: `slurmgpu docs affinity`" % (
                amap.label(),
                amap.source,
            )
        return cls(
            gpus_per_node=gpus_per_node,
            domain_nodes=dn,
            link="%g GB/s %s" % (nt.link_gbs, LINK_WORDS.get(nt.link, nt.link)),
            fabric=fabric,
            node_type="%s (%s)" % (nt.name, nt.gpu_model),
            node_names=tuple(node_names),
            binding=binding_rows(ranks),
            binding_note=note,
        )


def binding_rows(ranks: Sequence[RankPlan]) -> Tuple[Tuple[int, str, str, str], ...]:
    """(GPU, NUMA node, CPUs, NICs) per local rank, as the binding table prints them."""
    return tuple((r.gpu, "-" if r.numa is None else str(r.numa), r.cpulist, ", ".join(r.nics) or "-") for r in ranks)


@dataclass(frozen=True)
class Crossing:
    """A TP group whose ranks sit in more than one NVLink domain."""

    group: int
    ranks: Tuple[int, ...]
    domains: Tuple[int, ...]


@dataclass
class _Geo:
    per_row: int
    node_w: int
    node_h: int
    cols: int  # GPU cells per row inside a node
    boxes: List[Tuple[int, int]] = field(default_factory=list)  # (first node, node count)


def crossings(lay: Layout, topo: Topology) -> List[Crossing]:
    """TP groups (from plan.layout.tp_groups) that leave their NVLink domain."""
    gpn = max(1, topo.gpus_per_node)
    dn = max(1, topo.domain_nodes)
    out = []
    for g, ranks in enumerate(tp_groups(lay)):
        first, last = ranks[0] // gpn // dn, ranks[-1] // gpn // dn
        if first != last:
            out.append(Crossing(g, tuple(ranks), tuple(range(first, last + 1))))
    return out


def _geometry(lay: Layout, topo: Topology) -> _Geo:
    gpn = max(1, topo.gpus_per_node)
    cols = min(gpn, 8)
    rows = -(-gpn // cols)
    node_w = cols * CELL + 2 * PAD
    node_h = rows * CELL + 2 * PAD + 14
    fit = max(1, (MAX_WIDTH - 2 * GAP) // (node_w + GAP))
    dn = max(1, topo.domain_nodes)
    if dn > 1:  # whole domains per row, or whole rows per domain
        per_row = (fit // dn) * dn if fit >= dn else max(d for d in range(1, fit + 1) if dn % d == 0)
    else:
        per_row = fit
    geo = _Geo(per_row=per_row, node_w=node_w, node_h=node_h, cols=cols)
    n = lay.nodes
    if n <= DETAIL_NODES:
        geo.boxes = [(i, 1) for i in range(n)]
    else:
        per = -(-n // MAX_BOXES)
        if dn > 1:
            per = -(-per // dn) * dn
        geo.boxes = [(i, min(per, n - i)) for i in range(0, n, per)]
        geo.per_row = fit
    return geo


def colour(kind: str, index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def svg(
    lay: Layout,
    topo: Topology,
    marks: Marks = Marks(),
    title: str = "",
    prefix: str = "f",
    standalone: bool = True,
) -> str:
    """The picture; `prefix` keeps ids unique when a page holds two pictures. Inline in HTML
    (`standalone=False`) it carries no namespace, so the page holds no URL at all."""
    gpn = max(1, topo.gpus_per_node)
    dn = max(1, topo.domain_nodes)
    geo = _geometry(lay, topo)
    cross = crossings(lay, topo)
    crossing_ranks: Set[int] = set()
    for c in cross:
        crossing_ranks.update(c.ranks)
    aggregated = lay.nodes > DETAIL_NODES
    member = membership(lay)
    top = 48
    pos: Dict[int, Tuple[int, int]] = {}  # box index -> (x, y)
    for b in range(len(geo.boxes)):
        row, col = divmod(b, geo.per_row)
        pos[b] = (GAP + col * (geo.node_w + GAP), top + row * (geo.node_h + GAP + 8))
    rows_used = -(-len(geo.boxes) // geo.per_row)
    width = max(GAP * 2 + min(len(geo.boxes), geo.per_row) * (geo.node_w + GAP), 520)
    fabric_y = top + rows_used * (geo.node_h + GAP + 8) + 8
    height = fabric_y + 56
    out: List[str] = []
    head = title or "%d node%s x %d GPUs: TP=%d PP=%d DP=%d CP=%d EP=%d" % (
        lay.nodes,
        "s" if lay.nodes != 1 else "",
        gpn,
        lay.tp,
        lay.pp,
        lay.dp,
        lay.cp,
        lay.ep,
    )
    out.append(
        '<svg%s class="topo" id="%s-svg" width="%d" height="%d" '
        'viewBox="0 0 %d %d" role="img" aria-labelledby="%s-title" font-family="sans-serif">'
        % (SVG_NS if standalone else "", prefix, width, height, width, height, prefix)
    )
    out.append('<title id="%s-title">%s</title>' % (prefix, escape(head)))
    out.append('<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>' % (GAP, escape(head)))
    sub = "%s; NVLink domain: %d node%s (%s)" % (topo.node_type, dn, "s" if dn != 1 else "", topo.link)
    if aggregated:
        sub += "; aggregated: one box per %d nodes, showing its first node" % geo.boxes[0][1]
    out.append('<text x="%d" y="36" font-size="11" fill="#444">%s</text>' % (GAP, escape(sub)))
    # NVLink domains: consecutive boxes whose nodes share a domain index
    if not aggregated:
        for d in range(-(-lay.nodes // dn)):
            members = [b for b, (first, _) in enumerate(geo.boxes) if first // dn == d]
            xs = [pos[b][0] for b in members]
            ys = [pos[b][1] for b in members]
            x0, y0 = min(xs) - 4, min(ys) - 4
            x1, y1 = max(xs) + geo.node_w + 4, max(ys) + geo.node_h + 4
            out.append(
                '<rect class="domain" data-domain="%d" x="%d" y="%d" width="%d" height="%d" rx="6" '
                'fill="none" stroke="#2a6f97" stroke-width="1.5" stroke-dasharray="5 3"/>'
                % (d, x0, y0, x1 - x0, y1 - y0)
            )
    cell_xy: Dict[int, Tuple[int, int]] = {}
    for b, (first, count) in enumerate(geo.boxes):
        x, y = pos[b]
        failed = any(n in marks.nodes for n in range(first, first + count))
        label = _node_label(topo, first, count)
        out.append('<g class="node%s" data-node="%d" data-count="%d">' % (" failnode" if failed else "", first, count))
        out.append(
            '<rect x="%d" y="%d" width="%d" height="%d" rx="3" fill="%s" stroke="%s" stroke-width="%s"/>'
            % (
                x,
                y,
                geo.node_w,
                geo.node_h,
                "#fde0dd" if failed else "#f4f4f4",
                RED if failed else "#888",
                "2.5" if failed else "1",
            )
        )
        out.append('<text x="%d" y="%d" font-size="10">%s</text>' % (x + PAD, y + 11, escape(label)))
        for i in range(gpn):
            rank = first * gpn + i
            r, cidx = divmod(i, geo.cols)
            cx, cy = x + PAD + cidx * CELL, y + 14 + PAD + r * CELL
            cell_xy[rank] = (cx, cy)
            if rank >= lay.world:  # a GPU of the allocation that no rank uses
                out.append(
                    '<rect class="idle" x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#999" '
                    'stroke-dasharray="2 2"><title>unused GPU</title></rect>' % (cx + 1, cy + 1, CELL - 2, CELL - 2)
                )
                continue
            classes = ["gpu"] + [
                "%s%s" % (KIND_LETTER[k], "none" if k not in member.index else member.index[k][rank] % len(PALETTE))
                for k in GROUP_KINDS
            ]
            bad = rank in crossing_ranks or (
                aggregated and any(r2 in crossing_ranks for r2 in range(rank, (first + count) * gpn, gpn))
            )
            if bad:
                classes.append("x")
            if rank in marks.ranks:
                classes.append("fail")
            fill = RED if bad else colour("tp", member.index["tp"][rank])
            out.append(
                '<rect class="%s" data-rank="%d" x="%d" y="%d" width="%d" height="%d" fill="%s" '
                'stroke="%s" stroke-width="%s"/>'
                % (
                    " ".join(classes),
                    rank,
                    cx + 1,
                    cy + 1,
                    CELL - 2,
                    CELL - 2,
                    fill,
                    "#000" if rank in marks.ranks else ("#7f0000" if bad else "#333"),
                    "3" if rank in marks.ranks else ("2" if bad else "0.5"),
                )
            )
            out.append(
                '<text x="%d" y="%d" font-size="%d" text-anchor="middle" pointer-events="none">%d</text>'
                % (cx + CELL // 2, cy + CELL // 2 + 4, 10 if rank < 1000 else 8, rank)
            )
        out.append("</g>")
    # the link each crossing group crosses
    for c in cross[:MAX_LINKS]:
        a, z = c.ranks[0], c.ranks[-1]
        if a not in cell_xy or z not in cell_xy:
            continue
        (ax, ay), (zx, zy) = cell_xy[a], cell_xy[z]
        out.append(
            '<line class="crossing" data-group="%d" x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" '
            'stroke-width="3" stroke-dasharray="6 3"/>'
            % (c.group, ax + CELL // 2, ay + CELL - 2, zx + CELL // 2, zy + CELL - 2, RED)
        )
        out.append(
            '<text class="crossing-label" x="%d" y="%d" font-size="11" fill="%s" text-anchor="middle">'
            "TP group %d crosses %s</text>"
            % ((ax + zx) // 2 + CELL // 2, max(ay, zy) + CELL + PAD + 13, RED, c.group, escape(topo.fabric))
        )
    if len(cross) > MAX_LINKS:
        out.append(
            '<text x="%d" y="%d" font-size="11" fill="%s">... and %d more TP groups cross a domain boundary</text>'
            % (GAP, fabric_y - 4, RED, len(cross) - MAX_LINKS)
        )
    # the fabric between domains
    out.append(
        '<line class="fabric" x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555" stroke-width="4"/>'
        % (GAP, fabric_y + 10, width - GAP, fabric_y + 10)
    )
    out.append(
        '<text x="%d" y="%d" font-size="11">Fabric between NVLink domains: %s</text>'
        % (GAP, fabric_y + 28, escape(topo.fabric))
    )
    if cross:
        out.append(
            '<text x="%d" y="%d" font-size="11" fill="%s">%d TP group%s cross%s an NVLink domain boundary (red)</text>'
            % (
                GAP,
                fabric_y + 44,
                RED,
                len(cross),
                "s" if len(cross) != 1 else "",
                "" if len(cross) != 1 else "es",
            )
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _node_label(topo: Topology, first: int, count: int) -> str:
    def name(i: int) -> str:
        return topo.node_names[i] if i < len(topo.node_names) else "node %d" % i

    if count == 1:
        return name(first)
    return "%s-%d (x%d nodes)" % (name(first), first + count - 1, count)


# What each colouring numbers: the group (TP, EP) or the rank's place in its group (PP stage, DP
# replica, CP rank: the position along that axis, the same in every group of the kind).
COLOUR_BY = {"tp": 0, "ep": 0, "pp": 1, "dp": 1, "cp": 1}


@dataclass(frozen=True)
class Membership:
    """Each rank's colouring index per kind, from plan.placement.group_index (Megatron order), so the
    picture colours exactly the groups the planner and the submit filter reason about."""

    index: Dict[str, List[int]]
    counts: Dict[str, int]
    missing: Dict[str, str]  # kind -> why it has no groups (an EP that does not divide the ranks)


@lru_cache(maxsize=8)
def membership(lay: Layout) -> Membership:
    """Expert TP as the cost model assumes it (plan.layout.expert_tp: TP, or 1 when EP does not
    divide DP x CP), so an EP layout the planner prices is an EP layout the picture draws."""
    etp = expert_tp(lay.tp, lay.dp, lay.cp, lay.ep)
    index: Dict[str, List[int]] = {}
    counts: Dict[str, int] = {}
    missing: Dict[str, str] = {}
    for k in GROUP_KINDS:
        try:
            where = group_index(lay, etp=etp, kinds=(k,))[k]
        except ValueError as e:
            missing[k] = str(e)
            counts[k] = 0
            continue
        index[k] = [w[COLOUR_BY[k]] for w in where]
        counts[k] = max(index[k]) + 1 if index[k] else 0
    return Membership(index, counts, missing)


def group_counts(lay: Layout) -> Dict[str, int]:
    """How many colours each kind has (the legend's length): TP/EP groups, PP stages, DP replicas, CP ranks."""
    return dict(membership(lay).counts)
