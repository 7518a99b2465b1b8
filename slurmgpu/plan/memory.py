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

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple, Union

from .layout import expert_tp, node_shard
from .models import ModelSpec
from .profile import TEXTBOOK, MemoryProfile, StageBytes

GB = 1e9
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# Optimizer bytes per trained parameter beyond the 16-bit weight and gradient (K in ZeRO):
# fp32 master copy + state. Adam: 4 + 4 + 4; 8-bit Adam: 4 + 1 + 1; SGD with momentum: 4 + 4.
# The master copy is the framework's (profile.MemoryProfile): K - 4 are the optimizer's moments.
OPTIMIZER_BYTES = {"adam": 12.0, "adam8bit": 6.0, "sgd": 8.0}
NF4_BYTES = 0.5 + 0.127 / 8  # 4-bit weights + double-quantized block scales (QLoRA paper: 0.127 bit)
LORA_RANK = 16
OVERHEAD_GB = 2.0  # CUDA context, NCCL buffers, allocator reserve (a rule of thumb, not a measurement)
HEADROOM = 0.10  # keep 10% of the GPU free: fragmentation (ZeRO paper: OOM with >30% free happens)
PREFILL_CHUNK = 8192  # tokens processed at once during prefill (chunked prefill)


@dataclass(frozen=True)
class MemoryBreakdown:
    """GB per GPU on pipeline stage `stage` (a plan's `memory` is its most loaded stage).

    `levers`: the cheaper-profile flags (profile.Lever keys) this breakdown assumes written.
    Serving engines preallocate: `reserved` is what the engine takes per GPU (0: it does not
    preallocate), `kv_pool` the KV cache that leaves; `kv_cache` is what the planned batch needs.
    """

    weights: float
    gradients: float
    optimizer: float
    activations: float
    kv_cache: float
    overhead: float
    stage: int = 0
    recompute: str = "selective"
    zero: int = 1
    levers: Tuple[str, ...] = ()
    reserved: float = 0.0
    kv_pool: float = 0.0

    @property
    def need(self) -> float:
        """What the work itself holds: every term."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.kv_cache + self.overhead

    @property
    def total(self) -> float:
        """What the job occupies per GPU: the engine's preallocation where it makes one."""
        return self.reserved if self.reserved > 0 else self.need

    def to_dict(self) -> Dict[str, Union[float, str, List[str]]]:
        d: Dict[str, Union[float, str, List[str]]] = {
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
            "levers": list(self.levers),
        }
        if self.reserved > 0:
            d["reserved_gb"] = round(self.reserved, 3)
            d["kv_pool_gb"] = round(self.kv_pool, 3)
        return d

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
    gpus_per_node: int = 0  # for sharding groups inside one node (HSDP); 0: unknown, shard over DP x CP


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
    profile: MemoryProfile = TEXTBOOK,
    levers: Sequence[str] = (),
    precision: str = "bf16",
    selective: str = "attention",
) -> MemoryBreakdown:
    """Per-GPU memory of the worst pipeline stage (pretrain, finetune, lora, qlora).

    `interleave` is the number of virtual stages (model chunks) per GPU; Korthikanti's
    factor 1 + (p - 1)/(p * v) covers the extra micro-batches an interleaved schedule keeps.
    `stages` (stage_params for every stage) may be passed in by callers that cache it.
    `profile` is the framework's (its launcher's) memory rules, `levers` the cheaper-profile
    flags assumed written; `optimizer_bytes` is ZeRO's K (master + moments), of which the
    moments (K - 4) are the optimizer's and the master copy the profile's.
    """
    return _worst(
        training_stage_memory(
            model,
            shape,
            task,
            zero,
            recompute,
            optimizer_bytes,
            counts,
            interleave,
            stages,
            None,
            profile,
            levers,
            precision,
            selective,
        )
    )


def shard_groups(shape: TrainShape, group: str, experts_keep_tp: bool = True) -> Tuple[int, int, int]:
    """(sharding group of dense parameters, of expert parameters, expert-TP) for a sharding group kind."""
    t, cp, ep = shape.tp, shape.cp, shape.ep
    dense = shape.dp * cp
    if group == "node" and shape.gpus_per_node:
        dense = node_shard(shape.dp, cp, t, shape.gpus_per_node) * cp  # FSDP shards over DP-shard x CP
    etp = expert_tp(t, shape.dp, cp, ep) if experts_keep_tp else (1 if ep > 1 else t)
    return dense, max(1, dense * t // (etp * ep)), etp  # expert-DP: the ranks holding the same experts


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
    profile: MemoryProfile = TEXTBOOK,
    levers: Sequence[str] = (),
    precision: str = "bf16",
    selective: str = "attention",
) -> List[MemoryBreakdown]:
    """training_memory's breakdown of each stage in `which` (default: representative_stages), so
    the plan can show every stage with the same formulas the search ranks by."""
    t, p, cp, ep = shape.tp, shape.pp, shape.cp, shape.ep
    st = profile.applied(zero, levers)
    if shape.dp * shape.cp == 1:
        st = replace(st, buckets=0.0)  # no data parallelism: no DDP reducer
    if p > 1 and st.copies_pp is not None:
        st = replace(st, copies=st.copies_pp, gathered=0.0, head_copy=0.0)
    moments = optimizer_bytes - 4.0 if st.moments is None else st.moments  # K = fp32 master + moments
    shard_dense, shard_exp, etp = shard_groups(shape, st.group, profile.experts_keep_tp)
    counts = counts if counts is not None else stage_layers(model.layers, p)
    s_loc = shape.seq / cp
    b = shape.micro_batch
    h, a, v = model.hidden, model.heads, model.vocab
    sp = t > 1 and profile.sequence_parallel
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
    used = tuple(k for k in levers if any(lv.key == k and zero in lv.zeros for lv in profile.levers))
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
            # output layer input and the logits at the loss (Korthikanti 4sbh/t(1+v/h) with fp32 logits)
            acts += (4.0 * h + profile.logits_bytes * v) * s_loc * b / t
        wb = 2.0
        if task in ("lora", "qlora"):
            # the frozen base stays in bf16 (NF4 under QLoRA); only the rank-16 adapters train
            if task == "qlora":
                wb = NF4_BYTES
                w = NF4_BYTES * (sp_.dense / t + per_exp) + 2.0 * sp_.embed / t
            else:
                w = 2.0 * (per_dense + per_exp)
            if "weights" in st.sharded:  # FSDP shards the frozen base weights too
                w /= shard_dense
            adapters = lora_params(model, sp_.dense_layers, sp_.moe_layers) / t
            aw, ag, ao = _states(st, moments, adapters, 0.0, shard_dense, 1)
            weights, grads, opt = w + aw, ag, ao
        else:
            weights, grads, opt = _states(st, moments, per_dense, per_exp, shard_dense, shard_exp)
            if precision == "fp8" and profile.fp8_cache:
                weights += profile.fp8_cache * (sp_.dense / t + per_exp)  # linear layers only
        if st.gathered:
            # layers gathered whole before use (and the next prefetched): DeepSpeed's estimator charges
            # 4 bytes x the largest layer, FSDP2 two layers in bf16
            weights += st.gathered * (wb / 2.0) * _largest_layer(model, ep) / t
        if i == p - 1 and st.head_copy:
            weights += st.head_copy * (model.embedding_params if model.tied_embeddings else model.output_params) / t
        grads += st.buffer_gb * GB
        out.append(
            MemoryBreakdown(weights / GB, grads / GB, opt / GB, acts / GB, 0.0, OVERHEAD_GB, i, recompute, zero, used)
        )
    return out


