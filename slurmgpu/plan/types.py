"""What goes into the planner and what comes out: request, plan, alternatives, rejections, scaling.
Plain frozen data so `--json`, the generator and the explain view read the same objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from ..vocab import TASK_ALIASES
from .layout import Layout
from .memory import (
    MemoryBreakdown,
    usable_gb,
)
from .models import ModelSpec
from .profile import TEXTBOOK, MemoryProfile
from .terms import CostTerms


@dataclass(frozen=True)
class Capabilities:
    """What a launcher can express, so the planner never picks a layout that launcher cannot run.

    The launcher adapters (slurmgpu.job.launchers) declare these; the planner only reads them.
    """

    tp: bool = True  # tensor parallelism (False: the launcher's program is plain data parallel)
    pp: bool = True  # pipeline stages
    cp: bool = True  # context parallelism
    ep: bool = True  # expert parallelism
    virtual_stages: bool = True  # interleaved pipeline chunks
    uneven_stages: bool = True  # first/last stage with fewer layers
    zero: Tuple[int, ...] = (0, 1, 2, 3)  # sharding stages it can be told to use
    zero3_with_pp: bool = True  # full sharding combined with pipeline stages
    zero3_with_ep: bool = True  # full sharding combined with expert parallelism
    zero3_with_tied: bool = True  # full sharding of a model whose output layer shares the embedding
    serving_dp: bool = True  # serving: data-parallel replicas inside one server (False: one TP x PP server)
    serving_dp_nodes: bool = True  # serving: those replicas may span several nodes (False: DP only on one node)
    launcher: str = ""  # whose capabilities these are, for the errors that name it
    memory: MemoryProfile = TEXTBOOK  # what the framework keeps per GPU with the flags the launcher writes
    declare: bool = False  # the launcher runs the user's own program: a missing degree can be declared (implements:)
    # what the launcher's `selective` recomputation keeps (memory.SELECTIVE_POLICIES): "attention"
    # (Megatron: the attention core only) or "op" (PyTorch op-level checkpointing, torchtitan 'op')
    selective: str = "attention"
    # the attention kernels the framework runs: "fused" (Transformer Engine: cuDNN / FlashAttention-3)
    # or "sdpa" (PyTorch scaled_dot_product_attention: FlashAttention-2), which the cost model times
    attention: str = "fused"
    # EP groups come only out of the sharded data-parallel ranks x CP x TP (torchtitan's ParallelDims),
    # and ZeRO-1/2 shard inside one node (HSDP, layout.node_shard): EP must divide that
    ep_within_shard: bool = False


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: the model, the task, the allocation or its bounds, and the user's pins."""

    model: ModelSpec
    task: str = "pretrain"
    partition: Optional[str] = None
    gpus: Optional[int] = None
    nodes: Optional[int] = None
    seq: Optional[int] = None
    global_batch: Optional[int] = None  # sequences per step (inference: concurrent sequences)
    precision: str = "bf16"
    tokens: Optional[float] = None  # training tokens, for time-to-train
    pins: Mapping[str, int] = field(default_factory=dict)  # keys: PIN_KEYS
    zero: Optional[int] = None  # 0-3; default: distributed optimizer (1), more only if needed
    recompute: Optional[str] = None  # none | selective | full; default: selective, full if needed
    optimizer: str = "adam"  # adam (16 B/param with weights and grads) | adam8bit | sgd
    target_days: Optional[float] = None  # with tokens: smallest allocation that trains in time
    virtual_stages: Optional[int] = None  # interleaved pipeline chunks per GPU (Megatron VPP); default: searched
    caps: Capabilities = Capabilities()  # what the launcher can run (default: anything)
    terms: Optional[CostTerms] = None  # the cost model's fitted terms (default: terms.DEFAULT_TERMS)
    # a published, tuned layout for this model and allocation (keys: PIN_KEYS): the free choice may claim a
    # gain over it only inside the out-of-sample error band; beyond it the plan keeps this layout
    reference: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Alternative:
    """A runner-up layout and why the chosen one beat it."""

    layout: Layout
    memory_per_gpu_gb: float
    step_time_s: float
    tokens_per_s: float
    mfu: float
    zero: int
    recompute: str
    why: str

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = dict(self.layout.to_dict())
        d.update(
            {
                "memory_per_gpu_gb": round(self.memory_per_gpu_gb, 2),
                "step_time_s": _r(self.step_time_s),
                "tokens_per_s": round(self.tokens_per_s, 1),
                "mfu": round(self.mfu, 4),
                "zero": self.zero,
                "recompute": self.recompute,
                "why": self.why,
            }
        )
        return d


@dataclass(frozen=True)
class Rejection:
    """A layout (or a whole TP/PP choice) the planner ruled out, and why."""

    scope: str  # "TP=16" or a whole layout
    reason: str
    kind: str  # rule | memory | batch

    def to_dict(self) -> Dict[str, str]:
        return {"scope": self.scope, "reason": self.reason, "kind": self.kind}


