"""`format_plan`: a `Plan` as the text `slurmgpu plan` prints."""

from __future__ import annotations

from typing import Tuple

from .cost import COST_WORDS, _Ctx
from .memory import (
    GB,
)
from .models import fmt_params
from .types import Plan, ScalePoint
from .words import _count, _gb, _short, _t, _wrap, recompute_words


def _target_words(ctx: _Ctx, scaling: Tuple[ScalePoint, ...], days: float) -> str:
    ok = [p for p in scaling if p.days <= days]
    if not ok:
        return "No allocation up to %d nodes trains in %g days (best: %.1f days on %d nodes)." % (
            ctx.hw.partition.max_nodes_per_job,
            days,
            min(p.days for p in scaling),
            min(scaling, key=lambda p: p.days).nodes,
        )
    p = min(ok, key=lambda p: p.nodes)
    return "To finish in %g days: %d nodes (%d GPUs, %s) take %.1f days." % (days, p.nodes, p.gpus, p.layout, p.days)


def format_plan(plan: Plan, diagram: bool = False) -> str:
    lay, m = plan.layout, plan.model
    gpus = lay.nodes * lay.gpus_per_node
    lines = []
    moe = ", %s active" % fmt_params(m.active_params) if m.is_moe else ""
    if plan.task == "inference":
        work = "inference, %s, context %d, batch %d" % (plan.precision, plan.seq, plan.global_batch)
    else:
        work = "%s, %s, seq %d, global batch %d (%.2fM tokens)" % (
            plan.task,
            plan.precision,
            plan.seq,
            plan.global_batch,
            plan.global_batch * plan.seq / 1e6,
        )
    lines.extend(_wrap("Plan: ", "%s (%s params%s), %s" % (m.label, fmt_params(m.params), moe, work)))
    lines.append(
        "Site %s, partition %s: %d node%s x %d GPUs = %d GPUs"
        % (plan.site, plan.partition, lay.nodes, "s" if lay.nodes > 1 else "", lay.gpus_per_node, gpus)
    )
    lines.append("")
    degrees = "TP=%d x PP=%d x DP=%d" % (lay.tp, lay.pp, lay.dp)
    extra = [("CP=%d" % lay.cp) if lay.cp > 1 else "", ("EP=%d" % lay.ep) if lay.ep > 1 else ""]
    degrees += "".join(" x " + e for e in extra if e)
    if plan.task == "inference":
        lines.append(
            "Layout   %s, %d sequence%s per replica" % (degrees, lay.micro_batch, "s" if lay.micro_batch > 1 else "")
        )
    else:
        lines.extend(
            _wrap(
                "Layout   ",
                "%s, micro-batch %d, %d micro-batches per step" % (degrees, lay.micro_batch, plan.micro_batches),
            )
        )
        zero = {0: "no ZeRO", 1: "distributed optimizer (ZeRO-1)", 2: "ZeRO-2", 3: "ZeRO-3"}[plan.zero]
        sched = ", interleaved x%d" % plan.virtual_stages if plan.virtual_stages > 1 else ""
        lines.extend(_wrap("         ", "%s, %s%s" % (recompute_words(plan.recompute), zero, sched)))
    if plan.segment:
        lines.append(
            "         --segment=%d (keep each %d-node segment in one NVLink domain)" % (plan.segment, plan.segment)
        )
    mem = plan.memory
    lines.extend(
        _wrap(
            "Memory   ",
            "%.1f of %g GB per GPU (stage %d): %s"
            % (plan.memory_per_gpu_gb, plan.capacity_gb, mem.stage, " | ".join("%s %.1f" % kv for kv in mem.parts())),
        )
    )
    if plan.task == "inference":
        lines.append(
            "Speed    decode step %s, %s tokens/s, prefill %s, MFU %.1f%%"
            % (_t(plan.step_time_s), _count(plan.tokens_per_s), _t(plan.prefill_s or 0), 100 * plan.mfu)
        )
    else:
        band = plan.band
        lines.append(
            "Speed    step %s, %s tokens/s%s, MFU %.1f%%"
            % (
                _t(plan.step_time_s),
                _count(plan.tokens_per_s),
                " (+-%d%% out of sample)" % band[1] if band else " (error unknown)",
                100 * plan.mfu,
            )
        )
        parts = ["%s %s" % (COST_WORDS[k], _t(v)) for k, v in plan.time_breakdown.items() if v > 0]
        lines.extend(_wrap("         ", "; ".join(parts)))
    lines.extend(
        _wrap(
            "Traffic  ", "per GPU per step: %s" % ", ".join("%s %s" % (k, _gb(v * GB)) for k, v in plan.traffic.items())
        )
    )
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
                i,
                _short(a.layout),
                "batch/replica" if plan.task == "inference" else "micro-batch",
                a.layout.micro_batch,
                a.memory_per_gpu_gb,
            )
            lines.extend(_wrap("  ", head + a.why, "     "))
    rules = [r for r in plan.rejected if r.kind != "memory"]
    mems = [r for r in plan.rejected if r.kind == "memory"]
    if rules or mems:
        lines.append("")
        lines.append("Rejected:")
        for r in rules:
            lines.extend(
                _wrap("  - ", r.reason if r.reason.startswith(r.scope + " ") else "%s: %s" % (r.scope, r.reason))
            )
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
