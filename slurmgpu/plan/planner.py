"""`make_plan`: validate the request, size the allocation, run the search and build the `Plan`. The
only module that runs the search more than once (no-fit message, pins versus free choice, scaling)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterable, List, Optional, Sequence, Tuple

from ..errors import PlanError
from ..site import Site
from ..vocab import PARALLEL_KEYS as PIN_KEYS
from ..vocab import PRECISIONS, RECOMPUTE, TASKS
from .calibration import stated_band, stated_band_words
from .cost import TOKENS_PER_STEP, _Cand, _Ctx
from .explain import _explain_infer, _explain_train, _why_lost
from .hardware import Hardware, hardware
from .layout import Layout
from .memory import (
    GB,
    OPTIMIZER_BYTES,
    MemoryBreakdown,
    TrainShape,
    inference_stage_memory,
    shard_groups,
    stage_layers,
    training_memory,
    training_stage_memory,
)
from .models import fmt_params
from .profile import STATE_BYTES
from .report import _target_words
from .rules import _layout_rules, _tp_rules
from .search import TOP_ALTERNATIVES, _lower_bound_gpus, _Result, _search, _smallest, _split_gpus, caps_error
from .types import Alternative, Plan, PlanRequest, Rejection, ScalePoint, task_name
from .words import _count, _mem_words, _short


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
    for name, val in (
        ("--gpus", req.gpus),
        ("--nodes", req.nodes),
        ("--seq", req.seq),
        ("--global-batch", req.global_batch),
    ):
        if val is not None and val < 1:
            raise PlanError("%s must be a positive integer, got %d" % (name, val))
    if req.tokens is not None and req.tokens <= 0:
        raise PlanError("--tokens must be positive")
    if req.target_days is not None and (req.target_days <= 0 or req.tokens is None):
        raise PlanError("--target-days needs a positive number of days and --tokens")
    bad_caps = caps_error(req)
    if bad_caps:
        raise PlanError(bad_caps)
    vp = req.virtual_stages
    if vp is not None:
        pp = req.pins.get("pp")
        if vp < 1:
            raise PlanError("virtual pipeline stages must be a positive integer, got %d" % vp)
        if vp > 1 and pp is None:
            raise PlanError("virtual pipeline stages (%d) need a pinned PP degree (--pp)" % vp)
        if vp > 1 and pp is not None and (pp < 2 or not _vp_fits(req, pp, vp)):
            raise PlanError(
                "rule vpp-divides-layers: %d virtual stages x PP=%d need PP >= 2 and at least one of the %d layers "
                "in every chunk%s"
                % (
                    vp,
                    pp,
                    req.model.layers,
                    ""
                    if req.caps.uneven_stages
                    else ", in equal chunks (%s runs no uneven pipeline split)" % (req.caps.launcher or "the launcher"),
                )
            )
    hw = hardware(site, req.partition, req.precision, req.terms)
    part = hw.partition
    if req.nodes is not None and req.nodes > part.max_nodes_per_job:
        raise PlanError(
            "--nodes %d exceeds partition %s's limit of %d nodes per job"
            % (req.nodes, part.name, part.max_nodes_per_job)
        )
    if req.gpus is not None and req.gpus > part.max_nodes_per_job * hw.nt.gpus:
        raise PlanError(
            "--gpus %d exceeds partition %s's limit of %d nodes x %d GPUs = %d"
            % (req.gpus, part.name, part.max_nodes_per_job, hw.nt.gpus, part.max_nodes_per_job * hw.nt.gpus)
        )
    return hw


def _vp_fits(req: PlanRequest, pp: int, vp: int) -> bool:
    """Whether `vp` interleaved chunks per stage can be cut from PP stages' layers.

    Megatron (an explicit --pipeline-model-parallel-layout) and torchtitan (split points) run uneven
    chunks, so a published layout such as Llama 3.1 405B on PP 16 x VP 4 (126 layers in 64 chunks) is
    valid; only a chunk without a layer is not. A launcher without uneven splits needs equal chunks.
    """
    if not req.caps.uneven_stages:
        return req.model.layers % (pp * vp) == 0
    return pp <= req.model.layers and vp <= min(stage_layers(req.model.layers, pp))


def _normalize(req: PlanRequest) -> PlanRequest:
    """Accept what spec files carry: None for 'not given' in pins and options, tokens as '15T'."""
    tokens = req.tokens
    if isinstance(tokens, str):
        from ..schema import parse_size

        parsed = parse_size(tokens)
        if parsed is None:
            raise PlanError("tokens: expected a count such as 15T or 2e12, got %r" % tokens)
        tokens = parsed
    return replace(
        req,
        task=task_name(req.task or "pretrain"),
        precision=req.precision or "bf16",
        optimizer=req.optimizer or "adam",
        tokens=tokens,
        pins={k: v for k, v in (req.pins or {}).items() if v is not None},
    )


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
            notes.append(
                "%d GPUs = %d nodes x %d GPUs (--gpus-per-node=%d); multiples of %d keep whole nodes"
                % (gpus, fixed[0], fixed[1], fixed[1], hw.nt.gpus)
            )
        how = None
    else:
        alloc_res = _smallest(ctx)
        if alloc_res[0] is None:
            raise PlanError(_whole_partition_message(ctx))
        alloc = alloc_res[0]
        res = _search(ctx, alloc[0], alloc[1])
        how = "smallest allocation that fits"
    best = res.ranked[0]
    published: Optional[_Cand] = None
    if pins:
        notes.extend(_compare_with_free(ctx, alloc, best))
    elif ctx.train:
        tuned = bool(req.reference)
        published = _reference(ctx, alloc, notes) if tuned else _published_style(res.ranked)
        if published is not None and published.key == best.key:
            published = None
        if published is not None:
            best, res, note = _weigh_published(ctx, best, published, res, tuned)
            notes.append(note)
    return _build(ctx, best, res, notes, how, published)


def _reference(ctx: _Ctx, alloc: Tuple[int, int], notes: List[str]) -> Optional[_Cand]:
    """The request's published layout on this allocation, timed by the same search (None: it does not fit)."""
    ref = {k: v for k, v in ctx.req.reference.items() if v is not None}
    bad = [k for k in ref if k not in PIN_KEYS]
    if bad:
        raise PlanError("unknown layout degree '%s' in the reference layout" % bad[0])
    sub = replace(ctx.req, pins=ref, reference={})
    res = _search(_Ctx(ctx.hw, sub), alloc[0], alloc[1], want_rejects=False)
    if not res.ranked:
        notes.append(
            "the reference layout %s does not fit this allocation by the planner's memory model; the free "
            "choice is planned" % ", ".join("%s=%d" % kv for kv in sorted(ref.items()))
        )
        return None
    return res.ranked[0]


