"""Per-GPU memory of a training or inference layout, term by term.

Formulas and the public figures the tests hold them to:
- model states (ZeRO, Rajbhandari et al. 2020): mixed-precision Adam is 2 + 2 + 12 = 16
  bytes per parameter; ZeRO-1/2/3 divide the optimizer / + gradients / + weights by the
  data-parallel degree.
- activations (Korthikanti et al. 2022, Table 2): s*b*h*(34 + 5*a*s/h) bytes per layer,
  divided by TP with sequence parallelism; selective recomputation drops the 5*a*s/h
  attention-score term (as FlashAttention does), full recomputation keeps only the 2*s*b*h
  layer input. The 34 is for a 4h GeLU MLP; wider or gated MLPs scale its MLP part (19).
- with 1F1B pipelining, stage i holds min(p - i, m) micro-batches in flight.
- KV cache: 2 (K and V) x layers x KV heads x head size x tokens x bytes.
All sizes are decimal GB (1e9 bytes), as the public figures are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

from .layout import expert_tp
from .models import ModelSpec

GB = 1e9
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# Optimizer bytes per trained parameter beyond the 16-bit weight and gradient (K in ZeRO):
# fp32 master copy + state. Adam: 4 + 4 + 4; 8-bit Adam: 4 + 1 + 1; SGD with momentum: 4 + 4.
OPTIMIZER_BYTES = {"adam": 12.0, "adam8bit": 6.0, "sgd": 8.0}
# Framework memory profile of Megatron-style plans (ZeRO 0/1: NeMo's distributed Adam): with bf16
# weights NeMo keeps only the low 16 bits of each fp32 master weight (`store_param_remainders`, set
# by NeMo whenever optimizer state is fp32 and the model bf16); the bf16 weight is the high half, so
# the master copy costs 2 bytes, not 4. Gradients are reduced in bf16 (`optim.grad_sync_dtype=bf16`
# in NeMo's performance recipes): 2 + 2 + (2 + 8) = 14 bytes per parameter, the last 10 sharded
# over DP x CP. FSDP/ZeRO-2/3 (torchtitan, DeepSpeed) keep a full fp32 master: the paper's 16.
MASTER_REMAINDER_SAVING = 2.0
NF4_BYTES = 0.5 + 0.127 / 8  # 4-bit weights + double-quantized block scales (QLoRA paper: 0.127 bit)
LORA_RANK = 16
OVERHEAD_GB = 2.0  # CUDA context, NCCL buffers, allocator reserve (a rule of thumb, not a measurement)
HEADROOM = 0.10  # keep 10% of the GPU free: fragmentation (ZeRO paper: OOM with >30% free happens)
PREFILL_CHUNK = 8192  # tokens processed at once during prefill (chunked prefill)


@dataclass(frozen=True)
class MemoryBreakdown:
    """GB per GPU on pipeline stage `stage` (a plan's `memory` is its most loaded stage)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    kv_cache: float
    overhead: float
    stage: int = 0
    recompute: str = "selective"
    zero: int = 1

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.kv_cache + self.overhead

    def to_dict(self) -> Dict[str, Union[float, str]]:
        return {
            "weights_gb": round(self.weights, 3),
            "gradients_gb": round(self.gradients, 3),
            "optimizer_gb": round(self.optimizer, 3),
            "activations_gb": round(self.activations, 3),
            "kv_cache_gb": round(self.kv_cache, 3),
            "overhead_gb": round(self.overhead, 3),
            "total_gb": round(self.total, 3),
            "stage": self.stage,
            "recompute": self.recompute,
            "zero": self.zero,
        }

    def parts(self) -> List[Tuple[str, float]]:
        names = ("weights", "gradients", "optimizer", "activations", "kv_cache", "overhead")
        return [(n.replace("_", " "), getattr(self, n)) for n in names if getattr(self, n) > 0.0005]


def usable_gb(capacity_gb: float) -> float:
    return capacity_gb * (1.0 - HEADROOM)


# ---------------------------------------------------------------------------
# Textbook formulas (tested against the papers' numbers)


def model_states_bytes(
    params: float,
    dp: int = 1,
    zero: int = 0,
    optimizer_bytes: float = 12.0,
    weight_bytes: float = 2.0,
    grad_bytes: float = 2.0,
) -> Tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU under ZeRO stage `zero` over `dp` ranks."""
    w = weight_bytes * params
    g = grad_bytes * params
    o = optimizer_bytes * params
    if zero >= 1:
        o /= dp
    if zero >= 2:
        g /= dp
    if zero >= 3:
        w /= dp
    return w, g, o


def activation_bytes_per_layer(
    s: float,
    b: float,
    h: float,
    a: float,
    t: int = 1,
    sp: bool = False,
    recompute: str = "none",
    base: float = 34.0,
    flash: bool = False,
) -> float:
    """Korthikanti et al. Table 2, generalised: `base` is 34 for a 4h GeLU MLP.

    `flash`: FlashAttention keeps no s x s scores (only O(s) softmax statistics), so `none` stores
    what `selective` does; the planner always assumes it (every framework it plans for uses it).
    """
    if recompute == "full":
        return 2.0 * s * b * h / (t if sp else 1)
    scores = 0.0 if recompute == "selective" or flash else 5.0 * a * s / h
    if sp or t == 1:
        return s * b * h * (base + scores) / t
    return s * b * h * (10.0 + (base - 10.0) / t + scores / t)


def layer_act_base(model: ModelSpec, moe: bool) -> float:
    """The per-layer constant (34 for GPT-3) for this model: attention + norms 4 + MLP.

    Attention bytes per token / h: 2 (QKV input) + 1 (dropout mask) + Q, K, V and the output as
    wide as they are: 2*q (Q) + 2*q (output, also the projection's input) + 4*kv (K and V), q and
    kv the query and key/value widths over h, so 11 for multi-head attention with q = kv = 1 and
    7.5 for Llama 3 70B's 8 KV heads of 64 (MLA: Q and K of heads x (head + RoPE) dims, V and the
    output of heads x value dims, and the two compressed latents the up-projections read).
    MLP bytes per token / h: 2 (input) + 1 (dropout mask) + 4*ffn/h (GeLU: its input and output)
    or 6*ffn/h (gated: gate, up and their product). An MoE layer keeps that per routed copy of
    the token (top-k plus shared experts) and two k*h dispatch/combine buffers.
    """
    h = float(model.hidden)
    if model.is_mla:
        qk = model.heads * (model.hd + model.rope_head_dim) / h
        v = model.heads * (model.v_head_dim or model.hd) / h
        latent = (model.q_lora_rank + model.kv_lora_rank + model.rope_head_dim) / h
        attn = 3.0 + 4.0 * qk + 4.0 * v + 2.0 * latent
    else:
        attn = 3.0 + 4.0 * model.attn_width / h + 4.0 * model.kv_heads * model.hd / h
    per_width = 6.0 if model.gated else 4.0
    if moe:
        copies = model.experts_active + model.shared_experts
        mlp = 3.0 + copies * per_width * model.expert_ffn / h + 4.0 * model.experts_active
    else:
        mlp = 3.0 + per_width * model.ffn / h
    return 4.0 + attn + mlp


# What a launcher's `selective` recomputation keeps (types.Capabilities.selective):
#   "attention": Megatron's: recompute the attention core, which FlashAttention never stores, so as
#                `none`;
#   "op":        PyTorch's op-level selective activation checkpointing as torchtitan runs it
#                (selective_ac_option 'op'): each layer keeps its input, the attention kernel's output
#                and every other matmul output, and recomputes the rest (norms, activations, the
#                other matmuls) in backward.
SELECTIVE_POLICIES = ("attention", "op")


def layer_act_op(model: ModelSpec) -> float:
    """Bytes per token / h one layer keeps under op-level selective checkpointing ("op").

    The layer input (2) and the attention output (2*q); of the matmul outputs in order (q, k, v, o
    projections, then gate, up, down) the 1st, 3rd, 5th and 7th: Q (2*q), V (2*kv), gate (2*ffn/h)
    and the MLP output (2). An MoE layer's routed matmuls are counted as the dense MLP of its
    routed copies (top-k plus shared).
    """
    h = float(model.hidden)
    q = model.attn_width / h
    kv = model.kv_heads * model.hd / h
    if model.is_moe:
        ffn = (model.experts_active + model.shared_experts) * model.expert_ffn / h
    else:
        ffn = model.ffn / h
    return 2.0 + 2.0 * q + 2.0 * q + 2.0 * kv + 2.0 * ffn + 2.0


def kv_cache_bytes(
    model: ModelSpec, seq: int, batch: int = 1, bytes_per_elem: float = 2.0, tp: int = 1, layers: Optional[int] = None
) -> float:
    """KV cache for `batch` sequences of `seq` tokens; GQA heads shard over TP, MLA's latent does not."""
    n_layers = model.layers if layers is None else layers
    shard = 1 if model.is_mla else tp
    return model.kv_elems_per_token_layer() * n_layers * seq * batch * bytes_per_elem / shard


# ---------------------------------------------------------------------------
# Pipeline stages


def stage_layers(layers: int, pp: int) -> List[int]:
    """Layers per stage; uneven splits take a layer off the first and last stages first.

    Those stages also hold the embedding and output layer (Llama 3 405B: 126 layers on
    16 stages = 14 x 8 + 2 x 7).
    """
    full = -(-layers // pp)
    counts = [full] * pp
    deficit = full * pp - layers
    order = []
    lo, hi = 0, pp - 1
    while lo <= hi:
        order.append(lo)
        if hi != lo:
            order.append(hi)
        lo, hi = lo + 1, hi - 1
    for i in order[:deficit]:
        counts[i] -= 1
    return counts


def describe_split(layers: int, pp: int) -> str:
    counts = stage_layers(layers, pp)
    if pp == 1:
        return "1 stage of %d layers" % layers
    if len(set(counts)) == 1:
        return "%d stages of %d layers" % (pp, counts[0])
    big = max(counts)
    small = [str(i) for i, c in enumerate(counts) if c != big]
    return (
        "%d layers on %d stages: stage%s %s get %d, the other %d get %d (the first and last stage "
        "also hold the embedding and output layer)"
        % (layers, pp, "s" if len(small) > 1 else "", ", ".join(small), big - 1, counts.count(big), big)
    )


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one pipeline stage before TP/EP sharding."""

    dense: float  # attention, dense MLPs, norms, router, shared experts
    experts: float  # routed experts (shard over TP x EP)
    embed: float  # embedding / output layer (shards over TP, stays bf16 under QLoRA)
    dense_layers: int
    moe_layers: int


def stage_params(model: ModelSpec, counts: Sequence[int], stage: int) -> StageParams:
    first = sum(counts[:stage])
    last = first + counts[stage]
    n_dense_lead = model.dense_layers if model.is_moe else model.layers
    dl = max(0, min(last, n_dense_lead) - first)
    ml = counts[stage] - dl
    dense = dl * model.dense_layer_params + ml * model.moe_layer_shared_params
    experts = ml * model.experts * model.expert_params
    embed = 0.0
    if stage == 0:
        embed += model.embedding_params
    if stage == len(counts) - 1:
        embed += model.hidden  # final norm
        if model.tied_embeddings:
            if len(counts) > 1:
                embed += model.embedding_params  # the last stage keeps its own copy
        else:
            embed += model.output_params
    return StageParams(float(dense), float(experts), float(embed), dl, ml)


def lora_params(model: ModelSpec, dense_layers: int, moe_layers: int, rank: int = LORA_RANK) -> float:
    """LoRA adapters of rank r on every attention projection and dense-MLP matrix: r*(in+out) each."""
    h, q, kv = model.hidden, model.attn_width, model.kv_heads * model.hd
    attn = rank * ((h + q) * 2 + (h + kv) * 2)
    mlp = rank * (h + model.ffn) * (3 if model.gated else 2)
    return dense_layers * (attn + mlp) + moe_layers * attn


# ---------------------------------------------------------------------------
# Whole-GPU estimates


@dataclass(frozen=True)
class TrainShape:
    """What the memory estimate needs from a candidate layout."""

    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    micro_batch: int
    micro_batches: int
    seq: int


def representative_stages(counts: Sequence[int]) -> List[int]:
    """The stages the search evaluates: the first (embedding, most micro-batches in flight), the
    first with the most layers, and the last (output layer and logits)."""
    return sorted({0, list(counts).index(max(counts)), len(counts) - 1})


def _worst(stages: Sequence[MemoryBreakdown]) -> MemoryBreakdown:
    """The most loaded stage; the first of equals, so ties keep the lowest stage index."""
    return max(stages, key=lambda mb: mb.total)


def training_memory(
    model: ModelSpec,
    shape: TrainShape,
    task: str = "pretrain",
    zero: int = 1,
    recompute: str = "selective",
    optimizer_bytes: float = 12.0,
    counts: Optional[Sequence[int]] = None,
    interleave: int = 1,
    stages: Optional[Sequence[StageParams]] = None,
    selective: str = "attention",
) -> MemoryBreakdown:
    """Per-GPU memory of the worst pipeline stage (pretrain, finetune, lora, qlora).

    `interleave` is the number of virtual stages (model chunks) per GPU; Korthikanti's
    factor 1 + (p - 1)/(p * v) covers the extra micro-batches an interleaved schedule keeps.
    `stages` (stage_params for every stage) may be passed in by callers that cache it.
    """
    return _worst(
        training_stage_memory(
            model, shape, task, zero, recompute, optimizer_bytes, counts, interleave, stages, selective=selective
        )
    )


def training_stage_memory(
    model: ModelSpec,
    shape: TrainShape,
    task: str = "pretrain",
    zero: int = 1,
    recompute: str = "selective",
    optimizer_bytes: float = 12.0,
    counts: Optional[Sequence[int]] = None,
    interleave: int = 1,
    stages: Optional[Sequence[StageParams]] = None,
    which: Optional[Sequence[int]] = None,
    selective: str = "attention",
) -> List[MemoryBreakdown]:
    """training_memory's breakdown of each stage in `which` (default: representative_stages), so
    the plan can show every stage with the same formulas the search ranks by."""
    t, p, cp, ep = shape.tp, shape.pp, shape.cp, shape.ep
    if zero <= 1 and optimizer_bytes >= OPTIMIZER_BYTES["adam"]:
        optimizer_bytes -= MASTER_REMAINDER_SAVING  # NeMo's distributed Adam: see MASTER_REMAINDER_SAVING
    shard_dense = shape.dp * cp  # Megatron's distributed optimizer shards over DP x CP
    etp = expert_tp(t, shape.dp, cp, ep)
    shard_exp = max(1, shard_dense * t // (etp * ep))  # expert-DP: the ranks holding the same experts
    counts = counts if counts is not None else stage_layers(model.layers, p)
    s_loc = shape.seq / cp
    b = shape.micro_batch
    h, a, v = model.hidden, model.heads, model.vocab
    sp = t > 1
    op = recompute == "selective" and selective == "op"  # the launcher's selective keeps less (layer_act_op)
    act_dense = activation_bytes_per_layer(
        s_loc, b, h, a, t, sp, recompute, layer_act_op(model) if op else layer_act_base(model, False), True
    )
    act_moe = (
        activation_bytes_per_layer(
            s_loc, b, h, a, t, sp, recompute, layer_act_op(model) if op else layer_act_base(model, True), True
        )
        if model.is_moe
        else 0.0
    )
    work = 0.0
    if recompute == "full":  # one layer's activations are live again while it is recomputed
        work = activation_bytes_per_layer(s_loc, b, h, a, t, sp, "selective", layer_act_base(model, model.is_moe))
    out: List[MemoryBreakdown] = []
    for i in representative_stages(counts) if which is None else which:
        sp_ = stages[i] if stages is not None else stage_params(model, counts, i)
        per_dense = (sp_.dense + sp_.embed) / t
        per_exp = sp_.experts / (etp * ep)
        in_flight: float = min(p - i, shape.micro_batches)
        if interleave > 1:
            in_flight *= 1.0 + (p - 1) / float(p * interleave)
        acts = in_flight * (sp_.dense_layers * act_dense + sp_.moe_layers * act_moe) + work
        if i == p - 1:
            acts += 4.0 * s_loc * b * (h + v) / t  # output layer and fp32 logits (Korthikanti 4sbh/t(1+v/h))
        wb = 2.0
        if task in ("lora", "qlora"):
            if task == "qlora":
                wb = NF4_BYTES
                w = NF4_BYTES * (sp_.dense / t + per_exp) + 2.0 * sp_.embed / t
            else:
                w = 2.0 * (per_dense + per_exp)
            if zero >= 3:  # FSDP shards the frozen base weights too
                w /= shard_dense
            adapters = lora_params(model, sp_.dense_layers, sp_.moe_layers) / t
            aw, ag, ao = model_states_bytes(adapters, shard_dense, zero, optimizer_bytes)
            weights, grads, opt = w + aw, ag, ao
        else:
            dw, dg, do = model_states_bytes(per_dense, shard_dense, zero, optimizer_bytes)
            ew, eg, eo = model_states_bytes(per_exp, shard_exp, zero, optimizer_bytes)
            weights, grads, opt = dw + ew, dg + eg, do + eo
        if zero >= 3 and shard_dense > 1:
            # ZeRO-3 gathers one layer whole before using it, and prefetches the next (DeepSpeed: 4 x largest layer)
            weights += 2 * wb * _largest_layer(model, ep) / t
        out.append(MemoryBreakdown(weights / GB, grads / GB, opt / GB, acts / GB, 0.0, OVERHEAD_GB, i, recompute, zero))
    return out


def _largest_layer(model: ModelSpec, ep: int) -> float:
    if not model.is_moe:
        return float(model.dense_layer_params)
    return max(
        model.dense_layer_params if model.dense_layers else 0,
        model.moe_layer_shared_params + model.experts * model.expert_params / ep,
    )


def inference_memory(
    model: ModelSpec,
    tp: int,
    pp: int,
    ep: int,
    batch: int,
    seq: int,
    precision: str = "bf16",
    counts: Optional[Sequence[int]] = None,
    stages: Optional[Sequence[StageParams]] = None,
) -> MemoryBreakdown:
    """Weights, KV cache for `batch` sequences of `seq` tokens, and the prefill working set."""
    return _worst(inference_stage_memory(model, tp, pp, ep, batch, seq, precision, counts, stages))


def inference_stage_memory(
    model: ModelSpec,
    tp: int,
    pp: int,
    ep: int,
    batch: int,
    seq: int,
    precision: str = "bf16",
    counts: Optional[Sequence[int]] = None,
    stages: Optional[Sequence[StageParams]] = None,
    which: Optional[Sequence[int]] = None,
    selective: str = "attention",
) -> List[MemoryBreakdown]:
    """inference_memory's breakdown of each stage in `which` (default: representative_stages)."""
    wb = WEIGHT_BYTES.get(precision, 2.0)
    counts = counts if counts is not None else stage_layers(model.layers, pp)
    h = model.hidden
    width = model.expert_ffn * (model.experts_active + model.shared_experts) if model.is_moe else model.ffn
    chunk = min(batch * seq, PREFILL_CHUNK)
    work = chunk * 2.0 * (4 * h + 3 * width) / tp + 4.0 * batch * model.vocab / tp
    out: List[MemoryBreakdown] = []
    for i in representative_stages(counts) if which is None else which:
        sp_ = stages[i] if stages is not None else stage_params(model, counts, i)
        weights = wb * ((sp_.dense + sp_.embed) / tp + sp_.experts / (tp * ep))
        kv = kv_cache_bytes(model, seq, batch, wb, tp, layers=counts[i])
        out.append(MemoryBreakdown(weights / GB, 0.0, 0.0, work / GB, kv / GB, OVERHEAD_GB, i, "none", 0))
    return out
