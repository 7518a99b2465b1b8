"""A text picture of a layout: nodes, GPUs (global ranks), TP groups, PP stages, DP replicas.

Lines stay within 80 columns: long jobs show their first nodes and the last one, wide
nodes wrap every 8 GPUs, and labels that do not fit under a TP group move to the margin.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from .layout import Layout, rank_coords

WIDTH = 80
PER_ROW = 8


def _ranges(values: Sequence[int]) -> str:
    vals = sorted(set(values))
    if not vals:
        return "-"
    out = []
    start = prev = vals[0]
    for v in vals[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if v is not None:
            start = prev = v
    return ",".join(out)


def _group_label(lay: Layout, rank: int) -> str:
    c = rank_coords(lay, rank)
    label = "p%dd%d" % (c["pp"], c["dp"])
    if lay.cp > 1:
        label += "c%d" % c["cp"]
    return label


def _node_rows(lay: Layout, node: int, cell: int) -> List[str]:
    """The GPU row(s) and label row(s) of one node."""
    gpn, tp = lay.gpus_per_node, lay.tp
    rows: List[str] = []
    first = node * gpn
    for start in range(0, gpn, PER_ROW):
        ranks = list(range(first + start, first + min(gpn, start + PER_ROW)))
        gpu_line = ""
        label_line = ""
        i = 0
        while i < len(ranks):
            r = ranks[i]
            pos = r % tp
            run = [x for x in ranks[i:] if x // tp == r // tp]
            opened = "[" if pos == 0 else "~"
            closed = "]" if (run[-1] % tp) == tp - 1 else "~"
            body = "".join(str(x).rjust(cell) for x in run)
            chunk = opened + body + " " + closed
            label = _group_label(lay, r) if pos == 0 else ""
            gpu_line += chunk
            label_line += label.center(len(chunk)) if len(label) <= len(chunk) - 1 else " " * len(chunk)
            i += len(run)
        rows.append(gpu_line)
        rows.append(label_line.rstrip())
    return rows


def render(
    lay: Layout, stage_layers: Optional[Sequence[int]] = None, segment: Optional[int] = None, max_nodes: int = 5
) -> str:
    """The picture; `stage_layers` (layers per PP stage) adds layer ranges, `segment` marks segments."""
    world = lay.nodes * lay.gpus_per_node
    cell = max(3, len(str(world - 1)) + 1)
    head = "%d node%s x %d GPUs: TP=%d x PP=%d x DP=%d" % (
        lay.nodes,
        "s" if lay.nodes > 1 else "",
        lay.gpus_per_node,
        lay.tp,
        lay.pp,
        lay.dp,
    )
    if lay.cp > 1:
        head += " x CP=%d" % lay.cp
    if lay.ep > 1:
        head += " (EP=%d over DP)" % lay.ep
    out = [head]
    gpu_hdr = "GPU".ljust(10) + " " + "".join(str(i).rjust(cell) for i in range(min(lay.gpus_per_node, PER_ROW)))
    out.append(gpu_hdr)
    if lay.nodes <= max_nodes + 1:
        shown = list(range(lay.nodes))
    else:
        shown = list(range(max_nodes - 1)) + [lay.nodes - 1]
    prev = -1
    for node in shown:
        if node != prev + 1:
            out.append(
                "  ... %d more node%s in the same pattern ..." % (node - prev - 1, "s" if node - prev - 1 > 1 else "")
            )
        if segment and node % segment == 0:
            out.append(
                ("-- segment %d: nodes %d-%d, one NVLink domain " % (node // segment, node, node + segment - 1)).ljust(
                    WIDTH - 1, "-"
                )
            )
        prev = node
        ranks = range(node * lay.gpus_per_node, (node + 1) * lay.gpus_per_node)
        coords = [rank_coords(lay, r) for r in ranks]
        note = "PP %s  DP %s" % (_ranges([c["pp"] for c in coords]), _ranges([c["dp"] for c in coords]))
        if lay.cp > 1:
            note += "  CP %s" % _ranges([c["cp"] for c in coords])
        rows = _node_rows(lay, node, cell)
        for j in range(0, len(rows), 2):
            prefix = ("node %d" % node).ljust(10) if j == 0 else " " * 10
            line = prefix + rows[j]
            if j == 0:
                room = WIDTH - 1 - len(line) - 2
                line += "  " + note if len(note) <= room else ""
            out.append(line.rstrip())
            if rows[j + 1].strip():
                out.append((" " * 10 + rows[j + 1]).rstrip())
    out.append("[...] = one TP group on the fast link (~ = continues on the next node);")
    out.append("pXdY = pipeline stage X, data-parallel replica Y; numbers are global ranks.")
    if stage_layers and lay.pp > 1:
        parts = []
        first = 0
        for i, n in enumerate(stage_layers):
            parts.append("%d: %d-%d" % (i, first, first + n - 1))
            first += n
        out.extend(_wrap("Layers per stage: " + ", ".join(parts)))
    stride_dp = lay.tp * lay.cp
    if lay.dp > 1:
        members = [str(k * stride_dp) for k in range(min(lay.dp, 6))]
        out.extend(
            _wrap(
                "DP group of rank 0 (same stage and TP rank in each replica): ranks %s%s"
                % (", ".join(members), ", ..." if lay.dp > 6 else "")
            )
        )
    if lay.pp > 1:
        stride_pp = lay.tp * lay.cp * lay.dp
        members = [str(k * stride_pp) for k in range(min(lay.pp, 6))]
        out.extend(_wrap("PP chain of rank 0: ranks %s%s" % (", ".join(members), ", ..." if lay.pp > 6 else "")))
    return "\n".join(line[: WIDTH - 1] if len(line) >= WIDTH else line for line in out)


def _wrap(text: str) -> List[str]:
    import textwrap

    return textwrap.wrap(text, width=WIDTH - 1, subsequent_indent="  ")
