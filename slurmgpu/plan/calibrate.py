"""Fit the cost model's terms to measured runs, and measure how well they predict runs they never saw.

One fitter, two uses. `fit_terms(runs)` returns the `CostTerms` that make the planner, pinned to
each run's layout, predict its measured tokens/s best: on the published runs of
bench/data/calibration_runs.tsv that is `DEFAULT_TERMS`, and `leave_one_source_out(runs)` (fit on
every source but one, predict that one) is the out-of-sample error a plan's speed claim carries.
`fit_site` is `slurmgpu calibrate`: the same fit, from `DEFAULT_TERMS`, of the few terms a site's own
runs of one GPU model can pin down (GEMM ceilings of its architecture, attention, NVLink and NIC
efficiency: slurmgpu.plan.calibration.site_terms), each run held out in turn for the error it states.

A fit never searches layouts: which (ZeRO, recomputation, interleaving) variants of a pinned layout
fit in memory does not depend on the terms, so `prepare` records them once and a fit only re-times
them (the same candidates and the same choice `make_plan` makes; tests/test_calibrate.py checks it).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import PlanError
from ..site import Site
from ..site.calibration import Factors
from .cost import _Cand, _Ctx, _train_candidate
from .hardware import Hardware, with_terms
from .terms import BOUNDS, DEFAULT_TERMS, PRIOR_TERMS, CostTerms
from .types import PlanRequest

TERMS: Tuple[str, ...] = tuple(f.name for f in fields(CostTerms))


# The terms the global fit moves: every term but the link efficiencies. The published runs cannot
# tell NVLink and NIC efficiency apart from the exposed shares of the collectives (fitted with them,
# link_eff fell to 0.51 against nccl-tests' 0.80 while tp_exposed fell too, and the leave-one-source-
# out median rose from 8.45 % to 8.96 %), so they keep their measured priors there; a site's own runs
# (fit_site) fit them.
FITTED: Tuple[str, ...] = tuple(n for n in TERMS if n not in ("link_eff", "nic_eff"))


LOSS_CAP = 0.5  # |log(predicted / measured)| counts at most this much: one odd run cannot steer a fit


PRIOR_WEIGHT = 0.002  # pull towards the start per squared log-ratio: terms no run informs stay put


STEPS = (0.5, 0.7, 0.85, 0.93, 0.97, 1.03, 1.07, 1.18, 1.4, 2.0)  # multiplicative moves of one term


_DIFF = 1e-3  # finite-difference step in log(term) for derivatives


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


def chosen(p: Prepared, terms: Optional[CostTerms] = None) -> _Cand:
    """The candidate the planner picks for the run's layout under `terms` (default: the terms it was
    prepared with, the site's calibration included): the fastest of those that fit."""
    ctx = _Ctx(p.hardware if terms is None else with_terms(p.hardware, terms), p.request)
    return max((_train_candidate(ctx, *call) for call in p.calls), key=lambda c: c.tokens_per_s)


def predict(p: Prepared, terms: Optional[CostTerms] = None) -> float:
    """Tokens/s per GPU the planner predicts for the run's layout under `terms` (default as `chosen`)."""
    return chosen(p, terms).tokens_per_s / p.gpus


def _weights(prepared: Sequence[Prepared]) -> List[float]:
    """Each run weighs 1/sqrt(runs of its source): a large table does not drown a small one."""
    count: Dict[str, int] = {}
    for p in prepared:
        count[p.run.source] = count.get(p.run.source, 0) + 1
    return [1.0 / math.sqrt(count[p.run.source]) for p in prepared]


def _loss(prepared: Sequence[Prepared], weights: Sequence[float], terms: CostTerms, prior: CostTerms) -> float:
    total = 0.0
    for p, w in zip(prepared, weights):
        err = abs(math.log(predict(p, terms) / p.run.tokens_per_s_gpu))
        total += w * min(err, LOSS_CAP)
    total /= sum(weights) or 1.0
    for name in TERMS:
        before, value = getattr(prior, name), getattr(terms, name)
        if before > 0 and value > 0:
            total += PRIOR_WEIGHT * math.log(value / before) ** 2
    return total


