"""The cost model: memory and step time of one candidate layout, term by term, so the explanation can
name the term that decided."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .hardware import LATENCY_S, LINK_WORDS, Hardware
from .layout import Layout, expert_tp
from .memory import (
    NF4_BYTES,
    OPTIMIZER_BYTES,
    WEIGHT_BYTES,
    MemoryBreakdown,
    StageParams,
    kv_cache_bytes,
    layer_act_base,
    lora_params,
    stage_layers,
    stage_params,
    usable_gb,
)
from .models import ModelSpec
from .types import PlanRequest, task_name

CP_MIN_TOKENS = 4096  # context parallelism is only tried while each rank keeps >= 4K tokens


MICRO_BATCHES = (1, 2, 4, 8)


TOKENS_PER_STEP = {"pretrain": 4 * 2**20, "finetune": 2**20, "lora": 2**18, "qlora": 2**18}


SEQS_PER_GPU = 1 / 8.0  # default global batch grows to at least one sequence per 8 GPUs


QLORA_SLOWDOWN = 0.75  # NF4 dequantisation before each GEMM (estimate)


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
    "compute": "compute",
    "recompute": "recomputation",
    "tp": "TP all-reduces",
    "cp": "CP ring exchange",
    "ep": "EP all-to-all",
    "bubble": "pipeline bubble",
    "pp_p2p": "pipeline sends",
    "dp": "exposed gradient sync",
    "decode": "weight/KV reads and math",
    "prefill": "prefill",
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
        self.model_flops_tok = scale * (
            6.0 * self.layer_params * m.layers + self.head_flops + self.attn_flops * m.layers
        )
        # fwd+bwd FLOPs per token of one layer, split by which GEMMs run them
        self.f_dense = scale * 6.0 * m.dense_layer_params  # a dense layer's matmuls
        self.f_shared = scale * 6.0 * m.moe_layer_shared_params  # MoE layer: attention, router, shared experts
        self.f_experts = scale * 6.0 * m.experts_active * m.expert_params  # MoE layer: routed experts
        # FlashAttention skips the masked half of causal attention: time goes with half the model FLOPs;
        # it has no weights, so LoRA does not shrink its backward
        self.attn_time_flops = 6.0 * self.seq * m.attn_width
        # memory-bound bytes per token of one layer (fwd + bwd): passes over what the layer stores
        t = hw.terms
        cast = t.fp8_cast_bytes * m.hidden if req.precision == "fp8" and hw.peak > hw.peak_bf16 else 0.0
        self.mem_dense = t.mem_passes * layer_act_base(m, False) * m.hidden + cast
        self.mem_moe = t.mem_passes * layer_act_base(m, True) * m.hidden + cast if m.is_moe else 0.0
        self._counts: Dict[int, List[int]] = {}
        self._stages: Dict[int, List[StageParams]] = {}
        self._lora: Dict[Tuple[int, int], float] = {}
        self._groups: Dict[Tuple[int, ...], Tuple[float, float, int]] = {}
        # calibrate sets a list here to record every training candidate a search evaluates: which ones
        # fit in memory does not depend on the cost terms, so a fit re-times them instead of searching
        self.trace: Optional[List[Tuple[Any, ...]]] = None

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
    t = ctx.hw.terms
    return ctx.hw.gemm_eff * w / (w + t.gemm_w0) * tokens / (tokens + t.gemm_t0)


def _attn_rate(ctx: _Ctx, keys: float) -> float:
    """FlashAttention FLOP/s: BF16 (FP8 does not apply), lower for short sequences (fewer tiles), and
    lower with PyTorch SDPA's FlashAttention-2 kernels on GPUs newer than Ampere (terms.attn_sdpa)."""
    hw = ctx.hw
    rate = hw.peak_bf16 * hw.attn_eff * keys / (keys + hw.terms.attn_s0)
    if ctx.req.caps.attention == "sdpa" and hw.arch in ("hopper", "blackwell"):
        rate *= hw.terms.attn_sdpa
    return rate


def _eff_expert(ctx: _Ctx, tp: int, ep: int, tokens: float) -> float:
    """Routed-expert GEMMs: each local expert sees tokens x top-k / experts x EP tokens per micro-batch.

    This is why EP exists: it gathers tokens from EP ranks so each expert's GEMM is large enough.
    """
    m = ctx.model
    per_expert = tokens * m.experts_active / m.experts * ep
    return _eff(ctx, tp, per_expert, m.expert_ffn) * ctx.hw.terms.grouped_gemm


