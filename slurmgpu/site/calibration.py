"""A site's measured efficiency: its own values of a few of the cost model's terms, per GPU model.

`slurmgpu calibrate` fits them (slurmgpu.plan.calibrate, the fitter of the cost model's global terms)
and writes this file; `resolve_site` attaches it to the site, so `plan`, `gen`, `check` and `report`
all plan with the same figures and say so. Efficiency is a fact about the cluster (its GPUs' clocks
and cooling, its NCCL and fabric), which is why it lives with the site and not with the planner.

Each factor is an absolute share of a data-sheet figure, so no value above 1 is physical: no GEMM
runs above the GPU's peak FLOP/s and no collective above the link's line rate. Which cost term each
factor sets on a GPU's architecture, and the tighter bounds a fit keeps to, are the planner's
(slurmgpu.plan.calibration.term_of, slurmgpu.plan.terms.BOUNDS). A factor left out of the file keeps
the cost model's value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ..errors import ConfigError, Issue

# factor -> what it is a share of
FACTORS: Dict[str, str] = {
    "gemm_bf16": "the BF16 peak that large GEMMs sustain",
    "gemm_fp8": "the FP8 peak that large FP8 GEMMs sustain",
    "attn": "the BF16 peak that FlashAttention sustains",
    "link": "one direction of NVLink that a ring collective gets",
    "nic": "the compute NICs' line rate that the fabric delivers",
}
VERSION = 1


@dataclass(frozen=True)
class Factors:
    """One GPU model's calibration: the site's values of its cost terms (None keeps the cost model's)
    and how well the fit predicted runs it did not see."""

    gemm_bf16: Optional[float] = None
    gemm_fp8: Optional[float] = None
    attn: Optional[float] = None
    link: Optional[float] = None
    nic: Optional[float] = None
    runs: int = 0  # runs the factors were fitted to
    loo_median: Optional[float] = None  # leave-one-out |error| of tokens/s/GPU after the fit, percent
    loo_p90: Optional[float] = None  # its 90th percentile: the band a calibrated plan states

    def values(self) -> Dict[str, float]:
        """The factors that are set."""
        return {k: getattr(self, k) for k in FACTORS if getattr(self, k) is not None}

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {k: round(v, 4) for k, v in self.values().items()}
        d["runs"] = self.runs
        if self.loo_median is not None:
            d["loo_median_pct"] = round(self.loo_median, 1)
        if self.loo_p90 is not None:
            d["loo_p90_pct"] = round(self.loo_p90, 1)
        return d


@dataclass(frozen=True)
class Calibration:
    """A site's calibration file: factors per GPU model (the node types' `gpu_model`)."""

    path: str
    site: str
    fitted: str  # when (ISO date), for the plan header
    runs_file: str  # what it was fitted to
    gpus: Tuple[Tuple[str, Factors], ...]

    def for_gpu(self, gpu_model: str) -> Optional[Factors]:
        for name, f in self.gpus:
            if name == gpu_model:
                return f
        return None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "version": VERSION,
            "site": self.site,
            "fitted": self.fitted,
            "runs_file": self.runs_file,
            "gpus": {name: f.to_dict() for name, f in self.gpus},
        }


def data_home(environ: Mapping[str, str]) -> str:
    """$XDG_DATA_HOME/slurmgpu (default ~/.local/share/slurmgpu): the user's runs and calibrations."""
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"), "slurmgpu")


def runs_path(site_name: str, configured: Optional[str], environ: Mapping[str, str]) -> str:
    """The site's runs file: `paths.runs` of the site config, else <data home>/runs/<site>.tsv."""
    return _expand(configured) if configured else os.path.join(data_home(environ), "runs", site_name + ".tsv")


def calibration_path(site_name: str, configured: Optional[str], environ: Mapping[str, str]) -> str:
    """The site's calibration file: `paths.calibration`, else <data home>/calibration/<site>.yaml."""
    if configured:
        return _expand(configured)
    return os.path.join(data_home(environ), "calibration", site_name + ".yaml")


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


