"""The planner: choose TP x PP x DP (x CP, x EP) and the node count for a model, task and site.

It enumerates layouts for a GPU count, drops those that break a hard rule (TP leaves the
NVLink domain, heads do not divide, ...) or do not fit in memory, and ranks the rest with
a cost model whose every term is a formula over the site's own figures (peak FLOP/s, link
and fabric bandwidth), so the explanation can show the numbers. `make_plan` is pure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from .errors import PlanError
from .layout import Layout
from .memory import (GB, NF4_BYTES, OPTIMIZER_BYTES, WEIGHT_BYTES, MemoryBreakdown, StageParams, TrainShape,
                     describe_split, inference_memory, kv_cache_bytes, lora_params, stage_layers, stage_params,
                     training_memory, usable_gb)
from .models import ModelSpec, fmt_params
from .site import NodeType, Partition, Site
from .vocab import PARALLEL_KEYS as PIN_KEYS
from .vocab import PRECISIONS, RECOMPUTE, TASKS

TASK_ALIASES = {"serve": "inference", "serving": "inference", "infer": "inference", "sft": "finetune",
                "full": "finetune", "fine-tune": "finetune", "train": "pretrain"}

# Cost-model constants; docs/planner.md says where each comes from.
GEMM_EFF = 0.60  # share of dense peak that large transformer GEMMs sustain
LINK_EFF = 0.80  # ring all-reduce bus bandwidth / one direction of the link (nccl-tests: 368 of 450 GB/s)
NIC_EFF = 0.92  # achieved / line rate per NIC (NCCL maintainers: 46-48 GB/s on 400 Gb/s NDR)
LATENCY_S = 10e-6  # one small collective or hop (decode steps are latency-bound)
CP_MIN_TOKENS = 4096  # context parallelism is only tried while each rank keeps >= 4K tokens
MICRO_BATCHES = (1, 2, 4, 8)
TOKENS_PER_STEP = {"pretrain": 4 * 2 ** 20, "finetune": 2 ** 20, "lora": 2 ** 18, "qlora": 2 ** 18}
SEQS_PER_GPU = 1 / 8.0  # default global batch grows to at least one sequence per 8 GPUs
QLORA_SLOWDOWN = 0.75  # NF4 dequantisation before each GEMM (estimate)
TOP_ALTERNATIVES = 5
MAX_MEMORY_REJECTS = 40

FABRIC_WORDS = {"infiniband": "InfiniBand", "roce": "RoCE", "efa": "EFA", "slingshot": "Slingshot",
                "ethernet": "Ethernet"}
LINK_WORDS = {"nvlink": "NVLink", "xgmi": "Infinity Fabric", "pcie": "PCIe"}
# GPU figures the site does not give (HBM bandwidth, FP8 support) come from slurmgpu.gpus.GPU_TABLE.


# ---------------------------------------------------------------------------
# Data passed in and out

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
        d.update({"memory_per_gpu_gb": round(self.memory_per_gpu_gb, 2), "step_time_s": _r(self.step_time_s),
                  "tokens_per_s": round(self.tokens_per_s, 1), "mfu": round(self.mfu, 4), "zero": self.zero,
                  "recompute": self.recompute, "why": self.why})
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
        return {"nodes": self.nodes, "gpus": self.gpus, "layout": self.layout,
                "tokens_per_s": round(self.tokens_per_s, 1), "days": round(self.days, 2)}


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
    time_breakdown: Mapping[str, float] = field(default_factory=dict)
    rejected: Tuple[Rejection, ...] = ()
    scaling: Tuple[ScalePoint, ...] = ()
    train_days: Optional[float] = None
    prefill_s: Optional[float] = None
    virtual_stages: int = 1  # interleaved pipeline: model chunks per GPU

    def to_dict(self) -> Dict[str, Any]:
        lay = self.layout
        return {
            "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep,
            "nodes": lay.nodes, "gpus_per_node": lay.gpus_per_node, "gpus": lay.nodes * lay.gpus_per_node,
            "micro_batch": lay.micro_batch, "micro_batches": self.micro_batches,
            "memory_per_gpu_gb": round(self.memory_per_gpu_gb, 2), "capacity_gb": self.capacity_gb,
            "usable_gb": round(usable_gb(self.capacity_gb), 2),
            "alternatives": [a.to_dict() for a in self.alternatives],
            "site": self.site, "partition": self.partition,
            "model": {"name": self.model.name, "params": self.model.params,
                      "active_params": self.model.active_params, "estimated": self.model.estimated},
            "task": self.task, "precision": self.precision, "seq": self.seq, "global_batch": self.global_batch,
            "zero": self.zero, "recompute": self.recompute, "segment": self.segment,
            "virtual_stages": self.virtual_stages,
            "stage_layers": list(self.stage_layers), "memory": self.memory.to_dict(),
            "step_time_s": _r(self.step_time_s), "tokens_per_s": round(self.tokens_per_s, 1),
            "mfu": round(self.mfu, 4), "prefill_s": None if self.prefill_s is None else _r(self.prefill_s),
            "time_breakdown_s": {k: _r(v) for k, v in self.time_breakdown.items()},
            "traffic_gb_per_step": {k: round(v, 3) for k, v in self.traffic.items()},
            "train_days": None if self.train_days is None else round(self.train_days, 2),
            "scaling": [s.to_dict() for s in self.scaling],
            "explanation": list(self.explanation), "notes": list(self.notes),
            "rejected": [r.to_dict() for r in self.rejected],
        }


def _r(x: float) -> float:
    return float("%.4g" % x)


# ---------------------------------------------------------------------------
# Hardware figures the cost model uses, all from the site

@dataclass(frozen=True)
class Hardware:
    """The planner's view of one partition: peak FLOP/s and the bandwidths of each link."""

    site: str
    partition: Partition
    nt: NodeType
    peak: float  # FLOP/s per GPU at the requested precision
    peak_bf16: float
    link_bw: float  # B/s a ring collective gets per GPU on the fast link
    nic_node: float  # B/s all compute NICs of a node deliver
    hbm: float  # B/s
    notes: Tuple[str, ...]

    @property
    def link_words(self) -> str:
        return "%g GB/s %s" % (self.nt.link_gbs, LINK_WORDS.get(self.nt.link, self.nt.link))

    def nic_words(self) -> str:
        """The fabric's line rate per GPU, e.g. '400 Gb/s InfiniBand'."""
        per = self.nic_node / NIC_EFF * 8 / 1e9 / self.nt.gpus
        return "%g Gb/s %s" % (round(per, 1), FABRIC_WORDS.get(self.nt.fabric, self.nt.fabric))

    @property
    def fabric_name(self) -> str:
        return FABRIC_WORDS.get(self.nt.fabric, self.nt.fabric)

    @property
    def link_name(self) -> str:
        return LINK_WORDS.get(self.nt.link, self.nt.link)


def hardware(site: Site, partition: Optional[str], precision: str = "bf16") -> Hardware:
    from .gpus import lookup

    part = site.partition(partition)
    nt = site.node_types[part.node_type]
    notes: List[str] = []
    facts = lookup(nt.gpu_model)
    key = facts.key if facts else None
    peak_bf16 = nt.bf16_tflops * 1e12
    peak = peak_bf16
    if precision == "fp8":
        if facts is not None and not facts.fp8:
            notes.append("%s has no FP8 tensor cores: FP8 is planned at BF16 speed" % nt.gpu_model)
        elif key is None:
            notes.append("FP8 support of %s is unknown: planned at BF16 speed" % nt.gpu_model)
        else:
            peak = 2 * peak_bf16
            notes.append("FP8 GEMMs at 2x the BF16 peak; master weights and optimizer stay 16/32-bit")
    if precision == "fp16" and key == "v100":
        notes.append("V100's 'bf16_tflops' is its FP16 figure")
    gbps = nt.fabric_gbps
    if gbps <= 0:
        gbps = 100.0
        notes.append("the site lists no compute NIC speed for %s: assumed 100 Gb/s per node" % nt.name)
    hbm = facts.hbm_for(nt.gpu_memory_gb) if facts is not None else 0.0
    if not hbm:
        hbm = nt.bf16_tflops * 3.39  # H100's ratio (3.35 TB/s per 989 TFLOP/s)
    return Hardware(site=site.name, partition=part, nt=nt, peak=peak, peak_bf16=peak_bf16,
                    link_bw=nt.link_gbs / 2 * LINK_EFF * 1e9, nic_node=gbps / 8 * NIC_EFF * 1e9,
                    hbm=hbm * 1e9, notes=tuple(notes))


def _hbm_known(hw: Hardware) -> bool:
    from .gpus import lookup

    facts = lookup(hw.nt.gpu_model)
    return bool(facts and facts.hbm_gbs)


# ---------------------------------------------------------------------------
# Hard rules

def _nodes_word(n: int) -> str:
    return {2: "two", 3: "three", 4: "four"}.get(n, str(n))


def segment_unit(tp: int, gpn: int) -> int:
    """Fewest nodes that hold whole TP groups: tp / gcd(tp, GPUs per node) (TP=6 on 4-GPU trays: 3).

    The one rule for where --segment may cut a job; contrib/lua/policy.lua applies the same
    (`kbase = tp / gcd(tp, rpn)`), and tests/test_agreement.py keeps the two together.
    """
    return tp // math.gcd(tp, gpn)


def segment_for(nt: NodeType, tp: int, nodes: int, gpn: int) -> Tuple[Optional[int], Optional[str]]:
    """On a multi-node NVLink domain: the --segment size (nodes) and an error if none works.

    The largest segment of whole TP groups (a multiple of `segment_unit`) that fits in one
    domain and divides the node count: the whole job when it fits in one domain.
    """
    if nt.nvlink_domain <= nt.gpus or nodes <= 1:
        return None, None
    dn = nt.domain_nodes
    tn = segment_unit(tp, gpn)
    if nodes <= dn and nodes % tn == 0:
        return nodes, None
    for seg in range(dn - dn % tn, 0, -tn):
        if nodes % seg == 0:
            return (seg if seg > 1 else None), None
    return None, ("TP=%d needs segments of %d nodes (whole TP groups) inside the %d-GPU NVLink domain, but "
                  "%d nodes cannot be cut into such segments that fit in one %d-node domain (use a multiple "
                  "of %d nodes)" % (tp, tn, nt.nvlink_domain, nodes, dn, tn))