def _states(
    st: StageBytes, moments: float, dense: float, experts: float, shard_dense: int, shard_exp: int
) -> Tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes of `dense` + `experts` parameters under stage bytes `st`."""

    def term(name: str, per: float) -> float:
        if name in st.sharded:
            return per * (dense / shard_dense + experts / shard_exp)
        return per * (dense + experts)

    weights = term("weights", st.weights) + st.copies * (dense + experts)
    grads = term("grads", st.grads) + st.buckets * (dense + experts)
    grads += st.grads_sharded * (dense / shard_dense + experts / shard_exp)
    opt = term("master", st.master) + term("states", moments)
    return weights, grads, opt


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
    profile: MemoryProfile = TEXTBOOK,
    capacity_gb: float = 0.0,
    gpu: str = "",
) -> MemoryBreakdown:
    """Weights, KV cache for `batch` sequences of `seq` tokens, and the prefill working set."""
    return _worst(
        inference_stage_memory(
            model, tp, pp, ep, batch, seq, precision, counts, stages, None, profile, capacity_gb, gpu
        )
    )


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
    profile: MemoryProfile = TEXTBOOK,
    capacity_gb: float = 0.0,
    gpu: str = "",
    selective: str = "attention",
) -> List[MemoryBreakdown]:
    """inference_memory's breakdown of each stage in `which` (default: representative_stages).

    A serving engine's profile (`profile.serve`) sets the prefill chunk of the working set, adds its
    CUDA graphs to the overhead, and says what it preallocates on a `capacity_gb` GPU (`reserved`)
    and the KV pool that leaves (`kv_pool`, which must hold the planned `kv_cache`: serve_fits).
    """
    wb = WEIGHT_BYTES.get(precision, 2.0)
    counts = counts if counts is not None else stage_layers(model.layers, pp)
    h = model.hidden
    width = model.expert_ffn * (model.experts_active + model.shared_experts) if model.is_moe else model.ffn
    serve = profile.serve
    chunk_tokens, graph_gb = PREFILL_CHUNK, 0.0
    if serve is not None and capacity_gb:
        chunk_tokens = serve.tier(capacity_gb, gpu, tp)[0]
        graph_gb = serve.graph_gb(capacity_gb, gpu, tp)
    chunk = min(batch * seq, chunk_tokens)
    work = chunk * 2.0 * (4 * h + 3 * width) / tp + 4.0 * batch * model.vocab / tp
    out: List[MemoryBreakdown] = []
    for i in representative_stages(counts) if which is None else which:
        sp_ = stages[i] if stages is not None else stage_params(model, counts, i)
        weights = wb * ((sp_.dense + sp_.embed) / tp + sp_.experts / (tp * ep))
        kv = kv_cache_bytes(model, seq, batch, wb, tp, layers=counts[i])
        mb = MemoryBreakdown(weights / GB, 0.0, 0.0, work / GB, kv / GB, OVERHEAD_GB + graph_gb, i, "none", 0)
        if serve is not None and capacity_gb:
            share = serve.share(capacity_gb, gpu, tp, pp) * capacity_gb
            if serve.covers_all:
                mb = replace(mb, reserved=share, kv_pool=share - (mb.need - mb.kv_cache))
            else:
                mb = replace(mb, reserved=share + mb.activations + mb.overhead, kv_pool=share - mb.weights)
        out.append(mb)
    return out


def serve_fits(mem: MemoryBreakdown, usable: float, preallocates: bool = False) -> bool:
    """Whether a serving breakdown fits: where the engine preallocates (`preallocates`), its KV pool
    holds the planned batch (a share its own rule makes zero or negative holds nothing: SGLang's
    reserve grows with TP x PP); else every term within the usable memory."""
    if preallocates:
        return mem.reserved > 0 and mem.kv_pool >= mem.kv_cache
    return mem.total <= usable
