"""Small formatters the search and the explanations share (layouts, seconds, bytes, counts, wrapping),
so both spell a number the same way."""

from __future__ import annotations

from typing import List, Optional

from .cost import _Ctx
from .layout import Layout
from .memory import (
    MemoryBreakdown,
)


def _short(lay: Layout) -> str:
    parts = ["TP=%d" % lay.tp, "PP=%d" % lay.pp, "DP=%d" % lay.dp]
    if lay.cp > 1:
        parts.append("CP=%d" % lay.cp)
    if lay.ep > 1:
        parts.append("EP=%d" % lay.ep)
    return " x ".join(parts)


def _mem_words(ctx: _Ctx, mem: MemoryBreakdown) -> str:
    parts = ", ".join("%s %.1f" % (k, v) for k, v in mem.parts())
    prof = ctx.req.caps.memory
    if prof.serve is not None and not ctx.train:
        if mem.reserved <= 0:
            return (
                "needs %.1f GB per GPU (%s), but %s's own rule leaves no share of the GPU for weights and KV cache"
                % (
                    mem.need,
                    parts,
                    prof.framework,
                )
            )
        return "needs a KV cache of %.1f GB per GPU, but %s leaves %.1f GB for it (%s)" % (
            mem.kv_cache,
            _serve_share(ctx, mem),
            mem.kv_pool,
            parts,
        )
    how = []
    if ctx.train:
        how.append("%s recompute" % mem.recompute)
        how.append("ZeRO-%d" % mem.zero if mem.zero else "no ZeRO")
        how.extend(prof.lever(k).flag for k in mem.levers)
    return "needs %.1f GB per GPU (%s; %s) > %.1f GB usable of %g GB" % (
        mem.total,
        parts,
        ", ".join(how) if how else "inference",
        ctx.usable,
        ctx.hw.nt.gpu_memory_gb,
    )


def _serve_share(ctx: _Ctx, mem: MemoryBreakdown) -> str:
    """`vLLM 0.33.0's 0.92 of each GPU (gpu_memory_utilization)`: the engine's preallocation in words."""
    prof = ctx.req.caps.memory
    serve = prof.serve
    assert serve is not None
    share = (mem.reserved if serve.covers_all else mem.kv_pool + mem.weights) / ctx.hw.nt.gpu_memory_gb
    return "%s's %.3g of each %g GB GPU (%s)%s" % (
        prof.framework,
        share,
        ctx.hw.nt.gpu_memory_gb,
        serve.flag,
        "" if serve.covers_all else " for weights and KV cache",
    )


def _mem_line(ctx: _Ctx, mem: MemoryBreakdown) -> str:
    """The plan's memory sentence: whose rules, the total against the GPU, the terms."""
    nt = ctx.hw.nt
    parts = ", ".join("%s %.1f" % (k, v) for k, v in mem.parts())
    who = ctx.req.caps.memory.framework
    if mem.reserved > 0:
        return (
            "Memory (%s): %.1f GB per GPU (%s); %s is %.1f GB, leaving a KV cache pool of %.1f GB "
            "for the %.1f GB the planned sequences need."
            % (who, mem.need, parts, _serve_share(ctx, mem), mem.reserved, mem.kv_pool, mem.kv_cache)
        )
    return "Memory (%s): %.1f GB of %g GB per GPU (%.0f GB usable at 10%% headroom), on pipeline stage %d: %s." % (
        who,
        mem.total,
        nt.gpu_memory_gb,
        ctx.usable,
        mem.stage,
        parts,
    )


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


def _count(x: float) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return "%.3g%s" % (x / div, unit)
    return "%.0f" % x


def _wrap(first: str, text: str, rest: Optional[str] = None, width: int = 79) -> List[str]:
    import textwrap

    return textwrap.wrap(
        text, width=width, initial_indent=first, subsequent_indent=rest if rest is not None else " " * len(first)
    ) or [first.rstrip()]


def recompute_words(mode: str) -> str:
    """'none' -> 'no activation recomputation', 'full' -> 'full recomputation' (the report's words)."""
    return "no activation recomputation" if mode in ("none", "", None) else "%s recomputation" % mode
