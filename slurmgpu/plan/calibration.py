"""A site's calibration as overrides of the cost model's terms, and the one error band a plan states.

A calibration file (slurmgpu.site.calibration, written by `slurmgpu calibrate`) holds, per GPU model,
the site's own values of a few `CostTerms` under the site's words: `gemm_bf16` and `gemm_fp8` are the
GEMM ceilings of that GPU's architecture, `attn`, `link` and `nic` the attention, NVLink and NIC
efficiency (`term_of`). `hardware()` lays them over the request's terms with `calibrated`, so they
reach the cost model the way every term does, through `Hardware.terms`. The band a calibrated plan
states is the calibration's own leave-one-out error on the site's runs, never an in-sample figure;
otherwise the published-run band of slurmgpu.plan.accuracy.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from ..errors import PlanError
from ..site import Site
from ..site.calibration import FACTORS, Calibration, Factors
from .accuracy import band_words, error_band
from .terms import BOUNDS, CostTerms, gemm_term

if TYPE_CHECKING:
    from .hardware import Hardware

_SAME_ON_EVERY_GPU = {"attn": "attn", "link": "link_eff", "nic": "nic_eff"}


def term_of(key: str, arch: str) -> Optional[str]:
    """The CostTerms field a calibration key sets on a GPU of architecture `arch`; None where the GPU
    has no such term (FP8 GEMMs on an architecture without FP8)."""
    if key == "gemm_bf16":
        return gemm_term(arch, False)
    if key == "gemm_fp8":
        name = gemm_term(arch, True)
        return name if name != gemm_term(arch, False) else None
    return _SAME_ON_EVERY_GPU[key]


def site_terms(arch: str) -> Dict[str, str]:
    """Calibration key -> CostTerms field, for the keys a GPU of architecture `arch` has."""
    out = {}
    for key in FACTORS:
        name = term_of(key, arch)
        if name is not None:
            out[key] = name
    return out


def overrides(f: Factors, arch: str) -> Dict[str, float]:
    """The CostTerms values a GPU model's calibration sets."""
    names = site_terms(arch)
    return {names[k]: v for k, v in f.values().items() if k in names}


def calibrated(
    terms: CostTerms, cal: Calibration, gpu_model: str, arch: str
) -> Tuple[CostTerms, Optional[Factors], str]:
    """`terms` with the site's calibration for `gpu_model` laid over them, the calibration in effect
    (None where it has no runs on that GPU) and the note saying so. A value outside the cost model's
    physical bounds (terms.BOUNDS) is refused: `calibrate` never writes one."""
    f = cal.for_gpu(gpu_model)
    if f is None:
        return (
            terms,
            None,
            "the site's calibration (%s) has no runs on %s: planned with the built-in efficiency"
            % (cal.path, gpu_model),
        )
    names = site_terms(arch)
    for key, v in f.values().items():
        name = names.get(key)
        if name is None:
            continue
        lo, hi = BOUNDS[name]
        if not lo <= v <= hi:
            raise PlanError(
                "%s: gpus.%s.%s is %g, outside the cost model's bounds for %s (%g to %g); run `slurmgpu "
                "calibrate --site %s` again" % (cal.path, gpu_model, key, v, name, lo, hi, cal.site)
            )
    vals = ", ".join("%s %.3g" % (k, v) for k, v in f.values().items() if k in names)
    note = "speed calibrated on this site: efficiency fitted to %d run%s (%s, %s): %s" % (
        f.runs,
        "" if f.runs == 1 else "s",
        cal.path,
        cal.fitted or "undated",
        vals,
    )
    return replace(terms, **overrides(f, arch)), f, note


def stated_band(hw: Hardware, moe: bool, precision: str) -> Optional[Tuple[int, int, str]]:
    """(runs, percent, basis) of the throughput error a plan states, or None where nothing bounds it.

    A calibrated plan states its calibration's leave-one-out 90th percentile (the site's own runs,
    each predicted by a fit without it); otherwise the published-run band of slurmgpu.plan.accuracy.
    """
    f = hw.calibration
    if f is not None and f.loo_p90 is not None and f.runs:
        return f.runs, max(1, int(-(-f.loo_p90 // 1))), "site"  # rounded up to a whole percent, at least 1
    band = error_band(moe, precision)
    if band is None:
        return None
    return band[0], band[1], "published"


def stated_band_words(hw: Hardware, moe: bool, precision: str) -> str:
    """The sentence a training plan carries about its own expected error."""
    b = stated_band(hw, moe, precision)
    if b is None or b[2] != "site":
        return band_words(moe, precision)
    return (
        "expected throughput error: +-%d%% (90th percentile of the leave-one-out errors of this site's "
        "calibration, %d runs)" % (b[1], b[0])
    )


def with_calibration(site: Site, gpu_model: str, factors: Factors) -> Site:
    """`site` calibrated with `factors` on `gpu_model` alone (a what-if plan, a planted truth)."""
    cal = Calibration(path="(given)", site=site.name, fitted="", runs_file="", gpus=((gpu_model, factors),))
    return replace(site, calibration=cal)
