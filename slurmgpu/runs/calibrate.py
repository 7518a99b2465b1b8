"""`slurmgpu calibrate`: fit the site's efficiency to its runs file and write its calibration file.

Runs are grouped by the GPU model of the partition they ran on (each node type is calibrated on
its own runs); the fit and its leave-one-out error are slurmgpu.plan.calibrate's (`fit_site`: the
fitter of the cost model's global terms, from DEFAULT_TERMS, over the terms the runs can inform).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ..errors import ConfigError, PlanError
from ..plan.calibrate import MIN_RUNS, MeasuredRun, SiteFit, error_stats, fit_site
from ..site import Site
from ..site.calibration import FACTORS, Calibration
from .record import measured_run, read_runs


@dataclass(frozen=True)
class CalibrationRun:
    """What calibrate did: the fits per GPU model, what it refused, and the file it would write."""

    site: str
    runs_file: str
    fits: Tuple[SiteFit, ...]
    refused: Tuple[Tuple[str, str], ...]  # (GPU model, why)
    skipped: Tuple[Tuple[str, str], ...]  # (row, why) rows that could not be read
    calibration: Optional[Calibration]

    def to_dict(self) -> Dict[str, object]:
        return {
            "site": self.site,
            "runs_file": self.runs_file,
            "fits": [f.to_dict() for f in self.fits],
            "refused": [{"gpu_model": g, "why": w} for g, w in self.refused],
            "skipped_rows": [{"row": r, "why": w} for r, w in self.skipped],
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
        }


def calibrate(
    site: Site,
    runs_file: str,
    out_path: str,
    min_runs: int = MIN_RUNS,
    progress: Optional[Callable[[str], None]] = None,
) -> CalibrationRun:
    """Fit every GPU model of `site` that has runs in `runs_file`; the Calibration to write (or None)."""
    rows = read_runs(runs_file)
    groups: Dict[str, List[MeasuredRun]] = {}
    skipped: List[Tuple[str, str]] = []
    for i, rec in enumerate(rows, 1):
        label = rec.get("name") or "row %d" % i
        if rec.get("layout_only") == "True":
            skipped.append((label, "layout_only row (no measured speed)"))
            continue
        if rec.get("task") == "inference":
            skipped.append((label, "a serving run: the fit covers training runs (serving runs are kept for --diff)"))
            continue
        if rec.get("site") and rec.get("site") != site.name:
            skipped.append((label, "a run of site %s" % rec.get("site")))
            continue
        try:
            run = measured_run(rec, runs_file, i, site)
            nt = site.node_type_of(run.request.partition)
        except ConfigError as exc:
            skipped.append((label, str(exc).splitlines()[0]))
            continue
        if rec.get("gpu_model") and rec.get("gpu_model") != nt.gpu_model:
            skipped.append((label, "ran on %s, the partition now has %s" % (rec.get("gpu_model"), nt.gpu_model)))
            continue
        groups.setdefault(nt.gpu_model, []).append(run)
    fits: List[SiteFit] = []
    refused: List[Tuple[str, str]] = []
    for gpu, items in sorted(groups.items()):
        try:
            fits.append(fit_site(site, gpu, items, min_runs=min_runs, progress=progress))
        except PlanError as exc:
            refused.append((gpu, str(exc)))
    if not groups:
        refused.append(
            (
                "-",
                "no usable run of site %s in %s (record runs with `slurmgpu report JOBID --record`)"
                % (site.name, runs_file),
            )
        )
    cal = None
    if fits:
        cal = Calibration(
            path=out_path,
            site=site.name,
            fitted=datetime.date.today().isoformat(),
            runs_file=runs_file,
            gpus=tuple((f.gpu_model, f.factors) for f in fits),
        )
    return CalibrationRun(site.name, runs_file, tuple(fits), tuple(refused), tuple(skipped), cal)


def _pct(d: Dict[str, float], key: str) -> str:
    return "%.1f%%" % d[key] if key in d else "-"


def render_text(c: CalibrationRun, wrote: Optional[str]) -> str:
    out = ["slurmgpu calibrate: site %s, runs %s" % (c.site, c.runs_file)]
    for f in c.fits:
        b, a, ins = error_stats(f.before), error_stats(f.after_loo), error_stats(f.after_in_sample)
        out.append("")
        out.append("%s: %d runs" % (f.gpu_model, len(f.runs)))
        out.append(
            "  %-30s %12s %12s %12s %14s" % ("tokens/s/GPU error", "median |e|", "p90 |e|", "bias", "within +-10%")
        )
        for label, s in (
            ("before (built-in efficiency)", b),
            ("after, leave-one-out", a),
            ("after, in sample (optimistic)", ins),
        ):
            out.append(
                "  %-30s %12s %12s %12s %14s"
                % (label, _pct(s, "median_abs_pct"), _pct(s, "p90_abs_pct"), _pct(s, "bias_pct"),
                   "%.0f%%" % (100 * s["within_10pct"]) if s else "-")
            )  # fmt: skip
        bounds = {k: (lo, hi) for k, lo, hi in f.bounds}
        for name in FACTORS:
            start = getattr(f.start, name)
            if start is None:
                continue
            new = getattr(f.factors, name)
            if new is not None:
                lim = ""
                if name in f.at_limit:
                    lo, hi = bounds[name]
                    if new < hi * (1 - 1e-6):
                        lim = " (at its lower bound, %g)" % lo
                    else:
                        lim = " (at its physical limit)" if hi >= 1.0 else " (at its upper bound, %g)" % hi
                out.append("  %-10s %.3f -> %.3f  %s%s" % (name, start, new, FACTORS[name], lim))
            else:
                why = dict(f.held).get(name, "")
                out.append("  %-10s %.3f kept: %s" % (name, start, why))
        for r, why in f.skipped:
            out.append("  left out %s: %s" % (r, why))
        if f.at_limit:
            out.append(
                "  note: %s stopped at a bound: the runs are faster (or slower) than the cost model can explain "
                "within physical limits; check those runs' records" % ", ".join(f.at_limit)
            )
    for gpu, why in c.refused:
        out.append("")
        out.append("refused%s: %s" % ("" if gpu == "-" else " (%s)" % gpu, why))
    for r, why in c.skipped:
        out.append("skipped %s: %s" % (r, why))
    if wrote:
        out.append("")
        out.append("wrote %s: plan, gen, check and report on site %s now use it (and say so)" % (wrote, c.site))
    return "\n".join(out) + "\n"
