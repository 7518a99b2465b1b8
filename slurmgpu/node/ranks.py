"""Where a rank of a failed job ran: node, local GPU, TP/CP/PP/DP group, NVLink domain.

doctor reads ranks (NCCL DIAG and RAS reports) and GPUs (Xid lines: node + PCI bus id) from a log;
this module turns them into places from the job's stamp (`tp= pp= dp= cp= ep= nodes=
gpus_per_node=`) and its node list, with the groups from plan.placement (the one home of the rank
order) so doctor names the same groups the planner and the explain view do.

Ranks fill nodes in order (`gpus_per_node` ranks per node, Slurm's block distribution, which every
generated launch uses). A rank NCCL reports is a rank of a communicator: it is a global rank only
when that communicator has every rank of the job, which the callers check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..plan.layout import Layout
from ..plan.placement import group_index, groups
from ..stamp import stamp_int

KIND_WORDS = (("tp", "TP group"), ("cp", "CP group"), ("pp", "pipeline"), ("dp", "DP group"))


@dataclass(frozen=True)
class RankPlace:
    """One rank of the stamped layout, placed."""

    rank: int
    node_index: int  # 0-based, in the job's node order
    node: Optional[str]  # its name, when the node list is known
    local_rank: int  # LOCAL_RANK on that node (= the GPU index with one task per GPU)
    groups: Mapping[str, Tuple[int, int, Tuple[int, ...]]]  # kind -> (group number, position, its ranks)
    domain: Optional[int]  # NVLink domain index (the node itself when domains are one node), None: unknown
    domain_is_node: bool = True

    def to_dict(self) -> Dict[str, object]:
        """For `doctor --json`: the place as data (groups as number, position and member ranks)."""
        return {
            "rank": self.rank,
            "node": self.node,
            "node_index": self.node_index,
            "local_rank": self.local_rank,
            "groups": {k: {"group": g, "position": pos, "ranks": list(m)} for k, (g, pos, m) in self.groups.items()},
            "nvlink_domain": None if self.domain is None else ("node" if self.domain_is_node else self.domain),
        }

    def words(self) -> str:
        """`rank 13: node gpu02 (node 1 of the job), local rank 5, TP group 1 (ranks 8-15) as its rank 5, ...`"""
        where = (
            "node %s (node %d of the job)" % (self.node, self.node_index)
            if self.node
            else "node %d of the job" % (self.node_index)
        )
        parts = ["rank %d: %s, local rank %d" % (self.rank, where, self.local_rank)]
        for kind, label in KIND_WORDS:
            if kind not in self.groups:
                continue
            g, pos, members = self.groups[kind]
            if kind == "pp":
                parts.append("pipeline stage %d of %d" % (pos, len(members)))
            else:
                parts.append("%s %d (ranks %s) as its rank %d" % (label, g, _ranks_words(members), pos))
        if self.domain is None:
            parts.append("NVLink domain unknown (the stamp gives no segment)")
        elif self.domain_is_node:
            parts.append("NVLink domain: its node")
        else:
            parts.append("NVLink domain %d" % self.domain)
        return ", ".join(parts)


def _ranks_words(ranks: Sequence[int]) -> str:
    """`8-15` for a consecutive block, else up to 8 ranks and a count."""
    rs = list(ranks)
    if len(rs) > 1 and rs == list(range(rs[0], rs[0] + len(rs))):
        return "%d-%d" % (rs[0], rs[-1])
    if len(rs) <= 8:
        return ",".join(map(str, rs))
    return ",".join(map(str, rs[:8])) + ",... (%d)" % len(rs)


def layout_of(stamp: Mapping[str, str]) -> Optional[Layout]:
    """The stamped layout, or None when the stamp lacks its numbers (no stamp, a hand-written job)."""
    vals: Dict[str, int] = {}
    for k in ("tp", "pp", "dp", "cp", "ep", "nodes", "gpus_per_node"):
        v = stamp_int(stamp.get(k))
        if v is None:
            if k in ("cp", "ep"):
                v = 1
            else:
                return None
        vals[k] = v
    return Layout(
        tp=vals["tp"],
        pp=vals["pp"],
        dp=vals["dp"],
        cp=vals["cp"],
        ep=vals["ep"],
        nodes=vals["nodes"],
        gpus_per_node=vals["gpus_per_node"],
    )


def _order(stamp: Mapping[str, str]) -> str:
    return "torchtitan" if stamp.get("launcher") == "torchtitan" else "megatron"


class Placer:
    """Places ranks of one stamped layout; builds the group index once."""

    def __init__(
        self, layout: Layout, nodes: Sequence[str] = (), domain_nodes: int = 1, segment: Optional[int] = None,
        order: str = "megatron",
    ) -> None:  # fmt: skip
        self.layout = layout
        self.nodes = list(nodes)
        self.domain_nodes = domain_nodes
        self.segment = segment
        kinds = [k for k in ("tp", "cp", "pp", "dp") if int(getattr(layout, k)) > 1]
        self.index = group_index(layout, order, kinds=kinds) if kinds else {}
        self.members = {k: groups(layout, k, order) for k in kinds}
        self.placed: List[RankPlace] = []  # what place() answered for a caller that reports it

    @classmethod
    def from_stamp(cls, stamp: Mapping[str, str], nodes: Sequence[str] = (), domain_nodes: int = 1) -> Optional[Placer]:
        layout = layout_of(stamp)
        if layout is None:
            return None
        seg = stamp_int(stamp.get("segment"))
        return cls(layout, nodes, domain_nodes, seg, _order(stamp))

    @property
    def world(self) -> int:
        return self.layout.world

    def place(self, rank: int) -> Optional[RankPlace]:
        """The rank's place, or None when it is not a rank of this layout."""
        if not 0 <= rank < self.world:
            return None
        rpn = self.layout.gpus_per_node
        ni = rank // rpn
        node = self.nodes[ni] if ni < len(self.nodes) else None
        where = {}
        for k, index in self.index.items():
            g, pos = index[rank]
            where[k] = (g, pos, tuple(self.members[k][g]))
        if self.domain_nodes <= 1:
            domain: Optional[int] = ni
        elif self.segment:  # each segment lies inside one domain
            domain = ni // self.segment
        else:
            domain = None
        return RankPlace(rank, ni, node, rank % rpn, where, domain, self.domain_nodes <= 1)

    def ranks_on(self, node: str, local: Optional[int] = None) -> List[int]:
        """Global ranks on `node` (all, or the one with LOCAL_RANK `local`)."""
        short = node.split(".")[0]
        names = [n.split(".")[0] for n in self.nodes]
        if short not in names:
            return []
        ni = names.index(short)
        rpn = self.layout.gpus_per_node
        ranks = list(range(ni * rpn, (ni + 1) * rpn))
        return [r for r in ranks if local is None or r % rpn == local]