def _clip(name: str, value: float) -> float:
    lo, hi = BOUNDS[name]
    return min(hi, max(lo, value))


def _solve(a: List[List[float]], b: List[float]) -> Optional[List[float]]:
    """a x = b by Gaussian elimination with partial pivoting (a few unknowns; no numpy on a login node);
    None where `a` is singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        piv = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[piv][c]) < 1e-300:
            return None
        m[c], m[piv] = m[piv], m[c]
        for r in range(c + 1, n):
            k = m[r][c] / m[c][c]
            for j in range(c, n + 1):
                m[r][j] -= k * m[c][j]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][j] * x[j] for j in range(r + 1, n))) / m[r][r]
    return x


def _log_errors(prepared: Sequence[Prepared], terms: CostTerms) -> List[float]:
    return [math.log(predict(p, terms) / p.run.tokens_per_s_gpu) for p in prepared]


def _sensitivity(
    prepared: Sequence[Prepared], terms: CostTerms, names: Sequence[str]
) -> Tuple[List[float], List[List[float]]]:
    """log(predicted / measured) per run, and per name the column d log(predicted) / d log(term)
    (forward differences)."""
    res = _log_errors(prepared, terms)
    cols = []
    for n in names:
        trial = replace(terms, **{n: getattr(terms, n) * math.exp(_DIFF)})
        cols.append([(a - b) / _DIFF for a, b in zip(_log_errors(prepared, trial), res)])
    return res, cols


def _newton_move(
    prepared: Sequence[Prepared], weights: Sequence[float], terms: CostTerms, names: Sequence[str]
) -> List[CostTerms]:
    """Trial terms along a damped Gauss-Newton step of every name at once, in log(term), fitted to
    the runs inside LOSS_CAP (full step, then halves): the move one term at a time cannot make where
    terms act together (GEMM and attention on one run, NVLink and the NICs on another)."""
    res, cols = _sensitivity(prepared, terms, names)
    w = [wi if abs(r) < LOSS_CAP else 0.0 for wi, r in zip(weights, res)]
    free = list(range(len(names)))
    while True:
        jtj = [[sum(wi * cols[a][i] * cols[b][i] for i, wi in enumerate(w)) for b in free] for a in free]
        jtr = [-sum(wi * cols[a][i] * res[i] for i, wi in enumerate(w)) for a in free]
        for k in range(len(free)):
            jtj[k][k] = jtj[k][k] * (1 + 1e-3) + 1e-12
        solved = _solve(jtj, jtr)
        if solved is None:
            return []
        step = solved
        # a term at a bound the step pushes further out stays there; solve again for the rest
        out = [
            k
            for k, d in zip(free, step)
            if _clip(names[k], getattr(terms, names[k]) * math.exp(d)) == getattr(terms, names[k])
        ]
        if not out:
            break
        free = [k for k in free if k not in out]
        if not free:
            return []
    big = max(abs(d) for d in step)
    scale = min(1.0, math.log(2.0) / big) if big > 0 else 1.0
    moves = []
    for half in range(4):
        f = scale * 0.5**half
        moves.append(
            replace(
                terms,
                **{names[k]: _clip(names[k], getattr(terms, names[k]) * math.exp(f * d)) for k, d in zip(free, step)},
            )
        )
    return moves


def fit_prepared(
    prepared: Sequence[Prepared],
    start: CostTerms = PRIOR_TERMS,
    names: Iterable[str] = FITTED,
    rounds: int = 4,
    newton: bool = False,
) -> CostTerms:
    """`fit_terms` on runs already prepared (cross-validation prepares each run once for all folds)."""
    names = tuple(names)
    for n in names:
        if n not in BOUNDS:
            raise ValueError("unknown cost term %r; expected one of: %s" % (n, ", ".join(TERMS)))
    terms = replace(start, **{n: _clip(n, getattr(start, n)) for n in names})
    prepared = [p for p in prepared if not p.forced]
    if not prepared:
        return terms
    weights = _weights(prepared)
    best = _loss(prepared, weights, terms, start)
    for _ in range(rounds):
        moved = False
        for n in names:
            cur = getattr(terms, n)
            for f in STEPS:
                value = _clip(n, cur * f if cur else f - 0.5)
                if value == getattr(terms, n):
                    continue
                trial = replace(terms, **{n: value})
                v = _loss(prepared, weights, trial, start)
                if v < best - 1e-7:
                    best, terms, moved = v, trial, True
        for trial in _newton_move(prepared, weights, terms, names) if newton else ():
            v = _loss(prepared, weights, trial, start)
            if v < best - 1e-9:
                best, terms, moved = v, trial, True
                break
        if not moved:
            break
    return terms


def fit_terms(
    runs: Iterable[MeasuredRun],
    start: CostTerms = PRIOR_TERMS,
    names: Iterable[str] = FITTED,
    rounds: int = 4,
    newton: bool = False,
) -> CostTerms:
    """The cost terms (within `terms.BOUNDS`) under which the pinned plans best match the runs.

    Minimises the mean of min(|log(predicted / measured)|, 0.5) over the runs, each weighted
    1/sqrt(runs from its source), plus a small pull towards `start` so a term no run informs keeps
    its value; coordinate search over multiplicative moves (`STEPS`), at most `rounds` passes, each
    (with `newton`) ending in a joint Gauss-Newton move of all `names` where it lowers the loss.
    Runs whose layout the planner refuses
    (`prepare` says why) or fits only by adding recomputation the run did not state
    (`Prepared.forced`) are left out. Only `names` move.
    """
    prepared = []
    for r in runs:
        try:
            prepared.append(prepare(r))
        except PlanError:
            continue
    return fit_prepared(prepared, start, names, rounds, newton)


def leave_one_source_out(
    runs: Sequence[MeasuredRun],
    start: CostTerms = PRIOR_TERMS,
    names: Iterable[str] = FITTED,
    rounds: int = 4,
    newton: bool = False,
    progress: Optional[Callable[[int, int], None]] = None,
) -> Tuple[Holdout, ...]:
    """Each run predicted by terms fitted on the runs of every other source (never its own)."""
    names = tuple(names)
    prepared: Dict[int, Prepared] = {}
    refused: Dict[int, str] = {}
    for i, r in enumerate(runs):
        try:
            prepared[i] = prepare(r)
        except PlanError as e:
            refused[i] = str(e).splitlines()[0]
    out: Dict[int, Holdout] = {}
    sources = sorted({r.source for r in runs})
    for k, source in enumerate(sources):
        if progress is not None:
            progress(k + 1, len(sources))
        train = [p for p in prepared.values() if p.run.source != source]
        terms = fit_prepared(train, start, names, rounds, newton)
        for i, r in enumerate(runs):
            if r.source != source:
                continue
            if i in refused:
                out[i] = Holdout(r, None, refused[i], terms)
            else:
                out[i] = Holdout(r, predict(prepared[i], terms), None, terms)
    return tuple(out[i] for i in range(len(runs)))


# ---------------------------------------------------------------------------
# A site's calibration: the same fit, from DEFAULT_TERMS, of the terms the site's own runs pin down

MIN_RUNS = 5  # fewer runs than this: refused
MIN_SENSITIVE = 2  # runs that must depend on a term before it is fitted
SENSITIVE = 0.03  # |d log(tokens/s) / d log(term)| from which a run depends on a term
SITE_ROUNDS = 30  # coordinate and Newton passes at most (a site fit stops when neither moves)


@dataclass(frozen=True)
class SiteFit:
    """What a site fit found for one GPU model, and how well it predicts runs it did not see.

    Terms are named by the calibration file's keys (slurmgpu.site.calibration.FACTORS)."""

    gpu_model: str
    factors: Factors  # fitted values (the rest: the model's), with runs and leave-one-out figures
    start: Factors  # the model's values (DEFAULT_TERMS) of every key this GPU has
    fitted: Tuple[str, ...]
    held: Tuple[Tuple[str, str], ...]  # (key, why it was not fitted)
    at_limit: Tuple[str, ...]  # fitted keys that stopped at a bound of terms.BOUNDS
    runs: Tuple[str, ...]
    skipped: Tuple[Tuple[str, str], ...]  # (run, why it was left out)
    before: Tuple[float, ...]  # predicted / measured - 1 per run with the model's terms
    after_in_sample: Tuple[float, ...]  # ... with the terms fitted to every run
    after_loo: Tuple[float, ...]  # ... each run predicted by a fit without it
    bounds: Tuple[Tuple[str, float, float], ...] = ()  # (key, low, high) of each fitted key

    def to_dict(self) -> Dict[str, object]:
        return {
            "gpu_model": self.gpu_model,
            "factors": self.factors.to_dict(),
            "start": self.start.to_dict(),
            "fitted": list(self.fitted),
            "held": [{"factor": f, "why": w} for f, w in self.held],
            "at_limit": list(self.at_limit),
            "runs": list(self.runs),
            "skipped": [{"run": r, "why": w} for r, w in self.skipped],
            "before": error_stats(self.before),
            "after_in_sample": error_stats(self.after_in_sample),
            "after_leave_one_out": error_stats(self.after_loo),
            "errors": [
                {"run": r, "before": round(b, 4), "after_leave_one_out": round(a, 4)}
                for r, b, a in zip(self.runs, self.before, self.after_loo)
            ],
        }