def _published_style(ranked: List[_Cand]) -> Optional[_Cand]:
    """The layout a Megatron/NeMo recipe would use here, among those that fit.

    What the published tuned layouts share (Narayanan et al. SC21 takeaways; NeMo and
    Megatron-Bridge recipes): the distributed optimizer (no ZeRO-2/3), TP inside a node, and no
    full recomputation where model parallelism can avoid it (Llama 3 70B on 64 H100 is TP 4 PP 4
    CP 2, not TP 4 PP 2 with full recomputation). Among those, the recipes were tuned by measuring,
    so the fastest by the cost model stands for them; ties go to the least model parallelism.
    """
    pool = [c for c in ranked if c.memory.zero <= 1 and c.layout.tp <= c.layout.gpus_per_node]
    if not pool:
        return None
    return min(
        pool,
        key=lambda c: (
            c.memory.recompute == "full",
            -round(c.tokens_per_s, 6),
            c.layout.tp * c.layout.pp * c.layout.cp,
        ),
    )


def _weigh_published(
    ctx: _Ctx, best: _Cand, pub: _Cand, res: _Result, tuned: bool = False
) -> Tuple[_Cand, _Result, str]:
    """Keep the published(-style) layout unless the free choice beats it by more than the error band.

    A predicted gain inside the band is not evidence (the tuned recipes are measured, the gain is
    not), so the recipe's layout is planned and the faster-looking one is listed beside it. Against a
    published tuned layout (`tuned`) a gain beyond the band is not evidence either: the model is the
    suspect, so the published layout is kept and the cost terms that disagree are named.
    """
    gain = best.tokens_per_s / pub.tokens_per_s - 1.0
    band = stated_band(ctx.hw, ctx.model.is_moe, ctx.req.precision)
    rest = [c for c in res.ranked if c is not best and c is not pub]
    kept = _Result([pub, best] + rest, res.rejected, res.misses, res.batch_note)
    what = (
        "the published layout %s" % _short(pub.layout)
        if tuned
        else "the published-style layout %s (what a Megatron/NeMo recipe uses: distributed optimizer, "
        "TP inside a node, no full recomputation where parallelism avoids it)" % _short(pub.layout)
    )
    if band is not None and gain * 100 <= band[1]:
        note = (
            "planned %s: %s is predicted %.1f%% faster, within the +-%d%% error band measured out of sample, "
            "so not a reliable gain; it is listed as an alternative" % (what, _short(best.layout), 100 * gain, band[1])
        )
        return pub, kept, note
    where = (
        "beyond the +-%d%% error band measured out of sample" % band[1]
        if band is not None
        else "and no measured run of this class bounds the model's error"
    )
    if tuned:
        note = (
            "planned %s: the cost model predicts %s %.1f%% faster, %s, so the model rather than the recipe is "
            "suspect; the terms that disagree: %s; %s is listed as an alternative"
            % (what, _short(best.layout), 100 * gain, where, _why_lost(ctx, pub, best), _short(best.layout))
        )
        return pub, kept, note
    note = "%s is predicted %.1f%% slower than this plan, %s; it is listed as an alternative" % (
        what[0].upper() + what[1:],
        100 * gain,
        where,
    )
    return best, _Result([best, pub] + rest, res.rejected, res.misses, res.batch_note), note


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
        raise PlanError(
            "the pinned degrees multiply to %d, which does not divide the %d GPUs (%d nodes x %d)"
            % (known, n, nodes, gpn)
        )
    if all(d is not None for d in degrees[:3]):
        cp = pins.get("cp", 1)
        lay = Layout(
            tp=pins["tp"],
            pp=pins["pp"],
            dp=pins["dp"],
            cp=cp,
            ep=pins.get("ep", 1),
            micro_batch=pins.get("micro_batch", 1),
            nodes=nodes,
            gpus_per_node=gpn,
        )
        errs = _layout_rules(ctx.hw, ctx.model, lay, ctx.seq)
        if errs:
            raise PlanError("layout %s is not allowed: %s" % (_short(lay), "; ".join(errs)))
    for k in ("pp", "ep", "cp"):
        if k in pins:
            lay = Layout(
                tp=pins.get("tp", 1),
                pp=pins.get("pp", 1),
                cp=pins.get("cp", 1),
                ep=pins.get("ep", 1),
                dp=pins.get("dp", max(1, pins.get("ep", 1))),
                nodes=nodes,
                gpus_per_node=gpn,
            )
            errs = [e for e in _layout_rules(ctx.hw, ctx.model, lay, ctx.seq) if e.startswith(k.upper() + "=")]
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
    band = stated_band(ctx.hw, ctx.model.is_moe, ctx.req.precision)
    if band is not None and 0 < slower * 100 <= band[1]:
        return [
            "the planner's best here, %s (micro-batch %d), is predicted %.0f%% faster than your pinned "
            "layout, within its +-%d%% error on published runs: treat the two as equal"
            % (_short(top.layout), top.layout.micro_batch, slower * 100, band[1])
        ]
    if slower > 0:  # as a share of the best's throughput: "127% slower" reads as nonsense
        beyond = (
            "; that is beyond the +-%d%% error band measured out of sample, so if your layout is a tuned "
            "recipe, trust it and suspect those terms" % band[1]
            if band is not None
            else "; no measured run of this class bounds the model's error"
        )
        return [
            "your pinned layout is predicted at %.0f%% of the throughput of the planner's best here, %s "
            "(micro-batch %d): %s%s"
            % (
                100.0 * best.tokens_per_s / top.tokens_per_s,
                _short(top.layout),
                top.layout.micro_batch,
                _why_lost(ctx, best, top),
                beyond,
            )
        ]
    return [
        "your pinned layout is predicted %.0f%% faster than the planner's best here, %s (micro-batch %d)"
        % (-slower * 100, _short(top.layout), top.layout.micro_batch)
    ]


