"""The parallel layout shared by the planner, the renderer and the diagrams.

Rank order follows Megatron-LM's default (`tp-cp-ep-dp-pp`): TP is innermost, so
consecutive global ranks form a TP group, and ranks fill nodes in order.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List


@dataclass(frozen=True)
class Layout:
    """A parallel layout: TP x PP x DP x CP (EP inside DP), micro-batch, nodes x GPUs."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    micro_batch: int = 1
    nodes: int = 1
    gpus_per_node: int = 1

    @property
    def world(self) -> int:
        """Ranks in the job. EP reuses DP ranks (experts shard over data-parallel ranks)."""
        return self.tp * self.pp * self.dp * self.cp

    def stamp(self, site: str) -> str:
        """The machine-readable line every generated script carries; the filter reads it first."""
        from ..stamp import format_stamp

        return format_stamp(site, self.tp, self.pp, self.dp, self.cp, self.ep, self.nodes, self.gpus_per_node)

    def to_dict(self) -> Dict[str, int]:
        return asdict(self)


def rank_coords(layout: Layout, rank: int) -> Dict[str, int]:
    """Coordinates of a global rank in the tp-cp-dp-pp order (TP fastest)."""
    r = rank
    tp = r % layout.tp
    r //= layout.tp
    cp = r % layout.cp
    r //= layout.cp
    dp = r % layout.dp
    r //= layout.dp
    return {"tp": tp, "cp": cp, "dp": dp, "pp": r}


def tp_groups(layout: Layout) -> List[List[int]]:
    """Global ranks of each TP group (consecutive blocks)."""
    return [list(range(g * layout.tp, (g + 1) * layout.tp)) for g in range(layout.world // layout.tp)]


def node_of(rank: int, ranks_per_node: int) -> int:
    return rank // ranks_per_node


def tp_group_nodes(layout: Layout, ranks_per_node: int) -> List[List[int]]:
    """For each TP group, the distinct node indices its ranks land on."""
    out = []
    for group in tp_groups(layout):
        nodes = sorted({node_of(r, ranks_per_node) for r in group})
        out.append(nodes)
    return out


def expert_tp(tp: int, dp: int, cp: int, ep: int) -> int:
    """Tensor-parallel width of the routed experts (Megatron's expert_tensor_parallel_size).

    Megatron folds EP x expert-TP x expert-DP onto the TP x CP x DP ranks of a stage: experts keep
    the attention's TP while EP divides DP x CP, otherwise they run unsplit (expert-TP 1), as
    NeMo's DeepSeek-V3 recipe (TP 2, EP 64 over DP 32) does.
    """
    return tp if ep <= 1 or (dp * cp) % ep == 0 else 1


def node_shard(dp: int, cp: int, tp: int, gpus_per_node: int) -> int:
    """The data-parallel shard of HSDP inside one node (torchtitan's ZeRO-1/2): the largest divisor
    of DP whose shard, x TP x CP, fits in a node."""
    per_node = max(1, gpus_per_node // max(1, tp * cp))
    return max(d for d in range(1, dp + 1) if dp % d == 0 and d <= per_node)


GROUP_KINDS = ("tp", "pp", "dp", "cp", "ep")  # the explain view's colourings; members: placement.group_index
