"""Fit the cost model's terms to measured runs, and measure how well they predict runs they never saw.

Pure functions over frozen data. `fit_terms(runs)` returns the `CostTerms` that make the planner,
pinned to each run's layout, predict its measured tokens/s best (what `slurmgpu calibrate` and
bench/plan_accuracy.py call); `leave_one_source_out(runs)` fits on every source but one and
predicts that one, for each source in turn: the out-of-sample error a plan's speed claim carries.

A fit never searches layouts: which (ZeRO, recomputation, interleaving) variants of a pinned layout
fit in memory does not depend on the terms, so `prepare` records them once and a fit only re-times
them (the same candidates and the same choice `make_plan` makes; tests/test_calibrate.py checks it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import PlanError
from ..site import Site
from .cost import _Ctx, _train_candidate
from .hardware import Hardware, with_terms
from .terms import BOUNDS, PRIOR_TERMS, CostTerms
from .types import PlanRequest

# the terms a fit moves (every field of CostTerms)
FITTED: Tuple[str, ...] = tuple(f.name for f in fields(CostTerms))


LOSS_CAP = 0.5  # |log(predicted / measured)| counts at most this much: one odd run cannot steer a fit


PRIOR_WEIGHT = 0.002  # pull towards PRIOR_TERMS per squared log-ratio: terms no run informs stay put


STEPS = (0.5, 0.7, 0.85, 0.93, 0.97, 1.03, 1.07, 1.18, 1.4, 2.0)  # multiplicative moves of one term


@dataclass(frozen=True)
class MeasuredRun:
    """One training run that really ran: where, what layout, and the tokens/s per GPU it reached."""

    name: str
    source: str  # the publication or site log it comes from: the unit cross-validation holds out
    site: Site
    request: PlanRequest  # pinned to the layout that ran (pins, global batch, precision, recompute, ZeRO)
    tokens_per_s_gpu: float


@dataclass(frozen=True)
class Prepared:
    """A run with the candidates its pinned search evaluates, ready to be re-timed under any terms."""

    run: MeasuredRun
    request: PlanRequest
    hardware: Hardware
    calls: Tuple[Tuple[Any, ...], ...]  # _train_candidate arguments after the context
    gpus: int

    @property
    def forced(self) -> bool:
        """The run states no recomputation, yet the planner's memory model fits it only with full
        recomputation: its prediction carries the memory model's error, so a fit leaves it out."""
        return self.request.recompute is None and all(c[3] == "full" for c in self.calls)


@dataclass(frozen=True)
class Holdout:
    """A run predicted by terms fitted without any run of its source."""

    run: MeasuredRun
    predicted: Optional[float]  # tokens/s per GPU; None where the planner refuses the layout
    refused: Optional[str]
    terms: CostTerms

    @property
    def error(self) -> Optional[float]:
        """predicted / measured - 1."""
        if self.predicted is None:
            return None
        return self.predicted / self.run.tokens_per_s_gpu - 1.0


def prepare(run: MeasuredRun) -> Prepared:
    """Run the pinned search once, recording each candidate; PlanError where the layout is refused."""
    from .planner import _check_pins, _normalize, _validate
    from .search import _search, _split_gpus

    req = _normalize(run.request)
    hw = _validate(run.site, req)
    if not req.gpus:
        raise PlanError("%s: a measured run needs its GPU count (PlanRequest.gpus)" % run.name)
    nodes, gpn = _split_gpus(hw, req.gpus)
    _check_pins(_Ctx(hw, req), (nodes, gpn))
    ctx = _Ctx(hw, req)
    ctx.trace = []
    res = _search(ctx, nodes, gpn, want_rejects=False)
    if not res.ranked:
        from .planner import _no_fit_message

        raise PlanError(_no_fit_message(_Ctx(hw, req), (nodes, gpn), _search(_Ctx(hw, req), nodes, gpn)))
    return Prepared(run, req, hw, tuple(ctx.trace), nodes * gpn)


def predict(p: Prepared, terms: CostTerms) -> float:
    """Tokens/s per GPU the planner predicts for the run's layout under `terms`."""
    ctx = _Ctx(with_terms(p.hardware, terms), p.request)
    best = 0.0
    for call in p.calls:
        best = max(best, _train_candidate(ctx, *call).tokens_per_s)
    return best / p.gpus


