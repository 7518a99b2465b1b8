"""Fitting a site's efficiency factors to its measured runs, with an honest error: leave one out.

The fit asks the planner itself for each run's tokens/s/GPU with the run's own layout pinned
(TP/PP/DP/CP/EP, micro-batch, batch, precision, sharding, recompute, virtual stages) and moves the
`Factors` of slurmgpu.site.calibration (GEMM and attention shares of peak, NVLink and NIC
efficiency) until log(predicted / measured) is smallest. The loss has the shape slurmgpu.plan.calibrate
uses for the published calibration set (log error, runs further off than its LOSS_CAP counted
linearly so one bad record cannot steer the fit), and the same multiplicative moves (its STEPS) find
the right piece of the cost model first; damped Gauss-Newton in log-factor space then lands each
factor within a fraction of a percent. (calibrate.py fits the global CostTerms over many sources;
this fits the few factors a site's own runs can pin down, including NVLink and NIC efficiency, which
are not CostTerms.)

Honesty rules:
* a factor is fitted only when enough runs depend on it (`SENSITIVE` in at least `MIN_SENSITIVE`
  runs) and it is not a copy of one already chosen (the runs cannot tell GEMM and attention
  apart when every run has the same sequence length); the rest keep the model's value and the
  result says why;
* no factor leaves [lowest, physical limit] (site.calibration.FACTORS): a fit that presses
  against the peak FLOP/s or the line rate is reported as such, never extrapolated past it;
* fewer than `MIN_RUNS` runs, or fewer than two more runs than fitted factors, is refused;
* the error a calibrated plan states is the 90th percentile of leave-one-out errors: each run
  predicted by a fit made without it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import PlanError
from ..site import Site
from ..site.calibration import FACTORS, Calibration, Factors
from .calibrate import LOSS_CAP, STEPS
from .models import ModelSpec
from .types import PlanRequest

MIN_RUNS = 5  # fewer runs than this: refused
MIN_SENSITIVE = 2  # runs that must depend on a factor before it is fitted
SENSITIVE = 0.03  # |d log(tokens/s) / d log(factor)| from which a run depends on a factor
HUBER = LOSS_CAP  # log errors beyond this count linearly (plan.calibrate caps them there)
MAX_ITER = 60
STEP = 1e-3  # finite-difference step in log(factor)
GRID = STEPS  # the coarse pass's multipliers, plan.calibrate's
MAX_STEP = 0.3  # largest move of one log(factor) per iteration (a trust region)


@dataclass(frozen=True)
class MeasuredRun:
    """One measured run, as the runs file records it: what ran and its tokens/s/GPU."""

    name: str
    model: ModelSpec
    gpus: int
    precision: str
    task: str
    seq: int
    global_batch: int
    micro_batch: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vp: int
    zero: Optional[int]
    recompute: Optional[str]
    measured: float  # tokens/s/GPU
    partition: Optional[str] = None

    def request(self) -> PlanRequest:
        pins = {
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "cp": self.cp,
            "ep": self.ep,
            "micro_batch": self.micro_batch,
        }
        return PlanRequest(
            model=self.model,
            task=self.task,
            partition=self.partition,
            gpus=self.gpus,
            seq=self.seq,
            global_batch=self.global_batch,
            precision=self.precision,
            pins=pins,
            zero=self.zero,
            recompute=self.recompute,
            virtual_stages=self.vp if self.pp > 1 else None,
        )


def with_calibration(site: Site, gpu_model: str, factors: Factors) -> Site:
    """`site` planning with `factors` on `gpu_model` (the fit's trial calibrations)."""
    cal = Calibration(path="(fit)", site=site.name, fitted="", runs_file="", gpus=((gpu_model, factors),))
    return replace(site, calibration=cal)


def predict(site: Site, run: MeasuredRun) -> Tuple[float, int, str]:
    """(tokens/s/GPU, ZeRO stage, recompute) the planner gives the run's pinned layout on `site`."""
    from .cost import _Ctx
    from .planner import _normalize, _validate
    from .search import _search, _split_gpus

    req = _normalize(run.request())
    hw = _validate(site, req)
    ctx = _Ctx(hw, req)
    nodes, gpn = _split_gpus(hw, run.gpus)
    res = _search(ctx, nodes, gpn, want_rejects=False)
    if not res.ranked:
        raise PlanError("%s: the planner finds its pinned layout does not fit on %s" % (run.name, site.name))
    best = res.ranked[0]
    return best.tokens_per_s / run.gpus, best.memory.zero, best.memory.recompute


def start_factors(site: Site, partition: Optional[str]) -> Factors:
    """The cost model's own factors for a partition's GPU (BF16 and, where the GPU has it, FP8)."""
    from .calibration import defaults
    from .hardware import hardware

    base = replace(site, calibration=None)
    bf = defaults(hardware(base, partition, "bf16"))
    f8 = hardware(base, partition, "fp8")
    return replace(bf, gemm_fp8=f8.gemm_eff if f8.peak > f8.peak_bf16 else None)


@dataclass(frozen=True)
class FitResult:
    """What a fit found, and how well it predicts runs it did not see."""

    gpu_model: str
    factors: Factors  # fitted values (the rest: the model's), with runs and leave-one-out figures
    start: Factors
    fitted: Tuple[str, ...]
    held: Tuple[Tuple[str, str], ...]  # (factor, why it was not fitted)
    at_limit: Tuple[str, ...]  # fitted factors that stopped at a bound
    runs: Tuple[str, ...]
    skipped: Tuple[Tuple[str, str], ...]  # (run, why it was left out)
    before: Tuple[float, ...]  # predicted / measured - 1 per run with the model's factors
    after_in_sample: Tuple[float, ...]  # ... with the factors fitted to every run
    after_loo: Tuple[float, ...]  # ... each run predicted by a fit without it

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


# ---------------------------------------------------------------------------
# The fit


class _Problem:
    """Runs of one GPU model, their pinned choices, and log-error evaluation at trial factors."""

    def __init__(self, site: Site, gpu_model: str, runs: Sequence[MeasuredRun], base: Factors):
        self.site, self.gpu_model, self.base = site, gpu_model, base
        self.runs = list(runs)

    def residuals(self, f: Factors, runs: Optional[Sequence[MeasuredRun]] = None) -> List[float]:
        s = with_calibration(self.site, self.gpu_model, f)
        return [math.log(predict(s, r)[0] / r.measured) for r in (self.runs if runs is None else runs)]


def _factors(base: Factors, names: Sequence[str], x: Sequence[float]) -> Factors:
    vals: Dict[str, Any] = {n: math.exp(v) for n, v in zip(names, x)}
    return replace(base, **vals)


def _loss(res: Sequence[float]) -> float:
    return sum(r * r if abs(r) <= HUBER else 2 * HUBER * abs(r) - HUBER * HUBER for r in res)


def _weights(res: Sequence[float]) -> List[float]:
    return [1.0 if abs(r) <= HUBER else HUBER / abs(r) for r in res]


def _solve(a: List[List[float]], b: List[float]) -> List[float]:
    """Gaussian elimination with partial pivoting (a few unknowns; no numpy on a login node)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            raise ZeroDivisionError
        m[c], m[p] = m[p], m[c]
        for r in range(c + 1, n):
            k = m[r][c] / m[c][c]
            for j in range(c, n + 1):
                m[r][j] -= k * m[c][j]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][j] * x[j] for j in range(r + 1, n))) / m[r][r]
    return x


def _jacobian(
    prob: _Problem, names: Sequence[str], x: Sequence[float], res: Sequence[float], runs: Sequence[MeasuredRun]
) -> List[List[float]]:
    """d residual_i / d log factor_k by forward differences (runs x factors)."""
    cols = []
    for k in range(len(names)):
        xk = list(x)
        xk[k] += STEP
        rk = prob.residuals(_factors(prob.base, names, xk), runs)
        cols.append([(a - b) / STEP for a, b in zip(rk, res)])
    return [[cols[k][i] for k in range(len(names))] for i in range(len(res))]


def _bounds(names: Sequence[str]) -> List[Tuple[float, float]]:
    return [(math.log(FACTORS[n][1]), math.log(FACTORS[n][2])) for n in names]


def _minimise(prob: _Problem, names: Sequence[str], x0: Sequence[float], runs: Sequence[MeasuredRun]) -> List[float]:
    """Damped Gauss-Newton (Levenberg-Marquardt) with IRLS Huber weights inside the bounds: a factor
    at a bound that the step would push further out is held there for that step (active set)."""
    bounds = _bounds(names)
    x = [min(max(v, lo), hi) for v, (lo, hi) in zip(x0, bounds)]
    res = prob.residuals(_factors(prob.base, names, x), runs)
    loss = _loss(res)
    lam = 1e-2
    k = len(names)
    for _ in range(MAX_ITER):
        jac = _jacobian(prob, names, x, res, runs)
        w = _weights(res)
        jtj = [[sum(w[i] * jac[i][a] * jac[i][b] for i in range(len(res))) for b in range(k)] for a in range(k)]
        jtr = [sum(w[i] * jac[i][a] * res[i] for i in range(len(res))) for a in range(k)]
        # descent direction is -jtr: a factor at its bound whose descent points outward stays put
        free = [
            a
            for a in range(k)
            if not ((x[a] <= bounds[a][0] + 1e-12 and jtr[a] > 0) or (x[a] >= bounds[a][1] - 1e-12 and jtr[a] < 0))
        ]
        if not free:
            break
        improved = False
        moved = 0.0
        for _ in range(16):
            a_ = [[jtj[r][c] + (lam * (jtj[r][r] + 1e-12) if r == c else 0.0) for c in free] for r in free]
            try:
                sub = _solve(a_, [-jtr[r] for r in free])
            except ZeroDivisionError:
                lam *= 10
                continue
            scale = min(1.0, MAX_STEP / max(1e-300, max(abs(v) for v in sub)))
            xn = list(x)
            for r, d in zip(free, sub):
                xn[r] = min(max(x[r] + scale * d, bounds[r][0]), bounds[r][1])
            rn = prob.residuals(_factors(prob.base, names, xn), runs)
            ln = _loss(rn)
            if ln <= loss:
                moved = max(abs(p - q) for p, q in zip(xn, x))
                x, res, loss = xn, rn, ln
                lam = max(lam / 10, 1e-9)
                improved = True
                break
            lam *= 10
        if not improved or moved < 1e-8:
            break
    return x


def _coordinate(
    prob: _Problem, names: Sequence[str], x0: Sequence[float], runs: Sequence[MeasuredRun], rounds: int = 3
) -> List[float]:
    """plan.calibrate's search: each factor in turn over a multiplicative grid around its value.

    The cost model has hinges (a collective hidden behind compute until it is not; a group's
    bandwidth the lesser of NVLink's and the NICs'), so the loss is only piecewise smooth and
    Gauss-Newton alone can stop at a hinge; this coarse pass finds the right piece first.
    """
    bounds = _bounds(names)
    x = list(x0)
    best = _loss(prob.residuals(_factors(prob.base, names, x), runs))
    for _ in range(rounds):
        for k in range(len(names)):
            for f in GRID:
                xk = list(x)
                xk[k] = min(max(x[k] + math.log(f), bounds[k][0]), bounds[k][1])
                v = _loss(prob.residuals(_factors(prob.base, names, xk), runs))
                if v < best - 1e-12:
                    best, x = v, xk
    return x


def _best_fit(prob: _Problem, names: Sequence[str], x0: Sequence[float], runs: Sequence[MeasuredRun]) -> List[float]:
    """Gauss-Newton from the model's values and from the coarse search's point; the lower loss wins."""
    tries = [_minimise(prob, names, x0, runs), _minimise(prob, names, _coordinate(prob, names, x0, runs), runs)]
    return min(tries, key=lambda x: _loss(prob.residuals(_factors(prob.base, names, x), runs)))


def _choose(prob: _Problem, candidates: Sequence[str], min_sensitive: int) -> Tuple[List[str], List[Tuple[str, str]]]:
    """The factors the runs can tell apart, most influential first; the rest with the reason."""
    x0 = [math.log(getattr(prob.base, n)) for n in candidates]
    res = prob.residuals(prob.base)
    jac = _jacobian(prob, candidates, x0, res, prob.runs)
    held: List[Tuple[str, str]] = []
    order = sorted(range(len(candidates)), key=lambda k: -sum(row[k] ** 2 for row in jac))
    chosen: List[int] = []
    basis: List[List[float]] = []
    for k in order:
        col = [row[k] for row in jac]
        n_dep = sum(1 for v in col if abs(v) >= SENSITIVE)
        if n_dep < min_sensitive:
            held.append(
                (
                    candidates[k],
                    "only %d of %d runs depend on it (|d log speed / d log factor| >= %g in %d needed)"
                    % (n_dep, len(col), SENSITIVE, min_sensitive),
                )
            )
            continue
        resid = col[:]
        for b in basis:  # Gram-Schmidt: what this factor does that the chosen ones do not
            dot = sum(p * q for p, q in zip(resid, b))
            resid = [p - dot * q for p, q in zip(resid, b)]
        norm = math.sqrt(sum(v * v for v in resid))
        if norm < 0.2 * math.sqrt(sum(v * v for v in col)):
            held.append(
                (
                    candidates[k],
                    "the runs cannot tell it apart from %s (they change speed in the same proportions)"
                    % ", ".join(candidates[j] for j in chosen),
                )
            )
            continue
        basis.append([v / norm for v in resid])
        chosen.append(k)
    return [candidates[k] for k in chosen], held


def fit(
    site: Site,
    gpu_model: str,
    runs: Sequence[MeasuredRun],
    partition: Optional[str] = None,
    min_runs: int = MIN_RUNS,
    progress: Optional[Callable[[str], None]] = None,
    leave_one_out: bool = True,
) -> FitResult:
    """Fit the factors of `gpu_model` to `runs` (all on that GPU) and measure the fit out of sample
    (`leave_one_out=False`: the fit alone, with no out-of-sample figures; what each held-out fit is)."""
    base = start_factors(site, partition)
    prob = _Problem(site, gpu_model, [], base)
    kept: List[MeasuredRun] = []
    skipped: List[Tuple[str, str]] = []
    for r in runs:
        try:
            _, zero, rc = predict(with_calibration(site, gpu_model, base), r)
        except PlanError as exc:
            skipped.append((r.name, str(exc).splitlines()[0]))
            continue
        kept.append(replace(r, zero=zero, recompute=rc))  # the choice stays fixed while factors move
    prob.runs = kept
    if len(kept) < min_runs:
        raise PlanError(
            "calibrate: %d usable run%s of %s on site %s; at least %d are needed to fit and still leave "
            "runs to test the fit on (record more with `slurmgpu report JOBID --record`)"
            % (len(kept), "" if len(kept) == 1 else "s", gpu_model, site.name, min_runs)
        )
    candidates = [n for n in FACTORS if getattr(base, n) is not None]
    names, held = _choose(prob, candidates, MIN_SENSITIVE)
    while names and len(names) > len(kept) - 2:
        held.append((names[-1], "%d runs fit at most %d factors with two runs to spare" % (len(kept), len(kept) - 2)))
        names = names[:-1]
    if not names:
        raise PlanError(
            "calibrate: none of the efficiency factors of %s can be fitted from these %d runs: %s"
            % (gpu_model, len(kept), "; ".join("%s: %s" % h for h in held))
        )
    x0 = [math.log(getattr(base, n)) for n in names]
    before = [math.exp(v) - 1 for v in prob.residuals(base)]
    x = _best_fit(prob, names, x0, kept)
    fitted = _factors(base, names, x)
    after = [math.exp(v) - 1 for v in prob.residuals(fitted)]
    loo: List[float] = []
    for i, r in enumerate(kept if leave_one_out else ()):
        if progress is not None:
            progress("leave-one-out %d/%d" % (i + 1, len(kept)))
        others = kept[:i] + kept[i + 1 :]
        xi = _best_fit(prob, names, x0, others)  # the same procedure as the full fit, blind to run i
        loo.append(math.exp(prob.residuals(_factors(base, names, xi), [r])[0]) - 1)
    bounds = _bounds(names)
    at_limit = tuple(n for n, v, (lo, hi) in zip(names, x, bounds) if v <= lo + 1e-6 or v >= hi - 1e-6)
    a = [abs(e) for e in loo]
    only = Factors(
        **{n: getattr(fitted, n) for n in names},
        runs=len(kept),
        loo_median=100 * statistics.median(a) if a else None,
        loo_p90=100 * p90(a) if a else None,
    )
    return FitResult(
        gpu_model=gpu_model,
        factors=only,
        start=base,
        fitted=tuple(names),
        held=tuple(held),
        at_limit=at_limit,
        runs=tuple(r.name for r in kept),
        skipped=tuple(skipped),
        before=tuple(before),
        after_in_sample=tuple(after),
        after_loo=tuple(loo),
    )
