"""The layout search over TP/PP/DP/CP/EP, micro-batch, ZeRO stage and recompute. It ranks
candidates and records why others lost; it never re-runs itself (only `planner` does)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..errors import PlanError
from .cost import CP_MIN_TOKENS, MICRO_BATCHES, _Cand, _Ctx, _infer_candidate, _train_candidate
from .hardware import Hardware
from .layout import Layout, node_shard
from .memory import (
    GB,
    WEIGHT_BYTES,
    MemoryBreakdown,
    TrainShape,
    inference_memory,
    serve_fits,
    training_memory,
)
from .profile import STATE_BYTES
from .rules import _divisors, _tp_rules, segment_for, segment_for_layout
from .types import Capabilities, PlanRequest, Rejection, task_name
from .words import _mem_words, _short

TOP_ALTERNATIVES = 5


MAX_MEMORY_REJECTS = 40


@dataclass
class _Result:
    """What one search over an allocation found: ranked layouts, rejections, misses."""

    ranked: List[_Cand]
    rejected: List[Rejection]
    misses: List[Tuple[float, Layout, MemoryBreakdown]]  # layouts that did not fit, leanest first
    batch_note: Optional[str] = None


def _caps_zeros(caps: Capabilities, zeros: List[int], pp: int, ep: int, tied: bool = False) -> List[int]:
    """The stages the launcher can run among `zeros`; else its nearest stage (the least sharding first)."""

    def ok(z: int) -> bool:
        if z not in caps.zero:
            return False
        return z < 3 or (
            (pp == 1 or caps.zero3_with_pp) and (ep == 1 or caps.zero3_with_ep) and (not tied or caps.zero3_with_tied)
        )

    keep = [z for z in zeros if ok(z)]
    if keep:
        return keep
    near = sorted((z for z in (0, 1, 2, 3) if ok(z)), key=lambda z: abs(z - zeros[0]))
    return near[:1]


def caps_error(req: PlanRequest) -> Optional[str]:
    """Why the request's pins ask for something its launcher cannot express (None: they do not)."""
    caps, pins = req.caps, req.pins
    who = "launcher %s" % caps.launcher if caps.launcher else "the launcher"
    task = task_name(req.task)
    for key, allowed, what in (
        ("tp", caps.tp, "tensor parallelism"),
        ("pp", caps.pp, "pipeline stages"),
        ("cp", caps.cp, "context parallelism"),
        ("ep", caps.ep, "expert parallelism"),
    ):
        if pins.get(key, 1) > 1 and not allowed:
            if caps.declare:
                return (
                    "%s runs your own program, which declares no %s: drop --%s %d, or add `implements: [%s]` "
                    "to slurmgpu.yaml (--implements %s) if the program runs it" % (who, what, key, pins[key], key, key)
                )
            return "%s cannot run %s: drop --%s %d (or pick a launcher that has it)" % (who, what, key, pins[key])
    vp = req.virtual_stages or 1
    if vp > 1 and not caps.virtual_stages:
        return "%s cannot run interleaved (virtual) pipeline stages: drop --virtual-stages %d" % (
            who,
            vp,
        )
    pp = pins.get("pp", 1)
    if pp > 1 and not caps.uneven_stages and req.model.layers % pp:
        return "%s needs equal pipeline stages: --pp %d does not divide the %d layers of %s" % (
            who,
            pp,
            req.model.layers,
            req.model.label,
        )
    if req.zero is not None:
        if req.zero not in caps.zero:
            return "%s runs ZeRO stage%s %s only: --zero %d is not one of them" % (
                who,
                "s" if len(caps.zero) > 1 else "",
                "/".join(str(z) for z in caps.zero) or "(none)",
                req.zero,
            )
        if req.zero == 3 and pp > 1 and not caps.zero3_with_pp:
            return "%s cannot combine ZeRO-3 (full sharding) with pipeline stages: drop --zero 3 or --pp %d" % (
                who,
                pp,
            )
        if req.zero == 3 and req.model.tied_embeddings and not caps.zero3_with_tied:
            return "%s cannot fully shard (ZeRO-3) %s, whose output layer shares the embedding: drop --zero 3" % (
                who,
                req.model.label,
            )
        if req.zero == 3 and pins.get("ep", 1) > 1 and not caps.zero3_with_ep:
            return "%s cannot combine ZeRO-3 (full sharding) with expert parallelism: drop --zero 3 or --ep %d" % (
                who,
                pins["ep"],
            )
    prof = caps.memory
    if task != "inference" and req.recompute is not None and req.recompute not in prof.recompute:
        return "%s cannot ask %s for %s activation recomputation (it runs %s): drop --recompute %s" % (
            who,
            prof.framework,
            req.recompute,
            " or ".join(prof.recompute),
            req.recompute,
        )
    if task == "inference" and pins.get("dp", 1) > 1:
        if not caps.serving_dp:
            return "%s runs one TP x PP server, no data-parallel replicas: drop --dp %d" % (who, pins["dp"])
        if not caps.serving_dp_nodes and (req.nodes or 1) > 1:
            return "%s runs data-parallel replicas only inside one node: drop --dp %d or use --nodes 1" % (
                who,
                pins["dp"],
            )
    return None