def _weights(prepared: Sequence[Prepared]) -> List[float]:
    """Each run weighs 1/sqrt(runs of its source): a large table does not drown a small one."""
    count: Dict[str, int] = {}
    for p in prepared:
        count[p.run.source] = count.get(p.run.source, 0) + 1
    return [1.0 / math.sqrt(count[p.run.source]) for p in prepared]


def _loss(prepared: Sequence[Prepared], weights: Sequence[float], terms: CostTerms) -> float:
    total = 0.0
    for p, w in zip(prepared, weights):
        err = abs(math.log(predict(p, terms) / p.run.tokens_per_s_gpu))
        total += w * min(err, LOSS_CAP)
    total /= sum(weights) or 1.0
    for name in FITTED:
        prior, value = getattr(PRIOR_TERMS, name), getattr(terms, name)
        if prior > 0 and value > 0:
            total += PRIOR_WEIGHT * math.log(value / prior) ** 2
    return total


def _clip(name: str, value: float) -> float:
    lo, hi = BOUNDS[name]
    return min(hi, max(lo, value))


def fit_prepared(
    prepared: Sequence[Prepared], start: CostTerms = PRIOR_TERMS, names: Iterable[str] = FITTED, rounds: int = 4
) -> CostTerms:
    """`fit_terms` on runs already prepared (cross-validation prepares each run once for all folds)."""
    names = tuple(names)
    for n in names:
        if n not in BOUNDS:
            raise ValueError("unknown cost term %r; expected one of: %s" % (n, ", ".join(FITTED)))
    terms = replace(start, **{n: _clip(n, getattr(start, n)) for n in names})
    prepared = [p for p in prepared if not p.forced]
    if not prepared:
        return terms
    weights = _weights(prepared)
    best = _loss(prepared, weights, terms)
    for _ in range(rounds):
        moved = False
        for n in names:
            cur = getattr(terms, n)
            for f in STEPS:
                value = _clip(n, cur * f if cur else f - 0.5)
                if value == getattr(terms, n):
                    continue
                trial = replace(terms, **{n: value})
                v = _loss(prepared, weights, trial)
                if v < best - 1e-7:
                    best, terms, moved = v, trial, True
        if not moved:
            break
    return terms


def fit_terms(
    runs: Iterable[MeasuredRun], start: CostTerms = PRIOR_TERMS, names: Iterable[str] = FITTED, rounds: int = 4
) -> CostTerms:
    """The cost terms (within `terms.BOUNDS`) under which the pinned plans best match the runs.

    Minimises the mean of min(|log(predicted / measured)|, 0.5) over the runs, each weighted
    1/sqrt(runs from its source), plus a small pull towards `start`'s prior so a term no run
    informs keeps its physical default; coordinate search, `rounds` passes. Runs whose layout the
    planner refuses (`prepare` says why) or fits only by adding recomputation the run did not state
    (`Prepared.forced`) are left out. Only `names` move.
    """
    prepared = []
    for r in runs:
        try:
            prepared.append(prepare(r))
        except PlanError:
            continue
    return fit_prepared(prepared, start, names, rounds)


def leave_one_source_out(
    runs: Sequence[MeasuredRun], start: CostTerms = PRIOR_TERMS, names: Iterable[str] = FITTED, rounds: int = 4
) -> Tuple[Holdout, ...]:
    """Each run predicted by terms fitted on the runs of every other source (never its own)."""
    names = tuple(names)
    prepared: Dict[str, Prepared] = {}
    refused: Dict[str, str] = {}
    for r in runs:
        try:
            prepared[r.name] = prepare(r)
        except PlanError as e:
            refused[r.name] = str(e).splitlines()[0]
    out: List[Holdout] = []
    for source in sorted({r.source for r in runs}):
        train = [p for p in prepared.values() if p.run.source != source]
        terms = fit_prepared(train, start, names, rounds)
        for r in runs:
            if r.source != source:
                continue
            if r.name in refused:
                out.append(Holdout(r, None, refused[r.name], terms))
            else:
                out.append(Holdout(r, predict(prepared[r.name], terms), None, terms))
    order = {r.name: i for i, r in enumerate(runs)}
    return tuple(sorted(out, key=lambda h: order[h.run.name]))