def p90(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]


def error_stats(errs: Sequence[float]) -> Dict[str, float]:
    """Median, 90th percentile of |error| (percent), median signed error and share within +-10 %."""
    if not errs:
        return {}
    a = [abs(e) for e in errs]
    return {
        "runs": len(errs),
        "median_abs_pct": round(100 * statistics.median(a), 2),
        "p90_abs_pct": round(100 * p90(a), 2),
        "bias_pct": round(100 * statistics.median(errs), 2),
        "within_10pct": round(sum(1 for x in a if x <= 0.10) / len(a), 3),
    }


def _informed(
    prepared: Sequence[Prepared], start: CostTerms, keys: Dict[str, str]
) -> Tuple[List[str], List[Tuple[str, str]]]:
    """The keys whose terms the runs can tell apart, most influential first; the rest with the reason.

    A term is informed when at least MIN_SENSITIVE runs move by SENSITIVE per unit of log(term), and
    it does something the terms already chosen do not (the runs cannot tell GEMM and attention apart
    when every run has the same sequence length)."""
    _, columns = _sensitivity(prepared, start, list(keys.values()))
    cols = dict(zip(keys, columns))
    held: List[Tuple[str, str]] = []
    chosen_keys: List[str] = []
    basis: List[List[float]] = []
    for key in sorted(keys, key=lambda k: -sum(v * v for v in cols[k])):
        col = cols[key]
        n_dep = sum(1 for v in col if abs(v) >= SENSITIVE)
        if n_dep < MIN_SENSITIVE:
            held.append(
                (
                    key,
                    "only %d of %d runs depend on it (|d log speed / d log factor| >= %g in %d needed)"
                    % (n_dep, len(col), SENSITIVE, MIN_SENSITIVE),
                )
            )
            continue
        resid = col[:]
        for b in basis:  # Gram-Schmidt: what this term does that the chosen ones do not
            dot = sum(p * q for p, q in zip(resid, b))
            resid = [p - dot * q for p, q in zip(resid, b)]
        norm = math.sqrt(sum(v * v for v in resid))
        if norm < 0.2 * math.sqrt(sum(v * v for v in col)):
            held.append(
                (
                    key,
                    "the runs cannot tell it apart from %s (they change speed in the same proportions)"
                    % ", ".join(chosen_keys),
                )
            )
            continue
        basis.append([v / norm for v in resid])
        chosen_keys.append(key)
    return chosen_keys, held