def segment_error(nt: NodeType, tp: int, nodes: int, gpn: int, segment: int) -> Optional[str]:
    """Why an explicit --segment does not keep each TP group inside one NVLink domain (None: it does).

    A segment must hold whole TP groups (a multiple of tp / gcd(tp, gpn) nodes), fit in one
    domain, and cut the job into whole segments (divide the node count, or hold the whole job).
    """
    dn = nt.domain_nodes
    tn = segment_unit(tp, gpn)
    if segment >= 1 and segment % tn == 0 and segment <= dn and (segment >= nodes or nodes % segment == 0):
        return None
    return ("--segment=%d does not keep TP groups inside one %d-node NVLink domain for a %d-node job: TP=%d on "
            "%d GPUs per node needs %d node%s per group (tp / gcd(tp, %d)), so the segment must be a multiple of "
            "%d, divide %d and be at most %d" % (segment, dn, nodes, tp, gpn, tn, "s" if tn > 1 else "", gpn,
                                                 tn, nodes, dn))


def _tp_rules(hw: Hardware, model: ModelSpec, tp: int, nodes: int, gpn: int) -> List[str]:
    nt = hw.nt
    out: List[str] = []
    dom = nt.nvlink_domain
    if tp > 1:
        if dom > nt.gpus:  # multi-node NVLink domain (NVL72)
            if tp > dom:
                out.append("TP=%d is larger than the %d-GPU NVLink domain (%d nodes): its all-reduces would "
                           "run over %s instead of %s" % (tp, dom, nt.domain_nodes, hw.nic_words(),
                                                         hw.link_words))
            else:  # groups may cross trays: inside one domain (one --segment) that is still NVLink
                _, err = segment_for(nt, tp, nodes, gpn)
                if err:
                    out.append(err)
        elif dom == 1:
            out.append("TP=%d needs GPUs that share NVLink, but %s GPUs have none (NVLink domain of 1): its "
                       "all-reduces would run over %s; keep TP=1 and use PP/DP" % (
                           tp, nt.gpu_model, hw.link_words if nt.link == "pcie" else "PCIe"))
        elif tp > min(dom, gpn):
            if tp > gpn:
                span = -(-tp // gpn)
                if gpn < nt.gpus:
                    out.append("TP=%d needs %d GPUs of one NVLink domain, but %d GPUs on %d-GPU nodes are %d "
                               "nodes x %d GPUs: its groups would span nodes and run over %s instead of %s; "
                               "use a multiple of %d GPUs" % (tp, tp, nodes * gpn, nt.gpus, nodes, gpn,
                                                               hw.nic_words(), hw.link_words, nt.gpus))
                else:
                    out.append("TP=%d spans %s nodes: its all-reduces would run over %s instead of %s" % (
                        tp, _nodes_word(span), hw.nic_words(), hw.link_words))
            else:
                out.append("TP=%d is larger than the %d-GPU %s domain: its all-reduces would leave the fast "
                           "link" % (tp, dom, hw.link_name))
        elif dom % tp:
            out.append("TP=%d does not divide the %d-GPU NVLink domain: some TP groups would straddle two "
                       "domains" % (tp, dom))
        elif gpn % tp:
            out.append("TP=%d does not divide the %d GPUs used per node: some TP groups would straddle two "
                       "nodes" % (tp, gpn))
    if model.heads % tp:
        out.append("TP=%d does not divide the %d attention heads" % (tp, model.heads))
    elif not model.is_mla and model.kv_heads % tp:
        out.append("TP=%d does not divide the %d KV heads (grouped-query attention): each rank must hold "
                   "whole KV heads" % (tp, model.kv_heads))
    return out


def check_layout_rules(site: Site, partition: Union[str, Partition, None], model: ModelSpec, layout: Layout,
                       seq: Optional[int] = None) -> List[str]:
    """Hard-rule violations of `layout` in words; empty when the layout is allowed."""
    pname = partition.name if isinstance(partition, Partition) else partition
    hw = hardware(site, pname)
    return _layout_rules(hw, model, layout, seq or model.seq)


def _layout_rules(hw: Hardware, model: ModelSpec, lay: Layout, seq: int) -> List[str]:
    nt, part = hw.nt, hw.partition
    out: List[str] = []
    for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "nodes", "gpus_per_node"):
        if getattr(lay, k) < 1:
            out.append("%s must be at least 1, got %d" % (k.replace("_", "-"), getattr(lay, k)))
    if out:
        return out
    gpus = lay.nodes * lay.gpus_per_node
    if lay.world != gpus:
        out.append("TP x PP x DP x CP = %d x %d x %d x %d = %d ranks, but the allocation has %d GPUs "
                   "(%d nodes x %d)" % (lay.tp, lay.pp, lay.dp, lay.cp, lay.world, gpus, lay.nodes,
                                        lay.gpus_per_node))
    if lay.gpus_per_node > nt.gpus:
        out.append("%d GPUs per node asked, but %s nodes have %d" % (lay.gpus_per_node, nt.name, nt.gpus))
    if lay.nodes > part.max_nodes_per_job:
        out.append("%d nodes exceed partition %s's limit of %d nodes per job" % (
            lay.nodes, part.name, part.max_nodes_per_job))
    out.extend(_tp_rules(hw, model, lay.tp, lay.nodes, lay.gpus_per_node))
    if lay.pp > model.layers:
        out.append("PP=%d is more pipeline stages than the model's %d layers" % (lay.pp, model.layers))
    if lay.cp > 1 and seq % (2 * lay.cp):
        out.append("CP=%d needs the sequence length (%d) to be a multiple of 2 x CP = %d (causal load "
                   "balancing)" % (lay.cp, seq, 2 * lay.cp))
    if lay.ep > 1:
        if not model.is_moe:
            out.append("EP=%d needs a mixture-of-experts model; %s is dense" % (lay.ep, model.label))
        elif model.experts % lay.ep:
            out.append("EP=%d does not divide the %d experts" % (lay.ep, model.experts))
        elif lay.dp % lay.ep:
            out.append("EP=%d needs DP (%d) to be a multiple of it: expert parallelism reuses data-parallel "
                       "ranks" % (lay.ep, lay.dp))
    return out


# ---------------------------------------------------------------------------
# The cost model

@dataclass(frozen=True)
class _Cand:
    """One evaluated layout inside a search: cost model figures, before ranking."""

    layout: Layout
    memory: MemoryBreakdown
    step: float
    tokens_per_s: float
    mfu: float
    costs: Tuple[Tuple[str, float], ...]  # seconds per step by component, sums to step
    traffic: Tuple[Tuple[str, float], ...]  # bytes per GPU per step by link type
    global_batch: int
    micro_batches: int
    segment: Optional[int]
    detail: Tuple[Tuple[str, Any], ...]
    prefill: Optional[float] = None

    @property
    def key(self) -> Tuple[int, ...]:
        lay = self.layout
        return (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep)

    def cost(self, name: str) -> float:
        return dict(self.costs).get(name, 0.0)

    def d(self, name: str) -> Any:
        return dict(self.detail).get(name)


COST_WORDS = {
    "compute": "compute", "recompute": "recomputation", "tp": "TP all-reduces", "cp": "CP ring exchange",
    "ep": "EP all-to-all", "bubble": "pipeline bubble", "pp_p2p": "pipeline sends",
    "dp": "exposed gradient sync", "decode": "weight/KV reads and math", "prefill": "prefill",
}


