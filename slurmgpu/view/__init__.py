"""The explain view: the plan as a picture (SVG) and a self-contained HTML page, built from plain
data (a Layout, a site's NodeType, a Plan, a check verdict's layout, doctor's problems)."""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence, Set

from .figure import DETAIL_NODES, Marks, Topology, binding_rows, crossings, svg
from .page import check_page, doctor_page, fix_layout, plan_page, report_page

_RANK_RES = (
    re.compile(r"\[rank(\d+)\]"),
    re.compile(r"\b[Rr]ank[ :=]+(\d+)\b"),
    re.compile(r"\bglobal rank (\d+)\b"),
    re.compile(r"srun: error: \S+: tasks? (\d+)\b"),  # srun's task id is the global rank
)


def doctor_marks(problems: Sequence[Mapping[str, Any]], node_names: Sequence[str], gpus_per_node: int = 0) -> Marks:
    """Failing ranks (named in the evidence lines) and nodes (the hosts doctor named, placed by
    the job's node list, and the nodes of failing ranks) of Diagnosis.to_dict()["problems"]."""
    ranks: Set[int] = set()
    nodes: Set[int] = set()
    index = {name: i for i, name in enumerate(node_names)}
    for p in problems:
        for ev in p.get("evidence", []):
            text = str(ev.get("text", "")) if isinstance(ev, Mapping) else str(ev)
            for rx in _RANK_RES:
                ranks.update(int(m) for m in rx.findall(text))
        for h in p.get("hosts", []):
            short = str(h).split(".")[0]
            if short in index:
                nodes.add(index[short])
            elif h in index:
                nodes.add(index[h])
    if gpus_per_node > 0:
        nodes.update(r // gpus_per_node for r in ranks)
    return Marks(ranks=frozenset(ranks), nodes=frozenset(nodes))


__all__ = [
    "DETAIL_NODES",
    "Marks",
    "Topology",
    "binding_rows",
    "check_page",
    "crossings",
    "doctor_marks",
    "doctor_page",
    "fix_layout",
    "plan_page",
    "report_page",
    "svg",
]
