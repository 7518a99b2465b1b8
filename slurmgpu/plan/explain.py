"""Why the chosen layout won: per-term reasoning for training and inference, and why each alternative
lost. Reads search results; never searches."""

from __future__ import annotations

from typing import List

from .cost import COST_WORDS, _Cand, _Ctx
from .hardware import _hbm_known
from .layout import Layout
from .memory import (
    describe_split,
)
from .rules import _divisors, _tp_rules
from .words import _gb, _mem_line, _t, recompute_words


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
            extra = " (DP=%d over %s)" % (lay.dp * lay.cp, ctx.hw.fabric_name if alt.d("dp_fab") else ctx.hw.link_name)
        elif name == "recompute":
            extra = " (%s to fit)" % recompute_words(alt.memory.recompute)
        elif name == "compute":
            extra = (
                " (%.0f%% GEMM efficiency at TP=%d vs %.0f%%)" % (100 * alt.d("eff"), lay.tp, 100 * best.d("eff"))
                if alt.d("eff") != best.d("eff")
                else " (uneven stages)"
            )
        words.append("%s %s vs %s%s" % (COST_WORDS.get(name, name), _t(a), _t(b), extra))
    if not words:
        terms = ", ".join("%s %s" % (COST_WORDS[n], _t(v)) for n, v in alt.costs if v > 0)
        if alt.tokens_per_s >= best.tokens_per_s * 0.99:
            return "within 1%% of the best (%s)" % terms

        # the same step cost, less work per step: the gap is throughput, not any one term
        def work(lay: Layout) -> str:
            if ctx.train:
                return "DP=%d x micro-batch %d" % (lay.dp, lay.micro_batch)
            return "%d replica%s x %d sequence%s" % (
                lay.dp,
                "s" if lay.dp != 1 else "",
                lay.micro_batch,
                "s" if lay.micro_batch != 1 else "",
            )

        return "each step costs about the same (%s), but it moves %.0f tokens/s against %.0f (%s against %s)" % (
            terms,
            alt.tokens_per_s,
            best.tokens_per_s,
            work(alt.layout),
            work(best.layout),
        )
    return "; ".join(words)