@dataclass(frozen=True)
class ScalePoint:
    """Throughput and time to train at one allocation size (the scaling table)."""

    nodes: int
    gpus: int
    layout: str
    tokens_per_s: float
    days: float

    def to_dict(self) -> Dict[str, Any]:
        return {
            "nodes": self.nodes,
            "gpus": self.gpus,
            "layout": self.layout,
            "tokens_per_s": round(self.tokens_per_s, 1),
            "days": round(self.days, 2),
        }


@dataclass(frozen=True)
class Plan:
    """The planner's answer: a layout with its memory, step time, traffic and reasons."""

    site: str
    partition: str
    layout: Layout
    memory: MemoryBreakdown
    memory_per_gpu_gb: float
    capacity_gb: float
    step_time_s: float
    tokens_per_s: float
    mfu: float
    traffic: Mapping[str, float]  # GB per GPU per step, by link type
    alternatives: Tuple[Alternative, ...]
    explanation: Tuple[str, ...]
    notes: Tuple[str, ...]
    model: ModelSpec = None  # type: ignore[assignment]
    task: str = "pretrain"
    precision: str = "bf16"
    seq: int = 0
    global_batch: int = 0
    micro_batches: int = 1
    zero: int = 0
    recompute: str = "none"
    segment: Optional[int] = None
    stage_layers: Tuple[int, ...] = ()
    stage_memory: Tuple[MemoryBreakdown, ...] = ()  # every pipeline stage; `memory` is the most loaded
    time_breakdown: Mapping[str, float] = field(default_factory=dict)
    # (runs, percent, basis) of the throughput error the plan states and its layout choice used:
    # the site calibration's leave-one-out band where one applies, else the published one; None: none
    band: Optional[Tuple[int, int, str]] = None
    rejected: Tuple[Rejection, ...] = ()
    scaling: Tuple[ScalePoint, ...] = ()
    train_days: Optional[float] = None
    prefill_s: Optional[float] = None
    virtual_stages: int = 1  # interleaved pipeline: model chunks per GPU
    levers: Tuple[str, ...] = ()  # cheaper-profile flags the launcher must write (profile.Lever keys)
    # (flag, GB per GPU it saves against the framework's defaults) for every memory flag the plan relies on
    memory_flags: Tuple[Tuple[str, float], ...] = ()
    framework: str = ""  # whose memory rules the plan charged (MemoryProfile.framework)

    def to_dict(self) -> Dict[str, Any]:
        lay = self.layout
        return {
            "tp": lay.tp,
            "pp": lay.pp,
            "dp": lay.dp,
            "cp": lay.cp,
            "ep": lay.ep,
            "nodes": lay.nodes,
            "gpus_per_node": lay.gpus_per_node,
            "gpus": lay.nodes * lay.gpus_per_node,
            "micro_batch": lay.micro_batch,
            "micro_batches": self.micro_batches,
            "memory_per_gpu_gb": round(self.memory_per_gpu_gb, 2),
            "capacity_gb": self.capacity_gb,
            "usable_gb": round(usable_gb(self.capacity_gb), 2),
            "alternatives": [a.to_dict() for a in self.alternatives],
            "site": self.site,
            "partition": self.partition,
            "model": {
                "name": self.model.name,
                "params": self.model.params,
                "active_params": self.model.active_params,
                "estimated": self.model.estimated,
            },
            "task": self.task,
            "precision": self.precision,
            "seq": self.seq,
            "global_batch": self.global_batch,
            "zero": self.zero,
            "recompute": self.recompute,
            "segment": self.segment,
            "virtual_stages": self.virtual_stages,
            "stage_layers": list(self.stage_layers),
            "memory": self.memory.to_dict(),
            "memory_framework": self.framework,
            "levers": list(self.levers),
            "memory_flags": [{"flag": f, "saves_gb": round(gb, 2)} for f, gb in self.memory_flags],
            "stage_memory": [m.to_dict() for m in self.stage_memory],
            "step_time_s": _r(self.step_time_s),
            "tokens_per_s": round(self.tokens_per_s, 1),
            "mfu": round(self.mfu, 4),
            "prefill_s": None if self.prefill_s is None else _r(self.prefill_s),
            "time_breakdown_s": {k: _r(v) for k, v in self.time_breakdown.items()},
            "traffic_gb_per_step": {k: round(v, 3) for k, v in self.traffic.items()},
            "train_days": None if self.train_days is None else round(self.train_days, 2),
            "scaling": [s.to_dict() for s in self.scaling],
            "explanation": list(self.explanation),
            "notes": list(self.notes),
            "rejected": [r.to_dict() for r in self.rejected],
            "band": None if self.band is None else {"runs": self.band[0], "pct": self.band[1], "basis": self.band[2]},
        }


def _r(x: float) -> float:
    return float("%.4g" % x)


def task_name(task: str) -> str:
    """Canonical task name ('serve' -> 'inference'); unknown names pass through to be refused."""
    return dict(TASK_ALIASES).get(task.lower(), task.lower())
