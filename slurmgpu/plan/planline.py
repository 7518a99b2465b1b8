"""The plan line: `# slurmgpu-plan: task=pretrain precision=bf16 ... step_s=9.87 tokens_s_gpu=812 band=10`.

`gen` writes it under the stamp (and echoes it into the job log), so a finished run can be held
against the figures it was promised: `slurmgpu report` reads it back. It carries what the stamp
does not (the batch, precision, sharding and recompute the plan chose) and the plan's own figures
and error band at the time the script was written, so a later change of the cost model or of the
site's calibration does not move the promise after the fact.

Grammar: the marker `# slurmgpu-plan:` at the start of a line (blanks before it allowed), then
`key=value` words separated by blanks; a value has no blanks. The first such line counts.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from ..site import Site
    from .types import Plan

MARKER = "# slurmgpu-plan:"
_LINE = re.compile(r"^[ \t]*# slurmgpu-plan:([^\r\n]*)$", re.M)
_WORD = re.compile(r"([A-Za-z0-9_]+)=(\S*)")


def _g(x: float) -> str:
    return "%.4g" % x


def format_plan_line(site: Site, plan: Plan, launcher: str, implements: Sequence[str] = ()) -> str:
    """The plan line for a plan rendered into a script for `launcher` (no newline). `levers` are the
    cheaper-memory flags the launcher wrote (plan.levers), `implements` what the spec says the user's
    program runs: with zero and recompute, what `slurmgpu doctor` needs to recompute the job's memory
    by its framework's rules."""
    lay = plan.layout
    words: List[Tuple[str, str]] = [
        ("task", plan.task),
        ("precision", plan.precision),
        ("seq", str(plan.seq)),
        ("gbs", str(plan.global_batch)),
        ("mbs", str(lay.micro_batch)),
        ("vp", str(plan.virtual_stages)),
        ("zero", str(plan.zero)),
        ("recompute", plan.recompute),
        ("partition", plan.partition),
        ("launcher", launcher),
        ("step_s", _g(plan.step_time_s)),
        ("tokens_s_gpu", _g(plan.tokens_per_s / max(1, lay.world))),
        ("mfu", "%.4f" % plan.mfu),
        ("mem_gb", "%.2f" % plan.memory_per_gpu_gb),
        ("weights_gb", "%.2f" % plan.memory.weights),
    ]
    if plan.levers:
        words.append(("levers", ",".join(plan.levers)))
    if implements:
        words.append(("implements", ",".join(implements)))
    if plan.prefill_s is not None:
        words.append(("prefill_s", _g(plan.prefill_s)))
    band = plan.band  # the one the plan stated and chose its layout by (None for serving)
    if band is not None:
        words += [("band", str(band[1])), ("band_runs", str(band[0])), ("band_basis", band[2])]
    cal = site.calibration
    if cal is not None and cal.for_gpu(site.node_type_of(plan.partition).gpu_model) is not None:
        words.append(("calibration", cal.fitted or "undated"))
    return MARKER + "".join(" %s=%s" % (k, v.replace(" ", "_")) for k, v in words)


def parse_plan_line(text: str) -> Optional[Dict[str, str]]:
    """The words of the first plan line in `text` (a script or a log), or None."""
    m = _LINE.search(text)
    if m is None:
        return None
    return {k: v for k, v in _WORD.findall(m.group(1))}