def _no_fit_message(ctx: _Ctx, alloc: Tuple[int, int], res: _Result) -> str:
    nodes, gpn = alloc
    m = ctx.model
    lines = [
        "%s (%s params) does not fit for %s on %d node%s x %d GPUs (%g GB each)."
        % (m.label, fmt_params(m.params), ctx.task, nodes, "s" if nodes > 1 else "", gpn, ctx.hw.nt.gpu_memory_gb)
    ]
    if ctx.task in ("pretrain", "finetune"):
        lines.append(_states_words(ctx, nodes * gpn))
    caps = ctx.req.caps
    if ctx.task == "inference" and nodes > 1 and not caps.serving_dp_nodes and not res.misses:
        # not memory: the engine cannot spread data-parallel replicas over nodes (SGLang's DP
        # controller starts every replica on the local GPUs), so all GPUs must be one server
        lines[0] = (
            "%s cannot serve %s on %d nodes: it runs data-parallel replicas only inside one node, so %d nodes "
            "must be one TP x PP server over all %d GPUs, and %s splits no such way (below). Use --nodes 1 "
            "(replicas on that node), one job per node behind a router, or --launcher vllm, whose replicas "
            "span nodes." % (caps.launcher or "this launcher", m.label, nodes, nodes, nodes * gpn, m.label)
        )
    if res.misses:
        _, lay, mem = res.misses[0]
        lines.append(
            "The leanest layout, %s (micro-batch %d), %s." % (_short(lay), lay.micro_batch, _mem_words(ctx, mem))
        )
    elif res.rejected:
        lines.append("No layout passes:")
        lines.extend("  %s: %s" % (r.scope, r.reason) for r in res.rejected[:8])
    if not ctx.req.pins:
        small, sres = _smallest(ctx)
        if small is not None:
            sn, sg = small
            assert sres is not None
            top = sres.ranked[0]
            lines.append(
                "Smallest allocation that fits: %d node%s x %d GPUs (%d GPUs) with %s, %.1f GB per GPU."
                % (sn, "s" if sn > 1 else "", sg, sn * sg, _short(top.layout), top.memory.total)
            )
        else:
            lines.append(_whole_partition_message(ctx))
    else:
        lines.append("Drop or change the pinned degrees, or use more GPUs.")
    return "\n".join(lines)