def _explain_train(ctx: _Ctx, c: _Cand) -> List[str]:
    hw, m, lay = ctx.hw, ctx.model, c.layout
    nt = hw.nt
    out = []
    step = c.step

    def pct(x: float) -> float:
        return 100.0 * x / step

    # TP
    legal_max = max(
        t
        for t in _divisors(lay.nodes * lay.gpus_per_node)
        if t <= m.heads and not _tp_rules(hw, m, t, lay.nodes, lay.gpus_per_node)
    )
    where = (
        ("one node's %s" % hw.link_words)
        if lay.tp <= lay.gpus_per_node
        else (
            "one %d-GPU NVLink domain across %d nodes (%s)"
            % (nt.nvlink_domain, lay.tp // lay.gpus_per_node, hw.link_words)
        )
    )
    if lay.tp > 1:
        out.append(
            "TP=%d keeps each tensor-parallel group inside %s; its all-reduces move %s per GPU per "
            "micro-batch and take %s per step (%.0f%%)."
            % (lay.tp, where, _gb(c.d("tp_bytes_mb")), _t(c.cost("tp")), pct(c.cost("tp")))
        )
        if lay.tp < legal_max:
            out.append(
                "TP stops at %d although %d would be allowed: larger TP shrinks the GEMMs and adds "
                "all-reduces (see the alternatives)." % (lay.tp, legal_max)
            )
    else:
        out.append(
            "TP=1: the layers fit without splitting them, which avoids per-layer all-reduces "
            "(TP up to %d would stay inside %s)." % (legal_max, hw.link_words)
        )
    # PP
    if lay.pp > 1:
        vp = c.d("vp")
        sched = "bubble (p-1)/m = %d/%d" % (lay.pp - 1, c.micro_batches)
        if vp > 1:
            sched = "interleaved schedule with %d model chunks per GPU: bubble (p-1)/(v*m) = %d/(%d*%d)" % (
                vp,
                lay.pp - 1,
                vp,
                c.micro_batches,
            )
        out.append(
            "PP=%d: %s; stage boundaries send %s per micro-batch over %s; %s = %.1f%% (%s)."
            % (
                lay.pp,
                describe_split(m.layers, lay.pp),
                _gb(c.d("p2p_bytes")),
                hw.fabric_name if c.d("pp_fab") else hw.link_name,
                sched,
                100.0 * (lay.pp - 1) / (vp * c.micro_batches),
                _t(c.cost("bubble")),
            )
        )
    else:
        out.append("PP=1: no pipeline bubble; every GPU holds all %d layers (TP-sharded)." % m.layers)
    # CP / EP
    if lay.cp > 1:
        out.append(
            "CP=%d splits each %d-token sequence into %d-token chunks and passes K/V around a ring "
            "(%s exposed per step)." % (lay.cp, ctx.seq, ctx.seq // lay.cp, _t(c.cost("cp")))
        )
    if lay.ep > 1:
        out.append(
            "EP=%d spreads the %d experts over %d data-parallel ranks (%d experts each), so each "
            "expert's GEMMs see %dx more tokens (%.0f%% efficiency); token all-to-alls take %s per step."
            % (lay.ep, m.experts, lay.ep, m.experts // lay.ep, lay.ep, 100 * c.d("eff_e"), _t(c.cost("ep")))
        )
    elif m.is_moe:
        out.append(
            "EP=1: every rank holds all %d experts (TP-split); expert GEMMs run at %.0f%% efficiency "
            "with no all-to-all." % (m.experts, 100 * c.d("eff_e"))
        )
    # DP
    n_dp = lay.dp * lay.cp
    if n_dp > 1:
        bw = c.d("dp_bw") / 1e9
        over = hw.fabric_name if c.d("dp_fab") else hw.link_name
        zero = {
            0: "plain data parallelism",
            1: "distributed optimizer (ZeRO-1) shards optimizer states",
            2: "ZeRO-2 shards optimizer states and gradients",
            3: "ZeRO-3 (FSDP) shards weights, gradients and optimizer states",
        }[c.memory.zero]
        what = "gradient sync" if c.memory.zero < 3 else "weight gathers and gradient reduce-scatters"
        out.append(
            "DP=%d%s: %s over %d ranks; %s move%s %s per GPU per step over %s (ring 2(n-1)/n at "
            "%.0f GB/s effective) in %s, %s of it not hidden behind compute."
            % (
                lay.dp,
                " (x CP=%d)" % lay.cp if lay.cp > 1 else "",
                zero,
                n_dp,
                what,
                "s" if c.memory.zero < 3 else "",
                _gb(c.d("dp_bytes")),
                over,
                bw,
                _t(c.d("dp_time")),
                _t(c.cost("dp")),
            )
        )
    else:
        out.append("DP=1: the GPUs are all needed for model parallelism; no gradient all-reduce.")
    # memory
    mem = c.memory
    out.append(_mem_line(ctx, mem))
    if mem.recompute == "full":
        out.append(
            "Full activation recomputation is needed to fit: it stores only each layer's input and "
            "re-runs the forward pass (%s per step)." % _t(c.cost("recompute"))
        )
    elif mem.recompute == "selective":
        out.append(
            "Selective recomputation: attention scores are recomputed instead of stored "
            "(FlashAttention-style), %s per step." % _t(c.cost("recompute"))
        )
    # speed
    flops_tok = ctx.model_flops_tok
    out.append(
        "Step: %s for %d sequences x %d tokens = %.2fM tokens (%s FLOP/token); compute at %.0f%% of "
        "%g TFLOP/s%s; MFU %.1f%%."
        % (
            _t(step),
            c.global_batch,
            ctx.seq,
            c.global_batch * ctx.seq / 1e6,
            "%.3g" % flops_tok,
            100 * c.d("eff"),
            hw.peak / 1e12,
            " (QLoRA dequantisation included)" if ctx.task == "qlora" else "",
            100 * c.mfu,
        )
    )
    return out


def _explain_infer(ctx: _Ctx, c: _Cand) -> List[str]:
    hw, m, lay = ctx.hw, ctx.model, c.layout
    b = c.d("batch_per_replica")
    out = []
    if lay.tp > 1:
        out.append(
            "TP=%d inside %s splits the weights and the KV cache %d ways; each decode step pays 2 "
            "all-reduces per layer (%s per step)." % (lay.tp, hw.link_words, lay.tp, _t(c.cost("tp")))
        )
    else:
        out.append("TP=1: the model fits on one GPU per stage; no per-layer all-reduce.")
    if lay.pp > 1:
        out.append(
            "PP=%d: %s; a decode step passes through the stages one after another."
            % (lay.pp, describe_split(m.layers, lay.pp))
        )
    if lay.dp > 1 and lay.ep > 1:
        out.append(
            "DP=%d attention replicas, %d sequence%s each, share the experts over EP=%d (token "
            "all-to-alls: %s per step)." % (lay.dp, b, "s" if b > 1 else "", lay.ep, _t(c.cost("ep")))
        )
    elif lay.dp > 1:
        out.append("DP=%d independent replicas, %d sequence%s each." % (lay.dp, b, "s" if b > 1 else ""))
    mem = c.memory
    out.append("%s KV cache: %d sequence%s x %d tokens." % (_mem_line(ctx, mem), b, "s" if b > 1 else "", ctx.seq))
    bw_note = "" if _hbm_known(hw) else " (HBM bandwidth estimated from the FLOP/s)"
    touched = c.d("touched")
    moe = (" Each step touches %.0f%% of the experts." % (100 * touched)) if m.is_moe else ""
    out.append(
        "Decode: %s per step (reading weights and KV cache at %.2f TB/s%s), %.0f tokens/s across %d "
        "replica%s; prefill of %d x %d tokens: %s.%s"
        % (
            _t(c.step),
            hw.hbm / 1e12,
            bw_note,
            c.tokens_per_s,
            lay.dp,
            "s" if lay.dp > 1 else "",
            b,
            ctx.seq,
            _t(c.prefill or 0.0),
            moe,
        )
    )
    return out