def _op_recompute_share(m: ModelSpec) -> float:
    """The share of a layer's matmul FLOPs op-level checkpointing recomputes: the 2nd, 4th and 6th
    matmuls (k and output projections, the MLP's up projection) of q, k, v, o, gate, up, down."""
    aw, kvw = m.attn_width, m.kv_heads * m.hd
    ffn = m.expert_ffn if m.is_moe else m.ffn
    mlp = (3.0 if m.gated else 2.0) * ffn
    return (kvw + aw + ffn) / (2.0 * aw + 2.0 * kvw + mlp)


def _ep_bytes(ctx: _Ctx, tokens: float, ep: int, ep_k: int) -> Tuple[float, float]:
    """(NVLink, fabric) bytes of one MoE layer's four all-to-alls (dispatch and combine, fwd and bwd)
    for `tokens` tokens per rank, EP peers `ep_k` to a node.

    Each token goes to top-k experts spread evenly over the EP group; a copy for a peer in the same
    node stays on NVLink. With node-limited routing (DeepSeek-V3: 8 expert groups, each token in at
    most 4) and a group per node, a token crosses the fabric once per destination node (DeepEP
    forwards inside the node over NVLink), so at most `router_group_topk` fabric copies per token.
    """
    m = ctx.model
    if ep <= 1:
        return 0.0, 0.0
    k = m.experts_active
    near = k * (ep_k - 1) / ep
    far = k * (ep - ep_k) / ep
    nodes = ep / max(1, ep_k)
    if m.router_group_topk and m.router_groups and nodes >= m.router_groups:
        far = min(far, float(m.router_group_topk))
    unit = 4.0 * tokens * m.hidden * 2.0
    return unit * near, unit * far