def _caps_allow(ctx: _Ctx, nodes: int, pp: int, dp: int) -> bool:
    """Whether the launcher can express a (nodes, PP, DP) layout the search is about to try."""
    caps = ctx.req.caps
    if pp > 1 and not caps.uneven_stages and ctx.model.layers % pp:
        return False
    if pp > 1 and ctx.req.zero == 3 and not caps.zero3_with_pp:
        return False
    if not ctx.train and dp > 1:
        return caps.serving_dp and (nodes == 1 or caps.serving_dp_nodes)
    return True


def _strategies(ctx: _Ctx, pp: int, n_dp: int, ep: int = 1) -> List[Tuple[int, str]]:
    """(ZeRO stage, recomputation) to try, cheapest first."""
    req = ctx.req
    if req.zero is not None:
        zeros = [req.zero]
    elif n_dp == 1:
        # nothing to shard; a stage that only enables a cheaper profile (Megatron's distributed
        # optimizer carries --use-precision-aware-optimizer) is tried after the framework's default
        zeros = [0] + sorted({z for lv in req.caps.memory.levers for z in lv.zeros if z not in (0, 3)})
    elif pp > 1:
        zeros = [1]  # Megatron's distributed optimizer (FSDP + PP only when asked: torchtitan runs it)
    else:
        zeros = [1, 2, 3]
    if req.zero is None:
        zeros = _caps_zeros(req.caps, zeros, pp, ep, ctx.model.tied_embeddings)
    # with FlashAttention `selective` (recompute the attention core) saves no memory over `none`;
    # a program that recomputes nothing it is not told (the launcher's profile) gets `none` only
    can = req.caps.memory.recompute
    recs = [req.recompute] if req.recompute else ([r for r in ("none", "full") if r in can] or [can[0]])
    return [(z, r) for r in recs for z in zeros]