def _states_words(ctx: _Ctx, gpus: int) -> str:
    """The model state alone under the framework's leanest flags, spread over every GPU: why no
    layout of `gpus` GPUs can hold it, in the framework's own bytes per parameter."""
    prof = ctx.req.caps.memory
    m = ctx.model
    moments = STATE_BYTES[ctx.req.optimizer]
    every = tuple(lv.key for lv in prof.levers)
    zeros = [z for z in ctx.req.caps.zero if ctx.req.zero is None or z == ctx.req.zero] or [ctx.req.caps.zero[0]]
    best: Optional[Tuple[float, int, str]] = None
    for z in zeros:
        st = prof.applied(z, every)
        per = st.per_param(moments)
        split = set(st.sharded)
        words = "%s keeps %g B/param (weights %g, gradients %g%s, %s moments %g%s)" % (
            prof.framework,
            per,
            st.weights,
            st.grads + st.grads_sharded,
            ", master %g" % st.master if st.master else "",
            ctx.req.optimizer,
            moments,
            "".join(
                ", %s %g" % (what, b) for what, b in (("DDP buckets", st.buckets), ("bf16 copies", st.copies)) if b
            ),
        )
        if split:
            words += ", %s sharded over DP%s" % (
                "/".join(t for t in ("weights", "grads", "master", "states") if t in split),
                " x CP" if st.group == "dp_cp" else " inside a node",
            )
        flags = [st.flag] if st.flag else []
        flags += [lv.flag for lv in prof.levers if z in lv.zeros]
        if flags:
            words += " with %s" % " ".join(flags)
        if best is None or (per, -len(split)) < best[:2]:
            best = (per, -len(split), words)
    assert best is not None
    per, _, words = best
    return (
        "Model state: %s = %.0f GB for %s params: at least %.1f GB per GPU over %d GPUs even if all of it were "
        "sharded, before activations, against %.1f GB usable (%d%% headroom kept)."
        % (
            words,
            per * m.params / GB,
            fmt_params(m.params),
            per * m.params / GB / gpus,
            gpus,
            ctx.usable,
            round(100 * (1 - ctx.usable / ctx.hw.nt.gpu_memory_gb)),
        )
    )