class _Ctx:
    """One planning request: fixed inputs and caches shared by every candidate."""

    def __init__(self, hw: Hardware, req: PlanRequest):
        m = req.model
        self.hw, self.req, self.model = hw, req, m
        self.task = task_name(req.task)
        self.train = self.task != "inference"
        self.seq = req.seq or m.seq
        self.kopt = OPTIMIZER_BYTES[req.optimizer]
        self.usable = usable_gb(hw.nt.gpu_memory_gb)
        body = m.active_params - m.embedding_params - m.output_params - m.hidden
        self.layer_params = body / m.layers  # active params per layer, averaged
        self.attn_flops = 12.0 * self.seq * m.attn_width  # per token per layer, fwd+bwd
        self.head_flops = 6.0 * m.vocab * m.hidden  # output layer per token, fwd+bwd
        scale = 2.0 / 3.0 if self.task in ("lora", "qlora") else 1.0  # no weight gradients
        self.flops_scale = scale
        self.model_flops_tok = scale * (6.0 * self.layer_params * m.layers + self.head_flops
                                        + self.attn_flops * m.layers)
        # fwd+bwd FLOPs per token of one layer, split by which GEMMs run them
        self.f_dense = scale * 6.0 * m.dense_layer_params  # a dense layer's matmuls
        self.f_shared = scale * 6.0 * m.moe_layer_shared_params  # MoE layer: attention, router, shared experts
        self.f_experts = scale * 6.0 * m.experts_active * m.expert_params  # MoE layer: routed experts
        self._counts: Dict[int, List[int]] = {}
        self._stages: Dict[int, List[StageParams]] = {}
        self._lora: Dict[Tuple[int, int], float] = {}
        self._groups: Dict[Tuple[int, ...], Tuple[float, float, int]] = {}

    def counts(self, pp: int) -> List[int]:
        c = self._counts.get(pp)
        if c is None:
            c = self._counts[pp] = stage_layers(self.model.layers, pp)
        return c

    def stages(self, pp: int) -> List[StageParams]:
        st = self._stages.get(pp)
        if st is None:
            counts = self.counts(pp)
            st = self._stages[pp] = [stage_params(self.model, counts, i) for i in range(pp)]
        return st

    def lora(self, sp_: StageParams) -> float:
        key = (sp_.dense_layers, sp_.moe_layers)
        v = self._lora.get(key)
        if v is None:
            v = self._lora[key] = lora_params(self.model, sp_.dense_layers, sp_.moe_layers)
        return v

    def default_batch(self, gpus: int) -> int:
        if not self.train:
            return 1
        tokens = TOKENS_PER_STEP[self.task]
        return max(1, -(-tokens // self.seq), int(math.ceil(gpus * SEQS_PER_GPU)))

    def group(self, stride: int, size: int, gpn: int, seg: Optional[int]) -> Tuple[float, float, int]:
        """(bus bandwidth B/s, share of bytes on the fabric, members per fast domain) of a rank group."""
        key = (stride, size, gpn, seg or 1)
        hit = self._groups.get(key)
        if hit is not None:
            return hit
        hw = self.hw
        unit = gpn * (seg or 1)
        if size <= 1:
            out = (float("inf"), 0.0, 1)
        elif stride * (size - 1) < unit:
            out = (hw.link_bw, 0.0, size)
        else:
            k = max(1, min(size, unit // stride)) if stride < unit else 1
            out = (min(hw.link_bw, k * hw.nic_node / gpn), 1.0 / k, k)
        self._groups[key] = out
        return out


def _eff(ctx: _Ctx, tp: int, tokens: float, width: Optional[float] = None) -> float:
    """GEMM efficiency: large-GEMM share of peak, less for narrow (TP-split) or short (few-token) GEMMs."""
    w = (width or ctx.model.hidden) / tp
    return GEMM_EFF * w / (w + 128.0) * tokens / (tokens + 256.0)


def _eff_expert(ctx: _Ctx, tp: int, ep: int, tokens: float) -> float:
    """Routed-expert GEMMs: each local expert sees tokens x top-k / experts x EP tokens per micro-batch.

    This is why EP exists: it gathers tokens from EP ranks so each expert's GEMM is large enough.
    """
    m = ctx.model
    per_expert = tokens * m.experts_active / m.experts * ep
    return _eff(ctx, tp, per_expert, m.expert_ffn)


def _train_candidate(ctx: _Ctx, lay: Layout, batch: int, zero: int, recompute: str,
                     memory: MemoryBreakdown, seg: Optional[int], vp: int = 1) -> _Cand:
    m, hw = ctx.model, ctx.hw
    tp, pp, dp, cp, ep, mb = lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.micro_batch
    gpn = lay.gpus_per_node
    s = ctx.seq
    n_mb = batch // (dp * mb)
    counts = ctx.counts(pp)
    stages = ctx.stages(pp)
    tokens_gpu = mb * s / cp
    slow = QLORA_SLOWDOWN if ctx.task == "qlora" else 1.0
    eff = _eff(ctx, tp, tokens_gpu) * slow
    eff_e = _eff_expert(ctx, tp, ep, tokens_gpu) * slow if m.is_moe else eff
    rate = hw.peak * eff
    rate_e = hw.peak * eff_e
    sc = ctx.flops_scale
    attn_f = sc * ctx.attn_flops
    # seconds per token (per TP rank) of one dense / one MoE layer, and of recomputing it
    t_dense = (ctx.f_dense + attn_f) / rate
    t_moe = (ctx.f_shared + attn_f) / rate + ctx.f_experts / rate_e
    if recompute == "full":  # one more forward pass (a third of fwd+bwd)
        rc_dense, rc_moe = t_dense / 3.0, t_moe / 3.0
    elif recompute == "selective":  # the attention core's forward
        rc_dense = rc_moe = attn_f / 3.0 / rate
    else:
        rc_dense = rc_moe = 0.0
    link_bytes = 0.0
    fab_bytes = 0.0

    tp_bw, tp_fab, _ = ctx.group(1, tp, gpn, seg)
    cp_bw, cp_fab, cp_k = ctx.group(tp, cp, gpn, seg)
    _, _, ep_k = ctx.group(tp * cp, ep, gpn, seg)
    pp_bw, pp_fab, _ = ctx.group(tp * cp * dp, pp, gpn, seg)
    n_dp = dp * cp
    dp_bw, dp_fab, _ = ctx.group(tp, n_dp, gpn, seg)
    edp = max(1, n_dp // ep)
    edp_bw, edp_fab, _ = ctx.group(tp * cp * ep, edp, gpn, seg)

    ar_payload = mb * (s / cp) * m.hidden * 2.0
    n_ar = 4 + (2 if recompute == "full" else 0)
    kv_w = m.heads * (2 * m.hd + m.rope_head_dim) if m.is_mla else 2 * m.kv_heads * m.hd
    cp_layer = 3.0 * (cp - 1) * mb * (s / cp) * kv_w * 2.0 / tp
    attn_layer_t = sc * ctx.attn_flops * mb * s / (tp * cp) / rate
    ep_payload = 4.0 * mb * (s / cp) / tp * m.experts_active * m.hidden * 2.0 * (ep - 1) / ep
    if recompute == "full":
        ep_payload *= 1.5
    ep_t_layer = 0.0
    if ep > 1:
        near = (ep_k - 1) / (ep - 1)
        ep_t_layer = ep_payload * near / hw.link_bw + ep_payload * (1 - near) / (hw.nic_node / gpn)

    worst = None
    for i in sorted({0, counts.index(max(counts)), pp - 1}):
        sp_ = stages[i]
        n_i = counts[i]
        tok = tokens_gpu / tp
        comp = tok * (sp_.dense_layers * t_dense + sp_.moe_layers * t_moe
                      + (sc * ctx.head_flops / rate if i == pp - 1 else 0.0))
        rc = tok * (sp_.dense_layers * rc_dense + sp_.moe_layers * rc_moe)
        tp_bytes = n_i * n_ar * 2.0 * (tp - 1) / tp * ar_payload if tp > 1 else 0.0
        t_tp = tp_bytes / tp_bw if tp > 1 else 0.0
        cp_bytes = n_i * cp_layer
        t_cp = n_i * max(0.0, cp_layer / cp_bw - attn_layer_t) if cp > 1 else 0.0
        t_ep = sp_.moe_layers * ep_t_layer
        ep_bytes = sp_.moe_layers * ep_payload
        t_mb = comp + rc + t_tp + t_cp + t_ep
        row = (t_mb, i, sp_, comp, rc, t_tp, t_cp, t_ep, tp_bytes, cp_bytes, ep_bytes)
        if worst is None or t_mb > worst[0]:
            worst = row
    assert worst is not None
    t_mb, wi, wsp, comp, rc, t_tp, t_cp, t_ep, tp_bytes, cp_bytes, ep_bytes = worst

    # data-parallel gradient synchronisation (the stage with the most parameters)
    t_dp_total = 0.0
    dp_exposed = 0.0
    dp_bytes_total = 0.0
    dp_split = (0.0, 0.0)
    lora = ctx.task in ("lora", "qlora")
    wbytes = NF4_BYTES if ctx.task == "qlora" else 2.0
    for i in sorted({0, counts.index(max(counts)), pp - 1}):
        sp_ = stages[i]
        # bf16 gradients of what is trained (all weights, or the LoRA adapters), per TP rank
        if lora:
            dense_b, exp_b = 2.0 * ctx.lora(sp_) / tp, 0.0
        else:
            dense_b, exp_b = 2.0 * (sp_.dense + sp_.embed) / tp, 2.0 * sp_.experts / (tp * ep)
        if zero >= 3 and n_dp > 1:
            # FSDP: every micro-batch all-gathers the weights for forward and again for backward and
            # reduce-scatters the gradients, one ring per layer each time (n - 1 hop latencies each)
            wd = wbytes * (sp_.dense + sp_.embed) / tp if lora else dense_b
            we = wbytes * sp_.experts / (tp * ep) if lora else exp_b
            vol_mb = (n_dp - 1) / n_dp * (2 * wd + dense_b)
            vol_e_mb = (edp - 1) / edp * (2 * we + exp_b) if edp > 1 else 0.0
            per_mb = vol_mb / dp_bw + (vol_e_mb / edp_bw if vol_e_mb else 0.0) \
                + 3 * counts[i] * (n_dp - 1) * LATENCY_S
            exposed = n_mb * max(0.0, per_mb - (comp + rc))
            vol, vol_e, t_sync = n_mb * vol_mb, n_mb * vol_e_mb, n_mb * per_mb
        else:
            # ring all-reduce (or reduce-scatter + all-gather: the same bytes) once per step
            vol = 2.0 * (n_dp - 1) / n_dp * dense_b if n_dp > 1 else 0.0
            vol_e = 2.0 * (edp - 1) / edp * exp_b if edp > 1 else 0.0
            t_sync = (vol / dp_bw if vol else 0.0) + (vol_e / edp_bw if vol_e else 0.0)
            if n_dp > 1:  # Megatron buckets max(40M, 1M x DP) parameters; each bucket is a reduce-scatter
                bucket = 2.0 * max(40e6, 1e6 * n_dp)  # + all-gather ring of n - 1 hops each
                t_sync += 2 * math.ceil((dense_b + exp_b) / bucket) * (n_dp - 1) * LATENCY_S
            exposed = max(0.0, t_sync - (comp + rc))  # hidden behind the last backward / first forward
        if exposed >= dp_exposed:
            dp_exposed, t_dp_total = exposed, t_sync
            dp_bytes_total = vol + vol_e
            dp_split = (vol * dp_fab + vol_e * edp_fab, vol * (1 - dp_fab) + vol_e * (1 - edp_fab))

    p2p_payload = mb * (s / cp) * m.hidden * 2.0 / tp
    p2p_t = p2p_payload / pp_bw if pp > 1 else 0.0
    pp_exposed = 2.0 * (pp - 1) * p2p_t
    bubble = (pp - 1) * t_mb / vp  # interleaving vp chunks per stage divides the bubble by vp
    step = n_mb * t_mb + bubble + pp_exposed + dp_exposed

    link_bytes += n_mb * tp_bytes * (1 - tp_fab) + n_mb * cp_bytes * (1 - cp_fab)
    fab_bytes += n_mb * tp_bytes * tp_fab + n_mb * cp_bytes * cp_fab
    if ep > 1:
        near = (ep_k - 1) / (ep - 1)
        link_bytes += n_mb * ep_bytes * near
        fab_bytes += n_mb * ep_bytes * (1 - near)
    if pp > 1:
        link_bytes += 2 * n_mb * vp * p2p_payload * (1 - pp_fab)
        fab_bytes += 2 * n_mb * vp * p2p_payload * pp_fab
    if dp_bytes_total:
        fab_bytes += dp_split[0]
        link_bytes += dp_split[1]

    tokens = batch * s
    costs = (("compute", n_mb * comp), ("recompute", n_mb * rc), ("tp", n_mb * t_tp), ("cp", n_mb * t_cp),
             ("ep", n_mb * t_ep), ("bubble", bubble), ("pp_p2p", pp_exposed), ("dp", dp_exposed))
    mfu = ctx.model_flops_tok * tokens / (step * lay.world * hw.peak_bf16)
    detail = (("eff", eff), ("eff_e", eff_e), ("vp", vp), ("stage", wi), ("tp_bytes_mb", tp_bytes),
              ("tp_bw", tp_bw), ("tp_fab", tp_fab),
              ("dp_bytes", dp_bytes_total), ("dp_time", t_dp_total), ("dp_bw", dp_bw), ("dp_fab", dp_fab),
              ("p2p_bytes", p2p_payload), ("pp_fab", pp_fab), ("pp_bw", pp_bw), ("cp_fab", cp_fab),
              ("ep_k", ep_k), ("t_mb", t_mb))
    traffic = ((LINK_WORDS.get(hw.nt.link, hw.nt.link), link_bytes), (hw.fabric_name, fab_bytes))
    return _Cand(lay, memory, step, tokens / step, mfu, costs, traffic, batch, n_mb, seg, detail)


def _infer_candidate(ctx: _Ctx, lay: Layout, batch: int, memory: MemoryBreakdown,
                     seg: Optional[int]) -> _Cand:
    """Decode step for `batch // dp` sequences per replica at full context; prefill reported apart."""
    m, hw = ctx.model, ctx.hw
    tp, pp, ep = lay.tp, lay.pp, lay.ep
    gpn = lay.gpus_per_node
    b = batch // lay.dp
    s = ctx.seq
    wb = WEIGHT_BYTES.get(ctx.req.precision, 2.0)
    counts = ctx.counts(pp)
    stages = ctx.stages(pp)
    tp_bw, tp_fab, _ = ctx.group(1, tp, gpn, seg)
    pp_bw, pp_fab, _ = ctx.group(tp * lay.cp * lay.dp, pp, gpn, seg)
    touched = 1.0
    if m.is_moe:  # experts a decode step reads: each of b x EP tokens picks k of E
        touched = 1.0 - (1.0 - m.experts_active / m.experts) ** (b * ep)
    _, _, ep_k = ctx.group(tp * lay.cp, ep, gpn, seg)
    eff_dec = _eff(ctx, tp, b)
    decode = 0.0
    t_tp = 0.0
    tp_bytes = 0.0
    for i, n_i in enumerate(counts):
        sp_ = stages[i]
        w = wb * ((sp_.dense + sp_.embed) / tp + touched * sp_.experts / (tp * ep))
        kv = kv_cache_bytes(m, s, b, wb, tp, layers=n_i)
        flops = 2.0 * b * (n_i * ctx.layer_params + (m.vocab * m.hidden if i == pp - 1 else 0)) / tp \
            + 4.0 * b * n_i * s * m.attn_width / tp
        decode += max((w + kv) / hw.hbm, flops / (hw.peak * eff_dec))
        if tp > 1:
            payload = b * m.hidden * 2.0
            tp_bytes += n_i * 2 * 2.0 * (tp - 1) / tp * payload
            t_tp += n_i * 2 * (LATENCY_S + 2.0 * (tp - 1) / tp * payload / tp_bw)
    p2p = b * m.hidden * 2.0
    t_pp = (pp - 1) * (LATENCY_S + p2p / pp_bw) if pp > 1 else 0.0
    t_ep = 0.0
    ep_bytes = 0.0
    if ep > 1:  # dispatch and combine all-to-alls per MoE layer
        ep_bytes = 2.0 * b / tp * m.experts_active * m.hidden * wb * (ep - 1) / ep
        near = (ep_k - 1) / (ep - 1)
        per_layer = 2 * LATENCY_S + ep_bytes * near / hw.link_bw + ep_bytes * (1 - near) / (hw.nic_node / gpn)
        t_ep = m.moe_layers * per_layer
        ep_bytes *= m.moe_layers
    step = decode + t_tp + t_pp + t_ep
    # prefill: compute-bound; stages run one after another for one batch
    pre_tokens = b * s
    pre_flops = (2.0 * (ctx.layer_params * m.layers + m.vocab * m.hidden) * pre_tokens
                 + 2.0 * m.layers * s * m.attn_width * pre_tokens)
    prefill = pre_flops / tp / (hw.peak * _eff(ctx, tp, pre_tokens))
    if tp > 1:
        prefill += 2 * m.layers * 2.0 * (tp - 1) / tp * pre_tokens * m.hidden * 2.0 / tp_bw
    tok_s = lay.dp * b / step
    mfu = 2.0 * m.active_params * tok_s / (lay.world * hw.peak_bf16)
    near = (ep_k - 1) / (ep - 1) if ep > 1 else 1.0
    link_bytes = tp_bytes * (1 - tp_fab) + (pp - 1) * p2p * (1 - pp_fab) + ep_bytes * near
    fab_bytes = tp_bytes * tp_fab + (pp - 1) * p2p * pp_fab + ep_bytes * (1 - near)
    costs = (("decode", decode), ("tp", t_tp), ("pp_p2p", t_pp), ("ep", t_ep))
    detail = (("eff", eff_dec), ("tp_bw", tp_bw), ("tp_fab", tp_fab), ("pp_fab", pp_fab), ("touched", touched),
              ("batch_per_replica", b), ("tp_bytes_mb", tp_bytes))
    traffic = ((LINK_WORDS.get(hw.nt.link, hw.nt.link), link_bytes), (hw.fabric_name, fab_bytes))
    return _Cand(lay, memory, step, tok_s, mfu, costs, traffic, batch, 1, seg, detail, prefill)


# ---------------------------------------------------------------------------
# Search

def _divisors(n: int) -> List[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


@dataclass
class _Result:
    """What one search over an allocation found: ranked layouts, rejections, misses."""

    ranked: List[_Cand]
    rejected: List[Rejection]
    misses: List[Tuple[float, Layout, MemoryBreakdown]]  # layouts that did not fit, leanest first
    batch_note: Optional[str] = None


def _strategies(ctx: _Ctx, pp: int, n_dp: int) -> List[Tuple[int, str]]:
    """(ZeRO stage, recomputation) to try, cheapest first."""
    req = ctx.req
    if req.zero is not None:
        zeros = [req.zero]
    elif n_dp == 1:
        zeros = [0]
    elif pp > 1:
        zeros = [1]  # Megatron's distributed optimizer; ZeRO-2/3 do not combine with PP
    else:
        zeros = [1, 2, 3]
    recs = [req.recompute] if req.recompute else ["selective", "full"]
    return [(z, r) for r in recs for z in zeros]


def _search(ctx: _Ctx, nodes: int, gpn: int, want_rejects: bool = True,
            base_batch: Optional[int] = None) -> _Result:
    m, hw, req = ctx.model, ctx.hw, ctx.req
    pins = req.pins
    n = nodes * gpn
    ranked: Dict[Tuple[int, ...], _Cand] = {}
    rejected: List[Rejection] = []
    misses: List[Tuple[float, Layout, MemoryBreakdown]] = []
    user_batch = req.global_batch
    base_batch = user_batch or base_batch or ctx.default_batch(n)
    tps = [t for t in _divisors(n) if t <= m.heads]
    if "tp" in pins:
        tps = [pins["tp"]]
    batch_rejects: Dict[str, int] = {}
    for tp in tps:
        if n % tp:
            continue
        errs = _tp_rules(hw, m, tp, nodes, gpn)
        if errs:
            if want_rejects:
                rejected.extend(Rejection("TP=%d" % tp, e, "rule") for e in errs)
            continue
        seg, _ = segment_for(hw.nt, tp, nodes, gpn)
        rest = n // tp
        if "cp" in pins:
            cps = [pins["cp"]]
        elif ctx.train:
            cps = [c for c in _divisors(rest) if c == 1 or (ctx.seq // c >= CP_MIN_TOKENS
                                                            and ctx.seq % (2 * c) == 0)]
        else:
            cps = [1]
        for cp in cps:
            if rest % cp:
                continue
            pps = [p for p in _divisors(rest // cp) if p <= m.layers]
            if "pp" in pins:
                pps = [pins["pp"]]
            for pp in pps:
                if (rest // cp) % pp:
                    continue
                dp = rest // (cp * pp)
                if "dp" in pins and pins["dp"] != dp:
                    continue
                eps = [1]
                if m.is_moe and ctx.train:  # serving with EP (DP attention) only when pinned
                    eps = [e for e in _divisors(math.gcd(dp, m.experts))]
                if "ep" in pins:
                    eps = [pins["ep"]]
                for ep in eps:
                    if ep > 1 and (not m.is_moe or m.experts % ep or dp % ep):
                        continue
                    if ctx.train:
                        _train_layouts(ctx, nodes, gpn, tp, pp, dp, cp, ep, seg, base_batch, user_batch,
                                       ranked, misses, batch_rejects)
                    else:
                        _infer_layouts(ctx, nodes, gpn, tp, pp, dp, cp, ep, seg, user_batch, ranked, misses,
                                       batch_rejects)
    if want_rejects:
        for reason, count in batch_rejects.items():
            rejected.append(Rejection("%d layout%s" % (count, "s" if count > 1 else ""), reason, "batch"))
    misses.sort(key=lambda t: t[0])
    if want_rejects:
        for _, lay, mem in misses[:MAX_MEMORY_REJECTS]:
            if _key(lay) not in ranked:
                rejected.append(Rejection(_short(lay), _mem_words(ctx, mem), "memory"))
    order = sorted(ranked.values(), key=lambda c: (-c.tokens_per_s, c.memory.total))
    if not order and ctx.train and not user_batch and batch_rejects:
        # odd GPU counts force a large DP: grow the default batch to the smallest DP that divides them
        need = min(int(r.split("=")[1].split()[0]) for r in batch_rejects)
        if need > base_batch:
            retry = _search(ctx, nodes, gpn, want_rejects, base_batch=need)
            if retry.ranked:
                retry.batch_note = ("the default global batch grew from %d to %d sequences: %d GPUs leave no "
                                    "layout with DP <= %d" % (base_batch, need, n, base_batch))
            return retry
    return _Result(order, rejected, misses)


def _key(lay: Layout) -> Tuple[int, ...]:
    return (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep)


def _train_layouts(ctx: _Ctx, nodes: int, gpn: int, tp: int, pp: int, dp: int, cp: int, ep: int,
                   seg: Optional[int], base_batch: int, user_batch: Optional[int],
                   ranked: Dict[Tuple[int, ...], _Cand], misses: List[Tuple[float, Layout, MemoryBreakdown]],
                   batch_rejects: Dict[str, int]) -> None:
    m = ctx.model
    pins = ctx.req.pins
    mbs = [pins["micro_batch"]] if "micro_batch" in pins else list(MICRO_BATCHES)
    strategies = _strategies(ctx, pp, dp * cp)
    counts = ctx.counts(pp)
    leanest: Optional[Tuple[float, Layout, MemoryBreakdown]] = None
    any_batch = False
    for mb in mbs:
        if user_batch:
            if user_batch % (dp * mb):
                continue
            batch = user_batch
        else:
            if dp * mb > base_batch:
                continue
            batch = max(1, int(round(base_batch / float(dp * mb)))) * dp * mb
        any_batch = True
        lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=mb, nodes=nodes, gpus_per_node=gpn)
        shape = TrainShape(tp, pp, dp, cp, ep, mb, batch // (dp * mb), ctx.seq)
        best: Optional[_Cand] = None
        fitted = False
        n_mb = batch // (dp * mb)
        vps = [1]
        if pp > 1 and n_mb % pp == 0 and (pp - 1) / n_mb > 0.02:
            # interleaving needs whole rounds of micro-batches (Megatron); worth it only for a visible bubble
            vps += [v for v in (2, 4, 8) if v <= min(counts)]
        for zero, rec in strategies:
            for vp in vps:
                mem = training_memory(m, shape, ctx.task, zero, rec, ctx.kopt, counts, vp, ctx.stages(pp))
                if mem.total > ctx.usable:
                    if leanest is None or mem.total < leanest[0]:
                        leanest = (mem.total, lay, mem)
                    break  # more chunks only need more memory
                fitted = True
                cand = _train_candidate(ctx, lay, batch, zero, rec, mem, seg, vp)
                if best is None or cand.step < best.step - 1e-12:
                    best = cand
            if best is not None and rec == "selective" and zero <= 2:
                break  # nothing later in the list is faster
        if best is not None:
            cur = ranked.get(_key(lay))
            if cur is None or best.tokens_per_s > cur.tokens_per_s:
                ranked[_key(lay)] = best
        if not fitted:
            break  # a larger micro-batch only needs more memory
    if not any_batch:
        if user_batch:
            reason = "global batch %d is not a multiple of DP x micro-batch (DP=%d)" % (user_batch, dp)
        else:
            reason = ("DP=%d needs a global batch of at least %d sequences (%.1fM tokens); the default is %d "
                      "(set --global-batch to allow more)" % (dp, dp, dp * ctx.seq / 1e6, base_batch))
        batch_rejects[reason] = batch_rejects.get(reason, 0) + 1
    elif leanest is not None and _key(leanest[1]) not in ranked:
        misses.append(leanest)


def _infer_layouts(ctx: _Ctx, nodes: int, gpn: int, tp: int, pp: int, dp: int, cp: int, ep: int,
                   seg: Optional[int], user_batch: Optional[int], ranked: Dict[Tuple[int, ...], _Cand],
                   misses: List[Tuple[float, Layout, MemoryBreakdown]], batch_rejects: Dict[str, int]) -> None:
    """One replica is TP x PP GPUs; DP replicas fill the allocation, each serving batch / DP sequences."""
    if user_batch is not None and user_batch % dp:
        reason = ("DP=%d replicas need --global-batch (%d concurrent sequences) to be a multiple of %d"
                  % (dp, user_batch, dp))
        batch_rejects[reason] = batch_rejects.get(reason, 0) + 1
        return
    base_batch = user_batch or dp
    b = base_batch // dp
    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=b, nodes=nodes, gpus_per_node=gpn)
    mem = inference_memory(ctx.model, tp, pp, ep, b, ctx.seq, ctx.req.precision, ctx.counts(pp), ctx.stages(pp))
    if mem.total > ctx.usable:
        misses.append((mem.total, lay, mem))
        return
    ranked[_key(lay)] = _infer_candidate(ctx, lay, base_batch, mem, seg)


def _short(lay: Layout) -> str:
    parts = ["TP=%d" % lay.tp, "PP=%d" % lay.pp, "DP=%d" % lay.dp]
    if lay.cp > 1:
        parts.append("CP=%d" % lay.cp)
    if lay.ep > 1:
        parts.append("EP=%d" % lay.ep)
    return " x ".join(parts)


def _mem_words(ctx: _Ctx, mem: MemoryBreakdown) -> str:
    parts = ", ".join("%s %.1f" % (k, v) for k, v in mem.parts())
    how = []
    if ctx.train:
        how.append("%s recompute" % mem.recompute)
        how.append("ZeRO-%d" % mem.zero if mem.zero else "no ZeRO")
    return "needs %.1f GB per GPU (%s; %s) > %.1f GB usable of %g GB" % (
        mem.total, parts, ", ".join(how) if how else "inference", ctx.usable, ctx.hw.nt.gpu_memory_gb)


# ---------------------------------------------------------------------------
# Allocation: which node/GPU counts to try

def _split_gpus(hw: Hardware, gpus: int) -> Tuple[int, int]:
    """--gpus N -> (nodes, GPUs per node): the fewest nodes that hold N evenly."""
    g = hw.nt.gpus
    if gpus <= g:
        return 1, gpus
    maxn = hw.partition.max_nodes_per_job
    for nodes in range(-(-gpus // g), min(gpus, maxn) + 1):
        if gpus % nodes == 0 and gpus // nodes <= g:
            return nodes, gpus // nodes
    raise PlanError("--gpus %d cannot be spread evenly over at most %d nodes of %d GPUs (partition %s); use a "
                    "multiple of %d" % (gpus, maxn, g, hw.partition.name, g))


def _lower_bound_gpus(ctx: _Ctx) -> int:
    m = ctx.model
    if ctx.task in ("pretrain", "finetune"):
        need = (4.0 + ctx.kopt) * m.params
    elif ctx.task == "lora":
        need = 2.0 * m.params
    elif ctx.task == "qlora":
        need = 0.5 * m.params
    else:
        need = WEIGHT_BYTES.get(ctx.req.precision, 2.0) * m.params
    return max(1, int(need / (ctx.usable * GB)))


def _allocations(ctx: _Ctx) -> List[Tuple[int, int]]:
    """Allocation sizes in increasing GPU count, from the memory lower bound to the partition's limit."""
    hw = ctx.hw
    g = hw.nt.gpus
    lb = _lower_bound_gpus(ctx)
    out: List[Tuple[int, int]] = []
    if not hw.partition.exclusive:
        out.extend((1, d) for d in _divisors(g) if d < g and d >= min(lb, g))
    first = max(1, -(-lb // g))
    maxn = hw.partition.max_nodes_per_job
    nodes = first
    while nodes <= maxn:
        out.append((nodes, g))
        nodes = nodes + 1 if nodes < first + 16 else max(nodes + 1, int(nodes * 1.25))
    if not out or out[-1][0] != maxn:
        out.append((maxn, g))
    return out


def _smallest(ctx: _Ctx) -> Tuple[Optional[Tuple[int, int]], Optional[_Result]]:
    """The smallest allocation with a feasible layout (binary search over the geometric gaps)."""
    allocs = _allocations(ctx)
    last = allocs[-1]
    res = _search(ctx, last[0], last[1], want_rejects=False)
    if not res.ranked:
        return None, None
    prev = None
    for alloc in allocs:
        res = _search(ctx, alloc[0], alloc[1], want_rejects=False) if alloc != last else res
        if res.ranked:
            if prev is not None and alloc[1] == prev[1] and alloc[0] - prev[0] > 1:
                lo, hi = prev[0] + 1, alloc[0]
                best = (alloc, res)
                while lo < hi:
                    mid = (lo + hi) // 2
                    r = _search(ctx, mid, alloc[1], want_rejects=False)
                    if r.ranked:
                        hi, best = mid, ((mid, alloc[1]), r)
                    else:
                        lo = mid + 1
                return best
            return alloc, res
        prev = alloc
    return None, None


# ---------------------------------------------------------------------------
# The entry point

def task_name(task: str) -> str:
    """Canonical task name ('serve' -> 'inference'); unknown names pass through to be refused."""
    return TASK_ALIASES.get(task.lower(), task.lower())


def _validate(site: Site, req: PlanRequest) -> Hardware:
    if task_name(req.task) not in TASKS:
        raise PlanError("unknown task '%s'; expected one of: %s" % (req.task, ", ".join(TASKS)))
    if req.precision not in PRECISIONS:
        raise PlanError("unknown precision '%s'; expected one of: %s" % (req.precision, ", ".join(PRECISIONS)))
    if req.optimizer not in OPTIMIZER_BYTES:
        raise PlanError("unknown optimizer '%s'; expected one of: %s" % (req.optimizer, ", ".join(OPTIMIZER_BYTES)))
    if req.recompute is not None and req.recompute not in RECOMPUTE:
        raise PlanError("recompute must be none, selective or full, got '%s'" % req.recompute)
    if req.zero is not None and req.zero not in (0, 1, 2, 3):
        raise PlanError("ZeRO stage must be 0, 1, 2 or 3, got %s" % req.zero)
    if req.gpus is not None and req.nodes is not None:
        raise PlanError("give --gpus or --nodes, not both")
    for k, v in req.pins.items():
        if k not in PIN_KEYS:
            raise PlanError("unknown layout degree '%s'; expected one of: %s" % (k, ", ".join(PIN_KEYS)))
        if not isinstance(v, int) or v < 1:
            raise PlanError("--%s must be a positive integer, got %r" % (k.replace("_", "-"), v))
    for name, val in (("--gpus", req.gpus), ("--nodes", req.nodes), ("--seq", req.seq),
                      ("--global-batch", req.global_batch)):
        if val is not None and val < 1:
            raise PlanError("%s must be a positive integer, got %d" % (name, val))
    if req.tokens is not None and req.tokens <= 0:
        raise PlanError("--tokens must be positive")
    if req.target_days is not None and (req.target_days <= 0 or req.tokens is None):
        raise PlanError("--target-days needs a positive number of days and --tokens")
    if req.zero is not None and req.zero >= 2 and req.pins.get("pp", 1) > 1:
        raise PlanError("ZeRO-%d shards gradients across data-parallel ranks while pipeline stages accumulate "
                        "them; like DeepSpeed, the planner combines PP only with ZeRO-0/1" % req.zero)
    hw = hardware(site, req.partition, req.precision)
    part = hw.partition
    if req.nodes is not None and req.nodes > part.max_nodes_per_job:
        raise PlanError("--nodes %d exceeds partition %s's limit of %d nodes per job" % (
            req.nodes, part.name, part.max_nodes_per_job))
    if req.gpus is not None and req.gpus > part.max_nodes_per_job * hw.nt.gpus:
        raise PlanError("--gpus %d exceeds partition %s's limit of %d nodes x %d GPUs = %d" % (
            req.gpus, part.name, part.max_nodes_per_job, hw.nt.gpus, part.max_nodes_per_job * hw.nt.gpus))
    return hw


def _normalize(req: PlanRequest) -> PlanRequest:
    """Accept what spec files carry: None for 'not given' in pins and options, tokens as '15T'."""
    tokens = req.tokens
    if isinstance(tokens, str):
        from .schema import parse_size

        parsed = parse_size(tokens)
        if parsed is None:
            raise PlanError("tokens: expected a count such as 15T or 2e12, got %r" % tokens)
        tokens = parsed
    return replace(req, task=task_name(req.task or "pretrain"), precision=req.precision or "bf16",
                   optimizer=req.optimizer or "adam", tokens=tokens,
                   pins={k: v for k, v in (req.pins or {}).items() if v is not None})


def make_plan(site: Site, req: PlanRequest) -> Plan:
    """Choose a layout (and node count when not given) for `req` on `site`; PlanError if impossible."""
    req = _normalize(req)
    hw = _validate(site, req)
    ctx = _Ctx(hw, req)
    pins = req.pins
    gpus = req.gpus
    if gpus is None and req.nodes is None and all(k in pins for k in ("tp", "pp", "dp")):
        gpus = pins["tp"] * pins["pp"] * pins["dp"] * pins.get("cp", 1)
    fixed: Optional[Tuple[int, int]] = None
    if gpus is not None:
        fixed = _split_gpus(hw, gpus)
    elif req.nodes is not None:
        fixed = (req.nodes, hw.nt.gpus)
    notes: List[str] = list(hw.notes)
    if fixed is not None:
        _check_pins(ctx, fixed)
        res = _search(ctx, fixed[0], fixed[1])
        if not res.ranked:
            raise PlanError(_no_fit_message(ctx, fixed, res))
        alloc = fixed
        if gpus is not None and fixed[1] < hw.nt.gpus and fixed[0] > 1:
            notes.append("%d GPUs = %d nodes x %d GPUs (--gpus-per-node=%d); multiples of %d keep whole nodes"
                         % (gpus, fixed[0], fixed[1], fixed[1], hw.nt.gpus))
        how = None
    else:
        alloc_res = _smallest(ctx)
        if alloc_res[0] is None:
            raise PlanError(_whole_partition_message(ctx))
        alloc = alloc_res[0]
        res = _search(ctx, alloc[0], alloc[1])
        how = "smallest allocation that fits"
    best = res.ranked[0]
    if pins:
        notes.extend(_compare_with_free(ctx, alloc, best))
    return _build(ctx, best, res, notes, how)


def _check_pins(ctx: _Ctx, alloc: Tuple[int, int]) -> None:
    """A fully pinned layout that breaks a hard rule is refused with the rule in words."""
    pins = ctx.req.pins
    nodes, gpn = alloc
    n = nodes * gpn
    if "tp" in pins:
        errs = _tp_rules(ctx.hw, ctx.model, pins["tp"], nodes, gpn)
        if errs:
            raise PlanError("TP=%d is not allowed here: %s" % (pins["tp"], "; ".join(errs)))
    degrees = [pins.get(k) for k in ("tp", "pp", "dp", "cp")]
    known = 1
    for d in degrees:
        known *= d or 1
    if n % known:
        raise PlanError("the pinned degrees multiply to %d, which does not divide the %d GPUs (%d nodes x %d)" % (
            known, n, nodes, gpn))
    if all(d is not None for d in degrees[:3]):
        cp = pins.get("cp", 1)
        lay = Layout(tp=pins["tp"], pp=pins["pp"], dp=pins["dp"], cp=cp, ep=pins.get("ep", 1),
                     micro_batch=pins.get("micro_batch", 1), nodes=nodes, gpus_per_node=gpn)
        errs = _layout_rules(ctx.hw, ctx.model, lay, ctx.seq)
        if errs:
            raise PlanError("layout %s is not allowed: %s" % (_short(lay), "; ".join(errs)))
    for k in ("pp", "ep", "cp"):
        if k in pins:
            lay = Layout(tp=pins.get("tp", 1), pp=pins.get("pp", 1), cp=pins.get("cp", 1), ep=pins.get("ep", 1),
                         dp=pins.get("dp", max(1, pins.get("ep", 1))),
                         nodes=nodes, gpus_per_node=gpn)
            errs = [e for e in _layout_rules(ctx.hw, ctx.model, lay, ctx.seq)
                    if e.startswith(k.upper() + "=")]
            if errs:
                raise PlanError("; ".join(errs))


def _compare_with_free(ctx: _Ctx, alloc: Tuple[int, int], best: _Cand) -> List[str]:
    free_req = replace(ctx.req, pins={})
    free_ctx = _Ctx(ctx.hw, free_req)
    free = _search(free_ctx, alloc[0], alloc[1], want_rejects=False)
    if not free.ranked:
        return []
    top = free.ranked[0]
    if top.key == best.key and top.layout.micro_batch == best.layout.micro_batch:
        return ["your pinned layout is also the planner's best for this allocation"]
    slower = top.tokens_per_s / best.tokens_per_s - 1.0
    return ["your pinned layout is %.0f%% %s than the planner's best here, %s (micro-batch %d): %s" % (
        abs(slower) * 100, "slower" if slower > 0 else "faster", _short(top.layout), top.layout.micro_batch,
        _why_lost(ctx, best, top) if slower > 0 else "")]


def _no_fit_message(ctx: _Ctx, alloc: Tuple[int, int], res: _Result) -> str:
    nodes, gpn = alloc
    m = ctx.model
    lines = ["%s (%s params) does not fit for %s on %d node%s x %d GPUs (%g GB each)." % (
        m.label, fmt_params(m.params), ctx.task, nodes, "s" if nodes > 1 else "", gpn, ctx.hw.nt.gpu_memory_gb)]
    if ctx.task in ("pretrain", "finetune"):
        per = 4.0 + ctx.kopt
        lines.append("Weights, gradients and %s states alone are %g B/param x %s = %.0f GB: %.1f GB per GPU over "
                     "%d GPUs, before activations, against %.1f GB usable (%d%% headroom kept)." % (
                         ctx.req.optimizer, per, fmt_params(m.params), per * m.params / GB,
                         per * m.params / GB / (nodes * gpn), nodes * gpn, ctx.usable,
                         round(100 * (1 - ctx.usable / ctx.hw.nt.gpu_memory_gb))))
    if res.misses:
        _, lay, mem = res.misses[0]
        lines.append("The leanest layout, %s (micro-batch %d), %s." % (_short(lay), lay.micro_batch,
                                                                       _mem_words(ctx, mem)))
    elif res.rejected:
        lines.append("No layout passes:")
        lines.extend("  %s: %s" % (r.scope, r.reason) for r in res.rejected[:8])
    if not ctx.req.pins:
        small = _smallest(ctx)
        if small[0] is not None:
            (sn, sg), sres = small
            assert sres is not None
            top = sres.ranked[0]
            lines.append("Smallest allocation that fits: %d node%s x %d GPUs (%d GPUs) with %s, %.1f GB per GPU." % (
                sn, "s" if sn > 1 else "", sg, sn * sg, _short(top.layout), top.memory.total))
        else:
            lines.append(_whole_partition_message(ctx))
    else:
        lines.append("Drop or change the pinned degrees, or use more GPUs.")
    return "\n".join(lines)


def _whole_partition_message(ctx: _Ctx) -> str:
    hw = ctx.hw
    part = hw.partition
    n = part.max_nodes_per_job
    res = _search(ctx, n, hw.nt.gpus, want_rejects=True)
    m = ctx.model
    msg = "%s (%s params) cannot be planned for %s on partition %s even with all %d node%s (%d x %g GB)" % (
        m.label, fmt_params(m.params), ctx.task, part.name, n, "s" if n > 1 else "", n * hw.nt.gpus,
        hw.nt.gpu_memory_gb)
    if res.misses:
        _, lay, mem = res.misses[0]
        msg += ": the leanest layout, %s, %s" % (_short(lay), _mem_words(ctx, mem))
    elif res.rejected:
        msg += ": " + "; ".join(r.reason for r in res.rejected[:3])
    return msg


# ---------------------------------------------------------------------------
# Explanations

def _why_lost(ctx: _Ctx, alt: _Cand, best: _Cand) -> str:
    diffs = []
    for (name, a), (_, b) in zip(alt.costs, best.costs):
        diffs.append((a - b, name, a, b))
    diffs.sort(reverse=True)
    words = []
    for d, name, a, b in diffs[:2]:
        if d <= 0.01 * best.step:
            continue
        extra = ""
        lay = alt.layout
        if name == "tp":
            extra = " (TP=%d%s)" % (lay.tp, " over %s" % ctx.hw.fabric_name if alt.d("tp_fab") else "")
        elif name == "bubble":
            extra = " (PP=%d, %d micro-batches)" % (lay.pp, alt.micro_batches)
        elif name == "dp":
            extra = " (DP=%d over %s)" % (lay.dp * lay.cp, ctx.hw.fabric_name if alt.d("dp_fab") else
                                          ctx.hw.link_name)
        elif name == "recompute":
            extra = " (%s recomputation to fit)" % alt.memory.recompute
        elif name == "compute":
            extra = " (%.0f%% GEMM efficiency at TP=%d vs %.0f%%)" % (
                100 * alt.d("eff"), lay.tp, 100 * best.d("eff")) if alt.d("eff") != best.d("eff") else \
                " (uneven stages)"
        words.append("%s %s vs %s%s" % (COST_WORDS.get(name, name), _t(a), _t(b), extra))
    if not words:
        return "within 1%% of the best (%s)" % ", ".join(
            "%s %s" % (COST_WORDS[n], _t(v)) for n, v in alt.costs if v > 0)
    return "; ".join(words)


def _t(sec: float) -> str:
    if sec >= 100:
        return "%.0f s" % sec
    if sec >= 1:
        return "%.2f s" % sec
    return "%.1f ms" % (sec * 1e3)


def _gb(b: float) -> str:
    if b >= 1e12:
        return "%.1f TB" % (b / 1e12)
    if b >= 1e9:
        return "%.1f GB" % (b / 1e9)
    return "%.0f MB" % (b / 1e6)


def _explain_train(ctx: _Ctx, c: _Cand) -> List[str]:
    hw, m, lay = ctx.hw, ctx.model, c.layout
    nt = hw.nt
    out = []
    step = c.step
    pct = lambda x: 100.0 * x / step  # noqa: E731
    # TP
    legal_max = max(t for t in _divisors(lay.nodes * lay.gpus_per_node)
                    if t <= m.heads and not _tp_rules(hw, m, t, lay.nodes, lay.gpus_per_node))
    where = ("one node's %s" % hw.link_words) if lay.tp <= lay.gpus_per_node else \
        ("one %d-GPU NVLink domain across %d nodes (%s)" % (nt.nvlink_domain, lay.tp // lay.gpus_per_node,
                                                          hw.link_words))
    if lay.tp > 1:
        out.append("TP=%d keeps each tensor-parallel group inside %s; its all-reduces move %s per GPU per "
                   "micro-batch and take %s per step (%.0f%%)." % (
                       lay.tp, where, _gb(c.d("tp_bytes_mb")), _t(c.cost("tp")), pct(c.cost("tp"))))
        if lay.tp < legal_max:
            out.append("TP stops at %d although %d would be allowed: larger TP shrinks the GEMMs and adds "
                       "all-reduces (see the alternatives)." % (lay.tp, legal_max))
    else:
        out.append("TP=1: the layers fit without splitting them, which avoids per-layer all-reduces "
                   "(TP up to %d would stay inside %s)." % (legal_max, hw.link_words))
    # PP
    if lay.pp > 1:
        vp = c.d("vp")
        sched = "bubble (p-1)/m = %d/%d" % (lay.pp - 1, c.micro_batches)
        if vp > 1:
            sched = "interleaved schedule with %d model chunks per GPU: bubble (p-1)/(v*m) = %d/(%d*%d)" % (
                vp, lay.pp - 1, vp, c.micro_batches)
        out.append("PP=%d: %s; stage boundaries send %s per micro-batch over %s; %s = %.1f%% (%s)." % (
            lay.pp, describe_split(m.layers, lay.pp), _gb(c.d("p2p_bytes")),
            hw.fabric_name if c.d("pp_fab") else hw.link_name, sched,
            100.0 * (lay.pp - 1) / (vp * c.micro_batches), _t(c.cost("bubble"))))
    else:
        out.append("PP=1: no pipeline bubble; every GPU holds all %d layers (TP-sharded)." % m.layers)
    # CP / EP
    if lay.cp > 1:
        out.append("CP=%d splits each %d-token sequence into %d-token chunks and passes K/V around a ring "
                   "(%s exposed per step)." % (lay.cp, ctx.seq, ctx.seq // lay.cp, _t(c.cost("cp"))))
    if lay.ep > 1:
        out.append("EP=%d spreads the %d experts over %d data-parallel ranks (%d experts each), so each "
                   "expert's GEMMs see %dx more tokens (%.0f%% efficiency); token all-to-alls take %s per step." % (
                       lay.ep, m.experts, lay.ep, m.experts // lay.ep, lay.ep, 100 * c.d("eff_e"),
                       _t(c.cost("ep"))))
    elif m.is_moe:
        out.append("EP=1: every rank holds all %d experts (TP-split); expert GEMMs run at %.0f%% efficiency "
                   "with no all-to-all." % (m.experts, 100 * c.d("eff_e")))
    # DP
    n_dp = lay.dp * lay.cp
    if n_dp > 1:
        bw = c.d("dp_bw") / 1e9
        over = hw.fabric_name if c.d("dp_fab") else hw.link_name
        zero = {0: "plain data parallelism", 1: "distributed optimizer (ZeRO-1) shards optimizer states",
                2: "ZeRO-2 shards optimizer states and gradients",
                3: "ZeRO-3 (FSDP) shards weights, gradients and optimizer states"}[c.memory.zero]
        what = "gradient sync" if c.memory.zero < 3 else "weight gathers and gradient reduce-scatters"
        out.append("DP=%d%s: %s over %d ranks; %s move%s %s per GPU per step over %s (ring 2(n-1)/n at "
                   "%.0f GB/s effective) in %s, %s of it not hidden behind compute." % (
                       lay.dp, " (x CP=%d)" % lay.cp if lay.cp > 1 else "", zero, n_dp, what,
                       "s" if c.memory.zero < 3 else "", _gb(c.d("dp_bytes")), over, bw, _t(c.d("dp_time")),
                       _t(c.cost("dp"))))
    else:
        out.append("DP=1: the GPUs are all needed for model parallelism; no gradient all-reduce.")
    # memory
    mem = c.memory
    out.append("Memory: %.1f GB of %g GB per GPU (%.0f GB usable at 10%% headroom), on pipeline stage %d: %s." % (
        mem.total, nt.gpu_memory_gb, ctx.usable, mem.stage,
        ", ".join("%s %.1f" % (k, v) for k, v in mem.parts())))
    if mem.recompute == "full":
        out.append("Full activation recomputation is needed to fit: it stores only each layer's input and "
                   "re-runs the forward pass (%s per step)." % _t(c.cost("recompute")))
    elif mem.recompute == "selective":
        out.append("Selective recomputation: attention scores are recomputed instead of stored "
                   "(FlashAttention-style), %s per step." % _t(c.cost("recompute")))
    # speed
    flops_tok = ctx.model_flops_tok
    out.append("Step: %s for %d sequences x %d tokens = %.2fM tokens (%s FLOP/token); compute at %.0f%% of "
               "%g TFLOP/s%s; MFU %.1f%%." % (
                   _t(step), c.global_batch, ctx.seq, c.global_batch * ctx.seq / 1e6, "%.3g" % flops_tok,
                   100 * c.d("eff"), hw.peak / 1e12, " (QLoRA dequantisation included)" if ctx.task == "qlora"
                   else "", 100 * c.mfu))
    return out


def _explain_infer(ctx: _Ctx, c: _Cand) -> List[str]:
    hw, m, lay = ctx.hw, ctx.model, c.layout
    b = c.d("batch_per_replica")
    out = []
    if lay.tp > 1:
        out.append("TP=%d inside %s splits the weights and the KV cache %d ways; each decode step pays 2 "
                   "all-reduces per layer (%s per step)." % (lay.tp, hw.link_words, lay.tp, _t(c.cost("tp"))))
    else:
        out.append("TP=1: the model fits on one GPU per stage; no per-layer all-reduce.")
    if lay.pp > 1:
        out.append("PP=%d: %s; a decode step passes through the stages one after another." % (
            lay.pp, describe_split(m.layers, lay.pp)))
    if lay.dp > 1 and lay.ep > 1:
        out.append("DP=%d attention replicas, %d sequence%s each, share the experts over EP=%d (token "
                   "all-to-alls: %s per step)." % (lay.dp, b, "s" if b > 1 else "", lay.ep, _t(c.cost("ep"))))
    elif lay.dp > 1:
        out.append("DP=%d independent replicas, %d sequence%s each." % (lay.dp, b, "s" if b > 1 else ""))
    mem = c.memory
    out.append("Memory: %.1f GB of %g GB per GPU (%.0f GB usable): %s. KV cache: %d sequence%s x %d tokens." % (
        mem.total, hw.nt.gpu_memory_gb, ctx.usable, ", ".join("%s %.1f" % (k, v) for k, v in mem.parts()),
        b, "s" if b > 1 else "", ctx.seq))
    bw_note = "" if _hbm_known(hw) else " (HBM bandwidth estimated from the FLOP/s)"
    touched = c.d("touched")
    moe = (" Each step touches %.0f%% of the experts." % (100 * touched)) if m.is_moe else ""
    out.append("Decode: %s per step (reading weights and KV cache at %.2f TB/s%s), %.0f tokens/s across %d "
               "replica%s; prefill of %d x %d tokens: %s.%s" % (
                   _t(c.step), hw.hbm / 1e12, bw_note, c.tokens_per_s, lay.dp, "s" if lay.dp > 1 else "", b,
                   ctx.seq, _t(c.prefill or 0.0), moe))
    return out


def _build(ctx: _Ctx, best: _Cand, res: _Result, notes: List[str], how: Optional[str]) -> Plan:
    hw, m, req = ctx.hw, ctx.model, ctx.req
    lay = best.layout
    expl: List[str] = []
    gpus = lay.nodes * lay.gpus_per_node
    if how:
        expl.append("Allocation: %d node%s x %d GPUs = %d GPUs is the %s (lower bound from memory: %d GPUs)." % (
            lay.nodes, "s" if lay.nodes > 1 else "", lay.gpus_per_node, gpus, how, _lower_bound_gpus(ctx)))
    expl.extend(_explain_train(ctx, best) if ctx.train else _explain_infer(ctx, best))
    if best.segment:
        tn = max(1, lay.tp // lay.gpus_per_node)
        expl.append("The job needs --segment=%d: segments of %d nodes each stay inside one %d-GPU NVLink "
                    "domain%s." % (best.segment, best.segment, hw.nt.nvlink_domain,
                                   " (TP groups span %d nodes)" % tn if tn > 1 else ""))
    if m.estimated:
        notes.append("model shape estimated from --params: %d layers, hidden %d, %d heads, FFN %d, vocab %d; "
                     "give --model FILE.yaml for the real shape" % (m.layers, m.hidden, m.heads, m.ffn, m.vocab))
    if m.is_mla and not ctx.train:
        notes.append("MLA's compressed KV cache is replicated on every TP rank (not sharded)")
    if ctx.train and not req.global_batch:
        notes.append("global batch %d sequences (%.2fM tokens): the default %s target, rounded to a multiple "
                     "of DP x micro-batch; set --global-batch to fix it" % (
                         best.global_batch, best.global_batch * ctx.seq / 1e6,
                         "%.2fM-token" % (TOKENS_PER_STEP[ctx.task] / 1e6)))
    if res.batch_note:
        notes.append(res.batch_note)
    alts = []
    for c in res.ranked[1:1 + TOP_ALTERNATIVES]:
        why = "%.1f%% slower: %s" % (100.0 * (best.tokens_per_s / c.tokens_per_s - 1.0), _why_lost(ctx, c, best))
        alts.append(Alternative(c.layout, c.memory.total, c.step, c.tokens_per_s, c.mfu, c.memory.zero,
                                c.memory.recompute, why))
    train_days = None
    scaling: Tuple[ScalePoint, ...] = ()
    if req.tokens and ctx.train:
        train_days = req.tokens / best.tokens_per_s / 86400.0
        scaling = _scaling(ctx, lay, best)
        expl.append("Training on %s tokens takes %.1f days at %s tokens/s on %d GPUs." % (
            _count(req.tokens), train_days, _count(best.tokens_per_s), gpus))
        if req.target_days:
            expl.append(_target_words(ctx, scaling, req.target_days))
    traffic = {k: v / GB for k, v in best.traffic}
    return Plan(site=hw.site, partition=hw.partition.name, layout=lay, memory=best.memory,
                memory_per_gpu_gb=best.memory.total, capacity_gb=hw.nt.gpu_memory_gb, step_time_s=best.step,
                tokens_per_s=best.tokens_per_s, mfu=best.mfu, traffic=traffic, alternatives=tuple(alts),
                explanation=tuple(expl), notes=tuple(notes), model=m, task=ctx.task, precision=req.precision,
                seq=ctx.seq, global_batch=best.global_batch, micro_batches=best.micro_batches,
                zero=best.memory.zero, recompute=best.memory.recompute, segment=best.segment,
                stage_layers=tuple(ctx.counts(lay.pp)), time_breakdown=dict(best.costs),
                rejected=tuple(_dedupe(res.rejected)), scaling=scaling, train_days=train_days,
                prefill_s=best.prefill, virtual_stages=best.d("vp") or 1)


def _dedupe(rs: Iterable[Rejection]) -> List[Rejection]:
    seen = set()
    out = []
    for r in rs:
        if (r.scope, r.reason) not in seen:
            seen.add((r.scope, r.reason))
            out.append(r)
    return out


def _count(x: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return "%.3g%s" % (x / div, unit)
    return "%.0f" % x


def _scaling(ctx: _Ctx, lay: Layout, best: _Cand) -> Tuple[ScalePoint, ...]:
    """Time to train at 1x, 2x, 4x ... the chosen node count (up to the partition's limit)."""
    req = ctx.req
    assert req.tokens
    g = ctx.hw.nt.gpus
    maxn = ctx.hw.partition.max_nodes_per_job
    points = [ScalePoint(lay.nodes, lay.nodes * lay.gpus_per_node, _short(lay), best.tokens_per_s,
                         req.tokens / best.tokens_per_s / 86400.0)]
    sizes = []
    nodes = lay.nodes * 2
    while nodes < maxn and len(sizes) < 7:
        sizes.append(nodes)
        nodes *= 2
    if maxn > lay.nodes:
        sizes.append(maxn)
    if req.target_days and points[0].days > req.target_days:
        need = int(math.ceil(lay.nodes * points[0].days / req.target_days))
        if need <= maxn:
            sizes.extend([need, min(maxn, int(need * 1.1) + 1)])
    for n in sorted(set(sizes)):
        r = _search(ctx, n, g, want_rejects=False)
        if r.ranked:
            c = r.ranked[0]
            points.append(ScalePoint(n, n * g, _short(c.layout), c.tokens_per_s, req.tokens / c.tokens_per_s / 86400.0))
    return tuple(points)


def _target_words(ctx: _Ctx, scaling: Tuple[ScalePoint, ...], days: float) -> str:
    ok = [p for p in scaling if p.days <= days]
    if not ok:
        return "No allocation up to %d nodes trains in %g days (best: %.1f days on %d nodes)." % (
            ctx.hw.partition.max_nodes_per_job, days, min(p.days for p in scaling),
            min(scaling, key=lambda p: p.days).nodes)
    p = min(ok, key=lambda p: p.nodes)
    return "To finish in %g days: %d nodes (%d GPUs, %s) take %.1f days." % (days, p.nodes, p.gpus, p.layout, p.days)


# ---------------------------------------------------------------------------
# Text output

def format_plan(plan: Plan, diagram: bool = False) -> str:
    lay, m = plan.layout, plan.model
    gpus = lay.nodes * lay.gpus_per_node
    lines = []
    moe = ", %s active" % fmt_params(m.active_params) if m.is_moe else ""
    if plan.task == "inference":
        work = "inference, %s, context %d, batch %d" % (plan.precision, plan.seq, plan.global_batch)
    else:
        work = "%s, %s, seq %d, global batch %d (%.2fM tokens)" % (
            plan.task, plan.precision, plan.seq, plan.global_batch, plan.global_batch * plan.seq / 1e6)
    lines.extend(_wrap("Plan: ", "%s (%s params%s), %s" % (m.label, fmt_params(m.params), moe, work)))
    lines.append("Site %s, partition %s: %d node%s x %d GPUs = %d GPUs" % (
        plan.site, plan.partition, lay.nodes, "s" if lay.nodes > 1 else "", lay.gpus_per_node, gpus))
    lines.append("")
    degrees = "TP=%d x PP=%d x DP=%d" % (lay.tp, lay.pp, lay.dp)
    extra = [("CP=%d" % lay.cp) if lay.cp > 1 else "", ("EP=%d" % lay.ep) if lay.ep > 1 else ""]
    degrees += "".join(" x " + e for e in extra if e)
    if plan.task == "inference":
        lines.append("Layout   %s, %d sequence%s per replica" % (degrees, lay.micro_batch,
                                                                "s" if lay.micro_batch > 1 else ""))
    else:
        lines.extend(_wrap("Layout   ", "%s, micro-batch %d, %d micro-batches per step" % (
            degrees, lay.micro_batch, plan.micro_batches)))
        zero = {0: "no ZeRO", 1: "distributed optimizer (ZeRO-1)", 2: "ZeRO-2", 3: "ZeRO-3"}[plan.zero]
        sched = ", interleaved x%d" % plan.virtual_stages if plan.virtual_stages > 1 else ""
        lines.extend(_wrap("         ", "%s recomputation, %s%s" % (plan.recompute, zero, sched)))
    if plan.segment:
        lines.append("         --segment=%d (keep each %d-node segment in one NVLink domain)" % (
            plan.segment, plan.segment))
    mem = plan.memory
    lines.extend(_wrap("Memory   ", "%.1f of %g GB per GPU (stage %d): %s" % (
        plan.memory_per_gpu_gb, plan.capacity_gb, mem.stage, " | ".join("%s %.1f" % kv for kv in mem.parts()))))
    if plan.task == "inference":
        lines.append("Speed    decode step %s, %s tokens/s, prefill %s, MFU %.1f%%" % (
            _t(plan.step_time_s), _count(plan.tokens_per_s), _t(plan.prefill_s or 0), 100 * plan.mfu))
    else:
        lines.append("Speed    step %s, %s tokens/s, MFU %.1f%%" % (
            _t(plan.step_time_s), _count(plan.tokens_per_s), 100 * plan.mfu))
        parts = ["%s %s" % (COST_WORDS[k], _t(v)) for k, v in plan.time_breakdown.items() if v > 0]
        lines.extend(_wrap("         ", "; ".join(parts)))
    lines.extend(_wrap("Traffic  ", "per GPU per step: %s" % ", ".join(
        "%s %s" % (k, _gb(v * GB)) for k, v in plan.traffic.items())))
    if plan.train_days is not None:
        lines.append("Time     %.1f days for the requested tokens" % plan.train_days)
    if diagram:
        from .diagram import render

        lines.append("")
        lines.append(render(lay, stage_layers=plan.stage_layers, segment=plan.segment))
    lines.append("")
    lines.append("Why this layout:")
    for e in plan.explanation:
        lines.extend(_wrap("  - ", e))
    if plan.scaling and len(plan.scaling) > 1:
        lines.append("")
        lines.append("Scaling (same tokens):")
        lines.append("  %6s %7s  %-28s %9s %8s" % ("nodes", "GPUs", "layout", "tokens/s", "days"))
        for p in plan.scaling:
            lines.append("  %6d %7d  %-28s %9s %8.1f" % (p.nodes, p.gpus, p.layout, _count(p.tokens_per_s), p.days))
    if plan.alternatives:
        lines.append("")
        lines.append("Alternatives:")
        for i, a in enumerate(plan.alternatives, 1):
            head = "%d. %s, %s %d, %.1f GB/GPU: " % (
                i, _short(a.layout), "batch/replica" if plan.task == "inference" else "micro-batch",
                a.layout.micro_batch, a.memory_per_gpu_gb)
            lines.extend(_wrap("  ", head + a.why, "     "))
    rules = [r for r in plan.rejected if r.kind != "memory"]
    mems = [r for r in plan.rejected if r.kind == "memory"]
    if rules or mems:
        lines.append("")
        lines.append("Rejected:")
        for r in rules:
            lines.extend(_wrap("  - ", r.reason if r.reason.startswith(r.scope + " ") else
                               "%s: %s" % (r.scope, r.reason)))
        for r in mems[:5]:
            lines.extend(_wrap("  - ", "%s: %s" % (r.scope, r.reason)))
        if len(mems) > 5:
            lines.append("  - ... %d more layouts do not fit in memory (--json lists them)" % (len(mems) - 5))
    if plan.notes:
        lines.append("")
        lines.append("Notes:")
        for n in plan.notes:
            lines.extend(_wrap("  - ", n))
    return "\n".join(lines)


def _wrap(first: str, text: str, rest: Optional[str] = None, width: int = 79) -> List[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=first,
                         subsequent_indent=rest if rest is not None else " " * len(first)) or [first.rstrip()]