def _search(
    ctx: _Ctx,
    nodes: int,
    gpn: int,
    want_rejects: bool = True,
    base_batch: Optional[int] = None,
    lossy: bool = False,
) -> _Result:
    """Every layout of `nodes` x `gpn` GPUs, ranked. The framework's cheaper-memory flags that change
    its numerics (profile.Lever.lossless False) are tried only when nothing fits without them (`lossy`)."""
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
    elif not req.caps.tp:
        tps = [1]
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
        elif not req.caps.cp:
            cps = [1]
        elif ctx.train:
            cps = [c for c in _divisors(rest) if c == 1 or (ctx.seq // c >= CP_MIN_TOKENS and ctx.seq % (2 * c) == 0)]
        else:
            cps = [1]
        for cp in cps:
            if rest % cp:
                continue
            pps = [p for p in _divisors(rest // cp) if p <= m.layers]
            if "pp" in pins:
                pps = [pins["pp"]]
            elif not req.caps.pp:
                pps = [1]
            for pp in pps:
                if (rest // cp) % pp:
                    continue
                dp = rest // (cp * pp)
                if "dp" in pins and pins["dp"] != dp:
                    continue
                if not _caps_allow(ctx, nodes, pp, dp):
                    continue
                eps = [1]
                if m.is_moe and ctx.train and req.caps.ep:  # serving with EP (DP attention) only when pinned
                    eps = [e for e in _divisors(math.gcd(dp * cp, m.experts))]
                if "ep" in pins:
                    eps = [pins["ep"]]
                for ep in eps:
                    if ep > 1 and (not m.is_moe or m.experts % ep or (dp * cp * tp) % ep):
                        continue
                    if ep > 1 and req.zero == 3 and not req.caps.zero3_with_ep:
                        continue
                    seg_l = seg
                    if (cp > 1 or ep > 1) and hw.nt.nvlink_domain > hw.nt.gpus:
                        # CP/EP groups must stay inside one NVLink domain too (NVL72)
                        probe = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, nodes=nodes, gpus_per_node=gpn)
                        # kinds the site only warns about (policy.groups) are preferred through the
                        # cost model (a group past the segment runs on the NICs), not required
                        seg_l, err = segment_for_layout(hw.nt, probe, kinds=hw.strict_kinds)
                        if err:
                            if want_rejects:
                                rejected.append(Rejection(_short(probe), err, "rule"))
                            continue
                    if ctx.train:
                        _train_layouts(
                            ctx,
                            nodes,
                            gpn,
                            tp,
                            pp,
                            dp,
                            cp,
                            ep,
                            seg_l,
                            base_batch,
                            user_batch,
                            ranked,
                            misses,
                            batch_rejects,
                            lossy,
                        )
                    else:
                        _infer_layouts(
                            ctx, nodes, gpn, tp, pp, dp, cp, ep, seg_l, user_batch, ranked, misses, batch_rejects
                        )
    if want_rejects:
        for reason, count in batch_rejects.items():
            rejected.append(Rejection("%d layout%s" % (count, "s" if count > 1 else ""), reason, "batch"))
    misses.sort(key=lambda t: t[0])
    if want_rejects:
        for _, lay, mem in misses[:MAX_MEMORY_REJECTS]:
            if _key(lay) not in ranked:
                rejected.append(Rejection(_short(lay), _mem_words(ctx, mem), "memory"))
    order = sorted(ranked.values(), key=lambda c: (-c.tokens_per_s, c.memory.total))
    if not order and ctx.train and not lossy and req.caps.memory.lossy:
        return _search(ctx, nodes, gpn, want_rejects, base_batch, lossy=True)
    if not order and ctx.train and not user_batch and batch_rejects:
        # odd GPU counts force a large DP: grow the default batch to the smallest DP that divides them
        need = min(int(r.split("=")[1].split()[0]) for r in batch_rejects)
        if need > base_batch:
            retry = _search(ctx, nodes, gpn, want_rejects, base_batch=need, lossy=lossy)
            if retry.ranked:
                retry.batch_note = (
                    "the default global batch grew from %d to %d sequences: %d GPUs leave no "
                    "layout with DP <= %d" % (base_batch, need, n, base_batch)
                )
            return retry
    return _Result(order, rejected, misses)


def _key(lay: Layout) -> Tuple[int, ...]:
    return (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep)


def _train_layouts(
    ctx: _Ctx,
    nodes: int,
    gpn: int,
    tp: int,
    pp: int,
    dp: int,
    cp: int,
    ep: int,
    seg: Optional[int],
    base_batch: int,
    user_batch: Optional[int],
    ranked: Dict[Tuple[int, ...], _Cand],
    misses: List[Tuple[float, Layout, MemoryBreakdown]],
    batch_rejects: Dict[str, int],
    lossy: bool = False,
) -> None:
    m = ctx.model
    pins = ctx.req.pins
    mbs = [pins["micro_batch"]] if "micro_batch" in pins else list(MICRO_BATCHES)
    strategies = _strategies(ctx, pp, dp * cp, ep)
    if ep > 1 and ctx.req.caps.ep_within_shard and (node_shard(dp, cp, tp, gpn) * cp * tp) % ep:
        # only full sharding spans DP for EP (torchtitan: EP out of dp_shard x CP x TP; FSDP + PP runs)
        caps = ctx.req.caps
        full = 3 in caps.zero and (pp == 1 or caps.zero3_with_pp) and caps.zero3_with_ep
        recs = sorted({r for _, r in strategies}, key=[r for _, r in strategies].index)
        strategies = [(3, r) for r in recs] if full and ctx.req.zero in (None, 3) else []
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
        shape = TrainShape(tp, pp, dp, cp, ep, mb, batch // (dp * mb), ctx.seq, gpn)
        best: Optional[_Cand] = None
        fitted = False
        n_mb = batch // (dp * mb)
        vps = [1]
        if ctx.req.virtual_stages:
            vps = [ctx.req.virtual_stages]
        elif pp > 1 and ctx.req.caps.virtual_stages and n_mb % pp == 0 and (pp - 1) / n_mb > 0.02:
            # interleaving needs whole rounds of micro-batches (Megatron); worth it only for a visible bubble
            vps += [
                v for v in (2, 4, 8) if v <= min(counts) and (ctx.req.caps.uneven_stages or m.layers % (pp * v) == 0)
            ]
        for zero, rec in strategies:
            for vp in vps:
                mem = _train_fit(ctx, shape, zero, rec, counts, vp, pp, lossy)
                if mem.total > ctx.usable:
                    if leanest is None or mem.total < leanest[0]:
                        leanest = (mem.total, lay, mem)
                    break  # more chunks only need more memory
                fitted = True
                cand = _train_candidate(ctx, lay, batch, zero, rec, mem, seg, vp)
                if best is None or cand.step < best.step - 1e-12:
                    best = cand
            if best is not None and rec in ("none", "selective") and zero <= 2:
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
            reason = (
                "DP=%d needs a global batch of at least %d sequences (%.1fM tokens); the default is %d "
                "(set --global-batch to allow more)" % (dp, dp, dp * ctx.seq / 1e6, base_batch)
            )
        batch_rejects[reason] = batch_rejects.get(reason, 0) + 1
    elif leanest is not None and _key(leanest[1]) not in ranked:
        misses.append(leanest)


def _train_fit(
    ctx: _Ctx, shape: TrainShape, zero: int, rec: str, counts: List[int], vp: int, pp: int, lossy: bool = False
) -> MemoryBreakdown:
    """The breakdown with the framework's defaults, or with the fewest of its cheaper-profile flags
    (profile.Lever, in the profile's order) that make it fit; the last tried when none does."""
    prof = ctx.req.caps.memory
    mem = None
    for levers in prof.lever_sets(zero, lossy):
        mem = training_memory(
            ctx.model,
            shape,
            ctx.task,
            zero,
            rec,
            ctx.kopt,
            counts,
            vp,
            ctx.stages(pp),
            prof,
            levers,
            ctx.req.precision,
            ctx.req.caps.selective,
        )
        if mem.total <= ctx.usable:
            return mem
    assert mem is not None
    return mem


def _infer_layouts(
    ctx: _Ctx,
    nodes: int,
    gpn: int,
    tp: int,
    pp: int,
    dp: int,
    cp: int,
    ep: int,
    seg: Optional[int],
    user_batch: Optional[int],
    ranked: Dict[Tuple[int, ...], _Cand],
    misses: List[Tuple[float, Layout, MemoryBreakdown]],
    batch_rejects: Dict[str, int],
) -> None:
    """One replica is TP x PP GPUs; DP replicas fill the allocation, each serving batch / DP sequences."""
    if user_batch is not None and user_batch % dp:
        reason = "DP=%d replicas need --global-batch (%d concurrent sequences) to be a multiple of %d" % (
            dp,
            user_batch,
            dp,
        )
        batch_rejects[reason] = batch_rejects.get(reason, 0) + 1
        return
    base_batch = user_batch or dp
    b = base_batch // dp
    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=b, nodes=nodes, gpus_per_node=gpn)
    nt = ctx.hw.nt
    mem = inference_memory(
        ctx.model,
        tp,
        pp,
        ep,
        b,
        ctx.seq,
        ctx.req.precision,
        ctx.counts(pp),
        ctx.stages(pp),
        ctx.req.caps.memory,
        nt.gpu_memory_gb,
        nt.gpu_model,
    )
    if not serve_fits(mem, ctx.usable, ctx.req.caps.memory.serve is not None):
        misses.append((mem.need, lay, mem))
        return
    ranked[_key(lay)] = _infer_candidate(ctx, lay, base_batch, mem, seg)


def _split_gpus(hw: Hardware, gpus: int) -> Tuple[int, int]:
    """--gpus N -> (nodes, GPUs per node): the fewest nodes that hold N evenly."""
    g = hw.nt.gpus
    if gpus <= g:
        return 1, gpus
    maxn = hw.partition.max_nodes_per_job
    for nodes in range(-(-gpus // g), min(gpus, maxn) + 1):
        if gpus % nodes == 0 and gpus // nodes <= g:
            return nodes, gpus // nodes
    raise PlanError(
        "--gpus %d cannot be spread evenly over at most %d nodes of %d GPUs (partition %s); use a "
        "multiple of %d" % (gpus, maxn, g, hw.partition.name, g)
    )


def _lower_bound_gpus(ctx: _Ctx) -> int:
    m = ctx.model
    if ctx.task in ("pretrain", "finetune"):
        # the leanest the framework can be told to be: every stage and cheaper-profile flag, fully sharded
        need = ctx.req.caps.memory.leanest(STATE_BYTES[ctx.req.optimizer]) * m.params
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