def _whole_partition_message(ctx: _Ctx) -> str:
    hw = ctx.hw
    part = hw.partition
    n = part.max_nodes_per_job
    res = _search(ctx, n, hw.nt.gpus, want_rejects=True)
    m = ctx.model
    msg = "%s (%s params) cannot be planned for %s on partition %s even with all %d node%s (%d x %g GB)" % (
        m.label,
        fmt_params(m.params),
        ctx.task,
        part.name,
        n,
        "s" if n > 1 else "",
        n * hw.nt.gpus,
        hw.nt.gpu_memory_gb,
    )
    if res.misses:
        _, lay, mem = res.misses[0]
        msg += ": the leanest layout, %s, %s" % (_short(lay), _mem_words(ctx, mem))
    elif res.rejected:
        msg += ": " + "; ".join(r.reason for r in res.rejected[:3])
    return msg


def _build(
    ctx: _Ctx, best: _Cand, res: _Result, notes: List[str], how: Optional[str], published: Optional[_Cand] = None
) -> Plan:
    hw, m, req = ctx.hw, ctx.model, ctx.req
    lay = best.layout
    expl: List[str] = []
    gpus = lay.nodes * lay.gpus_per_node
    if how:
        expl.append(
            "Allocation: %d node%s x %d GPUs = %d GPUs is the %s (lower bound from memory: %d GPUs)."
            % (lay.nodes, "s" if lay.nodes > 1 else "", lay.gpus_per_node, gpus, how, _lower_bound_gpus(ctx))
        )
    expl.extend(_explain_train(ctx, best) if ctx.train else _explain_infer(ctx, best))
    if best.segment:
        tn = max(1, lay.tp // lay.gpus_per_node)
        expl.append(
            "The job needs --segment=%d: segments of %d nodes each stay inside one %d-GPU NVLink "
            "domain%s."
            % (best.segment, best.segment, hw.nt.nvlink_domain, " (TP groups span %d nodes)" % tn if tn > 1 else "")
        )
    relaxed = [k for k in ("cp", "ep") if k not in hw.strict_kinds and int(getattr(lay, k)) > 1]
    if relaxed and hw.nt.nvlink_domain > hw.nt.gpus and lay.nodes > 1:
        from .placement import crossings

        cross = crossings(lay, hw.nt.domain_nodes, best.segment, kinds=relaxed)
        if cross:
            notes.append(
                "%s groups may cross NVLink domains (%s): the site's policy.groups only warns for them, so "
                "their traffic is planned over the network; the submit filter will warn"
                % ("/".join(k.upper() for k in cross), ", ".join("%d %s" % (n, k.upper()) for k, n in cross.items()))
            )
    if m.estimated:
        notes.append(
            "model shape estimated from --params: %d layers, hidden %d, %d heads, FFN %d, vocab %d; "
            "give --model FILE.yaml for the real shape" % (m.layers, m.hidden, m.heads, m.ffn, m.vocab)
        )
    if m.gated_assumed:
        notes.append(
            "%s gives no `gated:`: planned as a GPT-style 2-matrix MLP; add `gated: true` for a "
            "SwiGLU/GeGLU model (Llama, Mistral, Qwen), which has 1.5x the MLP weights" % (m.source or m.name)
        )
    if m.is_mla and not ctx.train:
        notes.append("MLA's compressed KV cache is replicated on every TP rank (not sharded)")
    if ctx.train and not req.global_batch:
        notes.append(
            "global batch %d sequences (%.2fM tokens): the default %s target, rounded to a multiple "
            "of DP x micro-batch; set --global-batch to fix it"
            % (best.global_batch, best.global_batch * ctx.seq / 1e6, "%.2fM-token" % (TOKENS_PER_STEP[ctx.task] / 1e6))
        )
    if res.batch_note:
        notes.append(res.batch_note)
    if ctx.train:
        notes.append(stated_band_words(ctx.hw, m.is_moe, req.precision))
    flags = _memory_flags(ctx, best)
    if flags:
        expl.append(_flag_words(ctx, best, flags))
    alts = []
    for c in res.ranked[1 : 1 + TOP_ALTERNATIVES]:
        gap = 100.0 * (best.tokens_per_s / c.tokens_per_s - 1.0)
        if gap >= 0:
            why = "%.1f%% slower: %s" % (gap, _why_lost(ctx, c, best))
        else:  # the free choice kept beside the published layout (see _weigh_published)
            band = stated_band(ctx.hw, m.is_moe, req.precision)
            faster = 100.0 * (c.tokens_per_s / best.tokens_per_s - 1.0)
            inside = band is not None and faster <= band[1]
            why = "predicted %.1f%% faster, %s" % (
                faster,
                "within the error band measured out of sample"
                if inside
                else "beyond the error band measured out of sample: not trusted over the published layout",
            )
        if published is not None and c is published:
            why = "published-style layout (Megatron/NeMo recipe rule): " + why
        alts.append(
            Alternative(c.layout, c.memory.total, c.step, c.tokens_per_s, c.mfu, c.memory.zero, c.memory.recompute, why)
        )
    train_days = None
    scaling: Tuple[ScalePoint, ...] = ()
    if req.tokens and ctx.train:
        train_days = req.tokens / best.tokens_per_s / 86400.0
        scaling = _scaling(ctx, lay, best)
        expl.append(
            "Training on %s tokens takes %.1f days at %s tokens/s on %d GPUs."
            % (_count(req.tokens), train_days, _count(best.tokens_per_s), gpus)
        )
        if req.target_days:
            expl.append(_target_words(ctx, scaling, req.target_days))
    traffic = {k: v / GB for k, v in best.traffic}
    return Plan(
        site=hw.site,
        partition=hw.partition.name,
        layout=lay,
        memory=best.memory,
        memory_per_gpu_gb=best.memory.total,
        capacity_gb=hw.nt.gpu_memory_gb,
        step_time_s=best.step,
        tokens_per_s=best.tokens_per_s,
        mfu=best.mfu,
        traffic=traffic,
        alternatives=tuple(alts),
        explanation=tuple(expl),
        notes=tuple(notes),
        model=m,
        task=ctx.task,
        precision=req.precision,
        seq=ctx.seq,
        global_batch=best.global_batch,
        micro_batches=best.micro_batches,
        zero=best.memory.zero,
        recompute=best.memory.recompute,
        segment=best.segment,
        stage_layers=tuple(ctx.counts(lay.pp)),
        stage_memory=_stage_memory(ctx, best),
        time_breakdown=dict(best.costs),
        band=stated_band(ctx.hw, m.is_moe, req.precision) if ctx.train else None,
        rejected=tuple(_dedupe(res.rejected)),
        scaling=scaling,
        train_days=train_days,
        prefill_s=best.prefill,
        virtual_stages=best.d("vp") or 1,
        levers=best.memory.levers,
        memory_flags=flags,
        framework=req.caps.memory.framework,
    )


def _stage_memory(ctx: _Ctx, best: _Cand) -> Tuple[MemoryBreakdown, ...]:
    """Every pipeline stage's breakdown under the chosen strategy, with the search's own formulas
    (the search ranks by the worst of representative_stages; this is the same figure per stage)."""
    lay, mem = best.layout, best.memory
    every = range(lay.pp)
    prof = ctx.req.caps.memory
    if not ctx.train:
        m, seq, prec, nt = ctx.model, ctx.seq, ctx.req.precision, ctx.hw.nt
        per = inference_stage_memory(
            m,
            lay.tp,
            lay.pp,
            lay.ep,
            lay.micro_batch,
            seq,
            prec,
            ctx.counts(lay.pp),
            ctx.stages(lay.pp),
            every,
            prof,
            nt.gpu_memory_gb,
            nt.gpu_model,
        )
    else:
        per = training_stage_memory(
            ctx.model,
            _shape(ctx, best),
            ctx.task,
            mem.zero,
            mem.recompute,
            ctx.kopt,
            ctx.counts(lay.pp),
            best.d("vp") or 1,
            ctx.stages(lay.pp),
            every,
            prof,
            mem.levers,
            ctx.req.precision,
            ctx.req.caps.selective,
        )
    return tuple(per)


def _shape(ctx: _Ctx, c: _Cand) -> TrainShape:
    lay = c.layout
    return TrainShape(
        lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.micro_batch, c.micro_batches, ctx.seq, lay.gpus_per_node
    )


def _memory_flags(ctx: _Ctx, c: _Cand) -> Tuple[Tuple[str, float], ...]:
    """(flag, GB per GPU it saves) for the sharding stage and cheaper-profile flags the plan relies on,
    each against the plan without it: the framework's default stage, then one lever at a time."""
    if not ctx.train:
        return ()
    prof, mem = ctx.req.caps.memory, c.memory
    shape = _shape(ctx, c)

    def total(zero: int, levers: Tuple[str, ...]) -> float:
        return training_memory(
            ctx.model,
            shape,
            ctx.task,
            zero,
            mem.recompute,
            ctx.kopt,
            ctx.counts(c.layout.pp),
            c.d("vp") or 1,
            ctx.stages(c.layout.pp),
            prof,
            levers,
            ctx.req.precision,
            ctx.req.caps.selective,
        ).total

    out: List[Tuple[str, float]] = []
    stage = prof.stage(mem.zero)
    if stage.flag and mem.zero != prof.default_zero:
        saved = total(prof.default_zero, ()) - total(mem.zero, ())
        if saved > 0.05 or mem.levers:  # (a stage with nothing to shard is listed when a lever needs it)
            out.append((stage.flag, max(0.0, saved)))
    prev = total(mem.zero, ())
    for i, key in enumerate(mem.levers):
        cur = total(mem.zero, mem.levers[: i + 1])
        out.append((prof.lever(key).flag, prev - cur))
        prev = cur
    return tuple(out)


def _flag_words(ctx: _Ctx, c: _Cand, flags: Sequence[Tuple[str, float]]) -> str:
    prof, mem = ctx.req.caps.memory, c.memory
    dense, _, _ = shard_groups(_shape(ctx, c), prof.stage(mem.zero).group)
    bits = []
    for flag, gb in flags:
        lever = next((lv for lv in prof.levers if lv.flag == flag), None)
        what = lever.what if lever else prof.stage(mem.zero).about
        if gb < 0.05 and lever is None:
            bits.append("%s (nothing to shard at DP x CP = %d; the flags after it need it)" % (flag, dense))
            continue
        bits.append("%s saves %.1f GB%s" % (flag, gb, " (%s)" % what.replace("{n}", str(dense)) if what else ""))
    return "Memory flags written for %s: %s." % (prof.framework, "; ".join(bits))


def _dedupe(rs: Iterable[Rejection]) -> List[Rejection]:
    seen = set()
    out = []
    for r in rs:
        if (r.scope, r.reason) not in seen:
            seen.add((r.scope, r.reason))
            out.append(r)
    return out


def _scaling(ctx: _Ctx, lay: Layout, best: _Cand) -> Tuple[ScalePoint, ...]:
    """Time to train at 1x, 2x, 4x ... the chosen node count (up to the partition's limit)."""
    req = ctx.req
    assert req.tokens
    g = ctx.hw.nt.gpus
    maxn = ctx.hw.partition.max_nodes_per_job
    points = [
        ScalePoint(
            lay.nodes,
            lay.nodes * lay.gpus_per_node,
            _short(lay),
            best.tokens_per_s,
            req.tokens / best.tokens_per_s / 86400.0,
        )
    ]
    sizes: List[int] = []
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