def fit_site(
    site: Site,
    gpu_model: str,
    runs: Sequence[MeasuredRun],
    min_runs: int = MIN_RUNS,
    progress: Optional[Callable[[str], None]] = None,
    leave_one_out: bool = True,
    start: CostTerms = DEFAULT_TERMS,
) -> SiteFit:
    """Fit `site`'s own values of `gpu_model`'s terms to `runs` (all on that GPU) from `start`, and
    measure the fit out of sample (`leave_one_out=False`: the fit alone, what each held-out fit is).

    Each run is its own source: the fit weighs them alike and the error it states holds out one run
    at a time. The site's current calibration plays no part (the fit starts from `start`)."""
    from ..site import lookup
    from .calibration import site_terms

    base = replace(site, calibration=None)
    facts = lookup(gpu_model)
    keys = site_terms(facts.arch if facts is not None else "")
    values: Dict[str, Any] = {k: float(getattr(start, n)) for k, n in keys.items()}
    start_f = Factors(**values)
    own = [replace(r, site=base, source="%d" % i) for i, r in enumerate(runs)]
    kept: List[Prepared] = []
    skipped: List[Tuple[str, str]] = []
    for r in own:
        try:
            p = prepare(r)
        except PlanError as exc:
            skipped.append((r.name, str(exc).splitlines()[0]))
            continue
        if p.forced:
            skipped.append(
                (
                    r.name,
                    "the planner fits this layout only with full recomputation, which the run does not "
                    "state: its speed would test the memory model, not the efficiency",
                )
            )
            continue
        kept.append(p)
    if len(kept) < min_runs:
        raise PlanError(
            "calibrate: %d usable run%s of %s on site %s; at least %d are needed to fit and still leave "
            "runs to test the fit on (record more with `slurmgpu report JOBID --record`)"
            % (len(kept), "" if len(kept) == 1 else "s", gpu_model, site.name, min_runs)
        )
    chosen_keys, held = _informed(kept, start, keys)
    while chosen_keys and len(chosen_keys) > len(kept) - 2:
        held.append(
            (chosen_keys[-1], "%d runs fit at most %d factors with two runs to spare" % (len(kept), len(kept) - 2))
        )
        chosen_keys = chosen_keys[:-1]
    if not chosen_keys:
        raise PlanError(
            "calibrate: none of the efficiency factors of %s can be fitted from these %d runs: %s"
            % (gpu_model, len(kept), "; ".join("%s: %s" % h for h in held))
        )
    names = [keys[k] for k in chosen_keys]
    fitted = fit_prepared(kept, start, names, rounds=SITE_ROUNDS, newton=True)
    before = [predict(p, start) / p.run.tokens_per_s_gpu - 1 for p in kept]
    after = [predict(p, fitted) / p.run.tokens_per_s_gpu - 1 for p in kept]
    loo: List[float] = []
    if leave_one_out:
        tick = None if progress is None else (lambda k, n: progress("leave-one-out %d/%d" % (k, n)))
        held_out = leave_one_source_out(
            [p.run for p in kept], start, names, rounds=SITE_ROUNDS, newton=True, progress=tick
        )
        loo = [h.error for h in held_out if h.error is not None]
    bounds = tuple((k, BOUNDS[keys[k]][0], BOUNDS[keys[k]][1]) for k in chosen_keys)
    at_limit = tuple(k for k, lo, hi in bounds if not lo * (1 + 1e-6) < getattr(fitted, keys[k]) < hi * (1 - 1e-6))
    a = [abs(e) for e in loo]
    values = {k: float(getattr(fitted, keys[k])) for k in chosen_keys}
    only = Factors(
        **values,
        runs=len(kept),
        loo_median=100 * statistics.median(a) if a else None,
        loo_p90=100 * p90(a) if a else None,
    )
    return SiteFit(
        gpu_model=gpu_model,
        factors=only,
        start=start_f,
        fitted=tuple(chosen_keys),
        held=tuple(held),
        at_limit=at_limit,
        runs=tuple(p.run.name for p in kept),
        skipped=tuple(skipped),
        before=tuple(before),
        after_in_sample=tuple(after),
        after_loo=tuple(loo),
        bounds=bounds,
    )
