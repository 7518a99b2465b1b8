"""`generate`: size, build the request, render, and run the site's own submit filter on the result,
so `gen` never writes a script its cluster would reject."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple

from ..errors import ConfigError, PlanError, PolicyRejection
from ..render import TemplateDir
from ..site import Site
from .request import RenderRequest, build_request, render_request
from .sizing import Sizing, _model, layout_from_pins, plan_layout, suggestion

if TYPE_CHECKING:
    from ..policy import Verdict
    from .spec import JobSpec


@dataclass(frozen=True)
class Generated:
    """Everything `gen` produced: the script, its request, the sizing and the verdict."""

    script: str
    request: RenderRequest
    sizing: Sizing
    warnings: Tuple[str, ...] = ()
    verdict: Optional[Verdict] = None
    spec: Optional[JobSpec] = None

    def to_dict(self) -> Dict[str, Any]:
        plan = self.sizing.plan
        return {
            "script": self.script,
            "site": self.request.site,
            "layout": self.request.layout.to_dict(),
            "spec": self.spec.to_dict() if self.spec is not None else None,
            "stamp": self.request.stamp,
            "plan": plan.to_dict() if plan is not None else None,
            "serving": self.sizing.serve.to_dict() if self.sizing.serve is not None else None,
            "warnings": list(self.warnings),
            "policy": self.verdict.to_dict() if self.verdict is not None else None,
            "request": self.request.to_dict(),
        }


def generate(site: Site, spec: JobSpec, dirs: Sequence[TemplateDir], regen: str = "") -> Generated:
    """Plan, render and check a job; raises PolicyRejection for a layout the filter would refuse."""
    from .validate import check_spec

    check_spec(site, spec)  # every independent mistake at once, before planning stops at the first
    try:
        sizing = plan_layout(site, spec)
    except PlanError:
        _refuse_pinned_tp(site, spec, dirs, regen)
        raise
    try:
        req, warnings = build_request(site, spec, sizing, regen)
    except ConfigError:
        if spec.smoke:
            raise
        _refuse_layout(site, spec, sizing, dirs, regen)
        raise
    script = render_request(req, dirs)
    verdict = check_policy(site, spec, script, sizing)
    warns = list(warnings) + list(getattr(verdict, "warnings", ()) or ())
    return Generated(script=script, request=req, sizing=sizing, warnings=tuple(warns), verdict=verdict, spec=spec)


def _refuse_layout(site: Site, spec: JobSpec, sizing: Sizing, dirs: Sequence[TemplateDir], regen: str) -> None:
    """A spec error (missing training inputs): if the filter refuses the layout anyway, say that first,
    since no inputs would make the job run; the probe renders as a smoke run only to be checked."""
    from ..errors import SlurmgpuError

    try:
        req, _ = build_request(site, replace(spec, smoke=True), sizing, regen)
        script = render_request(req, dirs)
    except SlurmgpuError:
        return  # the spec error stands
    check_policy(site, spec, script, sizing)


def _refuse_pinned_tp(site: Site, spec: JobSpec, dirs: Sequence[TemplateDir], regen: str) -> None:
    """The planner refused a pinned TP: if the submit filter would refuse it too, say it in the
    filter's words (plus the planner's suggestion), as for a job planned without a model."""
    if "tp" not in spec.parallel:
        return
    from ..errors import SlurmgpuError

    try:
        node = site.node_type_of(spec.partition or site.default_partition)
        layout = layout_from_pins(node, spec.nodes, spec.gpus, spec.parallel)
        probe = Sizing(layout=layout, model=_model(spec.model) if spec.model else None)
        # the probe is only shown to the filter: missing training inputs must not hide its verdict
        req, _ = build_request(site, replace(spec, smoke=True), probe, regen)
        script = render_request(req, dirs)
    except SlurmgpuError:
        return  # the planner's own message stands
    check_policy(site, spec, script, probe)


def check_policy(site: Site, spec: JobSpec, script: str, sizing: Sizing) -> Verdict:
    """Run the submit filter's rules on the script; on reject add the planner's suggestion."""
    from ..policy import check_script

    partition = spec.partition or site.default_partition
    verdict = check_script(
        site, script, partition=partition, account=spec.account or site.account, qos=spec.qos or site.qos
    )
    if verdict.decision == "reject":
        msg = "\n".join(verdict.messages) or "the site's submit policy rejects this job"
        raise PolicyRejection(msg + "\n" + suggestion(site, spec, sizing))
    return verdict
