"""A site's calibration applied to the cost model, and the error band a plan states.

The cost model reads efficiency only through `Hardware` (GEMM and attention shares of peak, the
ring bandwidth of the fast link, what the NICs deliver), so a calibration is applied there, once,
by `hardware()`: the search, the explanation and the figures then all use the site's measured
efficiency. The band a calibrated plan states is the calibration's own leave-one-out error on
the site's runs, never an in-sample figure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Tuple

from ..site.calibration import Calibration, Factors
from .accuracy import band_words, error_band
from .hardware import LINK_EFF, NIC_EFF, Hardware


def fp8_gemms(hw: Hardware) -> bool:
    """Whether the linear layers run at the FP8 peak (FP8 asked for and the GPU has it)."""
    return hw.peak > hw.peak_bf16


def with_factors(hw: Hardware, f: Factors) -> Hardware:
    """`hw` with the factors that are set replacing the cost model's own. Bandwidths are recomputed
    from the data sheet (not scaled), so applying a calibration twice changes nothing."""
    gemm = f.gemm_fp8 if fp8_gemms(hw) else f.gemm_bf16
    gbps = hw.nt.fabric_gbps if hw.nt.fabric_gbps > 0 else 100.0  # hardware()'s assumption when unknown
    return replace(
        hw,
        gemm_eff=gemm if gemm is not None else hw.gemm_eff,
        attn_eff=f.attn if f.attn is not None else hw.attn_eff,
        link_bw=hw.nt.link_gbs / 2 * f.link * 1e9 if f.link is not None else hw.link_bw,
        nic_node=gbps / 8 * f.nic * 1e9 if f.nic is not None else hw.nic_node,
        calibration=f,
    )


def defaults(hw: Hardware) -> Factors:
    """The cost model's own factors for this hardware (what a calibration starts from)."""
    gemm = hw.gemm_eff
    return Factors(
        gemm_bf16=gemm if not fp8_gemms(hw) else None,
        gemm_fp8=gemm if fp8_gemms(hw) else None,
        attn=hw.attn_eff,
        link=LINK_EFF,
        nic=NIC_EFF,
    )


def calibrated(hw: Hardware, cal: Calibration, precision: str) -> Hardware:
    """Apply the site's calibration for this partition's GPU model, with a note saying so."""
    f = cal.for_gpu(hw.nt.gpu_model)
    if f is None:
        return replace(
            hw,
            notes=hw.notes
            + (
                "the site's calibration (%s) has no runs on %s: planned with the built-in efficiency"
                % (cal.path, hw.nt.gpu_model),
            ),
        )
    out = with_factors(hw, f)
    vals = ", ".join(
        "%s %.3g" % kv for kv in f.values().items() if kv[0] != ("gemm_bf16" if fp8_gemms(hw) else "gemm_fp8")
    )
    return replace(
        out,
        notes=out.notes
        + (
            "speed calibrated on this site: efficiency fitted to %d run%s (%s, %s): %s"
            % (f.runs, "" if f.runs == 1 else "s", cal.path, cal.fitted or "undated", vals),
        ),
    )


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