_RANK_SET = re.compile(r"\d+")


def rank_set(text: str) -> Tuple[List[int], bool]:
    """Ranks of a NCCL rank list (`{0,1,2,3}`, `{4,5,...}` with an ellipsis when cut): (ranks, cut)."""
    return [int(x) for x in _RANK_SET.findall(text.split("...")[0])], "..." in text


def gpu_index_of(bus_id: str, gpus: Mapping[str, int]) -> Optional[int]:
    """The local GPU index of a PCI bus id (`0000:3B:00` from an Xid line, `0000:3b:00.0` from
    nvidia-smi, `3b000` from NCCL's busId) in a {bus id: index} table, compared by bus number."""
    want = _bus_key(bus_id)
    for b, i in gpus.items():
        if _bus_key(b) == want:
            return i
    return None


def _bus_key(bus_id: str) -> Optional[Tuple[int, int, int]]:
    """(domain, bus, device) of a PCI bus id in any of the forms NVIDIA's tools print."""
    s = bus_id.strip().lower()
    m = re.match(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.[0-7])?$", s)
    if m:
        return (int(m.group(1) or "0", 16) & 0xFFFF, int(m.group(2), 16), int(m.group(3), 16))
    m = re.match(r"^([0-9a-f]+)$", s)  # NCCL's busId: (domain << 20) | (bus << 12) | (device << 4) | fn, in hex
    if m:
        v = int(s, 16)
        return ((v >> 20) & 0xFFFF, (v >> 12) & 0xFF, (v >> 4) & 0xFF)
    return None