def _expert_dp(tp: int, dp: int, cp: int, ep: int) -> Tuple[int, int]:
    """(expert-TP, expert-DP) of a stage: EP x expert-TP x expert-DP = TP x CP x DP (Megatron)."""
    etp = expert_tp(tp, dp, cp, ep)
    return etp, max(1, tp * dp * cp // (etp * ep))


def _train_candidate(
    ctx: _Ctx,
    lay: Layout,
    batch: int,
    zero: int,
    recompute: str,
    memory: MemoryBreakdown,
    seg: Optional[int],
    vp: int = 1,
) -> _Cand:
    if ctx.trace is not None:
        ctx.trace.append((lay, batch, zero, recompute, memory, seg, vp))
    m, hw = ctx.model, ctx.hw
    terms = hw.terms
    tp, pp, dp, cp, ep, mb = lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.micro_batch
    gpn = lay.gpus_per_node
    s = ctx.seq
    n_mb = batch // (dp * mb)
    counts = ctx.counts(pp)
    stages = ctx.stages(pp)
    tokens_gpu = mb * s / cp
    slow = QLORA_SLOWDOWN if ctx.task == "qlora" else 1.0
    eff = _eff(ctx, tp, tokens_gpu) * slow
    etp, edp = _expert_dp(tp, dp, cp, ep)
    eff_e = _eff_expert(ctx, etp, ep, tokens_gpu) * slow if m.is_moe else eff
    rate = hw.peak * eff
    rate_e = hw.peak * eff_e
    sc = ctx.flops_scale
    # seconds per token (per TP rank) of one dense / one MoE layer, and of recomputing it: linear
    # GEMMs at the requested precision, FlashAttention at BF16, memory-bound work at HBM speed
    t_attn = ctx.attn_time_flops / _attn_rate(ctx, s / cp)
    t_dense = ctx.f_dense / rate + t_attn + ctx.mem_dense / hw.hbm
    t_moe = (ctx.f_shared / rate + ctx.f_experts / rate_e + t_attn + ctx.mem_moe / hw.hbm) if m.is_moe else 0.0
    if recompute == "full":  # one more forward pass (a third of fwd+bwd)
        rc_dense, rc_moe = t_dense / 3.0, t_moe / 3.0
    elif recompute == "selective" and ctx.req.caps.selective == "op":
        # op-level checkpointing (memory.layer_act_op): the unsaved matmuls and the memory-bound work
        # run their forward again; the attention kernel's output is kept
        share = _op_recompute_share(m)
        rc_dense = (share * ctx.f_dense / rate + ctx.mem_dense / hw.hbm) / 3.0
        rc_moe = (share * (ctx.f_shared / rate + ctx.f_experts / rate_e) + ctx.mem_moe / hw.hbm) / 3.0
    elif recompute == "selective":  # the attention core's forward
        rc_dense = rc_moe = t_attn / 3.0
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
    edp_bw, edp_fab, _ = ctx.group(etp * ep, edp, gpn, seg)

    ar_payload = mb * (s / cp) * m.hidden * 2.0
    n_ar = 4 + (2 if recompute == "full" else 0)
    kv_w = m.heads * (2 * m.hd + m.rope_head_dim) if m.is_mla else 2 * m.kv_heads * m.hd
    cp_layer = 3.0 * (cp - 1) * mb * (s / cp) * kv_w * 2.0 / tp
    attn_layer_t = t_attn * mb * s / (tp * cp)
    ep_near, ep_far = _ep_bytes(ctx, mb * (s / cp) / tp, ep, ep_k)
    if recompute == "full":
        ep_near, ep_far = 1.5 * ep_near, 1.5 * ep_far
    ep_payload = ep_near + ep_far
    ep_t_layer = 0.0
    if ep > 1:
        ep_t_layer = (ep_near / hw.link_bw + ep_far / (hw.nic_node / gpn)) * terms.ep_exposed

    worst = None
    for i in sorted({0, counts.index(max(counts)), pp - 1}):
        sp_ = stages[i]
        n_i = counts[i]
        tok = tokens_gpu / tp
        comp = tok * (
            sp_.dense_layers * t_dense + sp_.moe_layers * t_moe + (sc * ctx.head_flops / rate if i == pp - 1 else 0.0)
        )
        rc = tok * (sp_.dense_layers * rc_dense + sp_.moe_layers * rc_moe)
        tp_bytes = n_i * n_ar * 2.0 * (tp - 1) / tp * ar_payload if tp > 1 else 0.0
        t_tp = terms.tp_exposed * (tp_bytes / tp_bw + n_i * n_ar * LATENCY_S) if tp > 1 else 0.0
        cp_bytes = n_i * cp_layer
        t_cp = 0.0
        if cp > 1:  # the ring exchange hides behind attention where it can, never wholly
            ring = cp_layer / cp_bw
            t_cp = n_i * max(ring - attn_layer_t, terms.cp_exposed * ring)
        t_ep = sp_.moe_layers * ep_t_layer
        ep_bytes = sp_.moe_layers * ep_payload
        comp += n_i * terms.layer_overhead_s + sp_.moe_layers * terms.moe_layer_overhead_s
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
            dense_b, exp_b = 2.0 * (sp_.dense + sp_.embed) / tp, 2.0 * sp_.experts / (etp * ep)
        if zero >= 3 and n_dp > 1:
            # FSDP: every micro-batch all-gathers the weights for forward and again for backward and
            # reduce-scatters the gradients, one ring per layer each time (n - 1 hop latencies each)
            wd = wbytes * (sp_.dense + sp_.embed) / tp if lora else dense_b
            we = wbytes * sp_.experts / (etp * ep) if lora else exp_b
            vol_mb = (n_dp - 1) / n_dp * (2 * wd + dense_b)
            vol_e_mb = (edp - 1) / edp * (2 * we + exp_b) if edp > 1 else 0.0
            per_mb = vol_mb / dp_bw + (vol_e_mb / edp_bw if vol_e_mb else 0.0) + 3 * counts[i] * (n_dp - 1) * LATENCY_S
            busy = comp + rc
            exposed = n_mb * (max(0.0, per_mb - busy) + terms.fsdp_exposed * min(per_mb, busy))
            vol, vol_e, t_sync = n_mb * vol_mb, n_mb * vol_e_mb, n_mb * per_mb
        else:
            # ring all-reduce (or reduce-scatter + all-gather: the same bytes) once per step
            vol = 2.0 * (n_dp - 1) / n_dp * dense_b if n_dp > 1 else 0.0
            vol_e = 2.0 * (edp - 1) / edp * exp_b if edp > 1 else 0.0
            t_sync = (vol / dp_bw if vol else 0.0) + (vol_e / edp_bw if vol_e else 0.0)
            if n_dp > 1:  # Megatron buckets max(40M, 1M x DP) parameters; each bucket is a reduce-scatter
                bucket = 2.0 * max(40e6, 1e6 * n_dp)  # + all-gather ring of n - 1 hops each
                t_sync += 2 * math.ceil((dense_b + exp_b) / bucket) * (n_dp - 1) * LATENCY_S
            # hidden behind the backward pass except the last bucket and what compute cannot cover
            exposed = max(0.0, t_sync - (comp + rc)) + terms.dp_exposed * min(t_sync, comp + rc)
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
    if ep > 1 and ep_payload:
        near = ep_near / ep_payload
        link_bytes += n_mb * ep_bytes * near
        fab_bytes += n_mb * ep_bytes * (1 - near)
    if pp > 1:
        link_bytes += 2 * n_mb * vp * p2p_payload * (1 - pp_fab)
        fab_bytes += 2 * n_mb * vp * p2p_payload * pp_fab
    if dp_bytes_total:
        fab_bytes += dp_split[0]
        link_bytes += dp_split[1]

    tokens = batch * s
    costs = (
        ("compute", n_mb * comp),
        ("recompute", n_mb * rc),
        ("tp", n_mb * t_tp),
        ("cp", n_mb * t_cp),
        ("ep", n_mb * t_ep),
        ("bubble", bubble),
        ("pp_p2p", pp_exposed),
        ("dp", dp_exposed),
    )
    mfu = ctx.model_flops_tok * tokens / (step * lay.world * hw.peak)  # against the precision's peak
    detail = (
        ("eff", eff),
        ("eff_e", eff_e),
        ("vp", vp),
        ("stage", wi),
        ("tp_bytes_mb", tp_bytes),
        ("tp_bw", tp_bw),
        ("tp_fab", tp_fab),
        ("dp_bytes", dp_bytes_total),
        ("dp_time", t_dp_total),
        ("dp_bw", dp_bw),
        ("dp_fab", dp_fab),
        ("p2p_bytes", p2p_payload),
        ("pp_fab", pp_fab),
        ("pp_bw", pp_bw),
        ("cp_fab", cp_fab),
        ("ep_k", ep_k),
        ("t_mb", t_mb),
    )
    traffic = ((LINK_WORDS.get(hw.nt.link, hw.nt.link), link_bytes), (hw.fabric_name, fab_bytes))
    return _Cand(lay, memory, step, tokens / step, mfu, costs, traffic, batch, n_mb, seg, detail)


def _infer_candidate(ctx: _Ctx, lay: Layout, batch: int, memory: MemoryBreakdown, seg: Optional[int]) -> _Cand:
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
        flops = (
            2.0 * b * (n_i * ctx.layer_params + (m.vocab * m.hidden if i == pp - 1 else 0)) / tp
            + 4.0 * b * n_i * s * m.attn_width / tp
        )
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
    pre_flops = (
        2.0 * (ctx.layer_params * m.layers + m.vocab * m.hidden) * pre_tokens
        + 2.0 * m.layers * s * m.attn_width * pre_tokens
    )
    prefill = pre_flops / tp / (hw.peak * _eff(ctx, tp, pre_tokens))
    if tp > 1:
        prefill += 2 * m.layers * 2.0 * (tp - 1) / tp * pre_tokens * m.hidden * 2.0 / tp_bw
    tok_s = lay.dp * b / step
    mfu = 2.0 * m.active_params * tok_s / (lay.world * hw.peak_bf16)
    near = (ep_k - 1) / (ep - 1) if ep > 1 else 1.0
    link_bytes = tp_bytes * (1 - tp_fab) + (pp - 1) * p2p * (1 - pp_fab) + ep_bytes * near
    fab_bytes = tp_bytes * tp_fab + (pp - 1) * p2p * pp_fab + ep_bytes * (1 - near)
    costs = (("decode", decode), ("tp", t_tp), ("pp_p2p", t_pp), ("ep", t_ep))
    detail = (
        ("eff", eff_dec),
        ("tp_bw", tp_bw),
        ("tp_fab", tp_fab),
        ("pp_fab", pp_fab),
        ("touched", touched),
        ("batch_per_replica", b),
        ("tp_bytes_mb", tp_bytes),
    )
    traffic = ((LINK_WORDS.get(hw.nt.link, hw.nt.link), link_bytes), (hw.fabric_name, fab_bytes))
    return _Cand(lay, memory, step, tok_s, mfu, costs, traffic, batch, 1, seg, detail, prefill)