_TOP = ("version", "site", "fitted", "runs_file", "gpus")
_STATS = ("runs", "loo_median_pct", "loo_p90_pct")


def read_calibration(path: str) -> Calibration:
    """Load and check a calibration file; every problem at once, with its line."""
    from ..schema import Checker, Field
    from ..yamlsrc import load_yaml_file

    data = load_yaml_file(path)
    ck = Checker(path)
    top = ck.take(
        data,
        {
            "version": Field("int", required=True),
            "site": Field("str", required=True),
            "fitted": Field("str", default=""),
            "runs_file": Field("str", default=""),
            "gpus": Field("map", required=True),
        },
        "",
    )
    if isinstance(top["version"], int) and top["version"] != VERSION:
        ck.error(
            data, "version", "version", "this slurmgpu reads calibration version %d, got %r" % (VERSION, top["version"])
        )
    fields = {k: Field("num") for k in FACTORS}
    fields.update(
        {"runs": Field("int", default=0, minimum=0), "loo_median_pct": Field("num"), "loo_p90_pct": Field("num")}
    )
    gpus = []
    for name, raw in (top["gpus"] or {}).items():
        vals = ck.take(raw, fields, "gpus.%s" % name, top["gpus"], name)
        for k, what in FACTORS.items():
            v = vals[k]
            if isinstance(v, (int, float)) and not 0 < v <= 1:
                ck.error(
                    raw,
                    k,
                    "gpus.%s.%s" % (name, k),
                    "a share of %s: above 0 and at most 1 (the physical limit), got %r" % (what, v),
                )
        gpus.append(
            (
                str(name),
                Factors(
                    **{k: (float(vals[k]) if isinstance(vals[k], (int, float)) else None) for k in FACTORS},
                    runs=vals["runs"] if isinstance(vals["runs"], int) else 0,
                    loo_median=_num(vals["loo_median_pct"]),
                    loo_p90=_num(vals["loo_p90_pct"]),
                ),
            )
        )
    ck.raise_if_any()
    return Calibration(
        path=path, site=top["site"], fitted=top["fitted"] or "", runs_file=top["runs_file"] or "", gpus=tuple(gpus)
    )


def _num(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def calibration_text(cal: Calibration) -> str:
    """The file `slurmgpu calibrate` writes (YAML, with a header saying what it is)."""
    import yaml

    head = (
        "# slurmgpu calibration of site %s: efficiency factors fitted to %s on %s.\n"
        "# plan/gen/check/report use it when it is present; delete it to plan with the built-in figures.\n"
        "# Regenerate: slurmgpu calibrate --site %s\n"
        % (cal.site, cal.runs_file or "the site's runs", cal.fitted, cal.site)
    )
    return head + yaml.safe_dump(cal.to_dict(), sort_keys=False, default_flow_style=False)


def attach(site: Any, environ: Mapping[str, str]) -> Tuple[Any, str]:
    """The site with its calibration file attached when there is one, and words for the notice
    ('' when there is none). A broken file is an error naming it: planning silently without a
    calibration the admin installed would promise figures nobody measured."""
    from dataclasses import replace

    path = calibration_path(site.name, site.calibration_file, environ)
    if not os.path.exists(path):
        if site.calibration_file:
            raise ConfigError(
                [
                    Issue(
                        site.source,
                        None,
                        None,
                        "paths.calibration",
                        "no calibration file at %s (run `slurmgpu calibrate --site %s`, or remove the key)"
                        % (path, site.name),
                    )
                ]
            )
        return site, ""
    cal = read_calibration(path)
    if cal.site != site.name:
        raise ConfigError(
            [
                Issue(
                    path,
                    None,
                    None,
                    "site",
                    "this calibration is of site %r, not %r: run `slurmgpu calibrate --site %s`"
                    % (cal.site, site.name, site.name),
                )
            ]
        )
    return replace(site, calibration=cal), "speed calibrated from %s" % path
